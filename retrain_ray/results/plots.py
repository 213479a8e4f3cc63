"""Metric curves of a campaign: one line per condition, the mean across seeds and a 95% band.

    from retrain_ray.results import CampaignResults
    CampaignResults.from_dir("logs/c").plot("mean_reward", smooth=5, out="logs/c/plots/mean_reward")
    # -> mean_reward.png and mean_reward.svg

The band is the 95% confidence interval of the mean across seeds at each step (Student t with
n-1 degrees of freedom, n = the seeds that logged that step); with one seed there is no band.
`smooth` is a trailing rolling mean over that many logged steps, applied to each run before
averaging, so the band reflects the seed-to-seed spread of the smoothed curves. Every step logs a row
(a step that trained nothing has `trained = false` and its rewards, so reward curves have no gaps); a
step without a value (`loss` on a step that trained nothing, or a step of a log written before every
step logged a row) carries that run's previous value, so gaps do not thin the band. Each condition's legend
entry ends with its verdict against the best condition (`CampaignResults.compare`: Welch's t on the mean
of each run's last 10 values, Holm-adjusted p, seeds), e.g. "slow (3 seeds): worse than fast, p=0.0004";
the best one says "best".

`plot_profile` draws a performance profile (Agarwal et al. 2021): for each threshold, the fraction of a
condition's runs whose value on the metric (the mean of its last 10 values, as the verdicts use) is better
than it, with a stratified bootstrap 95% band (results/robust_stats.py, seeded). Needs matplotlib
(`pip install retrain-ray[plot]`); it draws with the Agg backend, no display needed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Protocol, cast

import numpy as np
import pandas as pd

from retrain_ray.results.robust_stats import performance_profiles
from retrain_ray.results.significance import t95

if TYPE_CHECKING:  # matplotlib is an optional extra; CampaignResults imports this module
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from retrain_ray.results.campaign_results import CampaignResults

# Plot name -> the logged column it draws, and its axis label.
PLOT_METRICS: dict[str, tuple[str, str]] = {
    "mean_reward": ("mean_reward", "mean reward"),
    "correct_rate": ("correct_rate", "correct rate"),
    "loss": ("loss", "loss"),
    "kl": ("policy/abs_kl", "KL (mean |log ratio|)"),
    "clip_fraction": ("clip_fraction", "clip fraction"),
    "eval_accuracy": ("eval_correct_rate", "eval accuracy (correct rate)"),
    "eval_reward": ("eval_mean_reward", "eval mean reward"),
    "tokens_per_second": ("tokens_per_second", "tokens / s"),
    "step_time": ("step_time_s", "step time (s)"),
}
SPARSE_POINTS = 20
PROFILE_POINTS = 101
PROFILE_REPS = 2_000  # a band drawn at 101 thresholds; more resamples move it by less than a line's width


class _Axes(Protocol):
    """What `draw` uses of matplotlib's `Axes` (whose methods take unannotated **kwargs)."""

    def plot(self, x: object, y: object, /, *, color: str, linewidth: float, marker: str | None,
             label: str) -> object: ...
    def fill_between(self, x: object, y1: object, y2: object, /, *, color: str, alpha: float,
                     linewidth: float) -> object: ...
    def set_xlabel(self, label: str, /) -> object: ...
    def set_ylabel(self, label: str, /) -> object: ...
    def set_title(self, label: str, /) -> object: ...
    def grid(self, visible: bool, /, *, alpha: float) -> None: ...
    def legend(self, *, title: str, loc: str, fontsize: str) -> object: ...
    @property
    def figure(self) -> object: ...


class SavableFigure(Protocol):
    """What is saved of matplotlib's `Figure` (its `savefig` takes unannotated **kwargs)."""

    def savefig(self, fname: Path | IO[bytes], /, *, dpi: float = ..., format: str | None = ...) -> None: ...


def resolve_metric(name: str) -> tuple[str, str]:
    """(column, axis label) for a plot name or a logged column name."""
    if name in PLOT_METRICS:
        return PLOT_METRICS[name]
    for column, label in PLOT_METRICS.values():
        if name == column:
            return column, label
    return name, name


