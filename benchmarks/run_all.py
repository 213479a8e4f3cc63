"""Runs every benchmark in turn (`make bench`). Each prints its own table and ratios against a
baseline measured in the same run; results are recorded in docs/benchmarks.md."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHMARKS = (
    ("step throughput", ["step_throughput.py"]),
    ("throttle", ["throttle.py"]),
    ("back pressure", ["backpressure.py", "--seconds", "6", "--runs", "4", "8"]),
    ("campaign of short runs", ["campaign.py", "--reps", "1"]),
    ("campaign floor", ["campaign_floor.py", "--reps", "1"]),
)


def main() -> int:
    env = {**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}
    failed = []
    for title, argv in BENCHMARKS:
        print(f"\n=== {title} ===", flush=True)
        started = time.perf_counter()
        code = subprocess.call([sys.executable, str(HERE / argv[0]), *argv[1:]], env=env, timeout=900)
        print(f"--- {title}: exit {code}, {time.perf_counter() - started:.0f} s", flush=True)
        if code:
            failed.append(title)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
