"""Models named by a Hub id, resolved through a real Hugging Face cache built in tmp from the tiny model.

The cache has the layout huggingface_hub writes (models--org--name/snapshots/<commit>/..., refs/<name>),
with two revisions of one repo: `main` (seed 0) and tag `v1` (seed 1), so a test can see that
`[model] revision` picks the weights. Everything runs offline (HF_HUB_OFFLINE=1), as the hub is
unreachable here; a missing id must fail before anything starts, with the id and the fix in the message.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import ray
from hf_cache import add_ref, repo_cache_dir

from retrain_ray.models import build_tiny_model, load_model_and_tokenizer, state_dict_sha256
from retrain_ray.models.context import ModelUnavailableError, model_problem, resolve_hub_model

ROOT = Path(__file__).resolve().parents[2]
REPO = "retrain-test/tiny-chat"
MAIN_SHA = "a" * 40
V1_SHA = "b" * 40


@pytest.fixture(scope="module")
def hf_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("hf_home")
    build_tiny_model(add_ref(home, REPO, "main", MAIN_SHA), hidden_size=64, num_layers=1, seed=0)
    build_tiny_model(add_ref(home, REPO, "v1", V1_SHA), hidden_size=64, num_layers=1, seed=1)
    return home


@pytest.fixture
def offline_cache(hf_home, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return hf_home


def test_hub_id_resolves_to_the_cached_snapshot_of_its_revision(offline_cache):
    repo_dir = repo_cache_dir(offline_cache, REPO)
    assert resolve_hub_model(REPO) == repo_dir / "snapshots" / MAIN_SHA
    assert resolve_hub_model(REPO, "v1") == repo_dir / "snapshots" / V1_SHA
    assert resolve_hub_model(REPO, V1_SHA) == repo_dir / "snapshots" / V1_SHA


def test_revision_picks_the_weights_that_load(offline_cache):
    main, _ = load_model_and_tokenizer(REPO)
    v1, tokenizer = load_model_and_tokenizer(REPO, revision="v1")
    assert state_dict_sha256(main) != state_dict_sha256(v1)
    assert tokenizer.padding_side == "left"


def test_hf_hub_cache_wins_over_hf_home(offline_cache, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    with pytest.raises(ModelUnavailableError, match="retrain-test/tiny-chat"):
        resolve_hub_model(REPO)


def test_missing_id_or_revision_names_it_and_the_download_command(offline_cache):
    problem = model_problem("nobody/missing-model", "main")
    assert "'nobody/missing-model'" in problem
    assert "huggingface-cli download nobody/missing-model --revision main" in problem
    assert str(offline_cache / "hub") in problem and "HF_HUB_OFFLINE" in problem
    assert "revision 'v9'" in model_problem(REPO, "v9")
    assert model_problem(REPO, "v1") is None


def test_local_files_only_forbids_download_even_online(offline_cache, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    assert model_problem(REPO, local_files_only=True) is None
    problem = model_problem("nobody/missing-model", local_files_only=True)
    assert "downloading is off" in problem


def _smoke_with(tmp_path: Path, model: str, revision: str = "") -> Path:
    text = (ROOT / "configs" / "smoke.toml").read_text()
    text = text.replace('model = "builtin:tiny-h256-l2"', f'model = "{model}"\nrevision = "{revision}"')
    path = tmp_path / "hub.toml"
    path.write_text(text)
    return path


def test_train_runs_offline_from_the_hf_cache(offline_cache, tmp_path, capsys):
    """`retrain-ray train` (in-process: a subprocess would spend ~20 s importing torch) on tag v1."""
    from retrain_ray.cli import main

    cfg = _smoke_with(tmp_path, REPO, revision="v1")
    code = main(["train", str(cfg), "--log-dir", str(tmp_path / "run"), "--max-steps", "2",
                 "--sft-warmup-steps", "0", "--batch-size", "2", "--group-size", "2", "--quiet"])
    assert code == 0, capsys.readouterr().err
    assert "completed after step 1" in capsys.readouterr().out
    assert (tmp_path / "run" / "checkpoints" / "final").is_dir()
    meta = json.loads((tmp_path / "run" / "run_meta.json").read_text())
    assert meta["config"]["model"]["model"] == REPO and meta["config"]["model"]["revision"] == "v1"


def test_missing_id_fails_train_and_strict_explain_with_exit_2_and_warns_in_explain(offline_cache, tmp_path, capsys):
    """The CLI entry point in-process (the subprocess start would cost ~20 s of imports here). `explain` is a
    dry run: a model this machine lacks is a warning there (exit 0), an error with --strict."""
    from retrain_ray.cli import main

    cfg = _smoke_with(tmp_path, "nobody/missing-model")
    for args, rc in ((["train", str(cfg), "--log-dir", str(tmp_path / "run")], 2), (["explain", str(cfg)], 0),
                     (["explain", str(cfg), "--strict"], 2)):
        assert main(args) == rc, args
        captured = capsys.readouterr()
        seen = " ".join((captured.out + captured.err).split())  # rich wraps long lines
        assert "'nobody/missing-model'" in seen and "huggingface-cli download nobody/missing-model" in seen, seen
    assert not (tmp_path / "run").exists(), "nothing may be written when the model is missing"


def test_campaign_with_a_missing_id_fails_before_ray_starts(offline_cache, tmp_path):
    from retrain_ray.campaign import Campaign, CampaignError
    from retrain_ray.config import load_config

    if ray.is_initialized():
        pytest.skip("needs a process where Ray is not connected yet")
    cfg = load_config(ROOT / "configs" / "smoke-campaign.toml", {"model": {"model": "nobody/missing-model"}})
    with pytest.raises(CampaignError, match="huggingface-cli download nobody/missing-model"):
        Campaign(cfg, root=tmp_path)
    assert not ray.is_initialized()
    assert not any(tmp_path.iterdir())


def test_trust_remote_code_is_off_unless_asked():
    from retrain_ray.backends.local import settings_from_config
    from retrain_ray.config import load_config

    cfg = load_config(ROOT / "configs" / "smoke.toml")
    assert settings_from_config(cfg).trust_remote_code is False
    asked = load_config(ROOT / "configs" / "smoke.toml", {"backend": {"options": {"trust_remote_code": True}},
                                                           "model": {"revision": "v1"}})
    assert settings_from_config(asked).trust_remote_code is True
    assert settings_from_config(asked).revision == "v1"


def test_copying_the_cache_elsewhere_keeps_it_usable(hf_home, tmp_path, monkeypatch):
    """A cache synced to another node (another HF_HOME) resolves the same: refs and snapshots are plain files."""
    shutil.copytree(hf_home, tmp_path / "node2")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "node2"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    assert resolve_hub_model(REPO, "v1").parent.name == "snapshots"
    assert resolve_hub_model(REPO, "v1").name == V1_SHA
