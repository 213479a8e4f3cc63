"""Secrets never reach what retrain-ray writes: manifests, snapshots, run metadata, Arrow and Parquet
logs, Tune's own files, or error messages (issue 15)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import write_campaign

from retrain_ray.campaign import Campaign
from retrain_ray.campaign.plan import CampaignError
from retrain_ray.cli import main as cli_main
from retrain_ray.util.secrets import REDACTED, has_redactions, redact, restore_secrets, scrub

PLANTED = ("PLANTED_PW_1", "PLANTED_KEY_2", "PLANTED_TOKEN_3", "PLANTED_ENV_4", "PLANTED_ENV_5")
SECRET_URL = "https://alice:PLANTED_PW_1@models.example/v1?api_key=PLANTED_KEY_2&region=eu"


def _write_campaign(toml: Path, root: Path, base_url: str = SECRET_URL) -> Path:
    return write_campaign(toml, model={"base_url": base_url},
                          training={"batch_size": 2, "group_size": 2, "max_tokens": 4, "save_every": 1},
                          logging={"log_dir": f"{root}/logs/x"},
                          campaign={"name": "secrets", "seeds": [1], "max_steps": 2, "max_workers": 1})



@pytest.mark.parametrize(("text", "shown"), [
    ("https://alice:pw@host:8000/v1", f"https://{REDACTED}@host:8000/v1"),
    ("http://tok@host/x", f"http://{REDACTED}@host/x"),
    ("http://host/v1?api_key=abc&n=2", f"http://host/v1?api_key={REDACTED}&n=2"),
    ("http://host/v1?n=2&access_token=abc#frag", f"http://host/v1?n=2&access_token={REDACTED}#frag"),
    ("s3://bucket/key?X-Amz-Signature=abc", f"s3://bucket/key?X-Amz-Signature={REDACTED}"),
    ("error from 'http://u:p@h/x' after 3 tries", f"error from 'http://{REDACTED}@h/x' after 3 tries"),
    ("http://host:8000/v1?n=2", "http://host:8000/v1?n=2"),
    ("user@example.com", "user@example.com"),
])
def test_scrub_removes_url_credentials_and_keeps_the_rest(text, shown):
    assert scrub(text) == shown


def test_redact_covers_keys_and_urls_at_any_depth():
    value = {"model": {"base_url": SECRET_URL, "api_key": "PLANTED_KEY_2"},
             "runs": [{"hf_token": "PLANTED_TOKEN_3", "lr": 0.1}], "max_tokens": 4, "token_budget": 0}
    out = redact(value)
    assert not any(p in json.dumps(out) for p in PLANTED)
    assert out["model"]["base_url"] == f"https://{REDACTED}@models.example/v1?api_key={REDACTED}&region=eu"
    assert out["runs"][0]["lr"] == 0.1 and out["max_tokens"] == 4 and out["token_budget"] == 0
    assert has_redactions(out) and not has_redactions(value)


def test_restore_secrets_needs_the_same_url_around_the_secret():
    snapshot = redact({"model": {"base_url": SECRET_URL, "api_key": "k1"}, "lr": 1})
    restored, missing = restore_secrets(snapshot, {"model": {"base_url": SECRET_URL, "api_key": "k1"}})
    assert missing == [] and restored["model"] == {"base_url": SECRET_URL, "api_key": "k1"}
    other_host = SECRET_URL.replace("models.example", "evil.example")
    _, missing = restore_secrets(snapshot, {"model": {"base_url": other_host}})
    assert missing == ["model.base_url", "model.api_key"]


def test_rejected_option_error_never_prints_the_value(tmp_path, capsys):
    path = tmp_path / "c.toml"
    path.write_text('[backend]\nbackend = "tinker"\n[backend.options]\napi_key = "PLANTED_KEY_2"\n'
                    f'[inference]\nurl = "{SECRET_URL}"\nengine = "nope"\n')
    with pytest.raises(SystemExit) as exit_:
        cli_main(["train", str(path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "backend.options.api_key" in err and "PLANTED" not in err


def _files_holding(root: Path, needles: tuple[str, ...]) -> dict[str, list[str]]:
    found = {}
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            hits = [n for n in needles if n.encode() in data]
            if hits:
                found[str(path.relative_to(root))] = hits
    return found


def test_campaign_writes_no_planted_secret_anywhere(ray_4cpu_4gpu, tmp_path, monkeypatch):
    monkeypatch.setenv("TINKER_API_KEY", "PLANTED_ENV_4")
    monkeypatch.setenv("WANDB_API_KEY", "PLANTED_ENV_5")
    toml = _write_campaign(tmp_path / "campaign.toml", tmp_path)
    results = Campaign.from_toml(toml, root=tmp_path / "campaigns").run(progress=False)
    assert not results.errors
    written = _files_holding(tmp_path, PLANTED)
    assert written == {"campaign.toml": ["PLANTED_PW_1", "PLANTED_KEY_2"]}, written  # only the user's own file
    cdir = tmp_path / "campaigns" / "secrets"
    assert {"manifest.json", ".resume_config.json"} <= {p.name for p in cdir.iterdir()}
    assert any(cdir.rglob("tuner.pkl")) and any(cdir.rglob("run_meta.json"))

    again = Campaign.from_dir(cdir)  # resume takes the secret back from the campaign's TOML file
    assert again.config.model.base_url == SECRET_URL
    _write_campaign(toml, tmp_path, SECRET_URL.replace("models.example", "other.example"))
    with pytest.raises(CampaignError, match="model.base_url"):
        Campaign.from_dir(cdir)
