"""The shipped SFT file of `digit_chain` (retrain_ray/data/digit_chain_sft.jsonl): both turns demonstrated.

The warm start of configs/digit-chain-campaign.toml trains on this file before RL. Each row is one turn of one
episode, `{"prompt": ..., "completion": ...}` (the SFT file format of run/trainers/sft.py): the turn's whole
prompt as the environment gave it and the right answer written as a bare digit. The rows are made by playing
episodes of the environment itself with the right answers (`DigitChain.reset`, `Episode.step`), so turn 2's
prompt is exactly the transcript a run shows the model, whatever its format becomes.

The episodes are drawn with their own seed (`SFT_SEED`), not the run's: the file demonstrates the rule (copy the
first digit; then the digit after the one read, plus one, mod 10), not the run's own train or eval examples
(with 3 digits there are only 900 strings, so some prompts coincide).

Regenerate (deterministic: the same file byte for byte):

    python -m retrain_ray.environments.digit_chain_sft            # writes retrain_ray/data/digit_chain_sft.jsonl
    python -m retrain_ray.environments.digit_chain_sft --out x.jsonl --episodes 64
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from retrain_ray.data.types import Example
from retrain_ray.environments.digit_chain import TURNS, DigitChain, turn_target

SFT_SEED = 1_000_003
EPISODES = 512
DIGITS = 3
SHIPPED = Path(__file__).resolve().parent.parent / "data" / "digit_chain_sft.jsonl"


def episode_rows(environment: DigitChain, example: Example) -> list[dict[str, str]]:
    """One row per turn of `example` played with the right answers through the environment."""
    episode = environment.reset(example)
    prompt = episode.prompt()
    rows: list[dict[str, str]] = []
    for turn in range(TURNS):
        answer = turn_target(example, turn, episode.answers)
        if answer is None:  # cannot happen when every earlier answer was right
            raise RuntimeError(f"digit_chain: turn {turn + 1} of {example.prompt!r} has no right answer")
        rows.append({"prompt": prompt, "completion": answer})
        result = episode.step(answer)
        if result.reward != 1.0:
            raise RuntimeError(f"digit_chain: the right answer {answer!r} to {prompt!r} scored {result.reward}")
        if result.observation is not None:
            prompt = result.observation
    return rows


def demonstrations(episodes: int = EPISODES, digits: int = DIGITS, seed: int = SFT_SEED) -> list[dict[str, str]]:
    """The rows of `episodes` episodes of `digits`-digit strings, turn 1 and turn 2 of each in turn."""
    environment = DigitChain({"num_examples": episodes, "num_eval": 0, "digits": digits, "seed": seed})
    train, _ = environment.examples()
    return [row for example in train for row in episode_rows(environment, example)]


def write_jsonl(rows: list[dict[str, str]], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m retrain_ray.environments.digit_chain_sft",
                                     description="Write digit_chain's SFT file (both turns, right answers).")
    parser.add_argument("--out", type=Path, default=SHIPPED, help=f"the JSONL file to write (default {SHIPPED})")
    parser.add_argument("--episodes", type=int, default=EPISODES, help="episodes (two rows each)")
    parser.add_argument("--digits", type=int, default=DIGITS, help="digit string length, 1-6")
    args = parser.parse_args(argv)
    rows = demonstrations(args.episodes, args.digits)
    write_jsonl(rows, args.out)
    print(f"wrote {len(rows)} rows ({args.episodes} episodes x {TURNS} turns) to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
