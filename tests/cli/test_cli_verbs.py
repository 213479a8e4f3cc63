"""The original's inspection verbs (spec 11) on real files: one short LoRA run made by `retrain-ray train`
is shared by the module (about 25 s); each verb runs through `retrain_ray.cli.main(argv)`."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from retrain_ray.cli import main
from retrain_ray.config import load_config

ROOT = Path(__file__).resolve().parents[2]
SMOKE = str(ROOT / "configs" / "smoke.toml")


def cli_json(capsys, *argv: str) -> tuple[int, dict]:
    capsys.readouterr()
    code = main([*argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("verbs") / "run"
    code = main(["train", SMOKE, "--log-dir", str(run_dir), "--max-steps", "4", "--sft-warmup-steps", "2",
                 "--save-every", "2", "--finetune", "lora", "--lora-rank", "8", "--batch-size", "2",
                 "--group-size", "4", "--max-tokens", "4", "--quiet", "--squeeze.compress_to=4"])
    assert code == 0
    return run_dir


def test_backends_json_reports_the_backends_own_capabilities_and_option_schemas(capsys):
    from retrain_ray.backends.local.backend import LocalBackend
    from retrain_ray.backends.tinker.backend import TINKER_CAPABILITIES

    code, catalog = cli_json(capsys, "backends")
    assert code == 0
    local, tinker = catalog["backends"]["local"], catalog["backends"]["tinker"]
    assert local["capabilities"] == LocalBackend.capabilities.__dict__
    assert tinker["capabilities"]["resume_runtime_dependent"] is TINKER_CAPABILITIES.resume_runtime_dependent is True
    assert local["option_schema"]["gradient_checkpointing"] == {"type": "str", "default": "auto"}
    assert tinker["option_schema"]["max_attempts"]["type"] == "int"
    for dep in local["dependencies"] + tinker["dependencies"]:
        assert dep["available"] == (importlib.util.find_spec(dep["module"]) is not None)
    plugin = catalog["plugin"]
    assert plugin["default_capabilities"]["preserves_token_advantages"] is False
    assert "retrain_backend_capabilities" in plugin["hooks"]["capabilities"]
    assert "RETRAIN_BACKEND_OPTION_SCHEMA" in plugin["hooks"]["option_schema"]
    assert "retrain_backend_resources" in plugin["hooks"]["resources"]
    assert plugin["factory"].startswith("factory(config, context) -> Policy(engine, backend, tokenizer)")
    assert "prime_rl" not in catalog["not_shipped"]
    prime = catalog["backends"]["prime_rl"]
    assert prime["available"] is True  # msgspec and pyzmq: the dev extra installs them
    assert all(dep["available"] for dep in prime["dependencies"])
    assert prime["capabilities"]["reports_sync_loss"] is False
    assert prime["capabilities"]["preserves_token_advantages"] is False
    assert prime["option_schema"]["transport"] == {"type": "str", "default": "filesystem"}
    assert prime["option_schema"]["strict_advantages"] == {"type": "bool", "default": True}


def test_init_writes_loadable_templates_and_never_overwrites(tmp_path, capsys):
    for template in ("default", "quickstart", "experiment", "campaign"):
        path = tmp_path / f"{template}.toml"
        assert main(["init", "--template", template, "--output", str(path)]) == 0
        cfg = load_config(path)
        assert (cfg.campaign is not None) == (template == "campaign")
    before = (tmp_path / "default.toml").read_text()
    assert main(["init", "--template", "campaign", "--output", str(tmp_path / "default.toml")]) == 2
    assert "already exists" in capsys.readouterr().err
    assert (tmp_path / "default.toml").read_text() == before


def test_plugins_lists_discovered_modules_and_checks_the_paths_a_config_names(tmp_path, capsys):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "myrewards.py").write_text("def score(response, reference):\n    return float(response == reference)\n")
    good = tmp_path / "good.toml"
    good.write_text('[reward]\ntype = "myrewards.score"\n')
    code, report = cli_json(capsys, "plugins", str(good))
    assert code == 0
    assert [m["module"] for m in report["discovered"]] == ["myrewards"]
    assert report["references"] == {"reward.type": {"path": "myrewards.score", "error": ""}}
    assert "maxrl" in report["builtin"]["advantage_mode"]["names"]
    assert report["factories"]["inference_engine"].startswith("factory(config, context) -> a sampling engine")
    bad = tmp_path / "bad.toml"
    bad.write_text('[reward]\ntype = "myrewards.nope"\n')
    code, report = cli_json(capsys, "plugins", str(bad))
    assert code == 1
    assert "no attribute 'nope'" in report["references"]["reward.type"]["error"]


def test_doctor_probes_imports_and_reports_an_unreachable_cluster(capsys):
    code, report = cli_json(capsys, "doctor", "--address", "")
    assert code == 0 and report["ok"]
    assert report["required"]["torch"]["ok"] and report["required"]["ray"]["version"].startswith("2.60")
    assert report["optional"]["tinker"]["ok"] == (importlib.util.find_spec("tinker") is not None)
    assert report["backends"]["local"]["capabilities"]["preserves_token_advantages"] is True
    code, report = cli_json(capsys, "doctor", "--address", "127.0.0.1:9", "--timeout", "3")
    assert code == 1 and not report["ray_cluster"]["ok"] and report["ray_cluster"]["error"]


def test_trace_shows_the_probe_and_every_issue(tmp_path, capsys):
    code, report = cli_json(capsys, "trace", SMOKE, "--transform-mode", "gtpo")
    assert code == 0 and report["issues"] == []
    assert report["flow"]["token_varying"] is True
    from retrain_ray.checks.probe import PROBE_GROUPS

    for probe, group in zip(report["probes"], PROBE_GROUPS, strict=True):
        assert [len(r) for r in probe["token_advantages"]] == [len(r) for r in group["logprobs"]]
        assert probe["max_spread"] > 0  # gtpo weighs tokens by surprisal
    code, report = cli_json(capsys, "trace", SMOKE, "--reward-type", "nosuchmod.score")
    assert code == 1
    assert any("nosuchmod" in issue for issue in report["issues"])
    assert len(report["probes"]) == 2  # the probe still runs and is shown


def test_resume_check_on_a_finished_a_resumable_and_a_damaged_run(lora_run, tmp_path, capsys):
    code, report = cli_json(capsys, "resume-check", str(lora_run))
    assert code == 0 and report["complete"] and report["resumable"]
    assert report["payload"] == "LoRA adapter" and report["max_steps"] == 4

    partial = tmp_path / "partial"
    shutil.copytree(lora_run, partial)
    shutil.rmtree(partial / "checkpoints" / "final")
    code, report = cli_json(capsys, "resume-check", str(partial))
    assert code == 0 and report["resumable"] and not report["complete"]
    assert report["next_step"] == 2 and report["checkpoint"].endswith("checkpoint_step_2")

    adapter = partial / "checkpoints" / "checkpoint_step_2" / "adapter" / "adapter_model.safetensors"
    adapter.write_bytes(adapter.read_bytes()[:-8])
    code, report = cli_json(capsys, "resume-check", str(partial))
    assert code == 1 and not report["resumable"]
    assert "checksum" in report["checkpoints"][0]["problem"]
    assert "no complete checkpoint" in report["problems"][0]


def test_diff_of_two_runs_reads_their_logs(lora_run, tmp_path, capsys):
    from retrain_ray.results.campaign_results import read_history

    other = tmp_path / "other"
    shutil.copytree(lora_run, other)
    code, result = cli_json(capsys, "diff", str(lora_run), str(other))
    assert code == 0
    hist = read_history(lora_run)
    assert len(hist) >= 2 and result["a"]["steps"] == hist["step"].max() + 1
    assert result["a"]["final"]["loss"] == pytest.approx(float(hist["loss"].iloc[-1]))
    assert result["a"]["wall_time_s"] == pytest.approx(float(hist["step_time_s"].sum()))
    assert result["delta"]["final"]["loss"] == 0.0
    assert main(["diff", str(lora_run), str(tmp_path / "missing")]) == 2
    assert "holds no metrics" in capsys.readouterr().err


def test_squeeze_of_a_real_run_writes_an_adapter_peft_loads(lora_run, capsys):
    from peft import PeftModel

    from retrain_ray.models.loading import load_model_and_tokenizer

    after_train = json.loads((lora_run / "squeeze" / "squeeze.json").read_text())  # [squeeze] in the run's config
    assert after_train["compressed_rank"] == 4 and (lora_run / "squeeze" / "adapter_r4").is_dir()
    code, report = cli_json(capsys, "squeeze", str(lora_run), "--compress-to", "2")
    assert code == 0
    assert report["adapter"].endswith("checkpoints/final/adapter") and report["source_rank"] == 8
    assert report["target_ranks"] == [1, 2, 4, 8] and report["mean_retention"]["8"] == pytest.approx(1.0)
    assert json.loads((lora_run / "squeeze" / "squeeze.json").read_text())["compressed_rank"] == 2
    base, _ = load_model_and_tokenizer("builtin:tiny-h256-l2", device="cpu")
    model = PeftModel.from_pretrained(base, str(lora_run / "squeeze" / "adapter_r2"))
    ranks = {m.r["default"] for m in model.modules() if hasattr(m, "lora_A") and "default" in m.r}
    assert ranks == {2}


def test_train_on_prime_rl_reports_its_capabilities_and_trains_three_steps(tmp_path, capsys):
    """`retrain-ray train` on the prime_rl backend against its local stand-in (PRIME-RL needs CUDA); the
    start-up line is the backend's capability metadata (seed 002), and --quiet drops it."""
    from helpers import GRPO, TINY_RUN, write_config

    from retrain_ray.logs import read_stream

    def config(name: str) -> Path:
        return write_config(
            tmp_path / f"{name}.toml", base=TINY_RUN, algorithm=GRPO,
            backend={"backend": "prime_rl", "adapter_path": str(tmp_path / name / "prime"),
                     "options": {"standin": True, "sync_wait_s": 120.0, "sync_poll_s": 0.05}},
            training={"max_steps": 3, "sft_warmup_steps": 0, "save_every": 0},
            logging={"log_dir": str(tmp_path / name / "logs")})

    capsys.readouterr()
    assert main(["train", str(config("loud"))]) == 0
    err = capsys.readouterr().err
    assert ("backend prime_rl (builtin): reports_sync_loss=false preserves_token_advantages=false "
            "supports_checkpoint_resume=true resume_runtime_dependent=true checkpoint_resume_mode=adapter_only") in err
    rows = read_stream(tmp_path / "loud" / "logs", "metrics").to_pylist()
    assert [r["step"] for r in rows] == [0, 1, 2] and all(r["loss_is_placeholder"] for r in rows)
    prime = tmp_path / "loud" / "prime"
    assert (prime / "rollouts" / "step_2" / "train_rollouts.bin").is_file()  # the third batch went out
    assert (prime / "broadcasts" / "step_2" / "STABLE").is_file()  # the run synced the second update
    assert main(["train", str(config("quiet")), "--quiet"]) == 0
    assert "reports_sync_loss" not in capsys.readouterr().err


