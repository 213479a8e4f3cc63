"""Benchmark: the adaptive campaign's two tests, Bonferroni over looks and the group-sequential permutation
test, on the seeded simulation suite's scenarios (campaign/adaptive/sequential_simulation.py), the same
draws for both, at four rung schedules: the suite's, "dense" (every 10% of the last rung's step), "default"
(the rungs when `[campaign.adaptive] rungs` is left out: every 4%, config/rung_schedule.py) and
"doubling" (5%, 10%, 20%, 40%, 100%: an early first look with few looks, the Bonferroni split's friend).
Per scenario and schedule: how often the truly best condition is stopped (must be <= alpha), the mean
seeds started and the seed-steps spent (fraction of the grid's), and the sequential/Bonferroni ratio of
seed-steps. `floor` is the least any test could spend on these rungs: the best condition's seeds run to the
end, every other condition stopped at the first rung, no seed added; a ratio below floor / Bonferroni is
out of reach of any test. With several schedules, "best" lines set each test at its own cheapest schedule.

Run from the repository root: `.venv/bin/python benchmarks/adaptive_tests.py [--campaigns N]
[--spending early|pocock|obrien-fleming] [--rungs suite|dense|default|doubling|all ...] [--only TEXT ...]
[--json]` (`--only`: the scenarios whose name contains one of the texts).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable

from retrain_ray.campaign.adaptive.sequential import Spending
from retrain_ray.campaign.adaptive.sequential_simulation import simulate_test
from retrain_ray.campaign.adaptive.simulation import Scenario
from retrain_ray.config.rung_schedule import even_rungs

ALPHA = 0.05   # every scenario's (Scenario's default)
SCENARIOS: dict[str, Scenario] = {
    # tests/campaign/test_adaptive_simulation.py: the best condition at risk
    "close race, 3 seeds": Scenario({"a": 0.0, "b": -0.5, "c": -0.5, "d": -4.0}, min_seeds=3, max_seeds=5),
    "near tie, 4 conditions": Scenario({"a": 0.1, "b": 0.0, "c": 0.0, "d": 0.0}, min_seeds=3, max_seeds=5),
    "near tie, 2 seeds": Scenario({"a": 0.1, "b": 0.0, "c": 0.0}, rungs=(40, 80, 160), min_seeds=2, max_seeds=4),
    "minimising": Scenario({"a": -0.5, "b": 0.0, "c": 0.0}, mode="min", min_seeds=3, max_seeds=6),
    # all equal
    "equal, 4 conditions, 3 seeds": Scenario(dict.fromkeys("abcd", 0.0), min_seeds=3, max_seeds=5),
    "equal, seeds that do not persist": Scenario(dict.fromkeys("abc", 0.0), min_seeds=5, max_seeds=7,
                                                 persistence=0.0),
    # clearly worse (the suite's SEPARATED), and two in between
    "2 sd worse, 10 seeds": Scenario({"a": 0.0, "b": -2.0, "c": -2.0, "d": -2.0}, min_seeds=10, max_seeds=12),
    "4 sd worse, 5 seeds": Scenario({"a": 0.0, "b": -4.0, "c": -4.0, "d": -4.0}, min_seeds=5, max_seeds=7),
    "3 sd worse, 5 seeds": Scenario({"a": 0.0, "b": -3.0, "c": -3.0, "d": -3.0}, min_seeds=5, max_seeds=7),
    "1.5 sd worse, 10 seeds": Scenario({"a": 0.0, "b": -1.5, "c": -1.5, "d": -1.5}, min_seeds=10, max_seeds=12),
}


def floor_fraction(scenario: Scenario) -> float:
    """Seed-steps of the cheapest possible campaign over the grid's."""
    grid_seeds = scenario.grid_seeds or scenario.min_seeds
    others = len(scenario.means) - 1
    cheapest = scenario.min_seeds * (scenario.rungs[-1] + others * scenario.rungs[0])
    return cheapest / (len(scenario.means) * grid_seeds * scenario.rungs[-1])


