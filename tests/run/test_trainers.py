"""`[training] trainer` (issue 28): the command runner, plugin runners, standalone SFT and TTT-Discover,
each run for real on CPU with the tiny model (or a tiny script), and their config checks."""

from __future__ import annotations

import json
import pickle
import sys
from pathlib import Path

import pytest
from helpers import TINY_RUN, wait_for, write_config

from retrain_ray.config import ConfigError, load_config
from retrain_ray.logs import RunObserver, read_stream
from retrain_ray.run.train import train_run
from retrain_ray.run.trainers.discover import ARCHIVE_FILE, SUMMARY_FILE
from retrain_ray.run.trainers.external import MissingPolicyError, TrainerCommandError

SCRIPT = """
import json, sys
from pathlib import Path
config = json.loads(Path(sys.argv[1]).read_text())
log_dir, adapter = Path(sys.argv[2]), Path(sys.argv[3])
assert config["log_dir"] == str(log_dir) and config["adapter_path"] == str(adapter)
assert config["max_steps"] == 3 and config["retrain_ray"]["training"]["max_steps"] == 3, config
print("training", config["model"], flush=True)
print("a warning on stderr", file=sys.stderr, flush=True)
with (log_dir / "metrics.jsonl").open("a") as out:
    for step in range(config["max_steps"]):
        out.write(json.dumps({"step": step, "loss": 1.0 / (step + 1), "mean_reward": 0.1 * step,
                              "my_metric": step * 2, "note": "not numeric", "trainer": "command"}) + "\\n")
    out.write("not json\\n")
if "--no-adapter" not in sys.argv:
    adapter.mkdir(parents=True, exist_ok=True)
    (adapter / "adapter_config.json").write_text("{}")
if "--fail" in sys.argv:
    print("boom: out of memory", file=sys.stderr)
    sys.exit(3)
"""


def _config(tmp_path: Path, name: str = "run", **sections):
    run_dir = tmp_path / name
    training = {"max_steps": 3, **sections.pop("training", {})}
    write_config(tmp_path / f"{name}.toml", base=TINY_RUN, logging={"log_dir": str(run_dir)}, training=training,
                 **sections)
    return load_config(tmp_path / f"{name}.toml"), run_dir


def _command(tmp_path: Path, *extra: str) -> dict[str, object]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    return {"trainer": "command",
            "trainer_command": f"{sys.executable} {script} {{config_path}} {{log_dir}} {{adapter_path}} {' '.join(extra)}"}


def _extras(row: dict) -> dict[str, float]:
    return dict(row["extras"])


# ---- config --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("training", "sections", "key", "message"), [
    ({"trainer": "nonsense"}, {}, "training.trainer", "not a known trainer"),
    ({"trainer": "command"}, {}, "training.trainer_command", "needs a command"),
    ({"trainer": "command", "trainer_command": "run {cfg_path}"}, {}, "training.trainer_command",
     r"unknown placeholder \{cfg_path\}"),
    ({"trainer": "command", "trainer_command": "run {"}, {}, "training.trainer_command", "does not parse"),
    ({"trainer_command": "python train.py"}, {}, "training.trainer_command", 'used only by trainer = "command"'),
    ({"trainer": "ttt_discover"}, {"environment": {"provider": "builtin", "id": "digit_chain"}},
     "environment.provider", "single-turn"),
])
def test_bad_trainer_settings_are_refused_at_load_time(tmp_path, training, sections, key, message):
    with pytest.raises(ConfigError, match=message) as info:
        _config(tmp_path, training=training, **sections)
    assert key in str(info.value)


def test_every_runner_loads_and_explain_names_it():
    from retrain_ray.cli.explain import describe_run

    for trainer, said in (("retrain", "RL loop"), ("sft", "standalone SFT"), ("ttt_discover", "TTT-Discover"),
                          ("my_pkg.runners:Runner", "plugin runner")):
        cfg = load_config(None, overrides={"training": {"trainer": trainer}})
        assert cfg.training.trainer == trainer and said in describe_run(cfg)["trainer"]