def test_status_views_and_top_filter_campaigns_as_the_original(tmp_path, capsys):
    import os
    import time

    from retrain_ray.logs.manifest import Manifest

    def campaign(name: str, run_status: str, age_s: float = 0.0) -> None:
        cdir = tmp_path / name
        cdir.mkdir()
        manifest = Manifest.create(cdir, {"name": name, "conditions": ["grpo+none"], "seeds": [1]},
                                   [{"run_name": "grpo+none_s1", "condition": "grpo+none", "seed": 1, "max_steps": 4}])
        manifest.update_run("grpo+none_s1", status=run_status)
        old = time.time() - age_s
        for written in cdir.iterdir():  # the manifest and its event log: a campaign idles since its last write
            os.utime(written, (old, old))

    campaign("live", "running")
    campaign("recent", "completed", age_s=3600)
    campaign("old", "completed", age_s=3 * 24 * 3600)

    def names(*argv: str) -> list[str]:
        code, out = cli_json(capsys, "status", str(tmp_path), *argv)
        assert code == 0
        return sorted(c["campaign"] for c in out["campaigns"])

    assert names() == ["live", "recent"]  # idle for more than 24 h and not running: hidden
    assert names("--all") == ["live", "old", "recent"]
    assert names("--active") == ["live"]
    capsys.readouterr()
    assert main(["status", str(tmp_path), "--active"]) == 0
    out = capsys.readouterr().out
    assert "live" in out and "recent" not in out and "2 campaign(s) hidden" in out
    assert main(["top", str(tmp_path), "--count", "1"]) == 0  # status --watch --active, one frame
    out = capsys.readouterr().out
    assert "live" in out and "recent" not in out and "old" not in out


def test_no_argument_runs_retrain_toml_of_the_current_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main([]) == 0
    assert "retrain-ray init" in capsys.readouterr().out  # no file: usage and the hint
    (tmp_path / "retrain.toml").write_text("[training]\nbatch_size = 0\n")
    with pytest.raises(SystemExit) as exit_:  # the file was loaded, and refused
        main([])
    assert exit_.value.code == 2
    assert "training.batch_size" in capsys.readouterr().err