def seed_bands(long: pd.DataFrame, column: str, *, smooth: int = 1) -> pd.DataFrame:
    """Per condition and step: mean across seeds, 95% band (low, high) and n seeds.

    `long` has the columns of `CampaignResults.history()`: run, condition, seed, step, metric, value.
    """
    rows = long[long["metric"] == column]
    out: list[pd.DataFrame] = []
    for condition, group in rows.groupby("condition", sort=False):
        wide = group.pivot_table(index="step", columns="run", values="value", aggfunc="last").sort_index()
        if smooth > 1:
            wide = wide.apply(_smoothed, smooth=smooth)
        wide = wide.apply(_fill_gaps)
        n = wide.notna().sum(axis=1)
        mean, std = wide.mean(axis=1), wide.std(axis=1, ddof=1)
        half = [t95(int(k) - 1) * s / math.sqrt(k) if k >= 2 else float("nan") for k, s in zip(n, std, strict=True)]
        centre = mean.to_numpy(dtype=float)
        frame = pd.DataFrame({"condition": condition, "step": wide.index, "mean": centre,
                              "low": centre - half, "high": centre + half, "n": n.values})
        out.append(frame)
    columns = ["condition", "step", "mean", "low", "high", "n"]
    return pd.concat(out, ignore_index=True)[columns] if out else pd.DataFrame(columns=columns)


def _smoothed(run: pd.Series[float], smooth: int) -> pd.Series[float]:
    """Trailing mean over `smooth` logged values (the steps without one are skipped)."""
    return run.dropna().rolling(smooth, min_periods=1).mean()


def _fill_gaps(run: pd.Series[float]) -> pd.Series[float]:
    """Carries a run's last value over the steps without one (`loss` on an untrained step) between its
    first and last logged value, so a gap does not drop that seed from the mean and widen the band."""
    if not run.notna().any():
        return run
    first, last = run.first_valid_index(), run.last_valid_index()
    return run.loc[first:last].ffill().reindex(run.index)


def use_agg() -> None:
    """Checks that matplotlib (an optional extra) is installed and makes it draw with Agg (no display)."""
    try:
        # deferred: matplotlib is an optional extra, imported only when used
        import matplotlib
    except ImportError as exc:
        raise ImportError("plots need matplotlib: pip install 'retrain-ray[plot]' (or matplotlib)") from exc
    matplotlib.use("Agg")


def close(figure: Figure) -> None:
    """Frees a figure `draw` made (pyplot keeps every figure until closed)."""
    use_agg()
    # deferred: matplotlib is an optional extra, imported only when used
    import matplotlib.pyplot as plt

    plt.close(figure)


def _new_axes() -> Axes:
    use_agg()
    # deferred: matplotlib is an optional extra, imported only when used
    import matplotlib.pyplot as plt

    figure = plt.figure(figsize=(8, 4.8), layout="constrained")  # pyright: ignore[reportUnknownMemberType]  (**kwargs)
    return figure.add_subplot()


def draw(bands: pd.DataFrame, *, label: str, title: str, ax: Axes | None = None,
         notes: dict[str, str] | None = None) -> Figure:
    """Draws one line per condition with its band on `ax` (a new figure if None); returns the figure.
    `notes` (condition -> text) are appended to the conditions' legend entries."""
    if ax is None:
        ax = _new_axes()
    canvas = cast(_Axes, ax)
    for i, (condition, frame) in enumerate(bands.groupby("condition", sort=False)):
        color = f"C{i % 10}"
        seeds = int(frame["n"].max())
        sparse = len(frame) <= SPARSE_POINTS  # e.g. eval rows: markers, or a lone point shows nothing
        canvas.plot(frame["step"], frame["mean"], color=color, linewidth=2, marker="o" if sparse else None,
                label=f"{condition} ({seeds} seed{'s' if seeds != 1 else ''})" + (notes or {}).get(str(condition), ""))
        canvas.fill_between(frame["step"], frame["low"], frame["high"], color=color, alpha=0.2, linewidth=0)
    canvas.set_xlabel("step")
    canvas.set_ylabel(label)
    canvas.set_title(title)
    canvas.grid(True, alpha=0.3)
    if len(bands):
        legend = "condition (mean, 95% band)" + (": verdict vs best (Welch, Holm)" if notes else "")
        canvas.legend(title=legend, loc="best", fontsize="small")
    return cast("Figure", canvas.figure)  # a figure's own axes, never a subfigure's


def save(figure: Figure, out: str | Path) -> list[Path]:
    """Writes `<out>.png` and `<out>.svg` (a suffix on `out` is replaced); returns both paths."""
    stem = Path(out)
    stem = stem.with_suffix("") if stem.suffix in (".png", ".svg") else stem
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_name(stem.name + ".png"), stem.with_name(stem.name + ".svg")]
    savable = cast(SavableFigure, figure)
    savable.savefig(paths[0], dpi=120)
    savable.savefig(paths[1])
    return paths


