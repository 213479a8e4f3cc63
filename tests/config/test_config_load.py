"""Config models, strict loading, round trips and the bad-config corpus."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from retrain_ray.config import (
    ConfigError,
    RetrainConfig,
    dump_toml,
    field_to_key,
    load_config,
    load_config_with_warnings,
)
from retrain_ray.config.key_names import FIELD_INDEX, TRAIN_SECTIONS
from retrain_ray.config.load import toml_value

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.toml"))
BAD = sorted((ROOT / "tests" / "bad_configs").glob("*.toml"))


def _expected_key(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect:"), f"{path.name}: first line must be '# expect: section.key'"
    return first.split("expect:", 1)[1].strip()


def test_defaults_match_the_original():
    cfg = RetrainConfig()
    assert (cfg.training.batch_size, cfg.training.group_size, cfg.training.max_tokens) == (8, 16, 10240)
    assert (cfg.algorithm.advantage_mode, cfg.algorithm.transform_mode) == ("maxrl", "gtpo_sepa")
    assert (cfg.sepa.steps, cfg.sepa.delay_steps, cfg.sepa.correct_rate_gate) == (500, 50, 0.1)
    assert (cfg.optimizer.beta1, cfg.optimizer.beta2, cfg.optimizer.eps) == (0.9, 0.95, 1e-8)
    assert cfg.backend.max_concurrent == 4 and cfg.backpressure.max_batch_size == 64
    assert cfg.plugins.search_paths == ["plugins"] and cfg.campaign is None
    assert cfg.training.keep_last_checkpoints == 3 and cfg.model.finetune == "lora"


def test_model_is_frozen():
    cfg = RetrainConfig()
    with pytest.raises(ValidationError, match="frozen"):
        cfg.training.batch_size = 3  # type: ignore[misc]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_example_configs_load_and_round_trip(path: Path, tmp_path: Path):
    cfg = load_config(path)
    assert RetrainConfig.model_validate(cfg.model_dump()) == cfg
    out = tmp_path / "again.toml"
    out.write_text(dump_toml(cfg))
    assert load_config(out) == cfg


def test_campaign_example_keeps_tables():
    cfg = load_config(ROOT / "configs" / "original-campaign.toml")
    delight = cfg.campaign.conditions[2]
    assert delight.overrides == {"lr": 5e-5, "transform_params": {"delight_eta": 0.5}}
    assert cfg.squeeze is not None and cfg.squeeze.min_variance_retention == 0.95


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.stem)
def test_bad_config_names_the_key(path: Path):
    key = _expected_key(path)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert any(key in loc for loc in info.value.locations), (key, str(info.value))
    assert str(path) in str(info.value)


def test_bad_corpus_is_large_enough():
    assert len(BAD) >= 30


def test_three_mistakes_reported_at_once(tmp_path: Path):
    path = tmp_path / "three.toml"
    path.write_text('[training]\nbatch_size = 0\nlrr = 1e-5\n[algorithm]\ntransform_mode = "nope"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert sorted(info.value.locations) == ["algorithm.transform_mode", "training.batch_size", "training.lrr"]
    text = str(info.value)
    assert text.startswith(f"3 configuration problems in {path}")
    assert "did you mean `lr`?" in text and "0" in text


def test_did_you_mean_for_section_and_key(tmp_path: Path):
    path = tmp_path / "typo.toml"
    path.write_text("[trainng]\nmax_steps = 3\n[backpressure]\nenabeld = true\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    hints = {i.location: i.hint for i in info.value.issues}
    assert hints["trainng"] == "did you mean `training`?"
    assert hints["backpressure.enabeld"] == "did you mean `enabled`?"


def test_legacy_prime_rl_key_gets_rewrite_hint(tmp_path: Path):
    path = tmp_path / "legacy.toml"
    path.write_text('[backend]\nprime_rl_zmq_port = 5555\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "[backend.options]" in info.value.issues[0].hint and "zmq_port" in info.value.issues[0].hint


def test_coercion_and_empty_strings(tmp_path: Path):
    path = tmp_path / "coerce.toml"
    path.write_text('[training]\nmax_steps = "40"\nlr = "1e-5"\n[model]\nmodel = ""\n'
                    '[backpressure]\nenabled = "yes"\n')
    cfg = load_config(path)
    assert cfg.training.max_steps == 40 and cfg.training.lr == 1e-5 and cfg.backpressure.enabled is True
    assert cfg.model.model == "Qwen/Qwen3-4B-Instruct-2507"
    # [environment] parses as the original's (a table of args becomes JSON text); the hub install is for
    # verifiers environments only, and both of the original's providers load
    from retrain_ray.config.sections_runtime import EnvironmentSection

    assert EnvironmentSection.model_validate({"args": {"k": 1}}).args == '{"k": 1}'
    path.write_text('[environment]\nprovider = "builtin"\nid = "digit_chain"\n[environment.args]\nseed = 1\n')
    assert load_config(path).environment.args == '{"seed": 1}'
    path.write_text('[environment]\nprovider = "builtin"\nid = "digit_chain"\nauto_install = true\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert set(info.value.locations) == {"environment.auto_install"}
    path.write_text('[environment]\nprovider = "openenv"\nid = "http://x"\n')
    assert load_config(path).environment.provider == "openenv"
    path.write_text('[environment]\nprovider = "verifiers"\nid = "vf_digit_pair"\n')
    assert load_config(path).environment.provider == "verifiers"


def test_uncertainty_alias_is_canonicalized_and_override_wins():
    from retrain_ray.config import effective_uncertainty_kind

    cfg = RetrainConfig.model_validate({"algorithm": {"uncertainty_kind": "pred_var"}})
    assert cfg.algorithm.uncertainty_kind == "predictive_variance"
    cfg2 = RetrainConfig.model_validate({"algorithm": {"transform_params": {"uncertainty_metric": "nll"}}})
    assert effective_uncertainty_kind(cfg2) == "surprisal"


def test_the_schema_canonicalizes_uncertainty_kinds_as_the_uncertainty_registry_does():
    """config/ may not import algorithms/, yet must canonicalize on load (above): its alias table is the
    registry's, less the reserved names the registry refuses (issue 33.2 leaves this one copy, kept equal here)."""
    from retrain_ray.algorithms import uncertainty
    from retrain_ray.config.names import UNCERTAINTY_ALIASES

    registry = {k: v for k, v in uncertainty.ALIASES.items() if k not in uncertainty.UNSUPPORTED}
    assert registry == UNCERTAINTY_ALIASES


