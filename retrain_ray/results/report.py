"""A self-contained HTML report of a campaign: metric curves, results table, run matrix.

The results table states each condition against the best on mean reward (difference, 95% CI,
Holm-adjusted Welch p, verdict, seeds: `CampaignResults.significance`), beside it the mean and IQM with
stratified bootstrap intervals and P(best better) (`CampaignResults.robust`) and the performance profile,
and the GPU- and CPU-hours spent (and saved by an adaptive campaign: `CampaignResults.compute`). One file, no external assets (the plots are embedded as base64 PNG), so it opens anywhere and can
be attached to a ticket or mailed.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pandas as pd

from retrain_ray.results.compute import describe
from retrain_ray.results.plots import SavableFigure, close, plot_metric, plot_profile, use_agg
from retrain_ray.results.robust_stats import robust_table
from retrain_ray.results.status import CampaignStatus, campaign_status

if TYPE_CHECKING:  # matplotlib is an optional extra; campaign_results imports the plots
    from matplotlib.figure import Figure

    from retrain_ray.results.campaign_results import CampaignResults

_CSS = """
body { font-family: system-ui, sans-serif; margin: 24px; color: #222; max-width: 1300px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 28px; border-bottom: 1px solid #ddd; }
.plots { display: grid; grid-template-columns: repeat(auto-fill, minmax(560px, 1fr)); gap: 12px; }
.plots img { width: 100%; border: 1px solid #eee; }
.wide { overflow-x: auto; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
.muted { color: #666; font-size: 13px; }
"""
RUN_COLUMNS = ("run_name", "condition", "seed", "status", "attempts", "last_step", "last_mean_reward",
               "last_correct_rate", "last_loss", "last_tokens_per_second")


def _png_base64(figure: Figure) -> str:
    buffer = io.BytesIO()
    cast(SavableFigure, figure).savefig(buffer, format="png", dpi=110)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _plots_html(results: CampaignResults, metrics: Sequence[str], smooth: int) -> str:
    use_agg()
    images: list[str] = []
    for metric in metrics:
        try:
            figure = plot_metric(results, metric, smooth=smooth)
        except ValueError:
            continue
        images.append(f'<img alt="{html.escape(metric)} by step" src="data:image/png;base64,{_png_base64(figure)}">')
        close(figure)
    return f'<div class="plots">{"".join(images)}</div>' if images else "<p>No metric was logged yet.</p>"


def _robust_html(results: CampaignResults) -> str:
    conditions, versus_best = results.robust("mean_reward")
    if conditions.empty:
        return "<p>No run logged mean reward yet.</p>"
    figure = plot_profile(results, "mean_reward")
    image = f'<img alt="performance profile" src="data:image/png;base64,{_png_base64(figure)}">'
    close(figure)
    return _table(robust_table(conditions, versus_best)) + f'<div class="plots">{image}</div>'


def _table(df: pd.DataFrame) -> str:
    return '<div class="wide">' + df.to_html(index=False, float_format=lambda v: f"{v:.4g}", na_rep="—", border=0, escape=True) + "</div>"


def _matrix_html(status: CampaignStatus) -> str:
    rows = [{"condition": cond, **{f"seed {s}": cells.get(str(s), "") for s in status["seeds"]}}
            for cond, cells in status["matrix"].items()]
    counts = ", ".join(f"{k} {v}" for k, v in status["counts"].items())
    return f'<p class="muted">{html.escape(counts)}</p>' + _table(pd.DataFrame(rows))


def compact_summary(summary: pd.DataFrame) -> pd.DataFrame:
    """One column per metric, "mean ± ci95" (ci95 blank with one seed), so the table fits a page."""
    out = summary[[c for c in ("condition", "runs", "failed") if c in summary.columns]].copy()
    for column in summary.columns:
        if column.endswith("_mean"):
            metric = column.removesuffix("_mean")
            ci = summary.get(f"{metric}_ci95", pd.Series([float("nan")] * len(summary)))
            out[metric] = [f"{m:.4g}" + ("" if c != c else f" ± {c:.2g}") for m, c in zip(summary[column], ci, strict=True)]
    return out


def write_report(results: CampaignResults, path: str | Path, *, metrics: Sequence[str], smooth: int = 1) -> Path:
    """Writes the HTML report of `results` (a CampaignResults) to `path`; returns it."""
    name = results.manifest.name or Path(results.campaign_dir).name
    runs = results.get_dataframe()
    runs = runs[[c for c in RUN_COLUMNS if c in runs.columns]]
    body = [
        f"<h1>Campaign {html.escape(str(name))}</h1>",
        f'<p class="muted">{html.escape(str(results.campaign_dir))} · status '
        f'{html.escape(results.manifest.status)}</p>',
        "<h2>Curves (mean across seeds, 95% band)</h2>", _plots_html(results, metrics, smooth),
        "<h2>Results by condition (last value: mean ± 95% CI across seeds)</h2>",
        _table(compact_summary(results.summary(significance=None))),
        "<h2>Each condition against the best (mean reward over each run's last 10 steps)</h2>",
        '<p class="muted">diff = condition - best, 95% Welch CI (unadjusted), p: Welch\'s t-test, Holm-adjusted '
        "over all pairs; verdict at alpha 0.05. See docs/campaigns.md, Significance.</p>",
        _table(results.significance("mean_reward")),
        "<h2>As RL papers report it: mean and IQM, probability of improvement, performance profile</h2>",
        '<p class="muted">Each run\'s value: its mean reward over its last 10 steps. 95% CIs: stratified '
        "bootstrap (10,000 resamples, seeded). P(best better): the chance that a run of the best condition "
        "scores above a run of the other (Agarwal et al., NeurIPS 2021).</p>",
        _robust_html(results),
        "<h2>Compute</h2>", "".join(f"<p>{html.escape(line)}</p>" for line in describe(results.compute())),
        "<h2>Run matrix (condition x seed)</h2>", _matrix_html(campaign_status(Path(results.campaign_dir))),
        "<h2>Runs</h2>", _table(runs),
    ]
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(str(name))}</title>"
            f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path
