"""`retrain-ray status DIR --watch`: the condition x seed matrix, refreshed in place (rich Live), and one
line per standalone run (results/status.py).

Each cell shows the run's `step/max` (or `n ✓`, `n ✗`, `stale`), a sparkline of its last rewards and
its ETA from the wall-clock spacing of its recent steps; the title carries the campaign's counts and
ETA. The data comes from `campaign_status` (manifest + Arrow logs), so watching needs no Ray.
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from retrain_ray.results.status import (
    STALE_AFTER_S,
    CampaignStatus,
    RunState,
    RunSummary,
    campaign_status,
    cell,
    find_campaigns,
    find_runs,
    run_summary,
    visible,
)


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def summary_line(st: CampaignStatus) -> str:
    c = st["counts"]
    return (f"{st['campaign']} [{st['status']}]: done {c['completed']}/{len(st['runs'])}, running {c['running']}, "
            + (f"paused {c['paused']} (waiting for a rung's decision), " if c.get("paused") else "")
            + f"stale {c['stale']}, failed {c['failed']}, pending {c['pending']}"
            + (f", missing {c['missing']}" if c.get("missing") else "") + f", ETA {format_duration(st['eta_s'])}")


def _fmt(value: float | None, spec: str, unit: str = "") -> str:
    return "-" if value is None else format(value, spec) + unit


def run_line(summary: RunSummary) -> str:
    """The original's standalone run line: `path cond step= cr= reward= loss= tok/s= sample= train= ... [status]`."""
    from retrain_ray.results.live import (
        format_duration,  # deferred: loads rich, which this module does not need
    )

    s = summary
    step = "-" if s["step"] is None else f"{s['step'] + 1}" + (f"/{s['max_steps']}" if s["max_steps"] else "")
    return (f"{s['dir']} {s['condition'] or '-'} step={step} reward={_fmt(s['mean_reward'], '.3f')} "
            f"cr={_fmt(s['correct_rate'], '.2f')} loss={_fmt(s['loss'], '.4f')} "
            f"tok/s={_fmt(s['tokens_per_second'], ',.0f')} sample={_fmt(s['sample_time_s'], '.2f', 's')} "
            f"train={_fmt(s['train_time_s'], '.2f', 's')} step_t={_fmt(s['step_time_s'], '.2f', 's')} "
            f"time={format_duration(s['wall_time_s'])} updated={format_duration(s['last_update_s'])} ago "
            f"[{s['status']}]")


def _cell_text(state: RunState) -> str:
    parts = [cell(state)]
    if state["reward_sparkline"]:
        parts.append(f"{state['reward_sparkline']} {_fmt(state['mean_reward'], '.2f')}")
    if state["eta_s"] is not None:
        parts.append(f"ETA {format_duration(state['eta_s'])}")
    return "\n".join(parts)


def status_table(st: CampaignStatus) -> Table:
    """A rich Table: one row per condition, one column per seed (cells: state, reward sparkline, ETA)."""
    table = Table(show_lines=True)
    table.add_column("condition", style="bold")
    for seed in st["seeds"]:
        table.add_column(f"seed {seed}")
    by_cell = {(r["condition"], str(r["seed"])): r for r in st["runs"]}
    for condition in st["matrix"]:
        cells = [_cell_text(by_cell[(condition, str(s))]) if (condition, str(s)) in by_cell else ""
                 for s in st["seeds"]]
        table.add_row(condition, *cells)
    return table


def render(root: Path, stale_after_s: float = STALE_AFTER_S, view: str = "default") -> Group | Text:
    found = find_campaigns(root)
    runs = find_runs(root, found)
    if not found and not runs:
        return Text(f"no run (a directory with metrics.arrows) or campaign (a directory with manifest.json) "
                    f"in {root} yet")
    parts: list[Text | Table] = []
    for directory in found:
        st = campaign_status(directory, stale_after_s=stale_after_s)
        if visible(st, view):  # --all / --active / default (idle > 24 h hidden), as `status`
            parts += [Text(summary_line(st), style="bold"), status_table(st)]
    for run_dir in runs:
        summary = run_summary(run_dir, stale_after_s=stale_after_s)
        if view != "active" or summary["status"] == "running":
            parts.append(Text(run_line(summary)))
    stamp = Text(time.strftime("%H:%M:%S") + "  (Ctrl-C to stop)", style="dim")
    return Group(*parts, stamp)


def watch(root: Path, *, interval_s: float = 2.0, count: int | None = None, console: Console | None = None,
          stale_after_s: float = STALE_AFTER_S, view: str = "default") -> int:
    """Redraws the status every `interval_s` until Ctrl-C (or `count` refreshes); returns 0."""
    shown = 0
    try:
        with Live(render(root, stale_after_s, view), console=console, auto_refresh=False) as live:
            while True:
                shown += 1
                if count is not None and shown >= count:
                    break
                time.sleep(interval_s)
                live.update(render(root, stale_after_s, view), refresh=True)
    except KeyboardInterrupt:
        pass
    return 0
