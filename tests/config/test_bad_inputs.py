"""A hostile-user corpus of malformed files, each with its expected outcome (issue 15).

Every case builds its files in a temporary directory, calls the CLI's `main()` in-process and checks:
a clear error that names the offending file (exit code non-zero, no traceback), or success with a
warning naming the file where the damage can be skipped. Files already written stay as they were.
Beyond the config corpus of tests/bad_configs: config paths, data files, checkpoints, logs,
manifests and custom rewards. Only the rewards and data cases start a (tiny, CPU) model.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import TINY_CPU, write_campaign, write_config

from retrain_ray.cli import main as cli_main

MATCH = {"type": "match"}
GOOD_ROWS = [{"prompt": f"What is {i}+1?", "reference": str(i + 1)} for i in range(4)]


@dataclass(frozen=True)
class Case:
    build: Callable[[Path], list[str]]  # writes files under the dir, returns the CLI argv
    names: str  # the file name the message must contain ("" = none required)
    outcome: str = "error"  # "error": rc != 0; "ok": rc == 0 (a warning may name the file)
    env: tuple[str, str] = ()  # (variable, a path under the test's dir) set while the case runs


def _sections(log_dir: Path, *, data: dict = TINY_CPU["data"], reward: dict = MATCH, steps: int = 1) -> dict:
    return {"base": {**TINY_CPU, "data": data}, "reward": reward, "logging": {"log_dir": str(log_dir)},
            "training": {"batch_size": 2, "group_size": 2, "max_tokens": 4, "max_steps": steps, "save_every": 1}}


def _toml(tmp: Path, *, name: str = "run.toml", **sections) -> Path:
    return write_config(tmp / name, **_sections(tmp / "logs" / "run", **sections))


def _data_case(filename: str, write: Callable[[Path], None], *flags: str, **data_keys: object) -> Callable[[Path], list[str]]:
    def build(tmp: Path) -> list[str]:
        target = tmp / filename
        write(target)
        return ["train", str(_toml(tmp, data={"source": "file", "path": str(target), **data_keys})), "--quiet", *flags]
    return build


def _with_eval(*eval_rows: object) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        _jsonl(*GOOD_ROWS)(path)
        _jsonl(GOOD_ROWS[0], *eval_rows)(path.with_name("e.jsonl"))
    return write


def _link(target: str) -> Callable[[Path], None]:
    return lambda path: path.symlink_to(target)


def _loop(path: Path) -> None:
    path.symlink_to(path.with_name("other"))
    path.with_name("other").symlink_to(path)


def _fifo(path: Path) -> None:
    os.mkfifo(path)


def _log_dir_case(log_dir: str) -> Callable[[Path], list[str]]:
    def build(tmp: Path) -> list[str]:
        (tmp / "taken").write_text("a file, not a directory\n")
        return ["train", str(write_config(tmp / "run.toml", **_sections(tmp / log_dir))), "--quiet"]
    return build


def _file_case(content: bytes, name: str = "x.toml", first: tuple[str, ...] = ()) -> Callable[[Path], list[str]]:
    def build(tmp: Path) -> list[str]:
        (tmp / name).write_bytes(content)
        return [*first, str(tmp / name)]
    return build


def _special_config(make: Callable[[Path], None], command: str = "train") -> Callable[[Path], list[str]]:
    def build(tmp: Path) -> list[str]:
        make(tmp / "c.toml")
        return [command, str(tmp / "c.toml")] if command else [str(tmp / "c.toml")]
    return build


def _jsonl(*rows: object, raw: bytes = b"") -> Callable[[Path], None]:
    def write(path: Path) -> None:
        path.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in rows) + raw)
    return write


def _bytes(data: bytes) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(data)


def _parquet(table: pa.Table, cut: int = 0) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        pq.write_table(table, path)
        if cut:
            path.write_bytes(path.read_bytes()[:-cut])
    return write


def _config_case(content: bytes | None, name: str = "bad.toml", command: str = "train") -> Callable[[Path], list[str]]:
    def build(tmp: Path) -> list[str]:
        path = tmp / name
        if content is None:
            path.mkdir()
        else:
            path.write_bytes(content)
        return [command, str(path)]
    return build


def _diverging_case(tmp: Path) -> list[str]:
    sections = _sections(tmp / "logs" / "run", reward={"type": "custom", "custom_module": "operator:lt"})
    sections["training"] |= {"group_size": 16, "lr": 1e6, "stop_on_divergence": True}
    return ["train", str(write_config(tmp / "run.toml", **sections)), "--quiet"]


def _reward_case(body: str, **reward: object) -> Callable[[Path], list[str]]:
    def build(tmp: Path) -> list[str]:
        (tmp / "hostile_reward.py").write_text(body)
        return ["train", str(_toml(tmp, reward={"type": "custom", "custom_module": "hostile_reward", **reward})),
                "--quiet"]
    return build


# ---- checkpoints: a real 2-step run's directory, then damaged -----------------------------------
@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("finished")
    assert cli_main(["train", str(_toml(tmp, steps=2)), "--quiet"]) == 0
    return tmp / "logs" / "run"


def _damaged_run(damage: Callable[[Path], None], resume_target: str = "run") -> Callable[[Path, Path], list[str]]:
    def build(tmp: Path, finished: Path) -> list[str]:
        run = tmp / "logs" / "run"
        shutil.copytree(finished, run)
        damage(run)
        if not resume_target:
            return ["train", str(_toml(tmp, steps=3)), "--quiet"]
        target = run if resume_target == "run" else run / resume_target
        return ["train", str(_toml(tmp, steps=3)), "--quiet", "--resume", str(target)]
    return build


def _every_checkpoint(fn: Callable[[Path], None]) -> Callable[[Path], None]:
    def damage(run: Path) -> None:
        for ckpt in (run / "checkpoints").iterdir():
            fn(ckpt)
    return damage


def _killed_first_save(run: Path) -> None:
    """A kill during the first save: rows logged, the checkpoint still in its temporary directory."""
    checkpoints = run / "checkpoints"
    first = min(checkpoints.iterdir())
    for ckpt in list(checkpoints.iterdir()):
        if ckpt != first:
            shutil.rmtree(ckpt)
    (first / "CHECKSUMS.json").unlink()
    first.rename(checkpoints / ".tmp-checkpoint_step_0-4242")


def _flip_weights(ckpt: Path) -> None:
    weights = next(ckpt.glob("*.safetensors"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))


# ---- campaign directories: manifest and logs ----------------------------------------------------
def _campaign_dir(tmp: Path, manifest: bytes | None = None, runs: dict[str, bytes] | None = None) -> Path:
    cdir = tmp / "camp"
    cdir.mkdir()
    good = {"name": "camp", "status": "done", "conditions": ["grpo+none"], "seeds": [1], "max_steps": 2,
            "runs": [{"run_name": "grpo+none_s1", "condition": "grpo+none", "seed": 1, "status": "completed",
                      "attempts": 1, "result": {}, "error": "", "run_dir": str(cdir / "runs" / "grpo+none_s1"),
                      "max_steps": 2}]}
    (cdir / "manifest.json").write_bytes(json.dumps(good).encode() if manifest is None else manifest)
    for name, data in (runs or {}).items():
        run_dir = cdir / "runs" / "grpo+none_s1"
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / name).write_bytes(data)
    return cdir


def _arrow_stream_bytes(rows: int = 2) -> bytes:
    table = pa.table({"step": list(range(rows)), "mean_reward": [0.5] * rows, "phase": ["rl"] * rows})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        for batch in table.to_batches(max_chunksize=1):
            writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _campaign_case(command: str, manifest: bytes | None = None, runs: dict[str, bytes] | None = None):
    return lambda tmp: [command, str(_campaign_dir(tmp, manifest, runs))]


HUGE = "9" * (2 * 1024 * 1024)
LONG_ROW = {"prompt": "x" * 3000 + " What is 1+1?", "reference": "2"}
CASES: dict[str, Case] = {
    # config paths and TOML files
    "config_is_a_directory": Case(_config_case(None, "conf.toml"), "conf.toml"),
    "config_empty": Case(_config_case(b""), "bad.toml"),
    "config_only_comments": Case(_config_case(b"# nothing here\n\n"), "bad.toml"),
    "config_binary": Case(_config_case(bytes(range(256)) * 4), "bad.toml"),
    "config_invalid_utf8": Case(_config_case(b'[model]\nmodel = "caf\xe9"\n'), "bad.toml"),
    "config_utf16": Case(_config_case('[model]\nmodel = "x"\n'.encode("utf-16")), "bad.toml"),
    "config_syntax": Case(_config_case(b"[model\nmodel = 1\n"), "bad.toml"),
    "config_json": Case(_config_case(b'{"model": {"model": "x"}}'), "bad.toml"),
    "config_missing": Case(lambda tmp: ["train", str(tmp / "nope.toml")], "nope.toml"),
    "campaign_config_is_a_directory": Case(_config_case(None, "camp.toml", "campaign"), "camp.toml"),
    "campaign_config_binary": Case(_config_case(b"\x00\xff" * 64, "camp.toml", "campaign"), "camp.toml"),
    "explain_config_invalid_utf8": Case(_config_case(b"[training]\nlr = \xff\n", "x.toml", "explain"), "x.toml"),
    # data files
    "data_missing_prompt_column": Case(_data_case("d.jsonl", _jsonl({"question": "q", "reference": "1"})), "d.jsonl"),
    "data_missing_reference_column": Case(_data_case("d.jsonl", _jsonl({"prompt": "q"})), "d.jsonl"),
    "data_parquet_missing_column": Case(_data_case("d.parquet", _parquet(pa.table({"q": ["a"]}))), "d.parquet"),
    "data_prompt_is_a_list": Case(_data_case("d.jsonl", _jsonl({"prompt": ["a"], "reference": "1"})), "d.jsonl"),
    "data_prompt_is_an_object": Case(_data_case("d.jsonl", _jsonl({"prompt": {"a": 1}, "reference": "1"})), "d.jsonl"),
    "data_prompt_is_a_number": Case(_data_case("d.jsonl", _jsonl({"prompt": 12, "reference": "1"})), "d.jsonl"),
    "data_reference_null": Case(_data_case("d.jsonl", _jsonl(*GOOD_ROWS, {"prompt": "q", "reference": None})), "d.jsonl"),
    "data_empty_prompt": Case(_data_case("d.jsonl", _jsonl(*GOOD_ROWS, {"prompt": "", "reference": "1"})), "d.jsonl"),
    "data_blank_prompt": Case(_data_case("d.jsonl", _jsonl({"prompt": "  \n ", "reference": "1"})), "d.jsonl"),
    "data_empty_object_row": Case(_data_case("d.jsonl", _jsonl(*GOOD_ROWS, {})), "d.jsonl"),
    "data_array_row": Case(_data_case("d.jsonl", _jsonl(*GOOD_ROWS, ["q", "1"])), "d.jsonl"),
    "data_huge_row": Case(_data_case("d.jsonl", _jsonl({"prompt": HUGE, "reference": "1"})), "d.jsonl"),
    "data_invalid_utf8": Case(_data_case("d.jsonl", _jsonl(*GOOD_ROWS, raw=b'{"prompt": "caf\xe9", "reference": "1"}\n')),
                              "d.jsonl"),
    "data_torn_last_line": Case(_data_case("d.jsonl", _jsonl(*GOOD_ROWS, raw=b'{"prompt": "What is')), "d.jsonl"),
    "data_nul_bytes": Case(_data_case("d.jsonl", _bytes(b"\x00" * 100)), "d.jsonl"),
    "data_empty_file": Case(_data_case("d.jsonl", _bytes(b"")), "d.jsonl is empty"),
    "data_only_blank_lines": Case(_data_case("d.jsonl", _bytes(b"\n\n  \n")), "d.jsonl"),
    "data_is_a_directory": Case(_data_case("d.jsonl", lambda p: p.mkdir()), "d.jsonl"),
    "data_missing_file": Case(_data_case("d.jsonl", lambda p: None), "d.jsonl"),
    "data_unsupported_suffix": Case(_data_case("d.csv", _bytes(b"prompt,reference\nq,1\n")), "d.csv"),
    "data_eval_path_is_a_directory": Case(_data_case("d.jsonl", _jsonl(*GOOD_ROWS), eval_path="/"), "data file / is a directory"),
    "data_parquet_torn": Case(_data_case("d.parquet", _parquet(pa.table({"prompt": ["q"] * 50, "reference": ["1"] * 50}),
                                                               cut=40)), "d.parquet"),
    "data_parquet_garbage": Case(_data_case("d.parquet", _bytes(b"PAR1" + b"\x13" * 300)), "d.parquet"),
    "data_parquet_zero_rows": Case(_data_case("d.parquet", _parquet(pa.table({"prompt": pa.array([], pa.string()),
                                                                              "reference": pa.array([], pa.string())}))),
                                   "d.parquet"),
    "data_parquet_binary_not_utf8": Case(_data_case("d.parquet", _parquet(pa.table({
        "prompt": pa.array([b"\xff\xfe"] * 4, pa.binary()), "reference": ["1"] * 4}))), "d.parquet"),
    "data_parquet_int_prompt": Case(_data_case("d.parquet", _parquet(pa.table({"prompt": [1, 2], "reference": ["1", "2"]}))),
                                    "d.parquet"),
    # data the model cannot take (issue 26, class 5): the tiny model has 2,048 positions
    "data_prompt_longer_than_context": Case(_data_case("d.jsonl", _jsonl(*GOOD_ROWS, LONG_ROW)),
                                            "d.jsonl, line 5 (row 4): the prompt is 3,013 tokens"),
    "data_prompt_150k_characters": Case(_data_case("d.jsonl", _jsonl({"prompt": "y" * 150_000, "reference": "1"})),
                                        "at least 30,000 tokens (150,000 characters)"),
    "data_eval_prompt_longer_than_context": Case(_data_case("d.jsonl", _with_eval(LONG_ROW), eval_path="e.jsonl"),
                                                 "e.jsonl, line 2 (row 1)"),
    "data_max_tokens_fills_context": Case(_data_case("d.jsonl", _jsonl(*GOOD_ROWS), "--max-tokens", "2048"),
                                          "lower [training] max_tokens"),
    "data_prompt_truncated_when_asked": Case(_data_case("d.jsonl", _jsonl(*GOOD_ROWS, LONG_ROW), truncate_prompts=True),
                                             "1 of 5 prompts", outcome="ok"),
    # paths that are something else than they should be (issue 26, class 8)
    "data_symlink_loop": Case(_data_case("d.jsonl", _loop), "d.jsonl is a symlink loop"),
    "data_broken_symlink": Case(_data_case("d.jsonl", _link("gone.jsonl")), "d.jsonl is a broken symlink"),
    "data_is_dev_zero": Case(_data_case("d.jsonl", _link("/dev/zero")), "d.jsonl is a character device"),
    "data_is_a_fifo": Case(_data_case("d.jsonl", _fifo), "d.jsonl is a named pipe (FIFO)"),
    "config_is_dev_zero": Case(_special_config(_link("/dev/zero")), "device"),
    "config_is_a_fifo": Case(_special_config(_fifo), "FIFO"),
    "bare_config_is_a_fifo": Case(_special_config(_fifo, ""), "FIFO"),
    "bare_file_binary": Case(_file_case(bytes(range(256)) * 4), "UTF-8"),
    "bare_file_binary_no_suffix": Case(_file_case(b"\xca\xfe" * 300, "blob"), "UTF-8"),
    "log_dir_is_a_file": Case(_log_dir_case("taken"), "taken is a file, not a directory"),
    "log_dir_inside_a_file": Case(_log_dir_case("taken/run"), "taken is a file, not a directory"),
    "env_hf_home_is_a_file": Case(_data_case("d.jsonl", _jsonl(*GOOD_ROWS)), "$HF_HOME", env=("HF_HOME", "d.jsonl")),
    "env_model_cache_is_a_file": Case(_data_case("d.jsonl", _jsonl(*GOOD_ROWS)), "$RETRAIN_RAY_CACHE",
                                      env=("RETRAIN_RAY_CACHE", "d.jsonl")),
    "env_hub_cache_is_a_file": Case(_data_case("d.jsonl", _jsonl(*GOOD_ROWS)), "$HF_HUB_CACHE",
                                    env=("HF_HUB_CACHE", "d.jsonl")),
    "reward_slower_than_its_timeout": Case(_reward_case("import time\ndef score(c, r):\n    time.sleep(3)\n    return 1.0\n",
                                                        timeout_s=0.2), "[reward] timeout_s"),
    # custom rewards and plugins
    "reward_module_missing": Case(lambda tmp: ["train", str(_toml(tmp, reward={"type": "custom",
                                                                           "custom_module": "no_such_reward_mod"}))],
                                  "no_such_reward_mod"),
    "reward_function_missing": Case(_reward_case("def other(c, r):\n    return 1.0\n"), "hostile_reward"),
    "reward_module_syntax_error": Case(_reward_case("def score(c, r)\n    return 1.0\n"), "hostile_reward"),
    "reward_raises": Case(_reward_case("def score(c, r):\n    raise RuntimeError('checker crashed')\n"),
                          "hostile_reward"),
    "reward_returns_nan": Case(_reward_case("def score(c, r):\n    return float('nan')\n"), "hostile_reward"),
    # issue 26: a reward that never pays still logs every step (rc 0); an lr that blows the weights up
    # stops the run naming the step and the fix when [training] stop_on_divergence is on
    "reward_never_pays": Case(_reward_case("def score(c, r):\n    return 0.0\n"), "", outcome="ok"),
    "lr_diverges_with_stop_on_divergence": Case(_diverging_case, "training diverged at step 0"),
    "reward_returns_text": Case(_reward_case("def score(c, r):\n    return 'yes'\n"), "hostile_reward"),
    "reward_returns_none": Case(_reward_case("def score(c, r):\n    return None\n"), "hostile_reward"),
    "reward_module_imports_missing_package": Case(_reward_case("import no_such_pkg_xyz\ndef score(c, r):\n    return 1.0\n"),
                                                  "no_such_pkg_xyz"),
    # campaign directories: manifests and logs
    "manifest_half_written_results": Case(_campaign_case("results", b'{"name": "camp", "runs": [{"run_na'), "manifest.json"),
    "manifest_half_written_status": Case(_campaign_case("status", b'{"name": "camp", "runs": [{"run_na'), "manifest.json"),
    "manifest_not_an_object": Case(_campaign_case("results", b"[1, 2, 3]"), "manifest.json"),
    "manifest_binary": Case(_campaign_case("status", b"\x00\xff" * 50), "manifest.json"),
    "manifest_without_resume_snapshot": Case(_campaign_case("resume"), ".resume_config.json"),
    "results_torn_metrics_stream": Case(_campaign_case("results", runs={"metrics.arrows": _arrow_stream_bytes(3)[:-20]}),
                                        "", outcome="ok"),
    "results_garbage_metrics_stream": Case(_campaign_case("results", runs={"metrics.arrows": b"\x01" * 500}),
                                           "metrics.arrows", outcome="ok"),
    "results_deleted_run_is_missing": Case(_campaign_case("results"), "missing: grpo+none_s1", outcome="ok"),
    "results_truncated_parquet": Case(_campaign_case("results", runs={
        "metrics.arrows": _arrow_stream_bytes(2), "metrics.parquet": b"PAR1\x00\x00"}), "", outcome="ok"),
}

CHECKPOINT_CASES: dict[str, Case] = {
    "checkpoint_wrong_checksum": Case(_damaged_run(_every_checkpoint(_flip_weights)), "checkpoint"),
    "checkpoint_missing_weights": Case(_damaged_run(_every_checkpoint(lambda c: next(c.glob("*.safetensors")).unlink())),
                                       "checkpoint"),
    "checkpoint_missing_checksums": Case(_damaged_run(_every_checkpoint(lambda c: (c / "CHECKSUMS.json").unlink())),
                                         "checkpoint"),
    "checkpoint_garbage_checksums": Case(_damaged_run(_every_checkpoint(
        lambda c: (c / "CHECKSUMS.json").write_bytes(b"\xff\x00"))), "checkpoint"),
    "checkpoint_dir_itself_damaged": Case(_damaged_run(_every_checkpoint(_flip_weights), "checkpoints/final"),
                                          "checkpoint"),
    "checkpoint_resume_from_a_file": Case(_damaged_run(lambda run: None, "trainer_state.json"), "no complete checkpoint"),
    "checkpoint_resume_dir_missing": Case(_damaged_run(lambda run: shutil.rmtree(run / "checkpoints")), "run"),
    "checkpoint_first_save_killed_resume": Case(_damaged_run(_killed_first_save), "--overwrite"),
    "checkpoint_first_save_killed_fresh": Case(_damaged_run(_killed_first_save, resume_target=""),
                                               "cannot be resumed"),
    "checkpoint_one_damaged_falls_back": Case(_damaged_run(lambda run: _flip_weights(run / "checkpoints" / "final")),
                                              "", outcome="ok"),
}


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _run_cli(argv: list[str], capsys) -> tuple[int, str]:
    """Exit code and everything the user sees: stdout, stderr and warnings (shown on stderr by Python)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            rc = cli_main(argv)
        except SystemExit as exc:
            rc = int(exc.code or 0)
    out = capsys.readouterr()
    return rc, out.out + out.err + "".join(f"\nwarning: {w.message}" for w in caught)


