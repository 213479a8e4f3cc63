"""`trainer = "ttt_discover"`: test-time training on one problem, with an archive of its candidates.

The problem is the first training example of the run's data (`[data]`; with `max_examples`, seed and
order as any run loads them); the others are not used. Each step selects `batch_size` candidates from the
archive (the section at the end of this module; at first only the empty one), asks for an improvement of each (the
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
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from retrain_ray.data.types import Example
from retrain_ray.run.loop import RLStep, RunComponents, RunLoop
from retrain_ray.run.rollout import Rollout, rollout
from retrain_ray.run.state import TrainerState
from retrain_ray.run.types import RunOutcome

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.config.sections_training import TrainingSection

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
    def from_config(cls, params: Mapping[str, object], t: TrainingSection) -> DiscoverSettings:
        """From `[algorithm] params` and the batch shape of `[training]`."""

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
        self.settings = DiscoverSettings.from_config(cfg.algorithm.params, cfg.training)
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


# ----------------------------------------------------------------------------------------------------
# TTT-Discover's archive: the candidate solutions of one problem, and which of them to improve next.
#
# The root is the empty candidate (scored as the empty completion); every sampled completion becomes a
# candidate whose parent is the candidate its prompt asked to improve. `select` ranks candidates by a PUCT
# score, reward + c * prior * sqrt(1 + expansions so far) / (1 + expansions of the candidate), with a
# rank-based prior (best candidate highest), so good candidates are improved first and rarely tried ones
# still get their turn; the original also backs up the best descendant's reward into the score, this one
# ranks on the candidate's own reward. `prune` keeps the root and the best `max_entries - 1` others.
@dataclass
class Candidate:
    """One archived solution attempt."""

    id: int
    text: str
    reward: float
    parent: int | None
    step: int  # the step that sampled it (-1: the root)
    expansions: int = 0  # how often it was selected as the candidate to improve


def _candidate(row: dict[str, int | float | str | None]) -> Candidate:
    parent = row.get("parent")
    return Candidate(id=int(cast("int", row["id"])), text=str(row["text"]), reward=float(cast("float", row["reward"])),
                     parent=None if parent is None else int(cast("int", parent)), step=int(cast("int", row["step"])),
                     expansions=int(cast("int", row.get("expansions", 0))))


class Archive:
    """The candidates of one problem, best first by `rank`."""

    def __init__(self, root_reward: float, max_entries: int) -> None:
        self.entries: dict[int, Candidate] = {0: Candidate(0, "", float(root_reward), None, -1)}
        self.max_entries = max(2, max_entries)
        self.total_expansions = 0
        self.next_id = 1

    def __len__(self) -> int:
        return len(self.entries)

    def ranked(self) -> list[Candidate]:
        """Best first: higher reward, then the earlier candidate."""
        return sorted(self.entries.values(), key=lambda c: (-c.reward, c.id))

    def best(self) -> Candidate:
        return self.ranked()[0]

    def select(self, n: int, exploration: float) -> list[Candidate]:
        """The `n` candidates to improve this step (cycling through the archive when it is smaller)."""
        ranked = self.ranked()
        total = len(ranked) * (len(ranked) + 1) / 2
        prior = {c.id: (len(ranked) - i) / total for i, c in enumerate(ranked)}
        scale = math.sqrt(1.0 + self.total_expansions)

        def score(c: Candidate) -> tuple[float, float, int]:
            return (c.reward + exploration * prior[c.id] * scale / (1.0 + c.expansions), c.reward, -c.id)

        ordered = sorted(ranked, key=score, reverse=True)
        chosen = [ordered[i % len(ordered)] for i in range(n)]
        for c in chosen:
            c.expansions += 1
        self.total_expansions += len(chosen)
        return chosen

    def context(self, start: Candidate, k: int) -> list[Candidate]:
        """Up to `k` best other non-empty candidates, shown alongside the one to improve."""
        return [c for c in self.ranked() if c.id != start.id and c.text][:k]

    def add(self, parent: int, texts: list[str], rewards: list[float], step: int) -> None:
        for text, reward in zip(texts, rewards, strict=True):
            self.entries[self.next_id] = Candidate(self.next_id, text, float(reward), parent, step)
            self.next_id += 1

    def prune(self) -> None:
        if len(self.entries) <= self.max_entries:
            return
        kept = [c for c in self.ranked() if c.id != 0][: self.max_entries - 1]
        self.entries = {0: self.entries[0], **{c.id: c for c in kept}}

    def to_json(self) -> dict[str, object]:
        return {"next_id": self.next_id, "total_expansions": self.total_expansions,
                "entries": [asdict(c) for c in self.ranked()]}

    @classmethod
    def from_json(cls, data: dict[str, object], max_entries: int) -> Archive:
        """The archive `to_json` wrote (a checkpoint's `discover_archive.json`)."""
        archive = cls(0.0, max_entries)
        rows = cast("list[dict[str, int | float | str | None]]", data["entries"])
        archive.entries = {c.id: c for c in (_candidate(row) for row in rows)}
        archive.next_id = int(cast("int", data["next_id"]))
        archive.total_expansions = int(cast("int", data["total_expansions"]))
        return archive
