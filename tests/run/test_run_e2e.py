"""End to end on the embedded default: the tiny offline model really learns the built-in task by RL,
and an interrupted run resumed from its checkpoint matches an uninterrupted one."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest
import torch
from helpers import TINY_RUN, write_config

from retrain_ray.config import apply_overrides, load_config, parse_overrides
from retrain_ray.logs import read_stream
from retrain_ray.run.train import train_run

SMOKE = Path(__file__).resolve().parents[2] / "configs" / "smoke.toml"


def _config(tmp_path: Path, **overrides):
    """The smoke config with original-style field overrides (`--max-steps 30`)."""
    values = {"log_dir": str(tmp_path / "run"), **overrides}
    argv = [arg for key, value in values.items() for arg in (f"--{key.replace('_', '-')}", str(value))]
    return apply_overrides(load_config(SMOKE), parse_overrides(argv))


def _rl_rewards(run_dir: Path) -> list[float]:
    table = read_stream(run_dir, "metrics").to_pylist()
    return [row["mean_reward"] for row in table if row["phase"] == "rl"]


def _learn(seed: int, run_dir: str) -> list[float]:
    """One smoke run in a child process (both seeds train at once on the two cores)."""
    torch.set_num_threads(1)
    cfg = _config(Path(run_dir), seed=seed, log_dir=run_dir, save_every=0)
    outcome = train_run(cfg, run_name=f"learn-s{seed}", run_dir=Path(run_dir))
    assert outcome.status == "completed"
    return _rl_rewards(Path(run_dir))


@pytest.mark.extended  # about 140 s on 2 cores; `make demo` shows the same learning in the default path
def test_reward_rises_clearly_on_builtin_task_for_several_seeds(tmp_path):
    """First RL steps under 0.4 mean reward, last RL steps over 0.7, on seeds 1 and 3 (of the five seeds
    measured for the recipe, seeds 1, 3, 4 and 5 end above 0.9; seed 2 peaks near 0.6: docs/quickstart.md)."""
    seeds = (1, 3)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=len(seeds), mp_context=ctx) as pool:
        futures = {seed: pool.submit(_learn, seed, str(tmp_path / f"s{seed}")) for seed in seeds}
        rewards = {seed: future.result(timeout=600) for seed, future in futures.items()}
    for seed, series in rewards.items():
        first, last = sum(series[:5]) / 5, sum(series[-5:]) / 5
        assert first < 0.4, (seed, series[:5])
        assert last > 0.7, (seed, series[-5:])


def _final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    files = sorted((run_dir / "checkpoints" / "final").glob("*.safetensors"))
    assert files, "final checkpoint holds no safetensors file"
    out: dict[str, torch.Tensor] = {}
    for f in files:
        out.update(load_file(str(f)))
    return out


def test_resume_after_interruption_matches_uninterrupted_run(tmp_path):
    full_dir, cut_dir = tmp_path / "full", tmp_path / "cut"
    base = {"seed": 5, "max_steps": 30, "save_every": 10, "sft_warmup_steps": 8}
    full = _config(tmp_path, log_dir=str(full_dir), **base)
    train_run(full, run_name="r", run_dir=full_dir)

    interrupted = _config(tmp_path, log_dir=str(cut_dir), **{**base, "max_steps": 24})
    train_run(interrupted, run_name="r", run_dir=cut_dir)
    # The first attempt saved checkpoint_step_20 and then a 'final' at 24; simulate a crash after step 23
    # by removing 'final' so resume continues from checkpoint_step_20 and rewrites steps 20..23.
    import shutil

    shutil.rmtree(cut_dir / "checkpoints" / "final")
    resumed = _config(tmp_path, log_dir=str(cut_dir), **base)
    train_run(resumed, run_name="r", run_dir=cut_dir, resume_from=cut_dir)

    full_rows = read_stream(full_dir, "metrics").to_pylist()
    cut_rows = read_stream(cut_dir, "metrics").to_pylist()
    assert [r["step"] for r in cut_rows] == [r["step"] for r in full_rows]
    assert len({r["step"] for r in cut_rows}) == len(cut_rows)
    for a, b in zip(full_rows, cut_rows, strict=True):
        assert a["mean_reward"] == pytest.approx(b["mean_reward"]), a["step"]
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-4, abs=1e-6), a["step"]
    wa, wb = _final_weights(full_dir), _final_weights(cut_dir)
    assert wa.keys() == wb.keys()
    for name in wa:
        torch.testing.assert_close(wa[name], wb[name], rtol=1e-4, atol=1e-5)


def _tear_after(segment: Path, rows: int) -> None:
    """Cuts `segment` in the middle of its batch number `rows` (0-based): as a full disk or a power
    loss leaves it after the later checkpoints reached the disk."""
    import pyarrow as pa

    with pa.OSFile(str(segment)) as source:
        reader = pa.ipc.open_stream(source)
        for _ in range(rows):
            reader.read_next_batch()
        cut = source.tell() + 40
    with open(segment, "r+b") as fh:
        fh.truncate(cut)


def test_resume_after_a_torn_metrics_log_writes_the_lost_rows_again(tmp_path):
    run_dir = tmp_path / "run"
    write_config(tmp_path / "t.toml", base=TINY_RUN, logging={"log_dir": str(run_dir)}, training={"max_steps": 6})
    cfg = load_config(tmp_path / "t.toml")
    train_run(cfg, run_name="r", run_dir=run_dir)
    whole = _final_weights(run_dir)
    assert read_stream(run_dir)["step"].to_pylist() == list(range(6))
    _tear_after(run_dir / "metrics.arrows", 3)  # rows 0-2 complete; 3 torn; 4, 5 gone; checkpoints 2, 4, final kept
    with pytest.warns(RuntimeWarning, match="torn"):
        assert read_stream(run_dir)["step"].to_pylist() == [0, 1, 2]

    train_run(cfg, run_name="r", run_dir=run_dir, resume_from=run_dir)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the torn segment was cut back to its complete batches
        steps = read_stream(run_dir, key=None)["step"].to_pylist()
    assert steps == [0, 1, 2, 2, 3, 4, 5]  # resumed from checkpoint_step_2 (after step 1): 2..5 again
    assert read_stream(run_dir)["step"].to_pylist() == list(range(6))
    resumed = _final_weights(run_dir)
    for name in whole:
        torch.testing.assert_close(resumed[name], whole[name], rtol=0, atol=0)
