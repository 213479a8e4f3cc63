"""Training through a dotted-path plugin backend (issue 12, spec 1.6 / seed 002): the factory contract
of backends/plugins.py, with the test plugins of tests/fixtures/plugins/.

Real runs: the tiny CPU model trains through `retrain-ray train` with a plugin that wraps the local
backend, writes its rows and checkpoints, and resumes through it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers import install_test_plugins, write_config

from retrain_ray.checks.preflight import PreflightError, check_run, run_problems
from retrain_ray.cli import main as cli_main
from retrain_ray.config import load_config
from retrain_ray.logs import read_stream
from retrain_ray.run.build import build_policy

TOKEN_VARYING = {"advantage_mode": "grpo", "transform_mode": "gtpo"}


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    return install_test_plugins(tmp_path, monkeypatch)


def _toml(workdir: Path, backend: str, *, steps: int = 2, algorithm=TOKEN_VARYING, **backend_keys) -> Path:
    return write_config(
        workdir / "run.toml", backend={"backend": backend, "devices": "cpu", **backend_keys},
        reward={"type": "varied_reward.make"}, algorithm=algorithm,
        training={"seed": 3, "batch_size": 2, "group_size": 4, "max_tokens": 4, "max_steps": steps, "save_every": 1},
        logging={"log_dir": str(workdir / "logs" / "run")})


def _train(argv: list[str], capsys) -> tuple[int, str]:
    rc = cli_main(argv)
    out = capsys.readouterr()
    return rc, out.out + out.err


def test_a_plugin_backend_wrapping_the_local_one_trains_checkpoints_and_resumes(workdir, capsys):
    toml = _toml(workdir, "counting_backend:make_backend")
    rc, output = _train(["train", str(toml), "--quiet"], capsys)
    assert rc == 0, output
    plugin = sys.modules["plugins.counting_backend"]
    assert plugin.UPDATES == [8, 8]  # two updates of batch_size x group_size rows went through the plugin
    run_dir = workdir / "logs" / "run"
    rows = read_stream(run_dir, "metrics").to_pylist()
    assert [r["step"] for r in rows] == [0, 1]
    assert all(r["loss"] is not None and r["loss_is_placeholder"] is False for r in rows)  # bare float losses
    saved = sorted(run_dir.glob("checkpoints/*/counting_backend.json"))
    assert [json.loads(p.read_text())["updates"] for p in saved] == [1, 2]
    assert all(any(p.parent.glob("*.safetensors")) for p in saved)  # the wrapped backend's weights too

    rc, output = _train(["train", str(toml), "--quiet", "--max-steps", "3", "--resume", str(run_dir)], capsys)
    assert rc == 0, output
    assert plugin.UPDATES == [8, 8, 8]
    assert [r["step"] for r in read_stream(run_dir, "metrics").to_pylist()] == [0, 1, 2]
    newest = max(run_dir.glob("checkpoints/*/counting_backend.json"), key=lambda p: p.stat().st_mtime)
    assert json.loads(newest.read_text())["updates"] == 3  # the count was restored from the checkpoint


def test_a_factory_returning_a_whole_policy_trains(workdir):
    from retrain_ray.run.train import train_run

    cfg = load_config(_toml(workdir, "counting_backend.whole_policy", steps=1))
    outcome = train_run(cfg, run_name="whole", run_dir=workdir / "logs" / "whole")
    assert outcome.status == "completed"
    assert sys.modules["plugins.counting_backend"].UPDATES == [8]


def test_a_plugin_backend_that_declares_nothing_fails_preflight_for_a_token_varying_flow(workdir, capsys):
    toml = _toml(workdir, "counting_backend.undeclared")
    with pytest.raises(PreflightError, match="one advantage per sequence"):
        check_run(load_config(toml))
    rc, output = _train(["train", str(toml), "--quiet"], capsys)
    assert rc != 0 and "one advantage per sequence" in output and "gtpo" in output
    assert not (workdir / "logs" / "run" / "checkpoints").exists()
    check_run(load_config(_toml(workdir, "counting_backend.undeclared",
                                algorithm={"advantage_mode": "grpo", "transform_mode": "none"})))


def test_a_plugin_backend_that_does_not_import_fails_preflight_naming_key_and_path(workdir, capsys):
    toml = _toml(workdir, "broken_backend.make_backend")
    rc, output = _train(["train", str(toml), "--quiet"], capsys)
    assert rc != 0
    assert "[backend] backend='broken_backend.make_backend'" in output
    assert "retrain_ray_no_such_dependency" in output


@pytest.mark.parametrize(("factory", "expected"), [
    ("half_helper", "nor the original's TrainHelper (missing ['save_adapter', 'load_state'])"),
    ("alone", "nothing samples for it"),
    ("remote", "the factory raised AssertionError"),
])
def test_a_factory_that_returns_the_wrong_thing_is_named_with_its_key(workdir, factory, expected):
    cfg = load_config(_toml(workdir, f"counting_backend.{factory}",
                            algorithm={"advantage_mode": "grpo", "transform_mode": "none"}))
    with pytest.raises(ValueError) as info:
        build_policy(cfg)
    text = str(info.value)
    assert f"[backend] backend='counting_backend.{factory}'" in text and expected in text


def test_the_run_reports_the_registry_flags_not_the_wrapped_backends(workdir):
    """The wrapped local backend says checkpoint_resume_mode="exact" on its class; the plugin declares
    its own flags, and those are what the run's backend carries (as explain and preflight read them)."""
    from retrain_ray.backends.registry import capabilities_for
    from retrain_ray.cli.explain import capabilities

    cfg = load_config(_toml(workdir, "counting_backend.whole_policy", steps=1))
    policy = build_policy(cfg)
    flags, source = capabilities_for("counting_backend.whole_policy")
    assert policy.backend.capabilities == flags and source == "plugin/hook"
    assert flags.checkpoint_resume_mode == "adapter_only"  # the conservative default for what it left out
    assert capabilities(cfg)["checkpoint_resume_mode"] == "adapter_only"


