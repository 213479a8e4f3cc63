"""`retrain-ray explain` through a subprocess, as a user runs it."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from helpers import GRPO, SHIPPED_REWARD, free_port, write_campaign
from hf_cache import ORIGINAL_MODEL, stub_original_model

from retrain_ray.config import RetrainConfig

ROOT = Path(__file__).resolve().parents[2]
# The example configs name the original's Hub model; explain checks that it is in the HF cache.
_HF_HOME = stub_original_model(Path(tempfile.mkdtemp(prefix="explain-hf-")))


def _explain(*args: str, hf_home: Path = _HF_HOME, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "retrain_ray.cli.explain", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "COLUMNS": "200", "HF_HUB_OFFLINE": "1",
                               "HF_HOME": str(hf_home)})


def test_uncached_hub_model_is_a_warning_after_the_whole_plan(tmp_path):
    out = _explain("configs/ablation.toml", hf_home=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "5 conditions x 3 seeds = 15 runs" in out.stdout and "maxrl+gtpo_sepa_s202" in out.stdout
    assert "estimated wall time: 8,000 s" in out.stdout
    text = " ".join(out.stdout.split())
    assert "warning (this machine): model.model:" in text
    assert f"huggingface-cli download {ORIGINAL_MODEL}" in text and f"hf download {ORIGINAL_MODEL}" in text
    assert str(tmp_path / "hub") in text and "Traceback" not in out.stderr
    strict = _explain("configs/ablation.toml", "--strict", hf_home=tmp_path)
    assert strict.returncode == 2 and "5 conditions x 3 seeds = 15 runs" in strict.stdout
    # two: the model is not cached, and the MATH data ([data] source defaults to "math") needs a download
    # while HF_HUB_OFFLINE is set (issue 34.6)
    assert "--strict: 2 warning(s) are errors" in strict.stderr
    assert f"huggingface-cli download {ORIGINAL_MODEL}" in " ".join(strict.stderr.split())
    assert 'data.source: [data] source = "math" downloads' in strict.stderr
    cached = _explain("configs/ablation.toml", "--strict")  # the model cached: only the data download is left
    assert cached.returncode == 2 and "--strict: 1 warning(s) are errors" in cached.stderr, cached.stderr
    assert 'data.source: [data] source = "math" downloads' in cached.stderr


def test_the_original_campaign_file_plans_without_its_model(tmp_path):
    path = ROOT / "configs/original-campaign.toml"  # all three conditions, the delight one included
    out = _explain(str(path), "--json", hf_home=tmp_path)
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["campaign"]["total_runs"] == 6 and info["campaign"]["capacity"]["estimated_wall_time_s"] == 3000.0
    warning, download = info["environment"]  # the uncached model, and the MATH data offline (issue 34.6)
    assert warning.startswith("model.model: ") and f"`huggingface-cli download {ORIGINAL_MODEL}`" in warning
    assert download.startswith('data.source: [data] source = "math" downloads')
    assert _explain(str(path), "--strict", hf_home=tmp_path).returncode == 2


def test_missing_data_file_and_silent_server_are_warnings_with_their_fix(tmp_path):
    port = free_port()
    path = write_campaign(tmp_path / "c.toml", base={}, backend={"devices": "cpu"}, campaign={"seeds": [1], "max_steps": 5},
                          data={"source": "file", "path": str(tmp_path / "train.jsonl")},
                          inference={"engine": "openai", "url": f"http://127.0.0.1:{port}"}, conditions=[GRPO])
    out = _explain(str(path), "--json")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    assert info["campaign"]["total_runs"] == 1
    data, server = info["environment"]
    assert data.startswith("data.path: ") and str(tmp_path / "train.jsonl") in data and "set [data] path" in data
    assert server.startswith(f"inference.url: the openai server at http://127.0.0.1:{port} does not answer")
    assert "set [inference] url" in server
    strict = _explain(str(path), "--strict")
    assert strict.returncode == 2 and "--strict: 2 warning(s) are errors" in strict.stderr


def test_an_invalid_condition_still_exits_2_without_a_plan(tmp_path):
    path = write_campaign(tmp_path / "c.toml", base={}, backend={"devices": "cpu"}, campaign={"seeds": [1]},
                          reward={"type": "no_such_plugin_module:make"})
    out = _explain(str(path), hf_home=tmp_path)
    assert out.returncode == 2 and "the runs could not start" in out.stderr and "Traceback" not in out.stderr
    assert "run matrix" not in out.stdout


def test_campaign_matrix_and_capacity_text():
    out = _explain("configs/ablation.toml")
    assert out.returncode == 0, out.stderr
    for label in ["grpo+none", "maxrl+none", "maxrl+gtpo", "maxrl+gtpo_hicra", "maxrl+gtpo_sepa"]:
        assert f"{label}_s42" in out.stdout
    assert "5 conditions x 3 seeds = 15 runs" in out.stdout
    # 15 runs of 200 steps at 10 s on 4 slots: one slot runs 4 of them (the old formula's 3000 * 10 / 4 = 7500
    # assumed the runs divide evenly)
    assert "estimated wall time: 8,000 s" in out.stdout and "uncalibrated" in out.stdout




def test_campaign_json_capacity_formulas(tmp_path):
    path = write_campaign(tmp_path / "campaign.toml", base={}, backend={"devices": "cpu"},
                          training={"batch_size": 4, "group_size": 8},
                          campaign={"seeds": [1, 2], "max_steps": 40, "parallel": True, "max_workers": 2}, conditions=[])
    out = _explain(str(path), "--json", "--median-step-time", "2")
    assert out.returncode == 0, out.stderr
    info = json.loads(out.stdout)
    camp = info["campaign"]
    assert camp["total_runs"] == 10 and camp["conditions"][0] == "grpo+none"
    assert camp["matrix"]["maxrl+gtpo_sepa"] == {"1": "maxrl+gtpo_sepa_s1", "2": "maxrl+gtpo_sepa_s2"}
    assert {k: camp["capacity"][k] for k in ("concurrency_per_step", "total_campaign_steps", "median_step_time_s",
                                             "effective_parallelism", "estimated_wall_time_s")} == {
        "concurrency_per_step": 32, "total_campaign_steps": 400, "median_step_time_s": 2.0,
        "effective_parallelism": 2, "estimated_wall_time_s": 400.0}
    assert info["run"]["resources_per_run"] == {"cpus": 1.0, "gpus": 0, "placement": "cpu"}


def test_campaign_lists_the_plugin_folder_it_ships(tmp_path):
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "shipped_reward.py").write_text(SHIPPED_REWARD.format(report=str(tmp_path / "r.txt")))
    (tmp_path / "notes.py").write_text("NOT_SHIPPED = 1\n")
    campaign = {"seeds": [1], "max_steps": 2}
    path = write_campaign(tmp_path / "c.toml", base={}, backend={"devices": "cpu"}, campaign=campaign,
                          reward={"type": "shipped_reward:make"}, algorithm=GRPO)
    text = _explain(str(path), cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    assert "plugins shipped to the trials: 1 file, " in text.stdout
    assert f"plugins  from {tmp_path / 'plugins'}  (1 file, " in text.stdout and "notes.py" not in text.stdout
    out = _explain(str(path), "--json", cwd=tmp_path)
    shipped = json.loads(out.stdout)["plugins_shipped"]
    size = (tmp_path / "plugins" / "shipped_reward.py").stat().st_size
    assert shipped["status"] == "shipped" and shipped["files"] == 1 and shipped["raw_bytes"] == size
    assert shipped["units"] == [{"name": "plugins", "source": str(tmp_path / "plugins"), "files": 1, "bytes": size}]
    none = write_campaign(tmp_path / "none.toml", base={}, backend={"devices": "cpu"}, campaign=campaign)
    assert "plugins shipped to the trials: none: no plugin named" in _explain(str(none), cwd=tmp_path).stdout
    assert json.loads(_explain(str(none), "--json", cwd=tmp_path).stdout)["plugins_shipped"] == {
        "status": "none", "reason": "no plugin named"}


def test_a_plugin_folder_over_the_limit_is_shown_refused_and_exits_2(tmp_path):
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "shipped_reward.py").write_text(SHIPPED_REWARD.format(report=str(tmp_path / "r.txt")))
    with open(tmp_path / "plugins" / "weights.bin", "wb") as sparse:
        sparse.truncate(100 * 2**20 + 1)
    path = write_campaign(tmp_path / "c.toml", base={}, backend={"devices": "cpu"}, campaign={"seeds": [1]},
                          reward={"type": "shipped_reward:make"}, algorithm=GRPO)
    out = _explain(str(path), "--json", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    shipped = json.loads(out.stdout)["plugins_shipped"]
    assert shipped["status"] == "refused" and f"[plugins] {tmp_path / 'plugins'}: 100.0 MiB" in shipped["error"]
    assert "the campaign would be refused: [plugins]" in out.stderr


def test_single_run_split_and_tinker():
    split = json.loads(_explain("configs/original-local-split.toml", "--json").stdout)["run"]
    assert split["resources_per_run"]["gpus"] == 2 and split["resources_per_run"]["placement"] == "split"
    assert split["datums_per_step"] == 32 and split["total_datums"] == 3200
    tinker = json.loads(_explain("configs/original-tinker.toml", "--json", "--max-steps", "10").stdout)["run"]
    assert tinker["capabilities"]["resume_runtime_dependent"] is True
    assert tinker["capabilities"]["checkpoint_resume_mode"] == "exact"
    assert tinker["resources_per_run"]["gpus"] == 0 and tinker["total_datums"] == 320


def test_bad_file_exits_2_without_traceback():
    out = _explain("tests/bad_configs/batch_size_zero.toml")
    assert out.returncode == 2
    assert "training.batch_size" in out.stderr and "Traceback" not in out.stderr
    missing = _explain("configs/does-not-exist.toml")
    assert missing.returncode == 2 and "Traceback" not in missing.stderr


def test_explain_reads_the_backend_registry_the_backends_use():
    import dataclasses

    from retrain_ray.backends.local.backend import LocalBackend
    from retrain_ray.cli.explain import capabilities

    flags = capabilities(RetrainConfig())
    assert flags == {**dataclasses.asdict(LocalBackend.capabilities), "source": "builtin"}
