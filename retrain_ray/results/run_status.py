"""Status of standalone runs (`retrain-ray train`), read from their Arrow logs, as the original's
`retrain status` shows them (spec 5.3): the last row's step, condition, reward, correct rate, loss,
tokens/s, sample and train time, the wall time (sum of `step_time_s`) and when the run last logged.

A run directory is one holding a `metrics.arrows` stream; runs inside a campaign directory are the
campaign's (results/status.py shows them in its matrix). `completed` when the run's newest checkpoint is
`final` (trainer_state.json, as the original), `stale` when not completed and nothing was logged for
`stale_after_s`, else `running`.
"""

from __future__ import annotations

import json
import time
from numbers import Real
from pathlib import Path
from typing import TypedDict, cast

from retrain_ray.results.campaign_results import read_history
from retrain_ray.results.status import STALE_AFTER_S


class RunSummary(TypedDict):
    """One run outside a campaign, as `status` shows it (JSON-able; None: not logged yet)."""

    dir: str
    run_name: str
    condition: str | None
    seed: object  # as run_meta.json holds it
    status: str  # "completed", "running" or "stale"
    step: int | None
    max_steps: object
    mean_reward: float | None
    correct_rate: float | None
    loss: float | None
    tokens_per_second: float | None
    sample_time_s: float | None
    train_time_s: float | None
    step_time_s: float | None
    wall_time_s: float | None
    last_update_s: float | None


def is_run_dir(path: Path) -> bool:
    return (Path(path) / "metrics.arrows").is_file()


def find_runs(root: Path, campaigns: list[Path]) -> list[Path]:
    """`root` itself if it is a run directory, else every run directory below it not inside one of `campaigns`."""
    root = Path(root)
    if is_run_dir(root):
        return [root]
    if not root.is_dir():
        return []
    inside = [c.resolve() for c in campaigns]
    found = {p.parent for p in root.rglob("metrics.arrows")}
    return sorted(p for p in found if not any(c in p.resolve().parents for c in inside))


def _completed(run_dir: Path) -> bool:
    try:
        return json.loads((run_dir / "trainer_state.json").read_text()).get("checkpoint_name") == "final"
    except (OSError, ValueError, AttributeError):
        return False


def _meta(run_dir: Path) -> dict[str, object]:
    try:
        meta: object = json.loads((run_dir / "run_meta.json").read_text())
    except (OSError, ValueError):
        return {}
    return cast(dict[str, object], meta) if isinstance(meta, dict) else {}


def _field(data: object, key: str) -> object:
    """`data[key]` when `data` is a JSON object (else None)."""
    return cast(dict[str, object], data).get(key) if isinstance(data, dict) else None


def _number(value: object) -> float | None:
    if not isinstance(value, (Real, str)):  # numpy's numbers too
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if number == number else None  # NaN: no value


def run_summary(run_dir: Path, *, now: float | None = None, stale_after_s: float = STALE_AFTER_S) -> RunSummary:
    """One run's status as a JSON-able dict (`status` None fields: nothing logged yet)."""
    run_dir = Path(run_dir)
    now = time.time() if now is None else now
    hist = read_history(run_dir)
    meta = _meta(run_dir)
    last = cast(dict[str, object], hist.iloc[-1].to_dict()) if len(hist) else {}
    updated = max((f.stat().st_mtime for f in run_dir.glob("metrics*.arrows")), default=None)
    status = "completed" if _completed(run_dir) else "running"
    if status == "running" and (updated is None or now - updated > stale_after_s):
        status = "stale"
    condition = last.get("condition") or meta.get("condition")
    step = _number(last.get("step"))
    return RunSummary(
        dir=str(run_dir), run_name=str(meta.get("run_name") or run_dir.name),
        condition=str(condition) if condition else None, seed=meta.get("seed"), status=status,
        step=int(step) if last and step is not None else None,
        max_steps=_field(_field(meta.get("config"), "training"), "max_steps"),
        mean_reward=_number(last.get("mean_reward")), correct_rate=_number(last.get("correct_rate")),
        loss=_number(last.get("loss")), tokens_per_second=_number(last.get("tokens_per_second")),
        sample_time_s=_number(last.get("sample_time_s")), train_time_s=_number(last.get("train_time_s")),
        step_time_s=_number(last.get("step_time_s")),
        wall_time_s=float(hist["step_time_s"].sum()) if "step_time_s" in hist else None,
        last_update_s=None if updated is None else max(0.0, now - updated),
    )
