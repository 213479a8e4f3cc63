"""Verification benchmark: `[reward] workers = 1 / 2 / 4` on one batch of a 20 ms-per-item verifier.

The verifier is a custom reward that busy-waits 20 ms per item (CPU work, as a symbolic checker or a
test-running verifier is), so the figures show real CPU parallelism, not the overlap of sleeps (which
would scale with workers whatever the core count). Each worker count scores a warm-up batch first
(spawning the workers and importing the reward is paid once per run, not per step), then `--repeat`
batches of `--batch` items; items/s is the best of the repeats, and the speed-up is against 1 worker
measured in the same process, so the figures compare like with like on a loaded machine.

    .venv/bin/python benchmarks/verification.py [--batch 128] [--item-ms 20] [--workers 1 2 4] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import textwrap
import time
from pathlib import Path

from retrain_ray.rewards.custom import CustomReward

MODULE = "bench_busy_reward"


def _write_reward(directory: Path, item_ms: float) -> None:
    (directory / f"{MODULE}.py").write_text(textwrap.dedent(f"""
        import time
        def score(completion, reference):
            end = time.perf_counter() + {item_ms / 1000.0!r}
            while time.perf_counter() < end:
                pass
            return 1.0 if completion == reference else 0.0
    """))


def measure(workers: int, batch: int, repeat: int) -> float:
    """Best items/s over `repeat` batches with `workers` processes (1 = in-process, today's path)."""
    reward = CustomReward(MODULE, workers=workers)
    completions = [str(i) for i in range(batch)]
    try:
        reward.score_batch(completions[: max(workers, 1) * 2], completions[: max(workers, 1) * 2])  # warm-up
        best = 0.0
        for _ in range(repeat):
            start = time.perf_counter()
            scores = reward.score_batch(completions, completions)
            elapsed = time.perf_counter() - start
            assert scores == [1.0] * batch
            best = max(best, batch / elapsed)
        return best
    finally:
        reward.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--item-ms", type=float, default=20.0)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        _write_reward(Path(tmp), args.item_ms)
        sys.path.insert(0, tmp)
        print(f"batch {args.batch}, {args.item_ms:g} ms busy work per item, {os.cpu_count()} CPUs, best of {args.repeat}")
        print(f"{'workers':>8} {'items/s':>9} {'speed-up':>9}")
        base = 0.0
        for workers in args.workers:
            rate = measure(workers, args.batch, args.repeat)
            base = base or rate
            print(f"{workers:>8} {rate:>9.1f} {rate / base:>8.2f}x", flush=True)


if __name__ == "__main__":
    main()
