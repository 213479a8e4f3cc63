"""Tune's checkpoint of a run as a pointer to the run's own checkpoint, so a campaign stores each checkpoint once.

A run writes every checkpoint into its own work directory (`<campaign>/runs/<run>/work/checkpoints/...`,
atomic and checksummed: run/resume/checkpoint.py) and reports it to Tune, which copies what it is given into
its storage (`<campaign>/tune/<run>/checkpoint_NNNNNN`). When Tune's storage is the campaign directory itself
(no `[campaign] storage`), the run's directory and Tune's lie on the same file system, so the trial reports a
directory holding only `pointer.json` (the run, the step and the absolute path of its own checkpoint) and
Ray's `.metadata.json`: a few hundred bytes instead of the weights and optimizer state a second time.

With `[campaign] storage` (a bucket, or a shared mount while runs write to their nodes' disks) Tune's copy
is the only one every node reaches, and the trial reports the checkpoint itself, as before.

Reading one back (`resolve`): a pointer gives its target while that directory exists; a dangling pointer
(the run's keep-last-N pruned the checkpoint after Tune's last synced state named it) gives None, and the
resume decision (campaign/resume/point.py) falls back to the run's own newest verified checkpoint.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

POINTER_FILE = "pointer.json"


def write_pointer(directory: Path, *, run_name: str, step: int, target: Path) -> Path:
    """Writes `directory/pointer.json` naming `target` (the run's own checkpoint after `step`)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / POINTER_FILE
    path.write_text(json.dumps({"run_name": run_name, "step": step, "path": str(target.resolve())}))
    return path


def is_pointer(directory: Path) -> bool:
    return (directory / POINTER_FILE).is_file()


def pointer_target(directory: Path) -> Path:
    """The checkpoint `directory/pointer.json` names (it may no longer exist). Raises ValueError naming the
    file when it does not say."""
    path = directory / POINTER_FILE
    try:
        data: object = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: unreadable checkpoint pointer ({exc})") from exc
    target = cast("dict[str, object]", data).get("path") if isinstance(data, dict) else None
    if not isinstance(target, str) or not target:
        raise ValueError(f"{path}: a checkpoint pointer without a 'path'")
    return Path(target)


def resolve(directory: Path) -> Path | None:
    """`directory` itself when it is a checkpoint; its pointer's target when that exists; None when the
    pointer dangles or cannot be read."""
    if not is_pointer(directory):
        return directory
    try:
        target = pointer_target(directory)
    except ValueError:
        return None
    return target if target.is_dir() else None
