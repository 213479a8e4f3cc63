"""Pooled back pressure: one USL fit per shared resource over all runs that use it.

A single run cannot see cross-run contention: its own p moves, everybody else's load is noise. The
pooled controller fits USL to (N, X) where N is the endpoint's in-flight concurrency summed over runs
and X the campaign's throughput summed over runs, and recommends the endpoint's capacity (the
throttle's number of concurrent requests).

Rounds. Aggregation is per *round*, not per time window (so the class needs no clock and is tested
event by event): a round closes when every active run (seen in the last `stale_rounds` rounds) has
reported since the previous close, or when one run has reported `max_reports_per_round` times (so a
dead or slow run cannot stall the fit). The round's point is built from each active run's latest
observation by Little's law, steady state assumed:
    X = Σ_r total_tokens_r / step_time_r                         (campaign tokens/s)
    N = Σ_r p_r · sample_time_r / step_time_r                    (mean items in flight at the endpoint)
with p_r = batch_size·group_size and sample_time the time the request spent at the endpoint after
the throttle granted it (sample_time <= 0 counts as the whole step). A round is not fitted when it
follows a capacity change (its observations straddle two capacities), when runs joined or left, or
when it was closed before every active run reported (the missing runs' views are from older rounds).

Measurements per capacity (`CapacityLevels`, fit.py). A fitted round is filed under the capacity in force,
min(capacity, active runs), in a table per number of active runs (X at a capacity depends on how
many runs compete for it). The fit goes through one point per capacity, the mean of its last
`keep_rounds` rounds. Fitting a window of rounds instead (the first version) let the rounds at the
one capacity the controller settled on outvote the few sweep points that identify kappa: on a loaded
machine p* drifted from 22 to 44-63 items and the capacity climbed past the peak, and a fit with no
retrograde term opened the endpoint to every run.

Capacity, each round:
1. Sweep (warmup): the ladder 1, 2, 4, ... up to min(active runs, max_capacity) (appended), one
   fitted round per rung (in steady conditions two rounds: the first straddles the change). It
   stops at the top, when retrograde is seen (at least 3 rungs and the highest more than
   `sweep_drop` below the best: higher rungs would only cost throughput), or once the table holds
   `warmup_rounds` fitted rounds. Once over it never resumes for that number of runs, even if later
   means make the highest rung look good again (a loaded moment that lowers the best level's mean
   once sent the capacity to all 8 runs, 0.5 of the best).
2. Probe: every `probe_every` fitted rounds after the sweep, one fitted round at a neighbour of the
   current capacity, alternately above and below, so every level near the operating point stays
   measured as conditions change and the fit keeps seeing N vary. A probe that finds its neighbour
   more than `sweep_drop` worse doubles the interval (up to 8 x probe_every); any other resets it.
3. Otherwise the model proposes and the measurements decide. The model's capacity is
       round(p* · throttle_margin / items_per_slot)
   (items_per_slot: mean N per granted slot over the levels). "Good" below means a mean X within
   `sweep_drop` of the best level's.
   - If the best level was measured in fewer than TRUSTED_ROUNDS rounds, it is measured again first
     (one lucky round at a sweep rung must not become the yardstick; this happens once per level).
   - The current capacity is kept if it is good and the unrounded model value is within
     MODEL_DEADBAND of it (a p* near a rounding boundary does not flap the throttle).
   - Else the model's capacity, if it was measured in fewer than TRUSTED_ROUNDS rounds (measure it)
     or is good.
   - Else the current capacity if good (a deadband between near-equal levels), else the best.
   - With kappa ~ 0 (no retrograde identified) there is no model: the current capacity if good,
     else the best measured.
   So a noisy or degenerate fit can cost a round or two at a bad capacity, never a steady state.
Endpoint errors/timeouts in a round cut the capacity multiplicatively (`error_cut`, AIMD): a ceiling
drops to max(min_capacity, floor(capacity·error_cut)) and then rises by one per error-free round, and
the capacity is min(target, ceiling).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from retrain_ray.backpressure.fit import EPS, CapacityLevels, USLFit
from retrain_ray.backpressure.types import StepObservation

# The model's capacity is followed only when it moves more than this from the current capacity, so
# a p* near a rounding boundary does not flap the throttle between two neighbours.
MODEL_DEADBAND = 0.75
MAX_PROBE_BACKOFF = 8
# Rounds a capacity needs before its measured throughput may veto the model's choice of it: one
# round (a sweep rung) is too noisy to rule a capacity out for good.
TRUSTED_ROUNDS = 2


@dataclass(frozen=True)
class PooledDecision:
    """The pooled fit of one shared resource. Frozen and picklable."""

    resource: str
    rounds: int
    p_star: float
    sigma: float
    kappa: float
    lam: float
    capacity: int
    warmup: bool
    changed: bool = False
    probing: bool = False

    @property
    def phase(self) -> str:
        """One of "sweep" (warmup), "probe" (measuring a neighbour) or "steady"."""
        return "sweep" if self.warmup else "probe" if self.probing else "steady"


@dataclass
class _RunView:
    p: float
    busy_frac: float
    tokens_per_s: float
    last_round: int


class PooledController:
    """Round-based pooled USL fit and capacity recommendation for one shared resource."""

    def __init__(self, resource: str, *, throttle_margin: float = 0.85, min_capacity: int = 1,
                 max_capacity: int = 64, error_cut: float = 0.5, warmup_rounds: int = 16,
                 keep_rounds: int = 8, stale_rounds: int = 3, max_reports_per_round: int = 3,
                 sweep_drop: float = 0.05, probe_every: int = 16) -> None:
        _check(throttle_margin, min_capacity, max_capacity, error_cut, sweep_drop, probe_every, keep_rounds)
        self.resource = resource
        self.throttle_margin, self.error_cut = float(throttle_margin), float(error_cut)
        self.min_capacity, self.max_capacity = int(min_capacity), int(max_capacity)
        self.warmup_rounds, self.stale_rounds = int(warmup_rounds), int(stale_rounds)
        self.max_reports_per_round, self.keep_rounds = int(max_reports_per_round), int(keep_rounds)
        self.sweep_drop, self.probe_every = float(sweep_drop), int(probe_every)
        self.tables: dict[int, CapacityLevels] = {}  # per number of active runs
        self.swept: set[int] = set()  # numbers of active runs whose sweep is over (it never resumes)
        self.runs: dict[str, _RunView] = {}
        self.reports: dict[str, int] = {}
        self.round = 0
        self.errors_in_round = 0
        self.discard_next = False
        self.members: frozenset[str] = frozenset()
        self.warming = self.warmup_rounds > 0
        self.probe: int | None = None
        self.probe_from = 0
        self.probe_up = True
        self.probe_interval = self.probe_every
        self.rounds_since_probe = 0
        self.fit: USLFit | None = None
        self.sigma, self.kappa, self.lam, self.p_star = 0.0, 0.0, 0.0, 1.0
        self.capacity = self.max_capacity
        self.ceiling = self.max_capacity

    def observe(self, obs: StepObservation) -> PooledDecision:
        """Take one run's step; close the round when it is complete; return the current decision."""
        self.errors_in_round += max(0, int(obs.endpoint_errors))
        if not obs.skipped and obs.step_time_s > EPS:
            busy = obs.sample_time_s / obs.step_time_s if obs.sample_time_s > 0 else 1.0
            self.runs[obs.run_id] = _RunView(
                p=float(max(1, obs.batch_size) * max(1, obs.group_size)), busy_frac=min(1.0, busy),
                tokens_per_s=max(0.0, float(obs.total_tokens)) / obs.step_time_s, last_round=self.round)
        self.reports[obs.run_id] = self.reports.get(obs.run_id, 0) + 1
        changed = False
        if self._round_complete():
            changed = self._close_round()
        return self.decision(changed)

    def _active(self) -> dict[str, _RunView]:
        return {r: v for r, v in self.runs.items() if self.round - v.last_round < self.stale_rounds}

    def _round_complete(self) -> bool:
        active = self._active()
        if not active:
            return False
        if all(r in self.reports for r in active):
            return True
        return max(self.reports.values()) >= self.max_reports_per_round

    def levels(self, n_active: int) -> CapacityLevels:
        """The measurements taken with `n_active` runs competing."""
        if n_active not in self.tables:
            self.tables[n_active] = CapacityLevels(self.keep_rounds)
        return self.tables[n_active]

    def _close_round(self) -> bool:
        active = self._active()
        n_items = sum(v.p * v.busy_frac for v in active.values())
        x = sum(v.tokens_per_s for v in active.values())
        joined_or_left, self.members = frozenset(active) != self.members, frozenset(active)
        everyone_reported = all(r in self.reports for r in active)  # else some views are stale
        levels = self.levels(len(active))
        if everyone_reported and not self.discard_next and not joined_or_left and x > EPS:
            self._record(levels, min(self.capacity, len(active)), n_items, x)
        self._refit(levels)
        self.round += 1
        self._update_ceiling()
        new_cap = self._target(levels, len(active))
        changed = new_cap != self.capacity
        self.capacity = new_cap
        self.discard_next = changed
        self.reports = {}
        return changed

    def _record(self, levels: CapacityLevels, level: int, n_items: float, x: float) -> None:
        levels.add(level, n_items, x)
        if self.probe == level:
            self._back_off_if_worse(levels, level)
            self.probe = None
        elif not self.warming:
            self.rounds_since_probe += 1

    def _refit(self, levels: CapacityLevels) -> None:
        """Fit the current table (a few points, one per capacity); the reported values keep the last fit."""
        self.fit = levels.fit()
        if self.fit is not None:
            f = self.fit
            self.sigma, self.kappa, self.lam, self.p_star = f.sigma, f.kappa, f.lam, f.p_star

    def _update_ceiling(self) -> None:
        if self.errors_in_round > 0:
            self.ceiling = max(self.min_capacity, math.floor(self.capacity * self.error_cut))
        elif self.ceiling < self.max_capacity:
            self.ceiling += 1
        self.errors_in_round = 0

    def sweep(self, n_active: int) -> list[int]:
        """Warmup ladder: 1, 2, 4, ... (from min_capacity) up to min(n_active, max_capacity), appended."""
        top = self._highest(n_active)
        caps, c = [], self.min_capacity
        while c < top:
            caps.append(c)
            c *= 2
        caps.append(top)
        return caps

    def _highest(self, n_active: int) -> int:
        return max(self.min_capacity, min(self.max_capacity, n_active))

    def _target(self, levels: CapacityLevels, n_active: int) -> int:
        rung = None if n_active in self.swept else self._next_rung(levels, n_active)
        self.warming = rung is not None and levels.rounds < self.warmup_rounds
        if rung is not None and self.warming:
            return self._bounded(rung, n_active)
        self.swept.add(n_active)
        probe = self._probe(n_active)
        return self._bounded(probe if probe is not None else self._choose(levels, n_active), n_active)

    def _probe(self, n_active: int) -> int | None:
        """The probe in progress, a new one when it is due, else None."""
        if self.probe is not None and self._bounded(self.probe, n_active) != self.probe:
            self.probe = None  # an error cut (or runs leaving) put the probed capacity out of bounds
        if self.probe is None and self.rounds_since_probe >= self.probe_interval:
            self.rounds_since_probe = 0
            self.probe_from = min(self.capacity, n_active)
            self.probe = self._neighbour(n_active)
        return self.probe

    def _next_rung(self, levels: CapacityLevels, n_active: int) -> int | None:
        """The sweep's next capacity; None once it is over (top reached, or retrograde seen)."""
        ladder = self.sweep(n_active)
        top = levels.top()
        if top is None:
            return ladder[0]
        if len(levels) >= 3 and not levels.within(top, self.sweep_drop):
            return None
        return next((c for c in ladder if c > top), None)

    def _back_off_if_worse(self, levels: CapacityLevels, probed: int) -> None:
        """A probe that found its neighbour clearly worse doubles the wait before the next one (up to
        MAX_PROBE_BACKOFF x probe_every): near a sharp peak probes are pure cost. Otherwise reset."""
        base = self.probe_from
        if base in levels and levels.mean_x(probed) < (1.0 - self.sweep_drop) * levels.mean_x(base):
            self.probe_interval = min(MAX_PROBE_BACKOFF * self.probe_every, 2 * self.probe_interval)
        else:
            self.probe_interval = self.probe_every

    def _neighbour(self, n_active: int) -> int | None:
        """Alternately the capacity above and below the current one, where it is allowed."""
        current = min(self.capacity, n_active)
        order = (current + 1, current - 1) if self.probe_up else (current - 1, current + 1)
        self.probe_up = not self.probe_up
        hi = min(self._highest(n_active), self.ceiling)
        return next((c for c in order if self.min_capacity <= c <= hi), None)

    def _choose(self, levels: CapacityLevels, n_active: int) -> int:
        best = levels.best()
        if best is None:
            return self._highest(n_active)  # nothing measured (no warmup): no limit beyond the runs
        if levels.count(best) < TRUSTED_ROUNDS:
            return best  # the best so far was one round (a sweep rung): measure it again before trusting it

        def good(c: int) -> bool:
            return levels.within(c, self.sweep_drop)

        current = min(self.capacity, n_active)
        raw = self._model_capacity(levels)
        if raw is None:  # no retrograde identified: measurements alone
            return current if good(current) else best
        if abs(current - raw) <= MODEL_DEADBAND and good(current):
            return current
        model = self._bounded(round(raw), n_active)
        if levels.count(model) < TRUSTED_ROUNDS or good(model):
            return model  # barely measured: measure it again; measured and good: follow the model
        return current if good(current) else best

    def _model_capacity(self, levels: CapacityLevels) -> float | None:
        """p* · margin / items per slot, unrounded; None without an identified retrograde."""
        per_slot = levels.items_per_slot()
        if self.fit is None or self.fit.kappa <= EPS or per_slot <= EPS:
            return None
        return self.fit.p_star * self.throttle_margin / per_slot

    def _bounded(self, capacity: int, n_active: int) -> int:
        return max(self.min_capacity, min(self._highest(n_active), self.ceiling, int(capacity)))

    def decision(self, changed: bool = False) -> PooledDecision:
        return PooledDecision(
            resource=self.resource, rounds=self.round, p_star=self.p_star, sigma=self.sigma,
            kappa=self.kappa, lam=self.lam, capacity=self.capacity,
            warmup=self.warming, changed=changed, probing=self.probe is not None)

    def state_dict(self) -> dict[str, Any]:
        return {
            "tables": {str(n): t.state_dict() for n, t in self.tables.items()}, "round": self.round,
            "swept": sorted(self.swept),
            "capacity": self.capacity, "ceiling": self.ceiling,
            "fit": [self.sigma, self.kappa, self.lam, self.p_star], "warming": self.warming,
            "probe": self.probe, "probe_from": self.probe_from, "probe_up": self.probe_up,
            "probe_interval": self.probe_interval, "rounds_since_probe": self.rounds_since_probe,
        }

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self.tables = {int(n): CapacityLevels.from_state(t) for n, t in d["tables"].items()}
        self.swept = {int(n) for n in d["swept"]}
        self.round, self.capacity, self.ceiling = int(d["round"]), int(d["capacity"]), int(d["ceiling"])
        self.sigma, self.kappa, self.lam, self.p_star = (float(v) for v in d["fit"])
        self.fit = None  # refitted from the tables when the next round closes
        self.warming, self.probe_up = bool(d["warming"]), bool(d["probe_up"])
        self.probe = None if d["probe"] is None else int(d["probe"])
        self.rounds_since_probe = int(d["rounds_since_probe"])
        self.probe_from, self.probe_interval = int(d["probe_from"]), int(d["probe_interval"])


def _check(throttle_margin: float, min_capacity: int, max_capacity: int, error_cut: float,
           sweep_drop: float, probe_every: int, keep_rounds: int) -> None:
    if not 0.0 < error_cut < 1.0:
        raise ValueError(f"backpressure.error_cut must be in (0, 1), got {error_cut!r}")
    if min_capacity < 1 or max_capacity < min_capacity:
        raise ValueError(f"pooled capacity bounds need 1 <= min_capacity <= max_capacity, "
                         f"got {min_capacity!r}..{max_capacity!r}")
    if not 0.0 < throttle_margin <= 1.0:
        raise ValueError(f"backpressure.throttle_margin must be in (0, 1], got {throttle_margin!r}")
    if not 0.0 < sweep_drop < 1.0:
        raise ValueError(f"pooled sweep_drop (BackPressureSettings.pooled_sweep_drop) must be in (0, 1), got {sweep_drop!r}")
    if probe_every < 1:
        raise ValueError(f"pooled probe_every (BackPressureSettings.pooled_probe_every) must be >= 1 round, got {probe_every!r}")
    if keep_rounds < 1:
        raise ValueError(f"pooled keep_rounds (BackPressureSettings.pooled_keep_rounds) must be >= 1, got {keep_rounds!r}")
