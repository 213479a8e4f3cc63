"""`[campaign] storage = "s3://..."` against a real S3-compatible server: moto's, on 127.0.0.1, offline.

A LoRA campaign run by the CLI (its own local Ray, the server's endpoint and fake credentials in its
environment, as on a cluster) sends Tune's state and checkpoint copies to the bucket, keeps the
recorder's Arrow logs and the manifest in the local campaign directory, squeezes the run's adapter
from the bucket afterwards, and `retrain-ray resume` restores from the bucket without rerunning it.
The fast test squeezes an adapter straight from the bucket (no Ray).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess

import pyarrow.fs as pafs
import pytest
from campaign_helpers import PYTHON, run_to_end
from test_campaign_e2e import write_toml

from retrain_ray.campaign.afterwards import squeeze_first_completed
from retrain_ray.config import load_config
from retrain_ray.logs import read_stream
from retrain_ray.logs.manifest import Manifest

if importlib.util.find_spec("moto") is None:
    pytest.skip("moto[server] is not installed (`pip install -e .[dev]`)", allow_module_level=True)
BUCKET = "rr-bucket"
RUN = "grpo+none_s1"


# moto's server runs in its own process: importing it pulls in flask, whose context proxies break vLLM's
# module scan (`Working outside of application context`) in any later test of this pytest process.
_SERVE = """
import sys, threading
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print("%s:%d" % server.get_host_and_port(), flush=True)
sys.stdin.read()
server.stop()
"""


@pytest.fixture(scope="module")
def s3_server():
    """moto's S3 on a free local port; yields the environment a client needs to reach it."""
    proc = subprocess.Popen([PYTHON, "-c", _SERVE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        address = proc.stdout.readline().strip() if proc.stdout else ""
        assert address, "moto's server did not start"
        env = {"AWS_ENDPOINT_URL": f"http://{address}", "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_EC2_METADATA_DISABLED": "true"}
        yield env
    finally:
        proc.kill()
        proc.wait(timeout=30)


@pytest.fixture
def bucket(s3_server, monkeypatch):
    """A fresh bucket; this process (the squeeze, the checks) reaches the server through the environment."""
    for key, value in s3_server.items():
        monkeypatch.setenv(key, value)
    fs = pafs.S3FileSystem(endpoint_override=s3_server["AWS_ENDPOINT_URL"], access_key="testing",
                           secret_key="testing", region="us-east-1",
                           allow_bucket_creation=True, allow_bucket_deletion=True)
    if fs.get_file_info(BUCKET).type != pafs.FileType.NotFound:
        fs.delete_dir(BUCKET)
    fs.create_dir(BUCKET)
    return fs


def _files(fs: pafs.FileSystem, path: str) -> list[str]:
    infos = fs.get_file_info(pafs.FileSelector(path, recursive=True, allow_not_found=True))
    return sorted(i.path[len(path) + 1:] for i in infos if i.type == pafs.FileType.File)


def test_squeeze_takes_the_adapter_from_the_bucket(bucket, tmp_path):
    from lora_factors import factors_with_singular_values, write_peft_adapter

    adapter = tmp_path / "made" / "adapter"
    write_peft_adapter(adapter, {"layers.0.q_proj": factors_with_singular_values([4.0, 2.0], m=16, n=12, rank=8)}, 8)
    checkpoint = f"{BUCKET}/prefix/c1/tune/{RUN}/checkpoint_000002"
    pafs.copy_files(str(adapter), f"{checkpoint}/adapter", source_filesystem=pafs.LocalFileSystem(),
                    destination_filesystem=bucket)
    cdir = tmp_path / "c1"
    cdir.mkdir()
    Manifest.create(cdir, {"name": "c1"}, [{"run_name": RUN, "run_dir": str(cdir / "runs" / RUN)}])
    Manifest.load(cdir).update_run(RUN, status="completed", checkpoint=checkpoint)
    section = load_config(write_toml(tmp_path, name="c1", finetune="lora", squeeze={"min_variance_retention": 0.9})).squeeze
    record = squeeze_first_completed(cdir, section, f"s3://{BUCKET}/prefix")
    assert "error" not in record, record
    assert (record["run"], record["recommended_rank"]) == (RUN, 2)
    assert sorted(p.name for p in (cdir / "squeeze" / "source" / "adapter").iterdir()) == \
        sorted(p.name for p in adapter.iterdir())
    Manifest.load(cdir).update_run(RUN, checkpoint=f"{BUCKET}/prefix/c1/tune/{RUN}/checkpoint_000009")
    missing = squeeze_first_completed(cdir, section, f"s3://{BUCKET}/prefix")
    assert f"s3://{BUCKET}/prefix/c1/tune/{RUN}/checkpoint_000009" in missing["error"]


@pytest.mark.extended
@pytest.mark.timeout(600)  # two driver processes, each with its own Ray, on shared cores
def test_campaign_on_s3_storage_runs_squeezes_and_resumes_from_the_bucket(s3_server, bucket, tmp_path):
    toml = write_toml(tmp_path, name="ons3", steps=4, sft=4, two_conditions=False, finetune="lora",
                      campaign_extra={"storage": f"s3://{BUCKET}/prefix"}, squeeze={"min_variance_retention": 0.9})
    cdir = tmp_path / "campaigns" / "ons3"
    for n, cmd in enumerate(([PYTHON, "-m", "retrain_ray.cli", str(toml), "--root", str(tmp_path / "campaigns")],
                             [PYTHON, "-m", "retrain_ray.cli", "resume", str(cdir)])):
        rc, _ = run_to_end(cmd, log=tmp_path / f"driver{n}.log", prefix="rrs", timeout_s=280, **s3_server)
        assert rc == 0, (tmp_path / f"driver{n}.log").read_text()[-3000:]
        if n == 0:
            tune_files = _files(bucket, f"{BUCKET}/prefix/ons3/tune")
            assert any(f.startswith("experiment_state-") for f in tune_files), tune_files
            copies = {f.split("/")[1] for f in tune_files if f.startswith(f"{RUN}/checkpoint_")}
            assert copies and all(f"{RUN}/{c}/adapter/adapter_config.json" in tune_files for c in copies)
            shutil.rmtree(cdir / "squeeze")  # the resumed campaign squeezes again, from the bucket
    manifest = json.loads((cdir / "manifest.json").read_text())
    run = manifest["runs"][0]
    assert manifest["status"] == "done" and len(manifest["sessions"]) == 2
    assert (run["status"], run["attempts"]) == ("completed", 1), "restored from the bucket: finished, not rerun"
    assert not (cdir / "tune").exists(), "Tune's copies belong in the bucket"
    assert read_stream(cdir / "runs" / RUN)["step"].to_pylist() == [0, 1, 2, 3], "the logs stay on the driver"
    assert not _files(bucket, f"{BUCKET}/prefix/ons3/runs")
    assert run["checkpoint"].startswith(f"{BUCKET}/prefix/ons3/tune/{RUN}/checkpoint_")
    squeeze = manifest["squeeze"]
    assert "error" not in squeeze and 1 <= squeeze["recommended_rank"] <= 4, squeeze
    assert (cdir / "squeeze" / "source" / "adapter" / "adapter_config.json").is_file()
    assert (cdir / "squeeze" / f"adapter_r{squeeze['compressed_rank']}" / "adapter_config.json").is_file()
