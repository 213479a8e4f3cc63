"""Is a directory of checkpoints this run's? The run name and config its `run_meta.json` records.

A run's checkpoints are resumed only by the same run with a config that matches in every setting that
shapes the steps: a campaign trial picking up its work directory (campaign/resume/own_checkpoint.py) and a run
started with a `[training] checkpoint_dir` that holds checkpoints already (run/checkpoint_dir.py).
Settings that do not shape the steps (`[campaign]`, `[logging]`, `[resume]`, `[squeeze]`,
`training.max_steps`: raising it continues a run) may differ. Pure: no Ray, no torch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import cast

from retrain_ray.util.secrets import redact

RUN_META = "run_meta.json"
# config keys a run may change between its attempts: they do not change what its steps compute
IGNORED = ("campaign", "logging", "resume", "squeeze", "training.max_steps")


class ForeignRunDir(RuntimeError):
    """The run directory holds checkpoints of another run or config."""


def flat_config(data: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    flat: dict[str, object] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flat_config(cast("Mapping[str, object]", value), f"{name}."))
        else:
            flat[name] = value
    return flat


def _ignored(key: str) -> bool:
    return any(key == i or key.startswith(f"{i}.") for i in IGNORED)


def config_differences(recorded: Mapping[str, object], current: Mapping[str, object]) -> list[str]:
    """Dotted keys whose values differ between two (redacted) config dumps, ignoring `IGNORED`."""
    old, new = flat_config(recorded), flat_config(current)
    return sorted(k for k in old.keys() | new.keys() if not _ignored(k) and old.get(k) != new.get(k))


def foreign(work_dir: Path, what: str) -> ForeignRunDir:
    return ForeignRunDir(
        f"{work_dir} holds checkpoints of {what}; they are not resumed and not overwritten. Move the directory "
        "away (or delete it) to start this run from step 0, or run with the config that wrote it")


def check_meta(meta: object, meta_path: Path, where: Path, run_name: str, config: Mapping[str, object]) -> None:
    if not isinstance(meta, dict) or not isinstance(cast("dict[str, object]", meta).get("config"), dict):
        raise foreign(where, f"an unknown run ({meta_path} records no config)")
    recorded = cast("dict[str, object]", meta)
    if recorded.get("run_name") != run_name:
        raise foreign(where, f"run {recorded.get('run_name')!r}, not {run_name!r}")
    differ = config_differences(cast("Mapping[str, object]", recorded["config"]), redact(dict(config)))
    if differ:
        shown = ", ".join(differ[:8]) + (f" and {len(differ) - 8} more" if len(differ) > 8 else "")
        raise foreign(where, f"run {run_name!r} with another config (differs in {shown})")


def check_same_run(work_dir: Path, run_name: str, config: Mapping[str, object]) -> None:
    """Raises ForeignRunDir unless `work_dir/run_meta.json` records `run_name` and a matching config
    (`config`: the trial's `model_dump(mode="json")`, redacted here as run_meta's is)."""
    meta_path = work_dir / RUN_META
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise foreign(work_dir, f"an unknown run ({meta_path} does not load: {exc})") from exc
    check_meta(meta, meta_path, work_dir, run_name, config)
