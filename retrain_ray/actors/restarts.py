"""Control actors that Ray restarts (the recorder, the throttles, the back-pressure actor) say so: each
new lifetime after a death appends one line to `<campaign_dir>/control_restarts.jsonl`, which the driver
reads while Tune runs (campaign/experiment.py `RestartNotices`), prints and copies into the manifest.

A file, not a call: the actor that restarts cannot reach the driver's Tune loop, and the file outlives
both (a resumed campaign still shows what happened in the session before).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

RESTARTS_FILE = "control_restarts.jsonl"
CONTROL_RESTARTS = 5  # Ray restarts a dead control actor this many times in a driver session


def record_restart(campaign_dir: Path, actor: str) -> None:
    """Appends `actor`'s restart (now, this process) to the campaign's restart log; never raises."""
    line = json.dumps({"actor": actor, "at": time.time(), "pid": os.getpid()})
    try:
        with open(campaign_dir / RESTARTS_FILE, "a", encoding="utf-8") as out:
            out.write(line + "\n")
    except OSError:  # the restart itself matters more than its note
        pass


def read_restarts(campaign_dir: Path) -> list[dict[str, object]]:
    """Every restart the log holds, oldest first (a torn last line is skipped)."""
    path = campaign_dir / RESTARTS_FILE
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    restarts: list[dict[str, object]] = []
    for line in lines:
        try:
            restarts.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return restarts