@pytest.mark.parametrize(("backend", "devices", "options", "gpus", "mode"), [
    ("counting_backend.remote", "gpu:0", {}, 0, "cpu"),  # declares it holds no local GPU
    ("counting_backend.two_gpus", "cpu", {}, 2, "gpu"),  # declares 2 (whatever devices says), one process
    ("counting_backend.two_gpus", "cpu", {"gpus_per_run": 3}, 3, "gpu"),  # a hook of the options
    ("counting_backend.make_backend", "gpu:0,gpu:1", {}, 2, "gpu"),  # no hook: devices, never split actors
    ("local", "gpu:0,gpu:1", {}, 2, "split"),  # the built-in local backend splits sampler and trainer
])
def test_plugin_resources_place_a_run_alike_in_explain_and_the_campaign(workdir, backend, devices, options, gpus,
                                                                         mode):
    from retrain_ray.campaign.capacity.placement import decide_placement
    from retrain_ray.campaign.plan import build_plan
    from retrain_ray.cli.explain import resources_per_run
    from retrain_ray.config.load import dumps

    toml = _toml(workdir, backend, algorithm={"advantage_mode": "grpo", "transform_mode": "none"},
                 devices=devices, options=options)
    toml.write_text(toml.read_text() + "\n" + dumps({"campaign": {"seeds": [1]}}))
    cfg = load_config(toml)
    run = build_plan(cfg, root=workdir).runs[0]
    fake_node = [{"CPU": 4.0, "GPU": 4.0}]
    decided = decide_placement(run.devices, cpus_per_run=1.0, nodes=fake_node, cpu_fallback=False, can_scale=False,
                               in_process=run.in_process)
    assert not decided.problem
    assert (decided.placement.num_gpus, decided.placement.mode) == (gpus, mode)
    assert resources_per_run(cfg) == {"cpus": 1.0, "gpus": gpus, "placement": mode}
    if mode == "gpu":
        assert decided.placement.bundle_dicts == [{"CPU": 1.0, "GPU": float(gpus)}]  # all in the trial's process


