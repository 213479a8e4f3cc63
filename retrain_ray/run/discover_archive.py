"""TTT-Discover's archive: the candidate solutions of one problem, and which of them to improve next.

The root is the empty candidate (scored as the empty completion); every sampled completion becomes a
candidate whose parent is the candidate its prompt asked to improve. `select` ranks candidates by a PUCT
score, reward + c * prior * sqrt(1 + expansions so far) / (1 + expansions of the candidate), with a
rank-based prior (best candidate highest), so good candidates are improved first and rarely tried ones
still get their turn; the original also backs up the best descendant's reward into the score, this one
ranks on the candidate's own reward. `prune` keeps the root and the best `max_entries - 1` others.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import cast


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