# ---- the command runner --------------------------------------------------------------------------
def test_the_command_runs_and_its_metrics_rows_reach_the_run_logs(tmp_path, capfd):
    cfg, run_dir = _config(tmp_path, training=_command(tmp_path),
                           backend={"adapter_path": str(tmp_path / "adapter dir")})
    outcome = train_run(cfg, run_name="cmd", run_dir=run_dir)
    assert outcome.status == "completed" and outcome.checkpoint_dir == tmp_path / "adapter dir"
    assert outcome.last_step == 2
    rows = read_stream(run_dir).to_pylist()
    assert [r["step"] for r in rows] == [0, 1, 2] and [r["loss"] for r in rows] == [1.0, 0.5, pytest.approx(1 / 3)]
    assert _extras(rows[2])["my_metric"] == 4.0 and all(r["run"] == "cmd" for r in rows)
    mirror = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in mirror] == [0, 1, 2] and "note" not in mirror[0]
    assert "training builtin:tiny" in (run_dir / "trainer" / "stdout.log").read_text()
    assert "a warning on stderr" in (run_dir / "trainer" / "stderr.log").read_text()
    assert "training builtin:tiny" in capfd.readouterr().out  # streamed to the console as well
    assert json.loads((run_dir / "trainer" / "retrain_config.json").read_text())["lr"] == cfg.training.lr


def test_a_failing_command_fails_the_run_with_its_exit_code_and_stderr(tmp_path):
    cfg, run_dir = _config(tmp_path, training=_command(tmp_path, "--fail"),
                           backend={"adapter_path": str(tmp_path / "adapter")})
    with pytest.raises(TrainerCommandError, match="exited with status 3") as info:
        train_run(cfg, run_name="cmd", run_dir=run_dir)
    assert info.value.returncode == 3 and "boom: out of memory" in str(info.value)
    copied = pickle.loads(pickle.dumps(info.value))  # a campaign trial's error travels through Ray and Tune
    assert str(copied) == str(info.value) and copied.returncode == 3
    assert [r["step"] for r in read_stream(run_dir).to_pylist()] == [0, 1, 2]  # what it logged is kept


def test_a_command_that_writes_no_adapter_fails_the_run(tmp_path):
    cfg, run_dir = _config(tmp_path, training=_command(tmp_path, "--no-adapter"),
                           backend={"adapter_path": str(tmp_path / "adapter")})
    with pytest.raises(MissingPolicyError, match="wrote no adapter at .*adapter"):
        train_run(cfg, run_name="cmd", run_dir=run_dir)


PLUGIN = '''
import json
from pathlib import Path


class Runner:
    def run(self, config):
        log_dir = Path(config.log_dir)
        with (log_dir / "metrics.jsonl").open("w") as out:
            for step in range(config.max_steps):
                out.write(json.dumps({"step": step, "loss": 0.5, "mean_reward": config.lr}) + "\\n")
        Path(config.adapter_path).mkdir(parents=True, exist_ok=True)
        return config.adapter_path


class Lazy:
    def run(self, config):
        return None
'''


def test_a_plugin_runner_class_runs_and_returns_its_adapter(tmp_path, monkeypatch):
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "my_runner.py").write_text(PLUGIN)
    for name in [m for m in sys.modules if m == "plugins" or m.startswith("plugins.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.chdir(tmp_path)
    cfg, run_dir = _config(tmp_path, training={"trainer": "my_runner:Runner"},
                           backend={"adapter_path": str(tmp_path / "adapter")})
    outcome = train_run(cfg, run_name="plug", run_dir=run_dir)
    assert outcome.checkpoint_dir == tmp_path / "adapter" and outcome.last_step == 2
    assert [r["mean_reward"] for r in read_stream(run_dir).to_pylist()] == [cfg.training.lr] * 3
    lazy, lazy_dir = _config(tmp_path, "lazy", training={"trainer": "my_runner.Lazy"})
    with pytest.raises(MissingPolicyError, match="returned None"):
        train_run(lazy, run_name="lazy", run_dir=lazy_dir)


# ---- standalone SFT ------------------------------------------------------------------------------
def test_the_sft_runner_trains_every_step_supervised_and_checkpoints(tmp_path):
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{n}+0=", "completion": str(n)[0]}) + "\n"
                            for n in range(100, 108)))
    cfg, run_dir = _config(tmp_path, training={"trainer": "sft", "max_steps": 4, "sft_data_path": str(data),
                                               "sft_batch_size": 4, "sft_warmup_steps": 0, "save_every": 2})
    outcome = train_run(cfg, run_name="sft", run_dir=run_dir)
    rows = read_stream(run_dir).to_pylist()
    assert [r["phase"] for r in rows] == ["sft"] * 4 and all(r["num_datums"] == 4 for r in rows)
    assert rows[-1]["loss"] < rows[0]["loss"]  # it learns the demonstrations
    assert outcome.checkpoint_dir is not None and (outcome.checkpoint_dir / "trainer_state.json").is_file()
    assert (run_dir / "checkpoints" / "checkpoint_step_2").is_dir()


