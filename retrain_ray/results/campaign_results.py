"""`CampaignResults`: a campaign's outcome read back from its directory (manifest + logs).

It follows Ray Tune's `ResultGrid`: `len(res)`, `res[i]`, `for r in res`, `res.errors` (a list of
`RunError`), `res.get_best_result(metric, mode, scope)`, and each `RunResult` has `metrics`,
`metrics_dataframe`, `checkpoint` and `path`. On top:

    res = CampaignResults.from_dir("logs/smoke-campaign")
    res.get_dataframe()                 # one row per run: condition, seed, status, steps, first_/last_/best_*
    res.summary(by="condition")         # mean, std, 95% CI across seeds (Student t), and each condition
                                        # against the best: difference, CI, Holm-adjusted Welch p, verdict
    res.significance("mean_reward")     # one row per condition vs the best (results/significance.py)
    res.robust("mean_reward")           # mean and IQM with bootstrap 95% intervals, P(best > condition)
    res.compute()                       # GPU- and CPU-hours spent, and saved by an adaptive campaign
    res.history()                       # long format: campaign, run, condition, seed, step, metric, value
    res.history("grpo+none_s1")         # every step of one run, once (wide)
    res.plot("mean_reward")             # one line per condition, mean across seeds, 95% band

Rows come from the recorder's Arrow streams, de-duplicated on (run, step) when read.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol, cast

import pandas as pd

# read_stream returns a pyarrow.Table, which has no type annotations: `_read_frame` gives it its type
from retrain_ray.logs import read_stream  # pyright: ignore[reportUnknownVariableType]
from retrain_ray.logs.manifest import CampaignRecord, RunRecord, read_manifest
from retrain_ray.logs.run_columns import RUN, read_run_columns
from retrain_ray.results.compute import ComputeUsed, compute_used, runs_compute
from retrain_ray.results.eval_change import condition_changes, run_changes
from retrain_ray.results.plots import plot_metric
from retrain_ray.results.robust_stats import ROBUST_REPS, robust_conditions, robust_improvements
from retrain_ray.results.significance import PairComparison, ci95_halfwidth, compare_to_leader

if TYPE_CHECKING:  # Ray (for Tune's Checkpoint) and matplotlib are loaded only by the calls that return them
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from ray.tune import Checkpoint

# A run's value in significance tests: the mean of its last SIGNIFICANCE_WINDOW logged values of the metric.
SIGNIFICANCE_WINDOW = 10
SUMMARY_METRICS = ("mean_reward", "correct_rate", "loss", "tokens_per_second", "step_time_s")
SUMMARY_COLUMNS = ("step", "trained", *SUMMARY_METRICS)  # what the per-run table reads of a log
# what the campaign tables read of every run's log, once: the per-run table, the run values of a summary
# metric and the compute spent (wall_time) share one read of a thousand files (logs/run_columns.py)
TABLE_COLUMNS = (*SUMMARY_COLUMNS, "wall_time")
# Metrics `history()` and the plots know, with the direction that is better.
LOWER_IS_BETTER = ("loss", "step_time_s", "sample_time_s", "train_time_s", "sync_time_s", "policy/abs_kl")
HISTORY_METRICS = ("mean_reward", "correct_rate", "loss", "policy/abs_kl", "clip_fraction",
                   "eval_correct_rate", "eval_mean_reward", "tokens_per_second", "step_time_s")
IDENTITY = ("campaign", "run", "condition", "seed")
EVAL_METRICS = ("eval_correct_rate", "eval_mean_reward")  # the eval stream's, not the steps


class RunError(RuntimeError):
    """A run Tune gave up on; `run_name` names it, the message is its last error lines."""

    def __init__(self, run_name: str, message: str) -> None:
        super().__init__(f"{run_name}: {message}")
        self.run_name = run_name
        self.message = message


@dataclass
class RunResult:
    """One run's result, shaped like Tune's `Result` (metrics, metrics_dataframe, checkpoint, path, error)."""

    run_name: str
    condition: str
    seed: int
    status: str
    attempts: int
    metrics: dict[str, object] = field(default_factory=dict[str, object])
    error: str = ""
    path: Path | None = None
    metrics_dataframe: pd.DataFrame = field(default_factory=pd.DataFrame, repr=False)

    @property
    def checkpoint(self) -> Checkpoint | None:
        """The run's newest valid checkpoint as a `ray.tune.Checkpoint`, or None."""
        if self.path is None:
            return None
        # deferred: loads torch, which importing this module does not need
        from retrain_ray.run.resume.checkpoint import CheckpointManager

        latest = CheckpointManager(self.path / "work").latest_valid()
        if latest is None:
            return None
        # deferred: Ray, which reading a campaign back does not need; only a caller of this property loads it
        from ray.tune import Checkpoint

        # from_directory is annotated on Ray's base class; it returns Tune's own Checkpoint
        checkpoint = Checkpoint.from_directory(str(latest))  # pyright: ignore[reportUnknownMemberType]
        return cast("Checkpoint", checkpoint)


