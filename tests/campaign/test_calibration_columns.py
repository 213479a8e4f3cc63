"""`explain --calibrate` reads a pilot's logs on columns (campaign/capacity/calibration_columns.py): the figures
are those the row-by-row reading gave, to the last bit, on a campaign written through the product's writers
with the awkward rows a real log holds (a warm start, missing and zero step times, a wall clock that went back,
back-pressure regimes, a run read from its stream beside runs whose Parquet copy is current)."""

from __future__ import annotations

import datetime as dt
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from retrain_ray.campaign.capacity.calibration import PhaseFigures, RunFigures, read_calibration
from retrain_ray.campaign.recorder import RecorderCore
from retrain_ray.logs import read_stream
from retrain_ray.logs.manifest import Manifest

T0 = 1.79e9


def _row(run: int, step: int) -> dict[str, object]:
    warm = step < 3 and run % 2 == 0
    step_time = None if step == 4 else 0.0 if step == 5 else 0.25 + 0.01 * ((step * 7 + run) % 11)
    wall = T0 + 3.0 * step + 0.1 * run - (10.0 if step == 6 else 0.0)  # step 6's clock went back
    row: dict[str, object] = {"step": step, "wall_time": dt.datetime.fromtimestamp(wall, dt.UTC),
                              "condition": f"c{run % 3}", "phase": "sft" if warm else "rl",
                              "max_token_hit_rate": None if step % 4 == 0 else 0.1 * (step % 3),
                              "tokens_per_second": 0.0 if step == 7 else 100.0 + step + run,
                              "bp_regime": ["", "warmup", "retrograde", None][step % 4],
                              "bp_action": "hold" if step % 3 else None, "mean_reward": 0.5}
    if step_time is not None:
        row["step_time_s"] = step_time
    return row


def _write(cdir: Path, runs: int, steps: int) -> None:
    cdir.mkdir(parents=True)
    entries = [{"run_name": f"r{i}", "condition": f"c{i % 3}", "seed": i, "max_steps": steps} for i in range(runs)]
    manifest = Manifest.create(cdir, {"name": "cal", "conditions": ["c0", "c1", "c2"], "seeds": list(range(runs)),
                                      "max_steps": steps, "max_concurrent": 2}, entries)
    recorder = RecorderCore(cdir, parquet_every_s=1e9)
    for i in range(runs):
        for first in range(0, steps, 4):
            recorder.append(f"r{i}", "metrics", [_row(i, t) for t in range(first, min(first + 4, steps))])
        recorder.close_run(f"r{i}")
        manifest.stage_run(f"r{i}", status="completed", attempts=1, started_at=T0 - 5.0 + i,
                           finished_at=T0 + 3.0 * steps + i)
    manifest.update(status="done")
    recorder.close()
    (cdir / "runs" / f"r{runs - 1}" / "metrics.parquet").unlink()  # no copy (a crash before it): read from its stream


# --- the row-by-row reading the columns replaced, kept here as the reference ------------------------


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if number == number and abs(number) != float("inf") else None


def _seconds(value: object) -> float | None:
    return value.timestamp() if isinstance(value, dt.datetime) else _number(value)


