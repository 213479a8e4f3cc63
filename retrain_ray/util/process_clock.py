"""When this process was created, as Unix time: what "time to first step" is measured from.

Linux only (`/proc`): the process's start, in clock ticks since boot, placed on the wall clock through
the current uptime. `/proc/stat`'s `btime` would be simpler but is whole seconds, which put start-up
figures up to a second too high.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

__all__ = ["process_started_at"]


def process_started_at(pid: int | None = None) -> float | None:
    """time.time() at which this process (or process `pid`) was created; None where /proc cannot tell."""
    try:
        ticks = int(Path(f"/proc/{pid or 'self'}/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