def _check(case: Case, rc: int, output: str, before: dict[str, bytes], root: Path) -> None:
    assert output.count("Traceback") == output.count("--- Logging error ---"), output  # see test_nonfinite
    if case.outcome == "error":
        assert rc != 0, output
    else:
        assert rc == 0, output
    if case.names:
        assert case.names in output, output
    after = _snapshot(root)
    lost = [name for name, data in before.items() if not name.endswith(("trainer_state.json", "run_meta.json"))
            and "/checkpoints/" not in name and _lost(name, data, after.get(name), derived=_derived(name, before))]
    assert not lost, f"files changed or lost: {lost}"


def _derived(name: str, files: dict[str, bytes]) -> bool:
    """A run's Parquet copy of one of its Arrow streams, or its metrics.jsonl: rebuilt from the Arrow log when
    the run goes on, so it may grow but must never lose a step."""
    path = Path(name)
    return (path.suffix == ".parquet" and str(path.with_suffix(".arrows")) in files) or path.name == "metrics.jsonl"


def _lost(name: str, data: bytes, now: bytes | None, *, derived: bool) -> bool:
    if now is None:
        return True
    if derived and now != data:
        try:
            kept = _logged_steps(name, data)
        except (pa.ArrowInvalid, ValueError):  # a damaged copy (a case of its own) must stay as it was
            return True
        return not kept <= _logged_steps(name, now)
    return now != data