def run_status(entry: RunRecord, run_dir: Path) -> str:
    """The manifest's status of a run, except "missing" for a finished run whose directory is gone (its logs
    and checkpoints deleted or moved): not "completed with 0 steps". `results` and `status` both say it.
    A run that has just started has no directory until its first row: it stays "running"."""
    status: str = entry.status
    return "missing" if status in ("completed", "failed") and not run_dir.is_dir() else status


class _Table(Protocol):
    """What this module uses of a `pyarrow.Table` (pyarrow has no type annotations)."""

    def to_pandas(self) -> pd.DataFrame: ...
    @property
    def column_names(self) -> list[str]: ...
    def select(self, columns: list[str]) -> _Table: ...


def _read_frame(run_dir: Path, name: str, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """Stream `name` of a run (`logs/stream.py`) as a DataFrame; empty if nothing was logged. `columns`: only
    those the stream has (converting the `extras` map column to pandas is most of a wide log's reading time)."""
    if not any(Path(run_dir).glob(f"{name}*.arrows")):
        return pd.DataFrame()
    table = cast(_Table, read_stream(run_dir, name=name))
    if columns is not None:
        table = table.select([c for c in columns if c in table.column_names])
    return table.to_pandas()


def read_history(run_dir: Path, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """Every step of one run, once (last write wins), sorted by step; empty if nothing was logged.
    `columns`: only these (those the log has)."""
    return _read_frame(run_dir, "metrics", columns)


def read_eval_history(run_dir: Path) -> pd.DataFrame:
    return _read_frame(run_dir, "eval")


class CampaignResults:
    def __init__(self, campaign_dir: Path, manifest: CampaignRecord) -> None:
        self.campaign_dir = campaign_dir
        self.manifest = manifest
        self._history: dict[str, pd.DataFrame] = {}
        self._narrow: dict[str, pd.DataFrame] = {}  # SUMMARY_COLUMNS only, for the per-run table
        # a few columns of every run at once, by column tuple (results/run_columns.py)
        self._columns: dict[tuple[str, ...], pd.DataFrame] = {}
        # what `results` asks more than once (the runs table, each run's status and value): computed once
        self._table: pd.DataFrame | None = None
        self._statuses: dict[str, str] = {}
        self._values: dict[tuple[str, int], dict[str, list[float]]] = {}

    @classmethod
    def from_dir(cls, campaign_dir: str | Path) -> CampaignResults:
        campaign_dir = Path(campaign_dir)
        return cls(campaign_dir, read_manifest(campaign_dir))

    @property
    def runs(self) -> tuple[RunRecord, ...]:
        return self.manifest.runs

    def __len__(self) -> int:
        return len(self.runs)

    def __getitem__(self, index: int) -> RunResult:
        return self._result(self.runs[index])

    def __iter__(self) -> Iterator[RunResult]:
        return (self._result(entry) for entry in self.runs)

    def _entry(self, run_name: str) -> RunRecord:
        entry = next((r for r in self.runs if r.run_name == run_name), None)
        if entry is None:
            raise KeyError(f"no run {run_name!r} in {self.campaign_dir}; runs: {[r.run_name for r in self.runs]}")
        return entry

    def _run_history(self, run_name: str) -> pd.DataFrame:
        if run_name not in self._history:
            self._entry(run_name)
            self._history[run_name] = read_history(self.campaign_dir / "runs" / run_name)
        return self._history[run_name]

    def _all_runs(self, columns: tuple[str, ...]) -> pd.DataFrame:
        """`columns` of every run's log in one frame with a `run` column, read once (results/run_columns.py)."""
        if columns not in self._columns:
            self._columns[columns] = read_run_columns(self.campaign_dir / "runs", [r.run_name for r in self.runs],
                                                      columns)
        return self._columns[columns]

    def _summary_history(self, run_name: str) -> pd.DataFrame:
        """The columns the per-run table reads (a run's whole history when it is read already): a thousand
        runs' full logs, each metric and the extras map, are what made `results` slow and large."""
        if run_name in self._history:
            return self._history[run_name]
        if run_name not in self._narrow:
            self._narrow[run_name] = read_history(self.campaign_dir / "runs" / run_name, SUMMARY_COLUMNS)
        return self._narrow[run_name]

    def history(self, run_name: str | None = None, metrics: Sequence[str] = HISTORY_METRICS) -> pd.DataFrame:
        """With `run_name`: that run's steps, one row per step (wide). Without: every run's steps in
        long format, columns campaign, run, condition, seed, step, metric, value (eval rows included
        as eval_mean_reward / eval_correct_rate), ready for seaborn, plotnine or `plot()`."""
        if run_name is not None:
            return self._run_history(run_name)
        names = [r.run_name for r in self.runs]
        columns = ("step", *dict.fromkeys(metrics))
        logs = (self._all_runs(columns), read_run_columns(self.campaign_dir / "runs", names, columns, name="eval"))
        parts = [_long(frame, metrics) for frame in logs]
        parts = [p for p in parts if len(p)]
        out_columns = [*IDENTITY, "step", "metric", "value"]
        if not parts:
            return pd.DataFrame(columns=out_columns)
        order = {name: i for i, name in enumerate(names)}
        long = pd.concat(parts, ignore_index=True)
        long = long.iloc[long[RUN].map(order).argsort(kind="stable")].reset_index(drop=True)  # run by run, as logged
        identity = pd.DataFrame({RUN: names, "condition": [r.condition for r in self.runs],
                                 "seed": [r.seed for r in self.runs]})
        long = long.merge(identity, on=RUN, how="left")
        long["campaign"] = self.manifest.name or self.campaign_dir.name
        long["value"] = long["value"].astype(float)
        return long[out_columns]

    @property
    def errors(self) -> list[RunError]:
        """One `RunError` per failed run (as Tune's `ResultGrid.errors`); empty when all succeeded."""
        return [RunError(name, message) for name, message in self.error_by_run.items()]

    @property
    def error_by_run(self) -> dict[str, str]:
        return {r.run_name: r.error or "failed" for r in self.runs if r.status == "failed"}

    def _result(self, entry: RunRecord) -> RunResult:
        row = self._run_row(entry)
        last = {k.removeprefix("last_"): v for k, v in row.items() if k.startswith("last_")}
        return RunResult(entry.run_name, entry.condition, entry.seed, str(row["status"]), entry.attempts, last,
                         entry.error, self.campaign_dir / "runs" / entry.run_name, self._run_history(entry.run_name))

    def plot(self, metric: str = "mean_reward", *, out: str | Path | None = None, smooth: int = 1,
             title: str | None = None, ax: Axes | None = None) -> Figure:
        """Curves of `metric` by step, one line per condition, 95% band across seeds
        (`retrain_ray.results.plots.plot_metric`); writes PNG and SVG when `out` is given."""
        return plot_metric(self, metric, out=out, smooth=smooth, title=title, ax=ax)

    def _run_row(self, entry: RunRecord) -> dict[str, object]:
        """One run's row of `get_dataframe` from its own log (`_per_run_stats` computes every run's at once)."""
        row = self._run_identity(entry)
        hist = self._summary_history(entry.run_name)
        row["steps_logged"] = len(hist)
        row["steps_trained"] = _steps_trained(hist)
        row["last_step"] = int(hist["step"].max()) if len(hist) else -1
        for m in SUMMARY_METRICS:
            if m in hist and len(hist):
                col = hist[m].dropna()
                row[f"first_{m}"] = float(col.iloc[0]) if len(col) else float("nan")
                row[f"last_{m}"] = float(col.iloc[-1]) if len(col) else float("nan")
                row[f"best_{m}"] = float(col.min() if m in ("loss", "step_time_s") else col.max()) if len(col) else float("nan")
        return row

    def get_dataframe(self) -> pd.DataFrame:
        """One row per run: condition, seed, overrides, status, attempts, steps_logged (every step logs a row),
        steps_trained (those that updated the weights), first_*, last_* and best_* metrics (over the steps
        that logged the metric: `loss` is null on a step that trained nothing)."""
        if self._table is None:
            stats = _per_run_stats(self._all_runs(TABLE_COLUMNS))
            self._table = pd.DataFrame([{**self._run_identity(r), **stats.get(r.run_name, _NO_STEPS)}
                                        for r in self.runs])
        return self._table.copy()

    def _status(self, entry: RunRecord) -> str:
        if entry.run_name not in self._statuses:
            self._statuses[entry.run_name] = run_status(entry, self.campaign_dir / "runs" / entry.run_name)
        return self._statuses[entry.run_name]

    def _run_identity(self, entry: RunRecord) -> dict[str, object]:
        row: dict[str, object] = {"run_name": entry.run_name, "condition": entry.condition, "seed": entry.seed,
                                  "status": self._status(entry),
                                  "attempts": entry.attempts}
        row.update({f"override.{k}": v for k, v in entry.overrides.items()})
        return row

    def summary(self, by: str = "condition", metrics: tuple[str, ...] | None = None,
                significance: str | None = "mean_reward") -> pd.DataFrame:
        """Per group (default: condition): n, and mean / std / ci95 of each run's last value. By condition,
        also each condition against the best on `significance` (None: left out; see `significance()`):
        vs_best, diff, diff_ci95_low/high, p_value (Welch, Holm-adjusted), test, verdict ("best" for the
        leader, else better/worse/undecided) and seeds."""
        df = self.get_dataframe()
        cols = [f"last_{m}" for m in (metrics or SUMMARY_METRICS) if f"last_{m}" in df]
        out: list[dict[str, object]] = []
        for key, group in df.groupby(by, sort=False):
            row: dict[str, object] = {by: key, "runs": len(group), "failed": int((group["status"] == "failed").sum())}
            for c in cols:
                vals = [float(v) for v in group[c].dropna()]
                name = c.removeprefix("last_")
                row[f"{name}_mean"] = sum(vals) / len(vals) if vals else float("nan")
                row[f"{name}_std"] = pd.Series(vals).std() if len(vals) > 1 else float("nan")
                row[f"{name}_ci95"] = ci95_halfwidth(vals)
            out.append(row)
        summary = pd.DataFrame(out)
        if by != "condition" or significance is None or summary.empty:
            return summary
        return summary.merge(self._versus_best(significance), on="condition", how="left")

    def _versus_best(self, metric: str) -> pd.DataFrame:
        leader, comparisons = self.compare(metric)
        rows = [{"condition": c.condition, "vs_best": c.reference, "diff": c.diff, "diff_ci95_low": c.ci_low,
                 "diff_ci95_high": c.ci_high, "p_value": c.p_value, "test": c.test, "verdict": c.verdict,
                 "seeds": c.seeds} for c in comparisons]
        if leader is not None:
            seeds = len(self.run_values(metric).get(leader, []))
            rows.insert(0, {"condition": leader, "vs_best": leader, "diff": 0.0, "verdict": "best", "seeds": seeds})
        columns = ["condition", "vs_best", "diff", "diff_ci95_low", "diff_ci95_high", "p_value", "test", "verdict", "seeds"]
        return pd.DataFrame(rows, columns=columns)

    def run_values(self, metric: str = "mean_reward", *, window: int = SIGNIFICANCE_WINDOW) -> dict[str, list[float]]:
        """Per condition, one value per run: the mean of its last `window` logged values of `metric` (every
        step logs a row, untrained steps included); for the held-out metrics (`EVAL_METRICS`, from the eval
        stream) its last evaluation. Failed and missing runs are left out; a run that logged nothing of
        `metric` too."""
        if window < 1:
            raise ValueError(f"window={window}: expected at least 1 step")
        if (metric, window) not in self._values:
            self._values[metric, window] = self._run_values(metric, window)
        return {condition: list(values) for condition, values in self._values[metric, window].items()}

    def _run_values(self, metric: str, window: int) -> dict[str, list[float]]:
        if metric in EVAL_METRICS:  # each eval row already averages the eval split: a run's value is its last
            window = 1
            frame = read_run_columns(self.campaign_dir / "runs", [r.run_name for r in self.runs], ("step", metric),
                                     name="eval")
        else:
            frame = self._all_runs(TABLE_COLUMNS if metric in TABLE_COLUMNS else ("step", metric))
        if metric not in frame.columns:
            return {}
        logged = frame[[RUN, metric]].dropna()
        scores = logged.groupby(RUN, sort=False).tail(window).groupby(RUN, sort=False)[metric].mean()
        out: dict[str, list[float]] = {}
        for entry in self.runs:
            if entry.run_name not in scores.index or self._status(entry) in ("failed", "missing"):
                continue
            out.setdefault(entry.condition, []).append(float(scores[entry.run_name]))
        return out

    def compare(self, metric: str = "mean_reward", *, mode: Literal["max", "min"] | None = None,
                window: int = SIGNIFICANCE_WINDOW, alpha: float = 0.05) -> tuple[str | None, tuple[PairComparison, ...]]:
        """The best condition on `metric` (`run_values`) and every other condition against it:
        Welch's t on the runs' values, Holm-adjusted over all pairs (`significance.compare_to_leader`).
        `mode` defaults to "min" for metrics where lower is better (loss, times), else "max"."""
        mode = mode or ("min" if metric in LOWER_IS_BETTER else "max")
        return compare_to_leader(self.run_values(metric, window=window), mode=mode, alpha=alpha)

    def significance(self, metric: str = "mean_reward", *, mode: Literal["max", "min"] | None = None,
                     window: int = SIGNIFICANCE_WINDOW, alpha: float = 0.05) -> pd.DataFrame:
        """One row per condition against the best (`compare`): condition, best, metric, diff, ci_low, ci_high
        (95% Welch CI of the difference, unadjusted), p_value (Holm-adjusted), test, verdict, seeds, best_seeds."""
        leader, comparisons = self.compare(metric, mode=mode, window=window, alpha=alpha)
        rows = [{"condition": c.condition, "best": leader, "metric": metric, "diff": c.diff, "ci_low": c.ci_low,
                 "ci_high": c.ci_high, "p_value": c.p_value, "test": c.test, "verdict": c.verdict,
                 "seeds": c.seeds, "best_seeds": c.reference_seeds} for c in comparisons]
        return pd.DataFrame(rows, columns=["condition", "best", "metric", "diff", "ci_low", "ci_high", "p_value",
                                           "test", "verdict", "seeds", "best_seeds"])

    @staticmethod
    def mode(metric: str) -> Literal["max", "min"]:
        """"min" for the metrics where lower is better (loss, times), else "max"."""
        return "min" if metric in LOWER_IS_BETTER else "max"

    def robust(self, metric: str = "mean_reward", *, mode: Literal["max", "min"] | None = None,
               window: int = SIGNIFICANCE_WINDOW, reps: int = ROBUST_REPS,
               seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
        """As RL papers report results (results/robust_stats.py): per condition the mean and the IQM of
        the runs' values (`run_values`) with stratified bootstrap 95% intervals, and per other condition
        P(best > condition) with its interval, the best being `compare`'s. Seeded: the same every time."""
        mode = mode or self.mode(metric)
        values = self.run_values(metric, window=window)
        leader, _ = compare_to_leader(values, mode=mode)
        return (robust_conditions(values, reps=reps, seed=seed),
                robust_improvements(values, leader, mode=mode, reps=reps, seed=seed))

    def eval_change(self, metric: str = "eval_correct_rate") -> pd.DataFrame:
        """Held-out evaluation before (first eval row: step -1 with `eval_at_start`) and after (last) per
        condition, with the change's 95% interval across seeds (results/eval_change.py); empty without evals."""
        names = [r.run_name for r in self.runs]
        evals = read_run_columns(self.campaign_dir / "runs", names, ("step", metric), name="eval")
        identity = pd.DataFrame({RUN: names, "condition": [r.condition for r in self.runs]})
        return condition_changes(run_changes(evals, metric), identity)

    def compute(self) -> ComputeUsed:
        """GPU- and CPU-hours spent (GPUs held x wall time per run) and, for an adaptive campaign, saved
        against the full grid (results/compute.py)."""
        return compute_used(self.manifest, runs_compute(self.runs, self._all_runs(TABLE_COLUMNS)))

    def get_best_result(self, metric: str = "mean_reward", mode: Literal["max", "min"] = "max",
                        scope: Literal["last", "all", "avg", "last-5-avg", "last-10-avg"] = "last") -> RunResult:
        """The run whose `metric` is best, as Tune's `ResultGrid.get_best_result`: `scope` "last"
        compares each run's last value, "all" its best value over every step, "avg" its mean,
        "last-N-avg" the mean of its last N values. Runs that never logged `metric` are skipped."""
        if mode not in ("max", "min"):
            raise ValueError(f"mode={mode!r}: expected 'max' or 'min'")
        scores: dict[str, float] = {}
        for entry in self.runs:
            score = _score(self._run_history(entry.run_name), metric, mode, scope)
            if score is not None:
                scores[entry.run_name] = score
        if not scores:
            raise ValueError(f"metric {metric!r} was not logged by any run of {self.campaign_dir}")
        pick = max if mode == "max" else min
        return self._result(self._entry(pick(scores, key=scores.__getitem__)))


def _long(frame: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """`frame` (`read_run_columns`) in long format: run, step, metric, value; rows without a value dropped."""
    present = [m for m in dict.fromkeys(metrics) if m in frame.columns]
    if not present or frame.empty:
        return pd.DataFrame()
    long = frame[[RUN, "step", *present]].melt(id_vars=[RUN, "step"], var_name="metric", value_name="value")
    return long.dropna(subset=["value"])


_NO_STEPS: dict[str, object] = {"steps_logged": 0, "steps_trained": 0, "last_step": -1}


def _per_run_stats(frame: pd.DataFrame) -> dict[str, dict[str, object]]:
    """Per run of `frame` (`_all_runs(TABLE_COLUMNS)`), what `_run_row` computes of one run's history, in
    one groupby: steps logged and trained, last step, and first, last and best of each summary metric
    (first and last skip steps that did not log it)."""
    if frame.empty:
        return {}
    runs = frame.groupby(RUN, sort=False)
    stats = pd.DataFrame({"steps_logged": runs.size(), "last_step": runs["step"].max()})
    trained = ~frame["trained"].eq(False) if "trained" in frame else pd.Series(True, index=frame.index)
    stats["steps_trained"] = trained.groupby(frame[RUN], sort=False).sum()
    for m in (m for m in SUMMARY_METRICS if m in frame):
        values = runs[m]
        stats[f"first_{m}"], stats[f"last_{m}"] = values.first(), values.last()
        stats[f"best_{m}"] = values.min() if m in ("loss", "step_time_s") else values.max()
    columns = ["steps_logged", "steps_trained", "last_step",
               *(c for c in stats.columns if c.startswith(("first_", "last_", "best_")) and c != "last_step")]
    rows = cast("dict[str, dict[str, object]]", stats[columns].to_dict("index"))
    return {run: {k: (int(v) if k in _NO_STEPS else float(v)) for k, v in row.items()}  # pyright: ignore[reportArgumentType]
            for run, row in rows.items()}


def _steps_trained(hist: pd.DataFrame) -> int:
    """Logged steps that updated the weights: every step logs a row, `trained` says which updated (rows
    of logs written before the column existed were all trained: a step that trained nothing wrote none)."""
    if "trained" not in hist:
        return len(hist)
    return int((~hist["trained"].eq(False)).sum())


def _score(hist: pd.DataFrame, metric: str, mode: str, scope: str) -> float | None:
    if metric not in hist.columns:
        return None
    values = hist[metric].dropna().astype(float)
    if values.empty:
        return None
    if scope == "last":
        return float(values.iloc[-1])
    if scope == "all":
        return float(values.max() if mode == "max" else values.min())
    if scope == "avg":
        return float(values.mean())
    if scope.startswith("last-") and scope.endswith("-avg") and scope[5:-4].isdigit():
        return float(values.iloc[-int(scope[5:-4]):].mean())
    raise ValueError(f"scope={scope!r}: expected 'last', 'all', 'avg' or 'last-N-avg'")