def plot_metric(results: CampaignResults, metric: str = "mean_reward", *, out: str | Path | None = None,
                smooth: int = 1, title: str | None = None, ax: Axes | None = None) -> Figure:
    """Figure of `metric` by step for `results` (a CampaignResults); writes PNG+SVG if `out` is given."""
    column, label = resolve_metric(metric)
    long = results.history(metrics=(column,))
    if long.empty:
        known = ", ".join(PLOT_METRICS)
        raise ValueError(f"metric {metric!r} (column {column!r}) was not logged by any run of "
                         f"{results.campaign_dir}; choose one of: {known}, or another logged column")
    name = results.manifest.name or Path(results.campaign_dir).name
    smoothing = f", smoothed over {smooth} steps" if smooth > 1 else ""
    figure = draw(seed_bands(long, column, smooth=smooth), label=label, ax=ax, notes=verdict_notes(results, column),
                  title=title or f"{name}: {label} by step (mean across seeds, 95% band{smoothing})")
    if out is not None:
        save(figure, out)
    return figure


def verdict_notes(results: CampaignResults, column: str) -> dict[str, str]:
    """Legend notes: ": best" for the best condition on `column`, ": worse than X, p=..." for the others."""
    leader, comparisons = results.compare(column)
    if leader is None or not comparisons:
        return {}
    notes = {leader: ": best"}
    for c in comparisons:
        relation = {"worse": "worse than", "better": "better than", "undecided": "undecided vs"}[c.verdict]
        notes[c.condition] = f": {relation} {c.reference}, p={c.p_value:.2g}"
    return notes


def plot_metrics(results: CampaignResults, metrics: Sequence[str], out_dir: str | Path, *,
                 smooth: int = 1) -> list[Path]:
    """One PNG + SVG per metric in `out_dir`; metrics nobody logged are skipped. Returns the files."""
    use_agg()
    written: list[Path] = []
    for metric in metrics:
        try:
            figure = plot_metric(results, metric, smooth=smooth)
        except ValueError:
            continue
        written += save(figure, Path(out_dir) / metric)
        close(figure)
    return written


def plot_profile(results: CampaignResults, metric: str = "mean_reward", *, out: str | Path | None = None,
                 ax: Axes | None = None, reps: int = PROFILE_REPS) -> Figure:
    """Performance profile of `metric`: per condition, the fraction of its runs better than each threshold
    (above it; below it for a lower-is-better metric), with a 95% bootstrap band. PNG+SVG if `out` is given."""
    column, label = resolve_metric(metric)
    values = results.run_values(column)
    if not values:
        raise ValueError(f"metric {metric!r} (column {column!r}) was not logged by any run of {results.campaign_dir}")
    sign = -1.0 if results.mode(column) == "min" else 1.0
    taus = _thresholds([v for runs in values.values() for v in runs])
    profiles = performance_profiles({c: [sign * v for v in runs] for c, runs in values.items()},
                                    [sign * float(t) for t in taus], reps=reps)
    canvas = cast(_Axes, ax if ax is not None else _new_axes())
    for i, (condition, profile) in enumerate(profiles.items()):
        color = f"C{i % 10}"
        canvas.plot(taus, profile.fraction, color=color, linewidth=2, marker=None,
                    label=f"{condition} ({len(values[condition])} runs)")
        canvas.fill_between(taus, profile.low, profile.high, color=color, alpha=0.2, linewidth=0)
    better = "below" if sign < 0 else "above"
    canvas.set_xlabel(f"{label} threshold τ")
    canvas.set_ylabel(f"fraction of runs {better} τ")
    name = results.manifest.name or Path(results.campaign_dir).name
    canvas.set_title(f"{name}: performance profile of {label} (each run's last 10 values, 95% bootstrap band)")
    canvas.grid(True, alpha=0.3)
    canvas.legend(title="condition", loc="best", fontsize="small")
    figure = cast("Figure", canvas.figure)
    if out is not None:
        save(figure, out)
    return figure


def _thresholds(scores: Sequence[float]) -> np.ndarray[tuple[int], np.dtype[np.float64]]:
    """PROFILE_POINTS thresholds spanning the scores, a little beyond both ends so every curve reaches 1 and 0."""
    low, high = min(scores), max(scores)
    pad = 0.05 * (high - low) or 0.05 * abs(high) or 0.05
    return np.linspace(low - pad, high + pad, PROFILE_POINTS)
