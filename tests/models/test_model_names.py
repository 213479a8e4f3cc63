"""models/context.py: which loading path a model name takes, decided without torch, and the campaign's
preload of trial processes (peft only where a run imports it)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers import write_campaign

from retrain_ray.campaign.local_ray import TRIAL_MODULES, trial_modules
from retrain_ray.models.context import config_uses_peft, lean_applies, uses_peft


@pytest.mark.parametrize(("name", "finetune", "remote_code", "impl", "lean", "peft"), [
    ("builtin:tiny", "lora", False, "auto", True, False),
    ("builtin:tiny", "full", False, "auto", True, False),
    ("builtin:tiny", "lora", True, "auto", False, True),  # the repo's own code: transformers, and PEFT's LoRA
    ("builtin:tiny", "lora", False, "transformers", False, True),  # forced
    ("smollm2:135m", "lora", False, "auto", True, False),  # a Llama: lean
    ("smollm2:135m", "lora", False, "transformers", False, True),
    ("Qwen/Qwen3-4B-Instruct-2507", "lora", False, "auto", False, True),  # not downloaded here: unknown
    ("Qwen/Qwen3-4B-Instruct-2507", "full", False, "auto", False, False),
    ("/models/my-llama", "lora", False, "auto", False, True),  # no such folder
    ("/models/my-llama", "lora", False, "lean", True, False),  # forced (the loader says why if it cannot)
])
def test_lean_path_and_peft_by_model_name(name, finetune, remote_code, impl, lean, peft):
    assert lean_applies(name, trust_remote_code=remote_code, model_impl=impl) is lean
    assert uses_peft(name, finetune, trust_remote_code=remote_code, model_impl=impl) is peft


def test_the_names_module_imports_no_torch():
    code = "import sys, retrain_ray.models.context; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


def test_a_campaign_preloads_peft_only_for_lora_runs_that_load_through_transformers(tmp_path):
    from retrain_ray.campaign import Campaign

    lora = {"model": "builtin:tiny", "finetune": "lora"}
    builtin = Campaign.from_toml(write_campaign(tmp_path / "a.toml", campaign={"name": "a", "seeds": [1, 2]},
                                                model=lora), root=tmp_path)
    remote = Campaign.from_toml(write_campaign(tmp_path / "b.toml", campaign={"name": "b", "seeds": [1, 2]},
                                               model=lora, backend={"devices": "cpu",
                                                                    "options": {"trust_remote_code": True}}),
                                root=tmp_path)
    assert [config_uses_peft(r.config) for r in builtin.plan.runs] == [False, False]
    assert [config_uses_peft(r.config) for r in remote.plan.runs] == [True, True]
    # what the driver hands the local Ray to preload (Campaign.run)
    assert trial_modules(peft=any(config_uses_peft(r.config) for r in builtin.plan.runs)) == list(TRIAL_MODULES)
    assert trial_modules(peft=any(config_uses_peft(r.config) for r in remote.plan.runs)) == [*TRIAL_MODULES, "peft"]