def _phase(rows: Sequence[Mapping[str, object]], previous: Sequence[float | None]) -> PhaseFigures | None:
    times = [_number(r.get("step_time_s")) for r in rows]
    if not rows:
        return None
    valid = [t for t in times if t is not None and t > 0]
    step_sum = span_sum = 0.0
    spans = 0
    for row, step_time, before in zip(rows, times, previous, strict=True):
        now = _seconds(row.get("wall_time"))
        if step_time is None or step_time <= 0 or now is None or before is None or now <= before:
            continue
        step_sum += step_time
        span_sum += now - before
        spans += 1
    return PhaseFigures(len(rows), tuple(valid[len(valid) // 2:]), step_sum, span_sum, spans)


def _reference(name: str, rows: list[dict[str, object]], seed: int, started: float, finished: float) -> RunFigures:
    walls = [_seconds(r.get("wall_time")) for r in rows]
    previous: list[float | None] = [None, *walls[:-1]]
    warm = [i for i, r in enumerate(rows) if r.get("phase") == "sft"]
    rl = [i for i, r in enumerate(rows) if r.get("phase") != "sft"]
    rl_rows = [rows[i] for i in rl]
    hits = [h for h in (_number(r.get("max_token_hit_rate")) for r in rl_rows[len(rl_rows) // 2:]) if h is not None]
    speeds = [s for s in (_number(r.get("tokens_per_second")) for r in rl_rows[len(rl_rows) // 2:]) if s]
    first_step = _number(rows[0].get("step_time_s"))
    assert walls[0] is not None and walls[-1] is not None
    return RunFigures(
        run_name=name, condition=str(rows[-1].get("condition") or ""), seed=seed, steps=len(rows),
        warm_start=_phase([rows[i] for i in warm], [previous[i] for i in warm]),
        rl=_phase(rl_rows, [previous[i] for i in rl]), warm_start_ended=bool(warm) and bool(rl),
        max_token_hit_rate=statistics.fmean(hits) if hits else None,
        tokens_per_s=statistics.median(speeds) if speeds else None,
        bp_regimes=dict(Counter(str(r["bp_regime"]) for r in rows if r.get("bp_regime"))),
        bp_actions=dict(Counter(str(r["bp_action"]) for r in rows if r.get("bp_action"))),
        startup_s=max(0.0, walls[0] - (first_step or 0.0) - started), teardown_s=max(0.0, finished - walls[-1]),
        checkpoint_bytes=None, warm_start_capped=bool(warm) and bool(rl), warm_start_last_probe=None)


def test_the_column_reading_gives_the_row_readings_figures(tmp_path) -> None:
    runs, steps = 5, 11
    cdir = tmp_path / "cal"
    _write(cdir, runs, steps)
    assert not (cdir / "runs" / f"r{runs - 1}" / "metrics.parquet").exists()
    assert (cdir / "runs" / "r0" / "metrics.parquet").is_file()
    cal = read_calibration(tmp_path)
    expected = [_reference(f"r{i}", read_stream(cdir / "runs" / f"r{i}").to_pylist(), i, T0 - 5.0 + i,
                           T0 + 3.0 * steps + i) for i in range(runs)]
    assert list(cal.runs) == expected
    warm_run = cal.runs[0]
    assert warm_run.warm_start is not None and warm_run.warm_start.steps == 3 and warm_run.warm_start_ended
    assert warm_run.rl is not None and warm_run.rl.spans == 5  # steps 3, 8, 9, 10 and 7 (4: no time, 5: zero, 6: back)
    assert warm_run.bp_regimes == {"warmup": 3, "retrograde": 3} and warm_run.bp_actions == {"hold": 7}
    assert cal.runs[1].warm_start is None and cal.runs[1].tokens_per_s is not None
    (campaign,) = cal.campaigns
    assert campaign.runs == runs and campaign.max_concurrent == 2


def test_a_warm_starts_probe_logged_by_the_sft_trainer_reaches_the_calibration(tmp_path) -> None:
    """The SFT trainer logs `sft_probe_correct_rate` as a top-level key of its rows: it is a column of the metrics
    schema (it went into `extras` before, so the calibration never saw it and read every warm start as capped)."""
    cdir = tmp_path / "probe"
    cdir.mkdir()
    manifest = Manifest.create(cdir, {"name": "probe", "conditions": ["c0"], "seeds": [1], "max_steps": 4,
                                      "max_concurrent": 1}, [{"run_name": "r", "condition": "c0", "seed": 1,
                                                              "max_steps": 4}])
    recorder = RecorderCore(cdir, parquet_every_s=1e9)
    rows = [{**_row(0, step), "phase": "sft" if step < 2 else "rl",
             **({"sft_probe_correct_rate": 0.25 * (step + 1)} if step < 2 else {})} for step in range(4)]
    recorder.append("r", "metrics", rows)
    recorder.close_run("r")
    manifest.stage_run("r", status="completed", attempts=1, started_at=T0 - 5.0, finished_at=T0 + 12.0)
    manifest.update(status="done")
    recorder.close()
    assert read_stream(cdir / "runs" / "r", "metrics").column("sft_probe_correct_rate").to_pylist()[:2] == [0.25, 0.5]
    (run,) = read_calibration(cdir).runs
    assert run.warm_start_last_probe == 0.5 and not run.warm_start_capped
