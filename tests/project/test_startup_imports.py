"""Time to first step (issue 13): `retrain-ray train` imports nothing it does not use before the first step.

Checked in fresh subprocesses through `sys.modules` (no timing): the CLI front (`retrain_ray.cli`,
`retrain_ray.cli.train`) imports neither torch nor transformers, so `--help` and configuration errors
answer at once; the verbs that read results back (`retrain_ray.cli.results`, and `cli.campaign`, which
prints a finished campaign's table with it) import no Ray, Arrow or pydantic until one runs; a one-step
full fine-tuning run of the tiny model has imported no Ray, vLLM, PEFT, transformers, pandas, Parquet
writer, Arrow compute kernels, math-verify or tracker package when its first step ends, and
`retrain-ray train` of a built-in model, in full or with LoRA, never imports transformers or PEFT at all
(the lean torch-only Llama, models/lean_llama.py, and lean LoRA, models/lean_lora.py).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
from helpers import write_config

NEVER_BEFORE_FIRST_STEP = ("ray", "vllm", "peft", "transformers", "pandas", "pyarrow.parquet", "pyarrow.compute",
                           "math_verify",
                           "mlflow", "wandb", "tensorboard", "matplotlib", "plotly")


def _python(code: str, tmp_path) -> str:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env,
                          timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


def test_cli_front_imports_no_ml_stack(tmp_path):
    out = _python("""
        import json, sys
        import retrain_ray.cli, retrain_ray.cli.train
        print(json.dumps(sorted(m for m in ("torch", "transformers", "ray", "pyarrow", "pydantic") if m in sys.modules)))
    """, tmp_path)
    assert json.loads(out) == []


def test_result_verbs_import_no_ml_stack(tmp_path):
    out = _python("""
        import json, sys
        import retrain_ray.cli.results, retrain_ray.cli.campaign
        print(json.dumps(sorted(m for m in ("torch", "ray", "pyarrow", "pandas", "pydantic", "matplotlib")
                                if m in sys.modules)))
    """, tmp_path)
    assert json.loads(out) == []


def _one_step_config(tmp_path, finetune: str = "full"):
    return write_config(tmp_path / "run.toml", training={"max_steps": 1, "batch_size": 2, "group_size": 2,
                                                         "max_tokens": 4},
                        logging={"log_dir": str(tmp_path / "run")}, model={"finetune": finetune, "lora_rank": 4})


def test_one_step_run_imports_only_what_it_uses_before_its_first_step(tmp_path):
    config = _one_step_config(tmp_path)
    out = _python(f"""
        import json, sys
        import retrain_ray.run.loop as loop

        seen = []
        step = loop.RunLoop.rl_step

        def spy(self, *args):
            result = step(self, *args)
            seen.append(set(sys.modules))
            return result

        loop.RunLoop.rl_step = spy
        from retrain_ray.cli import main

        assert main(["train", {str(config)!r}, "--quiet"]) == 0
        print(json.dumps(sorted(m for m in {NEVER_BEFORE_FIRST_STEP!r} if m in seen[0])))
    """, tmp_path)
    assert json.loads(out) == []


@pytest.mark.parametrize("finetune", ["full", "lora"])
def test_builtin_model_train_never_imports_transformers(tmp_path, tiny_cache, finetune):
    """The whole `retrain-ray train` command, as a user runs it, under `-X importtime` (every import it
    made, to the end of the run): no transformers, no PEFT; the summary prints the
    time to first step."""
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "models").symlink_to(tiny_cache)  # the session's built model: no build here
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RETRAIN_RAY_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "retrain_ray", "train",
                           str(_one_step_config(tmp_path, finetune)), "--quiet"],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" in imported and "retrain_ray.models.lean_llama" in imported  # the check sees the run's imports
    assert sorted(m for m in imported if m.split(".")[0] in ("transformers", "peft")) == []
    assert re.search(r"time to first step: \d+\.\d\d s from the command", done.stdout), done.stdout


def test_the_campaign_driver_imports_no_torch(tmp_path):
    """The driver process schedules runs and never trains: importing it (and the `Campaign` API) loads no
    torch (the extended campaign test checks the same of a real driver; this catches it in the default tier)."""
    out = _python("""
        import json, sys
        import retrain_ray.campaign.driver
        from retrain_ray.campaign import Campaign
        print(json.dumps(sorted(m for m in ("torch", "transformers", "peft") if m in sys.modules)))
    """, tmp_path)
    assert json.loads(out) == []
