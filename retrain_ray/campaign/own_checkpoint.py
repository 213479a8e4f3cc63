"""A trial that Tune gives no checkpoint resumes from its run's own checkpoints when they are its own.

Tune hands a trial its last reported checkpoint. It has none after a torn experiment state was set
aside and Tune started afresh (campaign/tune_state.py), nor after a restart that lost its copies;
yet the run's work directory (`<campaign>/runs/<run>/work`) still holds the checkpoints the run wrote
(`checkpoint_step_N`, atomic and checksummed: run/checkpoint.py). `own_checkpoint` picks the newest of
them that verifies (a damaged one is skipped with a warning, as `retrain-ray train --resume` does),
whose step is logged (every step up to it is in the run's metrics log, so no row is lost) and whose
run is this trial's run: `run_meta.json` beside them names the same run and a config that matches the
trial's in every setting that shapes the steps. Settings that do not (`[campaign]`, `[logging]`,
`[resume]`, `[squeeze]`, `training.max_steps`: raising it continues a run) may differ.

A run directory of another run or config is an error (`ForeignRunDir`), never picked up and never
overwritten: the trial fails naming the directory, the differing settings and the fix.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from retrain_ray.secrets import redact

log = logging.getLogger(__name__)

RUN_META = "run_meta.json"
# config keys a run may change between its attempts: they do not change what its steps compute
IGNORED = ("campaign", "logging", "resume", "squeeze", "training.max_steps")


class ForeignRunDir(RuntimeError):
    """The run directory holds checkpoints of another run or config."""


def _flat(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flat(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def _ignored(key: str) -> bool:
    return any(key == i or key.startswith(f"{i}.") for i in IGNORED)


def config_differences(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Dotted keys whose values differ between two (redacted) config dumps, ignoring `IGNORED`."""
    old, new = _flat(recorded), _flat(current)
    return sorted(k for k in old.keys() | new.keys() if not _ignored(k) and old.get(k) != new.get(k))


def _foreign(work_dir: Path, what: str) -> ForeignRunDir:
    return ForeignRunDir(
        f"{work_dir} holds checkpoints of {what}; they are not resumed and not overwritten. Move the directory "
        "away (or delete it) to start this run from step 0, or run the campaign with the config that wrote it")


def check_same_run(work_dir: Path, run_name: str, config: Mapping[str, Any]) -> None:
    """Raises ForeignRunDir unless `work_dir/run_meta.json` records `run_name` and a matching config
    (`config`: the trial's `model_dump(mode="json")`, redacted here as run_meta's is)."""
    meta_path = work_dir / RUN_META
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _foreign(work_dir, f"an unknown run ({meta_path} does not load: {exc})") from exc
    if not isinstance(meta, dict) or not isinstance(meta.get("config"), dict):
        raise _foreign(work_dir, f"an unknown run ({meta_path} records no config)")
    if meta.get("run_name") != run_name:
        raise _foreign(work_dir, f"run {meta.get('run_name')!r}, not {run_name!r}")
    differ = config_differences(meta["config"], redact(dict(config)))
    if differ:
        shown = ", ".join(differ[:8]) + (f" and {len(differ) - 8} more" if len(differ) > 8 else "")
        raise _foreign(work_dir, f"run {run_name!r} with another config (differs in {shown})")


def own_checkpoint(work_dir: Path, run_name: str, config: Mapping[str, Any], logged_through: int) -> Path | None:
    """The newest verified checkpoint in `work_dir` whose step is <= `logged_through` (the last step
    such that every step up to it is logged), after `check_same_run`; None: start from step 0."""
    # deferred: run/checkpoint.py loads torch, which the driver (importing campaign/trial.py) never needs
    from retrain_ray.run.checkpoint import CheckpointManager, load_state, verify_checkpoint

    candidates = CheckpointManager(work_dir, keep_last=0).candidates()
    if not candidates:
        return None
    check_same_run(work_dir, run_name, config)
    for candidate in candidates:
        problem = verify_checkpoint(candidate)
        if problem:
            log.warning("skipping damaged checkpoint %s: %s; trying the previous one", candidate, problem)
            continue
        step = load_state(candidate).step
        if step <= logged_through:
            return candidate
        log.warning("skipping checkpoint %s: its step %d is past the last step logged without a gap (%d)",
                    candidate, step, logged_through)
    log.warning("%s: no usable checkpoint; run %s starts from step 0", work_dir, run_name)
    return None
