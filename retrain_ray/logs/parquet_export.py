"""Parquet copies of a campaign's Arrow logs that pandas, polars and DuckDB open directly.

The live logs are Arrow IPC streams (`runs/<run>/metrics.arrows`, ...), which most readers cannot
open (`pandas.read_feather` wants the IPC *file* format, DuckDB a community extension). While a
campaign runs, the recorder rewrites `runs/<run>/<kind>.parquet` from the streams every few
seconds and once more when the run closes. Each rewrite reads all segments, de-duplicates on
(run, step) (last write wins, so steps re-run after a resume appear once), adds the `campaign`,
`condition` and `seed` columns, and replaces the file atomically (temporary file + `os.replace`):
a reader sees the previous complete file or the new one, never a torn one, and a killed campaign
keeps the copy of its last rewrite (the Arrow streams keep every row).

    duckdb.sql("select condition, seed, step, mean_reward from 'DIR/runs/*/metrics.parquet'")
    polars.read_parquet("DIR/runs/*/metrics.parquet")
    pandas.concat(map(pandas.read_parquet, glob.glob("DIR/runs/*/metrics.parquet")))

The campaign's back-pressure log (`<campaign>/backpressure.arrows`) gets `backpressure.parquet`
next to it the same way, de-duplicated on (run, step, resource).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from retrain_ray.logs.manifest import CampaignRecord, read_manifest
from retrain_ray.logs.stream import read_stream, segment_paths, write_parquet_atomic

RUN_KINDS = ("metrics", "generations", "eval")
BACKPRESSURE = "backpressure"
KEYS: dict[str, tuple[str, ...] | None] = {
    "metrics": ("step",),
    "eval": ("step",),
    # All rows of the last batch that wrote a step are kept (read_stream keeps a batch's rows together).
    "generations": ("step",),
    BACKPRESSURE: ("run", "step", "resource"),
}
IDENTITY = ("campaign", "run", "condition", "seed")


def _manifest(campaign_dir: Path) -> CampaignRecord | None:
    try:
        return read_manifest(campaign_dir)
    except (OSError, ValueError):
        return None


def run_identities(campaign_dir: Path) -> dict[str, dict[str, Any]]:
    """run name -> {"condition", "seed"} from the campaign's manifest.json ({} if there is none)."""
    manifest = _manifest(campaign_dir)
    runs = manifest.runs if manifest is not None else ()
    return {r.run_name: {"condition": r.condition, "seed": r.seed} for r in runs}


def campaign_name(campaign_dir: Path) -> str:
    """The manifest's campaign name, else the directory's name."""
    manifest = _manifest(campaign_dir)
    return (manifest.name if manifest is not None else "") or Path(campaign_dir).name


def _with_identity(table: pa.Table, campaign: str, identity: Mapping[str, Any]) -> pa.Table:
    """Puts campaign, run, condition, seed first; fills condition/seed from the manifest."""
    n = table.num_rows
    columns: dict[str, pa.Array] = {"campaign": pa.array([campaign] * n, pa.string())}
    columns["run"] = table["run"] if "run" in table.column_names else pa.array([identity.get("run")] * n, pa.string())
    condition = identity.get("condition")
    if condition is None and "condition" in table.column_names:
        columns["condition"] = table["condition"]
    else:
        columns["condition"] = pa.array([condition] * n, pa.string())
    columns["seed"] = pa.array([identity.get("seed")] * n, pa.int64())
    rest = {name: table[name] for name in table.column_names if name not in columns}
    return pa.table({**columns, **rest})


def export_run(run_dir: Path, campaign: str, identity: Mapping[str, Any],
               kinds: Sequence[str] = RUN_KINDS) -> list[Path]:
    """Rewrites `<run_dir>/<kind>.parquet` for each kind that has a stream; returns the files written."""
    run_dir = Path(run_dir)
    identity = {"run": run_dir.name, **identity}
    written = []
    for kind in kinds:
        if not segment_paths(run_dir, kind):
            continue
        table = read_stream(run_dir, kind, key=KEYS[kind])
        written.append(write_parquet_atomic(_with_identity(table, campaign, identity), run_dir / f"{kind}.parquet"))
    return written


def export_backpressure(campaign_dir: Path, campaign: str) -> Path | None:
    """Rewrites `<campaign_dir>/backpressure.parquet` from the back-pressure log, if there is one."""
    campaign_dir = Path(campaign_dir)
    if not segment_paths(campaign_dir, BACKPRESSURE):
        return None
    table = read_stream(campaign_dir, BACKPRESSURE, key=KEYS[BACKPRESSURE])
    identities = run_identities(campaign_dir)
    runs = table["run"].to_pylist()
    extra = pa.table({
        "campaign": pa.array([campaign] * table.num_rows, pa.string()),
        "condition": pa.array([identities.get(r, {}).get("condition") for r in runs], pa.string()),
        "seed": pa.array([identities.get(r, {}).get("seed") for r in runs], pa.int64()),
    })
    merged = pa.table({**{c: extra[c] for c in extra.column_names}, **{c: table[c] for c in table.column_names}})
    return write_parquet_atomic(merged, campaign_dir / f"{BACKPRESSURE}.parquet")


def export_campaign(campaign_dir: Path, campaign: str | None = None) -> list[Path]:
    """Rewrites every Parquet copy of a campaign directory (e.g. for a campaign killed before its end)."""
    campaign_dir = Path(campaign_dir)
    campaign = campaign or campaign_name(campaign_dir)
    identities = run_identities(campaign_dir)
    written = []
    for run_dir in sorted(p for p in (campaign_dir / "runs").glob("*") if p.is_dir()):
        written += export_run(run_dir, campaign, identities.get(run_dir.name, {}))
    bp = export_backpressure(campaign_dir, campaign)
    return written + ([bp] if bp else [])
