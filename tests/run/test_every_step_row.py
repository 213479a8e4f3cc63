"""Every step leaves a row (issue 26, class 1; DESIGN.md decision 13).

A step whose groups all tie trains nothing and is still logged, with `trained = false`, its rewards,
tie statistics and timings, and null loss and train columns; with `batch_advantage_norm` the original
keeps tied groups for the batch norm and trains such a step (a zero-gradient AdamW step). The readers
(`results`, `summary`, `plot`, `status`) show a campaign that never earned reward as zeros, not NaN.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from helpers import GRPO, write_config

from retrain_ray.backends.types import TrainBatch
from retrain_ray.config import load_config
from retrain_ray.data.types import Example
from retrain_ray.engines.types import SampleResult
from retrain_ray.logs import read_stream
from retrain_ray.results.untrained import run_untrained_note
from retrain_ray.run.credit import CreditSettings, assign_credit
from retrain_ray.run.rollout import Group
from retrain_ray.run.train import train_run


def _group(rewards: list[float]) -> Group:
    samples = [SampleResult((5, 6), (-0.5, -1.5), "stop") for _ in rewards]
    return Group(Example("p", "r"), [1, 2], samples, ["t"] * len(rewards), list(rewards), [[0, 0]] * len(rewards))


def test_all_tied_groups_train_only_with_batch_advantage_norm():
    groups = [_group([1.0, 1.0]), _group([0.0, 0.0])]
    plain = assign_credit(groups, CreditSettings("grpo", "none"), 0.0, 1.0)
    assert plain.batch is None
    assert (plain.metrics["num_datums"], plain.metrics["tokens_per_step"], plain.metrics["reward_uniform_groups"]) \
        == (0.0, 0.0, 2.0)
    kept = assign_credit(groups, CreditSettings("grpo", "none", batch_advantage_norm=True), 0.0, 1.0)
    assert kept.batch is not None  # spec 1.5: tied groups are "kept for batch norm", and the step trains
    assert kept.batch.tokens_D == [[1, 2, 5, 6]] * 4
    assert kept.batch.logprobs_D == [[0.0, 0.0, -0.5, -1.5]] * 4
    assert kept.batch.advantages_D == [[0.0] * 4] * 4  # batch norm leaves zeros at zero (spec 2.8)
    m = kept.metrics
    assert (m["num_datums"], m["tokens_per_step"], m["batch_adv_count"]) == (4.0, 16.0, 0.0)
    assert m["rl/optimizer_nonzero_advantage_action_tokens"] == 0.0


def test_a_kept_step_without_action_tokens_is_one_exact_adamw_step(tiny_cache):
    """No action token: loss 0 and a zero gradient, yet AdamW steps: on a fresh optimizer the weights
    decay by exactly (1 - lr * weight_decay) and nothing else moves them."""
    from retrain_ray.backends.local import PolicySettings, build_shared_policy
    from retrain_ray.models import encode_prompt

    _engine, backend, tok = build_shared_policy("builtin:tiny", PolicySettings(finetune="full"), device="cpu",
                                                cache_dir=tiny_cache)
    prompt = encode_prompt(tok, "123")
    row = prompt + [5, 6, 7]
    batch = TrainBatch([row] * 2, [[0.0] * len(prompt) + [-1.0] * 3] * 2, [[0.0] * len(row)] * 2, [len(prompt)] * 2)
    before = {n: p.detach().clone() for n, p in backend.model.named_parameters() if p.requires_grad}
    result = backend.train_step(batch, lr=0.1, weight_decay=0.01)
    assert backend.version == 1
    assert (result.loss, result.metrics["grad_norm"], result.metrics["local_action_tokens"]) == (0.0, 0.0, 0.0)
    after = dict(backend.model.named_parameters())
    for name, old in before.items():
        assert torch.equal(after[name].detach(), old.mul(1 - 0.1 * 0.01)), name
    norm_before = math.sqrt(sum(float((p.double() ** 2).sum()) for p in before.values()))
    assert result.metrics["weight_norm_growth"] == pytest.approx(1 - 0.1 * 0.01, rel=1e-6)
    assert result.metrics["weight_norm"] == pytest.approx(norm_before * (1 - 0.1 * 0.01), rel=1e-5)


@pytest.fixture
def zero_reward(tmp_path, monkeypatch):
    """A reward that never pays: every group ties at 0."""
    (tmp_path / "zero_reward.py").write_text("def score(completion, reference):\n    return 0.0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return {"type": "custom", "custom_module": "zero_reward"}


@pytest.mark.parametrize("batch_norm", [False, True], ids=["untrained", "batch_norm_trains"])
def test_a_run_that_never_earns_reward_logs_one_row_per_step(tmp_path, zero_reward, batch_norm):
    run_dir = tmp_path / "run"
    cfg = load_config(write_config(
        tmp_path / "zero.toml", reward=zero_reward, algorithm=GRPO, logging={"log_dir": str(run_dir)},
        training={"batch_size": 2, "group_size": 2, "max_tokens": 4, "max_steps": 4, "save_every": 2,
                  "sft_warmup_steps": 1, "batch_advantage_norm": batch_norm, "weight_decay": 0.1}))
    outcome = train_run(cfg, run_name="zero", run_dir=run_dir)
    assert outcome.status == "completed" and outcome.metrics["step"] == 3
    rows = read_stream(run_dir).to_pylist()
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    sft, rl = rows[0], rows[1:]
    assert (sft["phase"], sft["trained"]) == ("sft", True) and sft["loss"] > 0  # a warm-start step trains
    for row in rl:
        assert (row["phase"], row["mean_reward"], row["correct_rate"]) == ("rl", 0.0, 0.0)
        assert (row["reward_uniform_groups"], row["reward_uniform_group_rate"]) == (2, 1.0)
        assert row["step_time_s"] > 0 and row["sample_time_s"] > 0 and row["bp_action"]
        assert row["trained"] is batch_norm
        if batch_norm:  # trained like the original: loss 0, zero gradient, the weights decayed
            assert (row["loss"], row["grad_norm"], row["staleness"]) == (0.0, 0.0, 0)
            assert row["weight_norm_growth"] < 1.0 and row["num_datums"] == 4
        else:  # nothing trained: the columns only an update makes are null, not 0
            assert row["loss"] is None and row["grad_norm"] is None and row["weight_norm"] is None
            assert row["staleness"] is None and row["optimizer/logical_batch_sha256"] is None
            assert (row["train_time_s"], row["num_datums"], row["tokens_per_step"]) == (0.0, 0, 0)
    generations = read_stream(run_dir, "generations", key=None).to_pylist()
    assert {g["step"] for g in generations} == {1, 2, 3}  # an untrained step's samples are logged too
    assert (run_dir / "checkpoints" / "final").is_dir()
    note = run_untrained_note(run_dir)  # the end summary's count
    assert note == (None if batch_norm else "3 of 4 steps trained nothing: every group tied")


# ---- the readers, on a campaign whose runs never earned reward -----------------------------------------

STEPS = 5


def _zero_row(step: int, condition: str) -> dict:
    return {"step": step, "wall_time": 1_700_000_000.0 + 2.0 * step, "condition": condition, "phase": "rl",
            "trained": False, "mean_reward": 0.0, "correct_rate": 0.0, "loss": None, "step_time_s": 0.4,
            "train_time_s": 0.0, "reward_uniform_group_rate": 1.0}


@pytest.fixture
def zero_campaign(tmp_path) -> Path:
    from retrain_ray.campaign.recorder import RecorderCore
    from retrain_ray.logs.manifest import Manifest

    directory = tmp_path / "never"
    directory.mkdir()
    runs = [{"run_name": f"{c}_s{s}", "condition": c, "seed": s, "max_steps": STEPS} for c in ("a", "b") for s in (1, 2)]
    manifest = Manifest.create(directory, {"name": "never", "conditions": ["a", "b"], "seeds": [1, 2],
                                           "max_steps": STEPS, "max_concurrent": 2}, runs)
    recorder = RecorderCore(directory)
    for run in runs:
        recorder.append(run["run_name"], "metrics", [_zero_row(t, run["condition"]) for t in range(STEPS)])
        manifest.update_run(run["run_name"], status="completed")
    recorder.close()
    return directory


def test_results_and_summary_show_the_zeros(zero_campaign, capsys):
    from retrain_ray.campaign import CampaignResults
    from retrain_ray.cli import main

    res = CampaignResults.from_dir(zero_campaign)
    df = res.get_dataframe()
    assert list(df["steps_logged"]) == [STEPS] * 4 and list(df["steps_trained"]) == [0] * 4
    assert list(df["last_mean_reward"]) == [0.0] * 4 and df["last_loss"].isna().all()
    summary = res.summary().set_index("condition")
    assert list(summary["mean_reward_mean"]) == [0.0, 0.0] and list(summary["correct_rate_mean"]) == [0.0, 0.0]
    assert summary["loss_mean"].isna().all()  # no update, no loss: NaN, never a made-up 0
    assert main(["results", str(zero_campaign), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [s["mean_reward_mean"] for s in out["summary"]] == [0.0, 0.0]


def test_the_campaign_summary_counts_the_steps_that_trained_nothing(zero_campaign, capsys):
    from retrain_ray.campaign import CampaignResults
    from retrain_ray.cli.campaign import _finish

    assert _finish(CampaignResults.from_dir(zero_campaign)) == 0
    lines = [x for x in capsys.readouterr().err.splitlines() if "trained nothing" in x]
    assert lines == [f"warning: {c}_s{s}: {STEPS} of {STEPS} steps trained nothing: every group tied"
                     for c in ("a", "b") for s in (1, 2)]


def test_plot_and_status_show_the_zeros(zero_campaign, capsys):
    pytest.importorskip("matplotlib")
    from retrain_ray.campaign import CampaignResults
    from retrain_ray.cli import main
    from retrain_ray.results.plots import seed_bands
    from retrain_ray.results.status import campaign_status

    bands = seed_bands(CampaignResults.from_dir(zero_campaign).history(metrics=("mean_reward",)), "mean_reward")
    assert len(bands) == 2 * STEPS and (bands["mean"] == 0.0).all() and (bands["n"] == 2).all()
    assert main(["plot", str(zero_campaign)]) == 0
    assert (zero_campaign / "plots" / "mean_reward.png").stat().st_size > 0
    assert main(["plot", str(zero_campaign), "--metric", "loss"]) == 2  # never trained: no loss to draw
    assert "none of the metrics ['loss'] was logged" in capsys.readouterr().err
    status = campaign_status(zero_campaign)
    assert {r["mean_reward"] for r in status["runs"]} == {0.0}
    assert status["matrix"]["a"] == {"1": f"{STEPS} ✓", "2": f"{STEPS} ✓"}


@pytest.mark.slow
def test_a_campaign_that_never_earns_reward_logs_every_step_and_shows_it(ray_4cpu_4gpu, tmp_path, capsys):
    """Through real Tune and the recorder: an untrained tiny model without a warm start on the
    first-digit task (a reward that almost never pays), 3 steps x 2 seeds: one row per step per run,
    `results` and `plot` show the rewards (zeros, not NaN)."""
    pytest.importorskip("matplotlib")
    from helpers import write_campaign

    from retrain_ray.campaign import Campaign
    from retrain_ray.cli import main

    toml = write_campaign(
        tmp_path / "never.toml", reward={"type": "match"}, algorithm=GRPO, logging={"log_dir": f"{tmp_path}/logs/x"},
        training={"batch_size": 2, "group_size": 2, "max_tokens": 4, "save_every": 0},
        campaign={"name": "never", "seeds": [1, 2], "max_steps": 3, "parallel": True, "max_workers": 2})
    results = Campaign.from_toml(toml, root=tmp_path / "campaigns").run(progress=False)
    cdir = tmp_path / "campaigns" / "never"
    for run in results:
        rows = read_stream(cdir / "runs" / run.run_name).to_pylist()
        assert [r["step"] for r in rows] == [0, 1, 2], run.run_name
        assert all(r["mean_reward"] is not None and r["trained"] is not None for r in rows)
    summary = results.summary()
    assert not summary["mean_reward_mean"].isna().any()
    assert main(["plot", str(cdir)]) == 0 and (cdir / "plots" / "mean_reward.png").is_file()
    assert main(["results", str(cdir), "--json"]) == 0
    out = capsys.readouterr().out
    assert [r["steps_logged"] for r in json.loads(out[out.index("{"):])["runs"]] == [3, 3]
