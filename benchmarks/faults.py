"""Fault-injection benchmark (issue 15): repeated, randomized faults on real Ray, each trial checked.

Scenarios (tests/fault_scenarios.py and tests/fault_scenarios_io.py; tests/campaign/test_faults.py runs each
once): a run's trial process SIGKILLed at a random step; one actor (sampler or trainer) of a split run
SIGKILLed at a random step (4 fake GPUs); the campaign driver SIGKILLed at a random
moment and the same command run again; a worker node removed mid-run (ray.cluster_utils.Cluster);
throttle lease holders SIGKILLed among 32 clients; a shared Serve endpoint failing 20% of its calls
(502, 504, stalls past the client's timeout); a full disk and a read-only run directory under
`retrain-ray train`; (tests/fault_scenarios_cli.py) a `train` interrupted by Ctrl-C or SIGTERM at a
random step, and a second writer started on a run directory in use; and (tests/fault_scenarios_control.py,
issue 34) SIGTERM or SIGHUP to a campaign driver's process group, the recorder actor SIGKILLed mid-campaign,
and a trial errored by Tune while the other runs wait at an adaptive rung. Every trial checks its scenario's invariant; the table gives trials, passes and
the median recovery time (what "recovery" means is in each row's invariant).

    .venv/bin/python benchmarks/faults.py --quick              # every scenario twice
    .venv/bin/python benchmarks/faults.py --full               # the counts of issue 15
    .venv/bin/python benchmarks/faults.py --quick --only throttle --seed 7
    .venv/bin/python benchmarks/faults.py --full --write-docs  # the table into docs/reliability.md

Exit code 1 when a trial failed. The machine's load average is printed with the table: on a shared
machine, recovery times are "under load".
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
for key, value in (("RAY_AUTH_MODE", "disabled"), ("HF_HUB_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false"),
                   ("RAY_USAGE_STATS_ENABLED", "0"), ("RAY_TRAIN_V2_ENABLED", "0"), ("RAY_DEDUP_LOGS", "0")):
    os.environ.setdefault(key, value)

import fault_scenarios as fs  # noqa: E402
import fault_scenarios_cli as fcli  # noqa: E402
import fault_scenarios_control as fctl  # noqa: E402
import fault_scenarios_io as fio  # noqa: E402
import fault_scenarios_split as fss  # noqa: E402

DOCS = REPO / "docs" / "reliability.md"
BEGIN, END = "<!-- faults-table:begin -->", "<!-- faults-table:end -->"
# name, function, quick count, full count, needs this process's Ray, invariant (and what recovery is)
SCENARIOS = (
    ("run_kill", fs.run_kill, 2, 10, True,
     "run completes (2 attempts), every step once, final weights bit-identical to an uninterrupted run; "
     "recovery: kill to the first row of the retry"),
    ("split_actor_kill", fss.split_actor_kill, 2, 10, True,
     "split run (2 fake GPUs): its inference or trainer actor SIGKILLed (alternating), the run completes "
     "(2 attempts, new actors), every step once, final weights bit-identical to an uninterrupted split run; "
     "recovery: kill to the first row of the retry"),
    ("driver_kill", fs.driver_kill, 2, 5, False,
     "same command again: campaign done, no finished run rerun (attempts and log segments unchanged), "
     "every step once, no process left; "
     "recovery: the second command's whole run"),
    ("node_removal", fs.node_removal, 2, 5, False,
     "node lost (raylet and every process under it SIGKILLed) while the run runs: the run finishes on the "
     "other worker, every step once; recovery: removal to the first row on the new node"),
    ("throttle", fio.throttle_kills, 10, 100, True,
     "32 clients, capacity 4, TTL 1 s: the killed holder's leases are reclaimed within TTL + 1 s, grants go "
     "on, never more holders than capacity; recovery: kill to reclaim"),
    ("endpoint", fio.failing_endpoint, 2, 5, True,
     "Serve endpoint failing 20% of calls (502, 504, 3 s stalls vs a 2 s client timeout): 2 runs complete, "
     "every step once, retries in the rows, the advisor told of the errors and capacity <= max(1, capacity // 2) in the 2 decisions after each; recovery: campaign time"),
    ("disk_full", fio.disk_full, 2, 5, False,
     "run dir on a 6-13 MB tmpfs: exit 1 with the error and no traceback, every checkpoint in place verifies, "
     "--resume after freeing space completes with every step once; recovery: the resume"),
    ("read_only", fio.read_only, 2, 5, False,
     "--resume into a read-only run dir: exit 1 with the error, nothing changed; made writable, --resume "
     "completes with every step once; recovery: the resume"),
    ("train_interrupt", fcli.train_interrupt, 2, 6, False,
     "`train` sent Ctrl-C or SIGTERM (random) at a random step: exit 130/143, no traceback, the printed "
     "command (`continue with: ... --resume`, or `start it again with: ... --overwrite` before the first checkpoint) "
     "completes the run with every step once; recovery: signal to the end of that command"),
    ("recorder_kill", fctl.recorder_kill, 2, 6, True,
     "the campaign's recorder actor SIGKILLed after a random number of rows: Ray restarts it, both runs complete "
     "in 1 attempt, every step once, the manifest's control_restarts names it; recovery: kill to the next row"),
    ("adaptive_trial_error", fctl.adaptive_trial_error, 2, 5, True,
     "adaptive campaign (2 conditions x 2 seeds, 1 slot, rungs [2, 4]): a run's trial process SIGKILLed while "
     "another waits at a rung; Tune errors it (max_failures 0), the run is counted failed, the rungs are decided "
     "without it and the campaign ends; recovery: the campaign's whole time"),
    ("driver_sigterm", fctl.driver_sigterm, 2, 6, False,
     "SIGTERM or SIGHUP (random) to a CLI campaign's process group after a random number of rows: exit 143/129, "
     "no traceback, manifest `interrupted`, `retrain-ray resume DIR` printed and completing every step once; "
     "recovery: signal to the end of the resume"),
    ("second_writer", fcli.second_writer, 2, 6, False,
     "a second `train` (another seed) on a run dir in use at a random step: exit 2 naming the holder's pid, "
     "no traceback; the first finishes with exactly one row per step; recovery: the second command's refusal"),
)


def _ray_init(attempts: int = 6) -> None:
    """A local Ray; retried, since Ray 2.60 gives its raylet a fixed 30 s to register, which a heavily
    loaded machine can miss."""
    import ray

    for attempt in range(1, attempts + 1):
        try:
            ray.init(address="local", num_cpus=4, num_gpus=4, include_dashboard=False, log_to_driver=False,
                     object_store_memory=300 * 2**20, namespace="faults-benchmark")
            return
        except Exception as exc:
            ray.shutdown()
            if attempt == attempts:
                raise
            print(f"ray.init failed ({exc}); retrying", flush=True)
            time.sleep(5.0)


def run_scenario(name: str, fn, count: int, rng: random.Random, root: Path) -> tuple[list[fs.Trial], float]:
    started = time.monotonic()
    try:
        trials = fn(count, rng, root / name)
    except Exception as exc:  # a scenario that breaks counts all its trials as failed
        traceback.print_exc()
        trials = [fs.Trial(False, None, f"scenario error: {exc!r}")] * count
    return trials, time.monotonic() - started


def table(rows: list[tuple[str, str, list[fs.Trial], float]]) -> str:
    lines = ["| scenario | trials | passed | invariant checked after every trial | median recovery (s) | wall (s) |",
             "|---|---|---|---|---|---|"]
    for name, invariant, trials, wall in rows:
        times = [t.recovery_s for t in trials if t.recovery_s is not None]
        median = f"{statistics.median(times):.2f}" if times else "—"
        lines.append(f"| {name} | {len(trials)} | {sum(t.passed for t in trials)} | {invariant} | {median} | {wall:.0f} |")
    return "\n".join(lines)


def write_docs(text: str) -> None:
    doc = DOCS.read_text()
    if BEGIN not in doc:
        raise SystemExit(f"{DOCS} has no {BEGIN} ... {END} markers")
    head, rest = doc.split(BEGIN, 1)
    DOCS.write_text(head + BEGIN + "\n" + text + "\n" + END + rest.split(END, 1)[1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    counts = parser.add_mutually_exclusive_group()
    counts.add_argument("--quick", action="store_true", help="every scenario twice (10 throttle kills)")
    counts.add_argument("--full", action="store_true", help="the counts of issue 15")
    parser.add_argument("--only", nargs="+", choices=[s[0] for s in SCENARIOS], help="these scenarios only")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: from the clock)")
    parser.add_argument("--write-docs", action="store_true", help=f"put the table into {DOCS.name}")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else int(time.time())
    chosen = [s for s in SCENARIOS if not args.only or s[0] in args.only]
    root = Path(tempfile.mkdtemp(prefix="faults-", dir="/tmp"))
    load_before, started = os.getloadavg(), time.monotonic()
    print(f"faults benchmark, seed {seed}, work dir {root}, load average {load_before[0]:.2f}", flush=True)
    if any(s[4] for s in chosen):
        _ray_init()
    rows = []
    # the scenarios on this process's Ray first; it is shut down before those that start their own
    chosen.sort(key=lambda s: not s[4])
    for i, (name, fn, quick, full, _, invariant) in enumerate(chosen):
        if i and chosen[i - 1][4] and not chosen[i][4]:
            import ray

            ray.shutdown()
        count = full if args.full else quick
        trials, wall = run_scenario(name, fn, count, random.Random(f"{seed}-{name}"), root)
        rows.append((name, invariant, trials, wall))
        print(f"\n== {name}: {sum(t.passed for t in trials)}/{len(trials)} passed in {wall:.0f} s", flush=True)
        for i, t in enumerate(trials):
            shown = "—" if t.recovery_s is None else f"{t.recovery_s:.2f} s"
            print(f"  {i + 1:>3} {'ok  ' if t.passed else 'FAIL'} recovery {shown}: {t.detail}", flush=True)
    load_after = os.getloadavg()
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    text = (f"Measured {when}, `benchmarks/faults.py {'--full' if args.full else '--quick'} --seed {seed}`, "
            f"{os.cpu_count()} cores shared with other work (loaded: load average {load_before[0]:.1f} before, "
            f"{load_after[0]:.1f} after), {time.monotonic() - started:.0f} s in all.\n\n" + table(rows))
    print("\n" + text, flush=True)
    if args.write_docs:
        write_docs(text)
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if all(t.passed for _, _, trials, _ in rows for t in trials) else 1


if __name__ == "__main__":
    sys.exit(main())