def test_a_malformed_resources_hook_stops_the_campaign_plan_naming_it(workdir):
    from retrain_ray.campaign.plan import CampaignError, build_plan
    from retrain_ray.config.load import dumps

    toml = _toml(workdir, "counting_backend.bad_resources", algorithm={"advantage_mode": "grpo",
                                                                       "transform_mode": "none"})
    toml.write_text(toml.read_text() + "\n" + dumps({"campaign": {"seeds": [1]}}))
    with pytest.raises(CampaignError, match=r"counting_backend.bad_resources.*resources hook returned \{'gpu': 1\}"):
        build_plan(load_config(toml), root=workdir)


@pytest.mark.extended
def test_a_campaign_places_a_plugin_run_on_the_gpus_its_hook_declares(ray_4cpu_4gpu, workdir):
    """Real Tune on the session Ray (4 fake GPUs): the plugin's run holds the 2 GPUs its resources hook
    declares, both in its own trial process, and trains through the plugin (on the CPU: the GPUs are fake)."""
    from retrain_ray.campaign import Campaign
    from retrain_ray.config.load import dumps

    toml = _toml(workdir, "counting_backend.on_two_gpus")
    toml.write_text(toml.read_text() + "\n" + dumps({"campaign": {"name": "gpus", "seeds": [1], "max_steps": 2,
                                                                  "conditions": [TOKEN_VARYING]}}))
    Campaign.from_toml(toml, root=workdir / "campaigns").run(progress=False)
    manifest = json.loads((workdir / "campaigns" / "gpus" / "manifest.json").read_text())
    assert [r["status"] for r in manifest["runs"]] == ["completed"]
    (record,) = [json.loads(p.read_text()) for p in (workdir / "campaigns").rglob("plugin_gpus.json")]
    assert len(record["gpu_ids"]) == 2 and len(record["cuda_visible"].split(",")) == 2
    rows = [r for p in (workdir / "campaigns" / "gpus" / "runs").iterdir() for r in read_stream(p, "metrics").to_pylist()]
    assert [r["step"] for r in rows] == [0, 1]


def test_a_backend_plugin_written_for_the_original_trains_and_resumes(workdir):
    """`factory(config)` returning the original's TrainHelper: it samples, trains, saves and restores."""
    from retrain_ray.run.train import train_run

    scalar = {"advantage_mode": "grpo", "transform_mode": "none"}  # undeclared: one advantage per sequence
    cfg = load_config(_toml(workdir, "original_helper.make_helper", algorithm=scalar))
    run_dir = workdir / "logs" / "helper"
    assert train_run(cfg, run_name="helper", run_dir=run_dir).status == "completed"
    calls = sys.modules["plugins.original_helper"].CALLS
    assert calls == ["sample", "train_step", "save_adapter", "checkpoint:step_1", "sample", "train_step",
                     "save_adapter"]
    rows = read_stream(run_dir, "metrics").to_pylist()
    assert [r["step"] for r in rows] == [0, 1] and all(r["loss"] is not None for r in rows)
    state = json.loads(sorted(run_dir.glob("checkpoints/*/original_helper.json"))[-1].read_text())
    final = sorted(run_dir.glob("checkpoints/*/original_helper.json"))[-1].parent
    assert state == {"reference": "adapter", "version": 2} and any((final / "adapter").rglob("*.safetensors"))

    calls.clear()
    longer = cfg.replace_section("training", max_steps=3)
    assert train_run(longer, run_name="helper", run_dir=run_dir, resume_from=run_dir).status == "completed"
    assert calls == ["load_state", "checkpoint:step_2", "sample", "train_step", "save_adapter"]
    assert [r["step"] for r in read_stream(run_dir, "metrics").to_pylist()] == [0, 1, 2]


