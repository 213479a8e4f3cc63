"""Adaptive campaigns on Ray Tune's own machinery: a condition-aware `TrialScheduler` that compares the
conditions at each rung and stops the ones that have clearly lost, and a `Searcher` that hands Tune the
runs to start: the first seeds, then the seeds the decisions add.

The manifest is the source of truth (not Tune's searcher state): every decision is written there before
Tune acts on it. `AdaptiveBook` reads it back on every driver session, so a resumed campaign never starts a
stopped run again, still starts an added seed, and does not decide a rung twice. A resumed adaptive
campaign starts a fresh Tune experiment (campaign/driver.py), whose runs continue after their own
checkpoints, as after a torn Tune state: Tune would otherwise restore its searcher's own idea of the runs.

A run reports to the campaign only with its checkpoints (campaign/trial.py), each carrying
`adaptive_value`, the mean of the metric over its last `window` steps. A rung `r` is a step count: a run
reaches it with the report whose `step` (0-based index of its last completed step) is `r - 1`, or when it
ends. When every live run (started or still to start) of every condition that is not stopped has reached
the rung or ended, the values of the runs that reached it go to `decide` (campaign/adaptive/policy.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import JsonValue
from ray.tune.schedulers import FIFOScheduler, TrialScheduler
from ray.tune.search import Searcher

from retrain_ray.campaign.adaptive import sequential
from retrain_ray.campaign.adaptive.plan import AdaptivePlan
from retrain_ray.campaign.adaptive.policy import RungDecision, planned_looks
from retrain_ray.campaign.adaptive.policy import decide as policy
from retrain_ray.campaign.plan import RunPlan, run_record
from retrain_ray.logs.manifest import AdaptiveRecord, Decision, Manifest, RunRecord, StoppedCondition

if TYPE_CHECKING:
    from ray.tune.execution.tune_controller import TuneController
    from ray.tune.experiment import Trial

    from retrain_ray.campaign.tracking import ManifestCallback
    from retrain_ray.results.significance import PairComparison

ENDED = ("completed", "stopped", "failed")
# How long the driver lets a rung wait with no trial running, pending or to suggest before it ends the wait
# (a run Tune ended outside the campaign's callbacks, or one no trial will ever run, cannot reach the rung)
STUCK_AFTER_S = 10.0
LIVE_TRIAL = ("RUNNING", "PENDING")
TUNE_ENDED = ("ERROR", "TERMINATED")


def _run_name(trial: Trial) -> str:
    return str(trial.config.get("run_name", ""))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]  # Tune types config loosely


def _status(trial: Trial) -> str:
    return str(trial.status)  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]  # Tune's status


def _error_line(trial: Trial) -> str:
    """The last line of the error file Tune wrote for the trial."""
    path = getattr(trial, "error_file", None)
    try:
        lines = [ln for ln in Path(path).read_text().splitlines() if ln.strip()] if path else []
    except OSError:
        lines = []
    return lines[-1][:300] if lines else "no error recorded"


def _reported_step(result: Mapping[str, object]) -> int:
    """The 0-based step a report is of (-1: none yet)."""
    step = result.get("step", -1)
    return int(step) if isinstance(step, (int, float)) else -1


def _silent(text: str) -> None:
    """No one to tell (a book built without the campaign's observer)."""


VALUE = "adaptive_value"  # the metric's window mean, reported with each checkpoint (campaign/trial.py)


def decide(plan: AdaptivePlan, step: int, values: dict[str, list[float]], seeds: dict[str, int], *,
           last_rung: bool, can_add_seeds: bool, relook: int = 0,
           earlier: dict[str, list[list[float]]] | None = None) -> RungDecision:
    """The decision at a rung: the one call into the statistics, the test the plan names
    (campaign/adaptive/sequential.py's spending plan, or policy.py's alpha / looks). `relook`: how many
    times this rung was decided before (the last rung's re-looks after seeds were added); `earlier`: each
    seed's values at the rungs before this one (same order as `values`), which the sequential test reads as
    one trajectory per seed (the looks re-measure the same seeds)."""
    mode: Literal["max", "min"] = "min" if plan.mode == "min" else "max"
    if plan.test == "sequential":
        return sequential.decide(step, values, seeds_by_condition=seeds, mode=mode, alpha=plan.alpha,
                                 max_seeds=plan.max_seeds, last_rung=last_rung, can_add_seeds=can_add_seeds,
                                 rungs=plan.rungs, min_seeds=plan.min_seeds, relook=relook, earlier_values=earlier)
    looks = planned_looks(len(plan.rungs), plan.min_seeds, plan.max_seeds)  # alpha is spent over every look
    return policy(step, values, seeds_by_condition=seeds, mode=mode, alpha=plan.alpha,
                  max_seeds=plan.max_seeds, last_rung=last_rung, can_add_seeds=can_add_seeds, looks=looks)


def decision_line(plan: AdaptivePlan, decision: RungDecision, added: list[str]) -> str:
    """What the console says of a rung's decision: the test and its level, each stop with its p-value."""
    head = f"rung {decision.step} ({plan.test}, level {decision.alpha_per_look:.2g}): "
    stops = [f"stop {pc.condition} (p = {pc.p_value:.2g} against {pc.reference})" for pc in decision.stop]
    undecided = [f"{pc.condition} undecided (p = {pc.p_value:.2g})" for pc in decision.comparisons
                 if pc.verdict != "worse"]
    parts = stops + undecided + ([f"add a seed to {', '.join(added)}"] if added else [])
    leader = f"leader {decision.leader}" if decision.leader else "no leader"
    return head + "; ".join([leader, *parts]) if parts else head + f"{leader}; nothing to stop"


def _comparison(pc: PairComparison, test: str, level: float) -> dict[str, JsonValue]:
    """A comparison as the manifest records it, with the adaptive test that decided and its level."""
    return {"adaptive_test": test, "test_level": level, "condition": pc.condition, "reference": pc.reference, "diff": pc.diff, "ci_low": pc.ci_low,
            "ci_high": pc.ci_high, "p_value": pc.p_value, "verdict": pc.verdict, "seeds": pc.seeds,
            "reference_seeds": pc.reference_seeds, "test": pc.test}


def stop_reason(pc: PairComparison, step: int) -> str:
    return (f"worse than {pc.reference} at step {step} (diff {pc.diff:+.4g}, 95% CI [{pc.ci_low:.4g}, "
            f"{pc.ci_high:.4g}], p = {pc.p_value:.3g}, {pc.test}; {pc.seeds} vs {pc.reference_seeds} seeds)")


class AdaptiveBook:
    """What the scheduler and the searcher share: the runs, their values at the rungs, the decisions.

    Every change goes to the manifest at once, through the `ManifestCallback`'s `Manifest` (one object
    writes the file: the callback reloads it in `setup`, hence `records`, not a manifest of its own)."""

    def __init__(self, plan: AdaptivePlan, runs: list[RunPlan], reserve: list[RunPlan], records: ManifestCallback,
                 *, say: Callable[[str], None] | None = None) -> None:
        self.plan = plan
        self.plans = {r.run_name: r for r in [*runs, *reserve]}
        self.records = records  # campaign/tracking.py ManifestCallback
        self.say: Callable[[str], None] = say or _silent
        self.queue: list[str] = []
        self.progress: dict[str, int] = {}  # run -> steps completed, as last reported this session
        self.finished = False
        self._loaded = False

    @property
    def manifest(self) -> Manifest:
        return self.records.manifest

    def load(self) -> None:
        """Reads the decisions back from the manifest (once per driver session, when Tune starts)."""
        if self._loaded:
            return
        self._loaded = True
        adaptive = self.manifest.record.adaptive or AdaptiveRecord(plan=self.plan.to_json(), decisions=())
        self.queue = [r.run_name for r in self.manifest.record.runs if r.status not in ("completed", "stopped")]
        self.finished = bool(adaptive.finished)
        self.manifest.update(adaptive=adaptive)

    # ---- what the manifest says ---------------------------------------------------------------
    def entries(self) -> tuple[RunRecord, ...]:
        return self.manifest.record.runs

    def decisions(self) -> tuple[Decision, ...]:
        adaptive = self.manifest.record.adaptive
        return adaptive.decisions if adaptive is not None else ()

    def stopped_conditions(self) -> set[str]:
        return {d.condition for dec in self.decisions() for d in dec.stopped}

    def live_entries(self) -> list[RunRecord]:
        gone = self.stopped_conditions()
        return [e for e in self.entries() if e.condition not in gone and e.status != "stopped"]

    def reached(self, entry: RunRecord, rung: int) -> bool:
        name = entry.run_name
        if entry.status in ENDED and name not in self.queue:
            return True
        return self.progress.get(name, 0) >= rung

    def missing_at(self, rung: int) -> list[str]:
        """The live runs that have not reached `rung` yet (what a run paused there waits for)."""
        return [e.run_name for e in self.live_entries() if not self.reached(e, rung)]

    def give_up_on(self, run_name: str, why: str) -> None:
        """A run that cannot reach the rungs any more (Tune ended its trial outside the campaign's callbacks):
        recorded failed where the manifest still has it live, and counted as ended so no rung waits for it."""
        entry = self.manifest.run(run_name)
        if entry.status not in ENDED:
            self.manifest.update_run(run_name, status="failed", error=why, finished_at=time.time())
            self.say(f"{run_name} failed outside the run ({why}); counted failed, no rung waits for it")
        self.ended(run_name)

    def steps_committed(self) -> int:
        """Steps the campaign spends if every run not stopped runs to the end."""
        total = 0
        for e in self.entries():
            done = e.last_step + 1
            total += done if e.status in ("stopped", "failed") else (e.max_steps or self.plan.max_steps)
        return total

    # ---- reports -------------------------------------------------------------------------------
    def record(self, run_name: str, result: Mapping[str, object]) -> None:
        """A run's report: its progress, and its value where the report is at a rung."""
        steps = _reported_step(result) + 1
        if result.get("run_done"):
            steps = max(steps, self.plan.max_steps)
        self.progress[run_name] = max(self.progress.get(run_name, 0), steps)
        value = result.get(VALUE)
        if not isinstance(value, (int, float)) or result.get("already_completed"):
            return
        rung = _reported_step(result) + 1
        if rung in self.plan.rungs:
            rung_values = {**self.manifest.run(run_name).rung_values, str(rung): float(value)}
            self.manifest.update_run(run_name, rung_values=rung_values)

    def ended(self, run_name: str) -> None:
        self.progress[run_name] = max(self.progress.get(run_name, 0), self.plan.max_steps)
        if run_name in self.queue:
            self.queue.remove(run_name)

    def started(self, run_name: str) -> None:
        if run_name in self.queue:
            self.queue.remove(run_name)

    # ---- decisions -----------------------------------------------------------------------------
    def _due(self) -> int | None:
        """The rung to decide now, if every live run has reached it; None otherwise."""
        done = {d.step: d for d in self.decisions()}
        live = self.live_entries()
        for rung in self.plan.rungs:
            last = rung == self.plan.rungs[-1]
            if rung in done and not (last and done[rung].seeds != self._seed_counts(live)):
                continue
            return rung if all(self.reached(e, rung) for e in live) else None
        return None

    def waits_at(self, run_name: str, result: Mapping[str, object]) -> int | None:
        """The rung this report is at when its decision has not been made yet (the run should wait there);
        else None. The last step is never a wait: the run ends there."""
        rung = _reported_step(result) + 1
        if result.get("run_done") or rung not in self.plan.rungs or rung >= self.plan.max_steps or self.finished:
            return None
        if self.manifest.run(run_name).status == "stopped":
            return None
        decided = {d.step for d in self.decisions()}
        return None if rung in decided else rung

    def _seed_counts(self, live: list[RunRecord]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for e in live:
            counts[e.condition] = counts.get(e.condition, 0) + 1
        return counts

    def check(self) -> list[str]:
        """Decides every rung that is due; returns the conditions stopped (their runs to end now)."""
        stopped: list[str] = []
        while not self.finished:
            rung = self._due()
            if rung is None:
                break
            stopped += self._decide_at(rung)
        if not self.finished and not self.queue and all(e.status in ENDED for e in self.live_entries()):
            self._finish("every run has ended")
        return stopped

    def _decide_at(self, rung: int) -> list[str]:
        live = self.live_entries()
        values: dict[str, list[float]] = {}
        earlier: dict[str, list[list[float]]] = {}  # each seed's values at the rungs before, in rung order
        before = [r for r in self.plan.rungs if r < rung]
        for e in live:
            value = e.rung_values.get(str(rung))
            values.setdefault(e.condition, [])
            earlier.setdefault(e.condition, [])
            if value is not None:
                values[e.condition].append(float(value))
                earlier[e.condition].append([float(e.rung_values.get(str(r), math.nan)) for r in before])
        seeds = self._seed_counts(live)
        last = rung == self.plan.rungs[-1]
        room = self._room_for_seeds() if self._spare_conditions() else 0
        relook = sum(d.step == rung for d in self.decisions())
        decision = decide(self.plan, rung, values, seeds, last_rung=last, can_add_seeds=room > 0, relook=relook,
                          earlier=earlier)
        stopped = [pc.condition for pc in decision.stop]
        for pc in decision.stop:
            self._stop(pc, rung)
        added = self._add(decision, rung, room) if last else []
        record = Decision(step=rung, at=time.time(), leader=decision.leader, seeds=seeds, values=values,
                          stopped=tuple(StoppedCondition(condition=pc.condition, reason=stop_reason(pc, rung))
                                        for pc in decision.stop),
                          added=tuple(added), comparisons=tuple(_comparison(pc, self.plan.test, decision.alpha_per_look)
                                            for pc in decision.comparisons))
        self._update_adaptive(decisions=(*self.decisions(), record))
        self.say(decision_line(self.plan, decision, added))
        if last and not added:
            self._finish(f"decided at the last rung, step {rung}")
        return stopped

    def _stop(self, pc: PairComparison, rung: int) -> None:
        reason = stop_reason(pc, rung)
        stopping = [e.run_name for e in self.entries() if e.condition == pc.condition and e.status != "completed"]
        record = self.manifest.record
        for name in stopping:
            record = record.with_run(name, status="stopped", stop_reason=reason, stopped_at=time.time())
            if name in self.queue:
                self.queue.remove(name)
        self.manifest.update(runs=record.runs)

    def _spare_conditions(self) -> list[str]:
        """Live conditions below max_seeds with a seed left to add."""
        known = {e.run_name for e in self.entries()}
        counts = self._seed_counts(self.live_entries())
        return [c for c, n in counts.items() if n < self.plan.max_seeds
                and any(r.condition == c and r.run_name not in known for r in self.plans.values())]

    def _room_for_seeds(self) -> int:
        """How many runs the budget still allows to add (any number without a budget)."""
        if not self.plan.budget_steps:
            return 1 << 30
        return max(0, (self.plan.budget_steps - self.steps_committed()) // self.plan.max_steps)

    def _add(self, decision: RungDecision, rung: int, room: int) -> list[str]:
        gone = self.stopped_conditions()
        known = {e.run_name for e in self.entries()}
        counts = self._seed_counts(self.live_entries())
        added: list[str] = []
        for cond in decision.add_seed_to:
            spare = [r for r in self.plans.values() if r.condition == cond and r.run_name not in known]
            if cond in gone or not spare or counts.get(cond, 0) >= self.plan.max_seeds or len(added) >= room:
                continue
            run = spare[0]
            why = next((pc for pc in decision.comparisons if cond in (pc.condition, pc.reference)), None)
            reason = (f"undecided at step {rung}: {why.condition} vs {why.reference} (p = {why.p_value:.3g})"
                      if why is not None else f"undecided at step {rung}")
            self.manifest.add_run(run_record(run, added=True, add_reason=reason))
            self.queue.append(run.run_name)
            added.append(run.run_name)
        return added

    def _finish(self, why: str) -> None:
        self.finished = True
        self._update_adaptive(finished=why)

    def _update_adaptive(self, **changes: object) -> None:
        adaptive = self.manifest.record.adaptive or AdaptiveRecord(plan=self.plan.to_json())
        self.manifest.update(adaptive=adaptive.model_copy(update=changes))


class AdaptiveScheduler(FIFOScheduler):
    """Tune's `TrialScheduler` for an adaptive campaign: records each report in the book, decides the
    rungs that are due, and stops the trials of the conditions a decision stopped."""

    def __init__(self, book: AdaptiveBook, max_concurrent: int) -> None:
        super().__init__()
        self.book = book
        # Tune's max_concurrent_trials would wrap the searcher in a ConcurrencyLimiter, which counts a paused
        # trial as running and so never asks for the runs the paused ones wait for: the limit is kept here
        self.max_concurrent = max_concurrent
        self.waiting: dict[str, int] = {}  # run -> the rung it is paused at until that rung is decided
        self.ended_by_tune: set[str] = set()  # runs whose ERROR trial the scheduler has counted
        self.stuck_since: float | None = None  # since when no trial could make progress

    def on_trial_add(self, tune_controller: TuneController, trial: Trial) -> None:
        self.book.load()
        self.book.started(_run_name(trial))

    def on_trial_result(self, tune_controller: TuneController, trial: Trial, result: dict[str, object]) -> str:
        name = _run_name(trial)
        self.book.record(name, result)
        stopped = self.book.check()
        self._stop_others(tune_controller, trial, stopped)
        if self.book.plans[name].condition in stopped:
            return TrialScheduler.STOP
        rung = self.book.waits_at(name, result)
        if rung is None:
            return TrialScheduler.CONTINUE
        # Paused with its checkpoint at the rung (Tune saves the last reported one): it gives its slot to the
        # runs still to reach the rung, and spends no step a decision to stop its condition would waste.
        self.waiting[name] = rung
        self._say_paused(name, rung)
        return TrialScheduler.PAUSE

    def _resumed(self, name: str) -> None:
        """The run leaves its rung: its manifest entry no longer says it waits (campaign/progress_line.py)."""
        self.waiting.pop(name, None)
        if getattr(self.book.manifest.run(name), "paused_at_rung", None) is not None:
            self.book.manifest.update_run(name, paused_at_rung=None, paused_why="")

    def _say_paused(self, name: str, rung: int) -> None:
        """Tells (console and manifest) which rung the run waits at and for which runs."""
        missing = [n for n in self.book.missing_at(rung) if n != name]
        why = f"waiting at rung {rung} for {', '.join(missing) or 'the decision'}"
        self.book.manifest.update_run(name, paused_at_rung=rung, paused_why=why)
        self.book.say(f"{name} paused at rung {rung}: waiting for {', '.join(missing) or 'the decision'}")

    def choose_trial_to_run(self, tune_controller: TuneController) -> Trial | None:
        """Pending trials first; a paused one only once the rung it waits at is decided (or can never be)."""
        trials = tune_controller.get_trials()
        self._count_trials_tune_ended(tune_controller, trials)
        if sum(_status(t) == "RUNNING" for t in trials) >= self.max_concurrent:
            return None
        for trial in trials:
            if _status(trial) == "PENDING":
                return trial
        decided = {d.step for d in self.book.decisions()}
        paused = [t for t in trials if _status(t) == "PAUSED"]
        for trial in paused:
            rung = self.waiting.get(_run_name(trial))
            if rung is None or rung in decided or self.book.finished:
                self._resumed(_run_name(trial))
                return trial
        return self._unstick(tune_controller, trials, paused)

    def _count_trials_tune_ended(self, tune_controller: TuneController, trials: list[Trial]) -> None:
        """A trial Tune ended without telling the scheduler (an actor it could not reuse or restart, a
        placement it gave up on) is counted failed, so no rung waits for it."""
        for trial in trials:
            name = _run_name(trial)
            if _status(trial) != "ERROR" or name not in self.book.plans or name in self.ended_by_tune:
                continue
            self.ended_by_tune.add(name)
            if self.book.progress.get(name, 0) < self.book.plan.max_steps:
                self.book.give_up_on(name, f"Tune ended its trial in ERROR: {_error_line(trial)}")
                self._stop_others(tune_controller, trial, self.book.check())

    def _unstick(self, tune_controller: TuneController, trials: list[Trial], paused: list[Trial]) -> Trial | None:
        """The way out of a rung that cannot be decided: with no trial running or pending and no run left to
        suggest for `STUCK_AFTER_S`, the runs the rung still waits for cannot arrive; they are counted ended and
        the rung decided without them, else the longest-paused trial goes on undecided."""
        if not paused or self.book.queue or any(_status(t) in LIVE_TRIAL for t in trials):
            self.stuck_since = None
            return None
        now = time.monotonic()
        if self.stuck_since is None:
            self.stuck_since = now
        if now - self.stuck_since < STUCK_AFTER_S:
            return None
        self.stuck_since = None
        rung = min(self.waiting.get(_run_name(t), 0) for t in paused)
        for name in self.book.missing_at(rung):
            if name not in {_run_name(t) for t in paused}:
                self.book.give_up_on(name, f"no trial runs it while the campaign waits at rung {rung}")
        self._stop_others(tune_controller, paused[0], self.book.check())
        if rung not in {d.step for d in self.book.decisions()} and not self.book.finished:
            self.book.say(f"rung {rung} cannot be decided (waiting for {self.book.missing_at(rung)}): "
                          "its paused runs go on undecided")
            self._resumed(_run_name(paused[0]))
        return None

    def on_trial_complete(self, tune_controller: TuneController, trial: Trial, result: dict[str, object]) -> None:
        self.book.ended(_run_name(trial))
        self._stop_others(tune_controller, trial, self.book.check())

    def on_trial_error(self, tune_controller: TuneController, trial: Trial) -> None:
        self.book.ended(_run_name(trial))
        self._stop_others(tune_controller, trial, self.book.check())

    def _stop_others(self, tune_controller: TuneController, current: Trial, stopped: list[str]) -> None:
        if not stopped:
            return
        for trial in tune_controller.get_trials():
            name = _run_name(trial)
            if trial is current or name not in self.book.plans or trial.is_finished():
                continue
            if self.book.plans[name].condition in stopped:
                tune_controller.stop_trial(trial)  # pyright: ignore[reportUnknownMemberType]


class AdaptiveSearcher(Searcher):
    """Tune's `Searcher` for an adaptive campaign: suggests the runs the manifest has still to run (the
    first seeds, then the seeds decisions add), and FINISHED once the last rung is decided."""

    def __init__(self, book: AdaptiveBook) -> None:
        super().__init__()
        self.book = book
        self.suggested: set[str] = set()

    def suggest(self, trial_id: str) -> dict[str, object] | str | None:  # pyright: ignore[reportIncompatibleMethodOverride]  # Tune's own Searcher.FINISHED is a str
        self.book.load()
        waiting = [n for n in self.book.queue if n not in self.suggested]
        if waiting:
            self.suggested.add(waiting[0])
            return {"run_name": waiting[0]}
        if not self.book.finished:
            self.book.check()
        return Searcher.FINISHED if self.book.finished and not self.book.queue else None

    def on_trial_complete(self, trial_id: str, result: dict[str, object] | None = None, error: bool = False) -> None:
        """Nothing to learn: the scheduler records every report (the manifest is the state)."""

    def save(self, checkpoint_path: str) -> None:
        """The manifest is the searcher's state: a resumed campaign rebuilds it from there."""

    def restore(self, checkpoint_path: str) -> None:
        """See `save`."""