def test_python_api_is_as_strict_as_toml():
    with pytest.raises(ConfigError) as info:
        RetrainConfig.model_validate({"training": {"clip_eps_high": 0.2}, "data": {"source": "file"}})
    assert set(info.value.locations) == {"training.clip_eps_high", "data.path"}


def test_warnings_side_channel(tmp_path: Path):
    path = tmp_path / "warn.toml"
    path.write_text('[training]\ntemperature = 2.5\nsave_every = 0\n[backend]\nadapter_path = "/tmp/x"\n')
    _, warnings = load_config_with_warnings(path)
    assert len(warnings) == 3 and any("temperature" in w for w in warnings)


def test_missing_file_and_syntax_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "syntax.toml"
    bad.write_text("[training\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_field_names_map_to_every_key_once():
    keys = {(s, (i.alias or n)) for s, m in TRAIN_SECTIONS.items() for n, i in m.model_fields.items()}
    assert set(FIELD_INDEX.values()) == keys
    assert field_to_key("bp_enabled") == ("backpressure", "enabled")
    assert field_to_key("optim_beta1") == ("optimizer", "beta1")
    assert field_to_key("resume_from") == ("resume", "from")
    assert field_to_key("tinker_max_concurrent") == ("backend", "max_concurrent")


def test_toml_value_matches_the_original():
    assert toml_value(0.7) == "0.7"
    assert toml_value('a "q"\n') == '"a \\"q\\"\\n"'
    assert tomllib.loads(f"x = {toml_value(float('inf'))}")["x"] == float("inf")
    assert tomllib.loads(f"x = {toml_value(chr(0x7f) + chr(1) + 'é')}")["x"] == chr(0x7f) + chr(1) + "é"


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)


@settings(max_examples=30, deadline=None)
@given(
    batch_size=st.integers(1, 10**6),
    lr=st.floats(1e-12, 10.0, allow_nan=False),
    log_dir=_text,
    params=st.dictionaries(st.text("abcxyz_", min_size=1, max_size=8),
                           st.one_of(st.booleans(), st.integers(-10**9, 10**9), _text,
                                     st.floats(allow_nan=False)), max_size=4),
    seeds=st.lists(st.integers(-1, 2**32 - 1), min_size=1, max_size=4, unique=True),
)
def test_toml_round_trip_property(batch_size, lr, log_dir, params, seeds):
    from retrain_ray.config import build_config

    raw = {"training": {"batch_size": batch_size, "lr": lr}, "logging": {"log_dir": log_dir or "x"},
           "algorithm": {"transform_params": params}, "campaign": {"seeds": seeds}}
    cfg = RetrainConfig.model_validate(raw)
    again, _ = build_config(tomllib.loads(dump_toml(cfg)))
    assert again == cfg


def test_tinker_options_follow_the_tinker_backend_schema():
    cfg = RetrainConfig.model_validate({"backend": {"backend": "tinker", "options": {"client": "standin"}}})
    assert cfg.backend.options == {"client": "standin"}
    with pytest.raises(ConfigError) as info:
        RetrainConfig.model_validate({"backend": {"backend": "tinker", "options": {"client": "nope"}}})
    assert info.value.locations == ["backend.options"] and "standin" in str(info.value)