def test_the_sft_warm_start_of_a_train_helper_without_sft_train_step_calls_train_step_with_zero_logprobs(workdir):
    """Spec 1.4 / 1.6: a warm-start step of a TrainHelper lacking `sft_train_step` is one `train_step(tokens,
    all-zero logprobs, advantages, lr, wd)` (prompt advantages 0, target 1) with no `checkpoint` before it;
    the RL steps after it sync (`checkpoint`), sample and train as usual."""
    from retrain_ray.run.train import train_run

    scalar = {"advantage_mode": "grpo", "transform_mode": "none"}
    toml = write_config(
        workdir / "sft.toml", backend={"backend": "original_helper.make_helper", "devices": "cpu"},
        reward={"type": "varied_reward.make"}, algorithm=scalar,
        training={"seed": 3, "batch_size": 2, "group_size": 4, "max_tokens": 4, "max_steps": 4, "save_every": 0,
                  "sft_warmup_steps": 2, "sft_batch_size": 3, "sft_lr": 0.5, "lr": 0.25, "weight_decay": 0.125},
        logging={"log_dir": str(workdir / "logs" / "sft")})
    cfg = load_config(toml)
    module = sys.modules.get("plugins.original_helper")
    if module is not None:
        module.CALLS.clear()
        module.TRAIN_ARGS.clear()
    run_dir = workdir / "logs" / "sft"
    assert train_run(cfg, run_name="sft", run_dir=run_dir).status == "completed"
    module = sys.modules["plugins.original_helper"]
    assert module.CALLS == ["train_step", "train_step", "checkpoint:step_2", "sample", "train_step",
                            "checkpoint:step_3", "sample", "train_step", "save_adapter"]
    sft, rl = module.TRAIN_ARGS[:2], module.TRAIN_ARGS[2:]
    for call in sft:
        assert (call["lr"], call["weight_decay"]) == (0.5, 0.125) and len(call["tokens"]) == 3
        assert all(lp == 0.0 for row in call["logprobs"] for lp in row)
        for tokens, advs in zip(call["tokens"], call["advantages"], strict=True):
            target = next(i for i, a in enumerate(advs) if a != 0.0)
            assert 0 < target < len(tokens) and advs == [0.0] * target + [1.0] * (len(tokens) - target)
    for call in rl:
        assert (call["lr"], call["weight_decay"]) == (0.25, 0.125)
        assert all(any(lp != 0.0 for lp in row) for row in call["logprobs"])  # sampled tokens' logprobs
    rows = read_stream(run_dir, "metrics").to_pylist()
    assert [(r["step"], r["phase"]) for r in rows] == [(0, "sft"), (1, "sft"), (2, "rl"), (3, "rl")]
    # the targets were trained on: an RL loss with old logprobs 0 is -mean(p(target token)) < 0
    assert all(r["loss"] is not None and -1.0 < r["loss"] < 0.0 for r in rows[:2]), [r["loss"] for r in rows]


def test_an_original_helper_declaring_entropies_trains_on_sample_with_entropy(workdir):
    """Spec 1.5: with shannon_entropy the helper's `sample_with_entropy` triples are used; preflight allows it
    only when the backend factory declares entropies (the engine hook), and names that hook otherwise."""
    from retrain_ray.run.train import train_run

    entropy = {"advantage_mode": "grpo", "transform_mode": "gtpo", "uncertainty_kind": "shannon_entropy"}
    undeclared = load_config(_toml(workdir, "original_helper.make_helper", algorithm=entropy))
    problems = " ".join(run_problems(undeclared, check_model=False))
    assert "plugin backend 'original_helper.make_helper' does not declare them" in problems
    assert "retrain_engine_capabilities / RETRAIN_ENGINE_CAPABILITIES" in problems

    cfg = load_config(_toml(workdir, "original_helper.make_entropy_helper", algorithm=entropy, steps=2))
    check_run(cfg)
    module = sys.modules["plugins.original_helper"]
    module.CALLS.clear()
    run_dir = workdir / "logs" / "run"
    assert train_run(cfg, run_name="entropy", run_dir=run_dir).status == "completed"
    assert module.CALLS.count("sample_with_entropy") == 2 and "sample" not in module.CALLS
    rows = read_stream(run_dir, "metrics").to_pylist()
    assert [r["step"] for r in rows] == [0, 1]
    for row in rows:  # every token's uncertainty is the helper's entropy
        assert row["exec_surprisal_mean"] == pytest.approx(module.ENTROPY)
        assert row["exec_surprisal_var"] == pytest.approx(0.0, abs=1e-12)