def dense(scenario: Scenario) -> Scenario:
    """The scenario with a rung at every 10% of its last rung's step."""
    last = scenario.rungs[-1]
    return dataclasses.replace(scenario, rungs=tuple(last * k // 10 for k in range(1, 11)))


def default(scenario: Scenario) -> Scenario:
    """The scenario at the default rungs of a campaign of its last rung's steps (every 4%)."""
    return dataclasses.replace(scenario, rungs=tuple(even_rungs(scenario.rungs[-1])))


def doubling(scenario: Scenario) -> Scenario:
    """The scenario with rungs at 5%, 10%, 20%, 40% and 100% of its last rung's step."""
    last = scenario.rungs[-1]
    return dataclasses.replace(scenario, rungs=(last // 20, last // 10, last // 5, 2 * last // 5, last))


SCHEDULES: dict[str, Callable[[Scenario], Scenario]] = {
    "suite": lambda scenario: scenario, "dense": dense, "default": default, "doubling": doubling}

Row = dict[str, float | str]


def compare(campaigns: int, spending: Spending, rungs: str = "suite",
            only: list[str] | None = None) -> list[Row]:
    rows: list[Row] = []
    for name, suite_scenario in SCENARIOS.items():
        if only and not any(text in name for text in only):
            continue
        scenario = SCHEDULES[rungs](suite_scenario)
        bonferroni = simulate_test(scenario, "bonferroni", campaigns)
        sequential = simulate_test(scenario, "sequential", campaigns, spending=spending)
        rows.append({"scenario": name, "rungs": rungs,
                     "best_stopped_bonferroni": bonferroni.summary.best_stopped_rate,
                     "best_stopped_sequential": sequential.summary.best_stopped_rate,
                     "seeds_bonferroni": bonferroni.mean_seeds, "seeds_sequential": sequential.mean_seeds,
                     "steps_bonferroni": bonferroni.steps_fraction, "steps_sequential": sequential.steps_fraction,
                     "steps_ratio": sequential.steps_fraction / bonferroni.steps_fraction,
                     "floor_ratio": floor_fraction(scenario) / bonferroni.steps_fraction})
        print(_line(rows[-1]), file=sys.stderr, flush=True)
    return rows


def each_at_its_best(rows: list[Row]) -> list[Row]:
    """Per scenario, each test at the schedule where it spends least: the ratio of those seed-steps."""
    out: list[Row] = []
    for name in dict.fromkeys(str(r["scenario"]) for r in rows):
        mine = [r for r in rows if r["scenario"] == name]
        s_best = min(mine, key=lambda r: float(r["steps_sequential"]))
        b_best = min(mine, key=lambda r: float(r["steps_bonferroni"]))
        out.append({"scenario": name, "sequential_rungs": s_best["rungs"], "bonferroni_rungs": b_best["rungs"],
                    "steps_sequential": s_best["steps_sequential"], "steps_bonferroni": b_best["steps_bonferroni"],
                    "steps_ratio": float(s_best["steps_sequential"]) / float(b_best["steps_bonferroni"])})
        best = out[-1]
        print(f"{name:<34} best  S {best['steps_sequential']:.3f} ({best['sequential_rungs']}) B "
              f"{best['steps_bonferroni']:.3f} ({best['bonferroni_rungs']}) S best / B best "
              f"{best['steps_ratio']:.3f}", file=sys.stderr, flush=True)
    return out


def _line(row: dict[str, float | str]) -> str:
    return (f"{row['scenario']:<34} {row['rungs']:<5} best stopped B {row['best_stopped_bonferroni']:.3f} S "
            f"{row['best_stopped_sequential']:.3f} | seeds B {row['seeds_bonferroni']:.2f} S "
            f"{row['seeds_sequential']:.2f} | steps B {row['steps_bonferroni']:.3f} S {row['steps_sequential']:.3f}"
            f" S/B {row['steps_ratio']:.3f} (floor {row['floor_ratio']:.3f})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--campaigns", type=int, default=1000)
    parser.add_argument("--spending", choices=["early", "pocock", "obrien-fleming"], default="early")
    parser.add_argument("--rungs", nargs="+", choices=[*SCHEDULES, "all"], default=["all"])
    parser.add_argument("--only", nargs="+", metavar="TEXT", help="scenarios whose name contains a TEXT")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    schedules = list(SCHEDULES) if "all" in args.rungs else list(dict.fromkeys(args.rungs))
    rows = [row for rungs in schedules for row in compare(args.campaigns, args.spending, rungs, args.only)]
    best = each_at_its_best(rows) if len(schedules) > 1 else []
    if args.json:
        print(json.dumps({"rows": rows, "each_at_its_best": best}, indent=2))
    return 0 if all(float(r["best_stopped_sequential"]) <= ALPHA for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