def test_the_sft_runner_without_a_file_trains_on_the_task_answers(tmp_path):
    cfg, run_dir = _config(tmp_path, training={"trainer": "sft", "max_steps": 2, "sft_warmup_steps": 0})
    train_run(cfg, run_name="sft", run_dir=run_dir)
    assert [r["phase"] for r in read_stream(run_dir).to_pylist()] == ["sft", "sft"]


# ---- TTT-Discover --------------------------------------------------------------------------------
def test_ttt_discover_searches_one_problem_with_an_archive_and_entropic_advantages(tmp_path):
    cfg, run_dir = _config(tmp_path, training={"trainer": "ttt_discover", "max_steps": 4, "batch_size": 2,
                                               "group_size": 8, "sft_warmup_steps": 0, "save_every": 2},
                           algorithm={"algorithm_mode": "ttt_discover_entropic", "params": {"context_k": 2}},
                           reward={"type": "custom", "custom_module": "operator:lt"})
    outcome = train_run(cfg, run_name="ttt", run_dir=run_dir)
    rows = read_stream(run_dir).to_pylist()
    assert len(rows) == 4 and outcome.status == "completed"
    sizes = [_extras(r)["discover_archive_size"] for r in rows]
    assert sizes == [1 + 16 * (i + 1) for i in range(4)]  # the root + every completion so far
    assert all("discover_kl" in _extras(r) and "discover_beta" in _extras(r) for r in rows)
    assert _extras(rows[-1])["discover_best_reward"] == max(_extras(r)["discover_reward_max"] for r in rows)
    summary = json.loads((run_dir / SUMMARY_FILE).read_text())
    assert summary["archive_size"] == 65 and summary["best_reward"] == _extras(rows[-1])["discover_best_reward"]
    saved = json.loads((run_dir / "checkpoints" / "checkpoint_step_2" / ARCHIVE_FILE).read_text())
    assert len(saved["entries"]) == 33

    # resumed from its step-2 checkpoint, the run continues with the archive saved there
    again = train_run(cfg, run_name="ttt", run_dir=tmp_path / "again",
                      resume_from=run_dir / "checkpoints" / "checkpoint_step_2")
    assert again.last_step == 3
    resumed = read_stream(tmp_path / "again").to_pylist()
    assert [_extras(r)["discover_archive_size"] for r in resumed] == [49, 65]


def test_retrain_ray_train_reports_a_failing_command_without_a_traceback(tmp_path, capsys):
    from retrain_ray.cli.train import train_main

    _config(tmp_path, training=_command(tmp_path, "--fail"), backend={"adapter_path": str(tmp_path / "adapter")})
    assert train_main([str(tmp_path / "run.toml")]) == 1
    err = capsys.readouterr().err
    assert "run failed" in err and "exited with status 3" in err and "boom: out of memory" in err
    assert "Traceback" not in err


class _Stops(RunObserver):
    def on_step(self, row, **info):
        raise RuntimeError("the run was stopped")


def test_a_stopped_run_stops_everything_its_command_started(tmp_path):
    pids = tmp_path / "pids"
    # a literal brace is doubled, as in str.format
    command = f"sleep 60 & echo $! > {pids}; echo '{{{{\"step\": 0}}}}' > {{log_dir}}/metrics.jsonl; sleep 60"
    cfg, run_dir = _config(tmp_path, training={"trainer": "command", "trainer_command": command})
    with pytest.raises(RuntimeError, match="the run was stopped"):
        train_run(cfg, run_name="cmd", run_dir=run_dir, observers=[_Stops()])
    stat = Path(f"/proc/{int(pids.read_text())}/stat")

    def ended() -> bool:  # gone, or a zombie not yet reaped
        try:
            return stat.read_text().split(") ")[1].startswith("Z")
        except FileNotFoundError:
            return True

    wait_for(ended, timeout_s=10, what="the command's background child to end")
