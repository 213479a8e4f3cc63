"""The campaign wall-time estimate (campaign/capacity/estimate.py) and its inputs from pilot figures
(campaign/capacity/explain.py), on hand-computed cases."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from retrain_ray.campaign.capacity.calibration import PhaseFigures, RunFigures
from retrain_ray.campaign.capacity.estimate import (
    CheckpointUse,
    Overheads,
    RunWork,
    Slots,
    estimate,
    kept_checkpoints,
    schedule,
    slots,
)
from retrain_ray.campaign.capacity.explain import step_times, warm_start_steps
from retrain_ray.campaign.plan import concurrent_runs


def test_equal_runs_fill_the_slots_as_the_old_formula() -> None:
    runs = [RunWork(f"r{i}", 0, 10, 1.0, 2.0) for i in range(4)]
    est = estimate(runs, slot_plan=Slots(2, "max_workers"), stagger_s=0.0, overheads=Overheads())
    assert est.wall_time_s == pytest.approx(40.0)  # 4 runs x 10 steps x 2 s / 2 at once
    assert est.rl_seconds == pytest.approx(80.0) and est.warm_start_seconds == 0.0


def test_warm_start_at_its_own_time_and_every_overhead() -> None:
    # each run: start-up 2 + 3 warm-start steps x 1 s + 7 RL steps x 2 s + teardown 1 = 20 s
    runs = [RunWork(f"r{i}", 3, 7, 1.0, 2.0) for i in range(3)]
    over = Overheads(campaign_startup_s=5.0, campaign_teardown_s=3.0, run_startup_s=2.0, run_teardown_s=1.0,
                     handover_s=0.5)
    est = estimate(runs, slot_plan=Slots(2, "max_workers"), stagger_s=0.0, overheads=over)
    assert est.run_seconds == {"r0": 20.0, "r1": 20.0, "r2": 20.0}
    # r0 and r1 from 0 to 20; r2 in the first freed slot from 20.5 to 40.5
    assert est.schedule_s == pytest.approx(40.5)
    assert est.wall_time_s == pytest.approx(5.0 + 40.5 + 3.0)
    assert est.warm_start_seconds == pytest.approx(9.0) and est.rl_seconds == pytest.approx(42.0)


def test_stagger_delays_each_start() -> None:
    assert schedule([20.0, 20.0], 2, stagger_s=10.0, handover_s=0.0) == (30.0, 10.0)
    # one slot: the stagger is already over when the slot frees
    assert schedule([20.0, 20.0], 1, stagger_s=10.0, handover_s=0.0) == (40.0, 0.0)


def test_gpus_bound_the_slots() -> None:
    assert slots(4, 2.0, 3.0) == Slots(1, "gpus")
    assert slots(4, 1.0, 8.0) == Slots(4, "max_workers")
    assert slots(2, 1.0, None) == Slots(2, "max_workers")
    assert slots(2, 0.0, 0.0) == Slots(2, "max_workers")  # a CPU run needs no GPU


def test_the_plans_concurrency() -> None:
    assert concurrent_runs(True, 2, 10) == 2
    assert concurrent_runs(True, 0, 10) == 10  # 0 = one worker per run
    assert concurrent_runs(True, 16, 10) == 10
    assert concurrent_runs(False, 4, 10) == 1


def test_checkpoints_kept() -> None:
    assert kept_checkpoints(160, 50, 3) == 3
    assert kept_checkpoints(160, 50, 2) == 2
    assert kept_checkpoints(160, 50, 0) == 3  # 0 keeps all
    assert kept_checkpoints(160, 0, 3) == 0
    assert CheckpointUse(100, 4, 10).total_bytes == 4000


def _phase(median: float, overhead: float, steps: int = 4) -> PhaseFigures:
    return PhaseFigures(steps, (median,) * steps, median * steps, median * steps * overhead, steps)


def _pilot(condition: str, seed: int, warm: int, *, ended: bool = True, warm_s: float = 1.0,
           rl_s: float = 2.0) -> RunFigures:
    return RunFigures(f"{condition}_s{seed}", condition, seed, warm + 4, _phase(warm_s, 1.5, warm),
                      _phase(rl_s, 1.0) if ended else None, ended)


def test_step_times_from_the_condition_else_pooled_else_default() -> None:
    a, b = _pilot("a", 1, 5, warm_s=1.0, rl_s=2.0), _pilot("b", 1, 5, warm_s=3.0, rl_s=4.0)
    own = step_times([a], [a, b], None)
    assert (own.warm_start_s, own.rl_s, own.rl_median_s, own.source) == (1.5, 2.0, 2.0, "condition")
    pooled = step_times([], [a, b], None)
    assert pooled.rl_median_s == pytest.approx(3.0) and pooled.source == "pooled"
    assert step_times([], [], None).rl_s == 10.0 and step_times([], [], 4.0).warm_start_s == 4.0
    typed = step_times([a], [a], 6.0)  # --median-step-time overrides the median, keeps the overhead
    assert (typed.warm_start_s, typed.rl_s) == (9.0, 6.0)


def test_warm_start_length_from_the_pilot() -> None:
    training = SimpleNamespace(sft_warmup_steps=100, sft_target_correct_rate=0.2)
    pilots = [_pilot("a", 1, 30), _pilot("a", 2, 50), _pilot("a", 3, 64, ended=False)]
    assert warm_start_steps(training, 160, 1, pilots) == 30  # the same seed's
    assert warm_start_steps(training, 160, 9, pilots) == round((30 + 50 + 100) / 3)  # unfinished: the cap
    assert warm_start_steps(training, 40, 1, pilots) == 30
    assert warm_start_steps(training, 20, 1, pilots) == 20  # never more than max_steps
    fixed = SimpleNamespace(sft_warmup_steps=100, sft_target_correct_rate=0.0)
    assert warm_start_steps(fixed, 160, 1, pilots) == 100  # no target: the whole warm start runs


def test_a_pilot_warm_start_that_stopped_at_its_own_cap_is_not_its_length() -> None:
    """A 2-step pilot warm start made the estimate of a 100-step one 48 s (issue 34): a pilot whose warm
    start ran its own sft_warmup_steps (no probe logged, or a probe below the target) measures nothing;
    the run is estimated at the planned warm start's full length, with a warning."""
    from retrain_ray.campaign.capacity.pilot_warm_start import capped_pilot_warnings

    training = SimpleNamespace(sft_warmup_steps=100, sft_target_correct_rate=0.2)
    no_target = dataclasses.replace(_pilot("a", 1, 2), warm_start_capped=True)
    below = dataclasses.replace(_pilot("a", 2, 3), warm_start_last_probe=0.1)
    reached = dataclasses.replace(_pilot("a", 3, 30), warm_start_last_probe=0.25)
    assert warm_start_steps(training, 160, 1, [no_target]) == 100
    assert warm_start_steps(training, 160, 2, [below]) == 100
    assert warm_start_steps(training, 160, 3, [no_target, below, reached]) == 30
    assert warm_start_steps(training, 160, 9, [no_target, below, reached]) == round((100 + 100 + 30) / 3)
    [warning] = capped_pilot_warnings(100, 0.2, 160, [no_target, below, reached])
    assert warning == ("warning: 2 pilot run(s) ended their warm start at their own sft_warmup_steps (2, 3 steps) "
                       "without reaching sft_target_correct_rate = 0.2: that says nothing of when this campaign's "
                       "reaches it, so the estimate assumes the full 100 warm-start steps (an upper bound); run the "
                       "pilot with sft_warmup_steps = 100 to measure it")
    assert capped_pilot_warnings(100, 0.0, 160, [no_target]) == []  # no target: the full warm start is planned anyway
    assert capped_pilot_warnings(2, 0.2, 160, [no_target]) == []  # the pilot ran as long as the plan's


def test_run_figures_say_whether_the_warm_start_was_capped() -> None:
    from retrain_ray.campaign.capacity.calibration import run_figures

    def rows(probe: float | None) -> list[dict[str, object]]:
        warm = [{"step": i, "phase": "sft", "step_time_s": 1.0, "wall_time": 100.0 + i,
                 **({"sft_probe_correct_rate": probe} if probe is not None else {})} for i in range(2)]
        return warm + [{"step": 2 + i, "phase": "rl", "step_time_s": 1.0, "wall_time": 102.0 + i} for i in range(2)]

    capped = run_figures("a_s1", rows(None))
    assert capped.warm_start_ended and capped.warm_start_capped and capped.warm_start_last_probe is None
    probed = run_figures("a_s1", rows(0.4))
    assert probed.warm_start_ended and not probed.warm_start_capped and probed.warm_start_last_probe == 0.4
