"""`trainer = "ttt_discover"`: test-time training on one problem, with an archive of its candidates.

The problem is the first training example of the run's data (`[data]`; with `max_examples`, seed and
order as any run loads them); the others are not used. Each step selects `batch_size` candidates from the
archive (run/discover_archive.py; at first only the empty one), asks for an improvement of each (the
problem's prompt, then the candidate to improve and up to `context_k` other good candidates with their
rewards: the original's "discovery memory"), samples `group_size` completions per prompt, scores them
against the problem's reference, archives them under the candidate they improve and trains on them with
the run's advantages: `[algorithm] algorithm_mode = "ttt_discover_entropic"` (Boltzmann weights at a
target KL, spec 2.7) is TTT-Discover's own; any other mode trains as configured, as in the original.
Everything else is the RL loop's: rows, back pressure, evaluation, checkpoints and resume.

Settings come from `[algorithm] params` as in the original: `context_k` (3), `puct_c` (1.0, the exploration
weight of the selection), `archive_max_entries` (4096, at least 64 and 2 x batch_size x group_size),
`candidate_char_limit` (1200) and `context_char_limit` (600) for the text shown of each candidate.
Rows add `discover_archive_size`, `discover_best_reward` and `discover_start_reward_mean` (the mean reward of
the step's selected candidates) to the advantage's own `discover_*` metrics. The archive is saved with each
checkpoint (`discover_archive.json`, restored on resume), and when the run ends `ttt_discover.json` in the run
directory holds the best candidate and the top ten.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from retrain_ray.data.types import Example
from retrain_ray.run.discover_archive import Archive, Candidate
from retrain_ray.run.loop import RLStep, RunComponents, RunLoop
from retrain_ray.run.rollout import Rollout, rollout
from retrain_ray.run.state import TrainerState
from retrain_ray.run.types import RunOutcome

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig

ARCHIVE_FILE = "discover_archive.json"
SUMMARY_FILE = "ttt_discover.json"


@dataclass(frozen=True)
class DiscoverSettings:
    """TTT-Discover's knobs, read from `[algorithm] params` with the original's names and defaults."""

    context_k: int = 3
    puct_c: float = 1.0
    archive_max_entries: int = 4096
    candidate_char_limit: int = 1200
    context_char_limit: int = 600

    @classmethod
    def from_config(cls, cfg: RetrainConfig) -> DiscoverSettings:
        params = cfg.algorithm.params
        t = cfg.training

        def number(key: str, default: float) -> float:
            value = params.get(key, default)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"[algorithm] params.{key} = {value!r}: TTT-Discover needs a number here")
            return float(value)

        return cls(
            context_k=max(0, int(number("context_k", cls.context_k))),
            puct_c=number("puct_c", cls.puct_c),
            archive_max_entries=max(64, 2 * t.batch_size * t.group_size,
                                    int(number("archive_max_entries", cls.archive_max_entries))),
            candidate_char_limit=max(64, int(number("candidate_char_limit", cls.candidate_char_limit))),
            context_char_limit=max(64, int(number("context_char_limit", cls.context_char_limit))),
        )


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def discovery_prompt(problem: str, start: Candidate, context: list[Candidate], s: DiscoverSettings) -> str:
    """The problem, then the candidate to improve and the other good ones (none for the empty root)."""
    blocks: list[str] = []
    if start.text.strip():
        blocks.append(f"Current candidate to improve:\n{_cut(start.text.strip(), s.candidate_char_limit)}")
    if context:
        shown = "\n\n".join(f"{i}. reward={c.reward:.4f}\n{_cut(c.text.strip(), s.context_char_limit)}"
                            for i, c in enumerate(context, start=1))
        blocks.append(f"Other promising attempts:\n{shown}")
    if not blocks:
        return problem
    blocks.append("Improve on the current candidate if possible. Return only the full improved solution.")
    return problem.rstrip() + "\n\nDiscovery memory:\n\n" + "\n\n".join(blocks)


class DiscoverLoop(RunLoop):
    """The RL loop on one problem whose prompts come from the archive."""

    def __init__(self, cfg: RetrainConfig, parts: RunComponents, *, run_name: str, run_dir: Path,
                 condition: str) -> None:
        if not parts.train_examples:
            raise ValueError('trainer = "ttt_discover" needs a problem: the run\'s data has no training example')
        self.problem: Example = parts.train_examples[0]
        parts.train_examples = [self.problem]
        super().__init__(cfg, parts, run_name=run_name, run_dir=run_dir, condition=condition)
        self.run_dir = run_dir
        self.settings = DiscoverSettings.from_config(cfg)
        root = parts.reward.score_batch([""], [self.problem.reference])[0]
        self.archive = Archive(float(root), self.settings.archive_max_entries)
        self.step_metrics: dict[str, float] = {}

    def read_payload(self, directory: Path) -> None:
        """The backend's files and the archive saved with them (none saved: the run starts a new archive)."""
        super().read_payload(directory)
        path = directory / ARCHIVE_FILE
        if path.is_file():
            data = cast("dict[str, object]", json.loads(path.read_text(encoding="utf-8")))
            self.archive = Archive.from_json(data, self.settings.archive_max_entries)

    def sample(self, examples: list[Example], group_size: int, *, step: int = 0) -> Rollout:
        """`group_size` attempts at improving each of `len(examples)` selected candidates, archived."""
        starts = self.archive.select(len(examples), self.settings.puct_c)
        prompts = [discovery_prompt(self.problem.prompt, c, self.archive.context(c, self.settings.context_k),
                                    self.settings) for c in starts]
        parts = self.parts
        out = rollout(parts.engine, [dataclasses.replace(self.problem, prompt=p) for p in prompts],
                      [self.encode(p) for p in prompts], group_size=group_size, params=self.sampling,
                      tokenizer=parts.tokenizer, reward=parts.reward,
                      detect_planning=parts.detect_planning if parts.needs_planning else None)
        for start, group in zip(starts, out.groups, strict=True):
            self.archive.add(start.id, group.texts_G, group.rewards_G, step)
        self.archive.prune()
        self.step_metrics = {
            "discover_archive_size": float(len(self.archive)),
            "discover_best_reward": self.archive.best().reward,
            "discover_start_reward_mean": sum(c.reward for c in starts) / max(len(starts), 1),
        }
        return out

    def rl_step(self, step: int, state: TrainerState) -> RLStep:
        result = super().rl_step(step, state)
        result.row.update(self.step_metrics)
        return result

    def write_payload(self, directory: Path) -> None:
        super().write_payload(directory)
        (directory / ARCHIVE_FILE).write_text(json.dumps(self.archive.to_json()), encoding="utf-8")

    def run(self, state: TrainerState) -> RunOutcome:
        outcome = super().run(state)
        self.write_summary()
        return outcome

    def write_summary(self) -> None:
        best = self.archive.best()
        top = [{"id": c.id, "parent": c.parent, "reward": c.reward, "step": c.step, "expansions": c.expansions,
                "text": _cut(c.text, 240)} for c in self.archive.ranked()[:10]]
        summary = {"problem": self.problem.prompt, "reference": self.problem.reference,
                   "archive_size": len(self.archive), "total_expansions": self.archive.total_expansions,
                   "best_id": best.id, "best_reward": best.reward, "best_text": best.text, "top": top}
        (self.run_dir / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