def _logged_steps(name: str, data: bytes) -> set[int]:
    if name.endswith(".jsonl"):
        return {json.loads(line)["step"] for line in data.splitlines() if line.strip()}
    table = pq.read_table(pa.BufferReader(data))
    return set(table.column("step").to_pylist()) if "step" in table.column_names else set()


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_has_a_clear_outcome(name, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(logging.root, "handlers", [])  # basicConfig of an earlier test bound a closed stream
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "hostile_reward", raising=False)  # each case imports its own file
    monkeypatch.chdir(tmp_path)
    case = CASES[name]
    argv = case.build(tmp_path)
    if case.env:
        monkeypatch.setenv(case.env[0], str(tmp_path / case.env[1]))
    before = _snapshot(tmp_path)
    rc, output = _run_cli(argv, capsys)
    _check(case, rc, output, before, tmp_path)


@pytest.mark.parametrize("name", sorted(CHECKPOINT_CASES))
def test_damaged_checkpoint_has_a_clear_outcome(name, finished_run, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(logging.root, "handlers", [])  # basicConfig of an earlier test bound a closed stream
    monkeypatch.chdir(tmp_path)
    case = CHECKPOINT_CASES[name]
    argv = case.build(tmp_path, finished_run)
    before = {k: v for k, v in _snapshot(tmp_path).items() if "metrics" in k}
    rc, output = _run_cli(argv, capsys)
    _check(case, rc, output, before, tmp_path)


def test_run_dir_with_checkpoints_but_no_rows_is_not_overwritten(finished_run, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "logs" / "run"
    shutil.copytree(finished_run, run)
    for stream in run.glob("metrics*"):
        stream.unlink()  # a run killed before its first row reached the log
    before = _snapshot(run)
    rc, output = _run_cli(["train", str(_toml(tmp_path)), "--quiet"], capsys)
    assert rc == 2 and "already holds a run" in output and _snapshot(run) == before


def test_manifest_from_another_campaign_is_refused(tmp_path):
    from retrain_ray.campaign import Campaign
    from retrain_ray.campaign.plan import CampaignError

    toml = write_campaign(tmp_path / "c.toml", **_sections(tmp_path / "logs" / "x"),
                          campaign={"name": "mine", "seeds": [1], "max_steps": 1})
    campaign = Campaign.from_toml(toml, root=tmp_path)
    cdir = tmp_path / "mine"
    cdir.mkdir()
    (cdir / "manifest.json").write_text(json.dumps({"name": "theirs", "runs": [
        {"run_name": r.run_name} for r in campaign.plan.runs]}))
    with pytest.raises(CampaignError, match="belongs to campaign 'theirs'"):
        campaign._open_dir()


@pytest.mark.parametrize("text,what", [
    ('{"name": "mine", "runs": []}', 'its "runs" list is empty'),
    ('{"name": "mine", "runs": {"a": 1}}', '"runs" is a dict, not a list'),
    ('{"name": "mine"}', 'no "runs" list'),
    ('["mine"]', "a JSON list, not an object"),
    ('{"name": "mine", "runs": [', "not valid JSON"),
], ids=["runs_emptied", "runs_not_a_list", "runs_missing", "not_an_object", "not_json"])
def test_a_damaged_manifest_is_named_as_damaged_and_left_alone(tmp_path, capsys, text, what):
    """It used to get "choose another [campaign].name" (an emptied runs list) or a traceback."""
    from retrain_ray.campaign import Campaign
    from retrain_ray.campaign.plan import CampaignError

    toml = write_campaign(tmp_path / "c.toml", **_sections(tmp_path / "logs" / "x"),
                          campaign={"name": "mine", "seeds": [1], "max_steps": 1})
    campaign = Campaign.from_toml(toml, root=tmp_path)
    manifest = tmp_path / "mine" / "manifest.json"
    manifest.parent.mkdir()
    manifest.write_text(text)
    with pytest.raises(CampaignError) as info:
        campaign._open_dir()
    assert f"the manifest {manifest} is damaged: {what}" in str(info.value)
    assert "restore it or move the directory aside" in str(info.value) and "choose another" not in str(info.value)
    assert manifest.read_text() == text and sorted(p.name for p in manifest.parent.iterdir()) == ["manifest.json"]


def test_corpus_is_large_enough():
    assert len(CASES) + len(CHECKPOINT_CASES) >= 50
