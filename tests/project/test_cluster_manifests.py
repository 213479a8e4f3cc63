"""The cluster manifests start a campaign: schema-valid (KubeRay's RayJob CRD, Ray's cluster-launcher
schema), with the image built from this working copy, token auth wired, GPU workers from zero,
shared checkpoint storage, a head that takes no runs and resources that match the instance type.

Docker is not available here: the Dockerfile's install step is exercised by building the package
from exactly the files the Dockerfile copies (`pip wheel`, same extras checked against pyproject).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import jsonschema
import pytest
import ray
import yaml

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "cluster"
RAYJOB_SCHEMA = Path(__file__).parents[1] / "schemas" / "kuberay-rayjob-v1.json"
LAUNCHER_SCHEMA = Path(ray.__file__).parent / "autoscaler" / "ray-schema.json"
# vCPU, GPUs, GiB of the instance types the manifests name (AWS)
INSTANCES = {"m6i.xlarge": (4, 0, 16), "g5.12xlarge": (48, 4, 192)}
AUTH_SECRET_KEY = "auth_token"  # the data key KubeRay reads from authOptions.secretName


def load(name: str) -> dict:
    return yaml.safe_load((CLUSTER / name).read_text())


def closed(schema):
    """The CRD schema as `kubectl apply` (strict field validation) enforces it: unknown fields fail."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: closed(v) for k, v in schema.items()}
    if ("properties" in out and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


@pytest.fixture(scope="module")
def rayjob_validator():
    return jsonschema.Draft7Validator(closed(json.loads(RAYJOB_SCHEMA.read_text())))


@pytest.fixture(scope="module")
def launcher_schema():
    return json.loads(LAUNCHER_SCHEMA.read_text())


def pods(job: dict) -> list[dict]:
    spec = job["spec"]["rayClusterSpec"]
    return [spec["headGroupSpec"]["template"]["spec"]] + [g["template"]["spec"] for g in spec["workerGroupSpecs"]]


def gib(quantity: str) -> float:
    number, unit = re.fullmatch(r"(\d+)(Gi|Mi)", quantity).groups()
    return int(number) / (1024 if unit == "Mi" else 1)


# ---- KubeRay RayJob -------------------------------------------------------------------------------
def test_rayjob_is_valid_for_the_kuberay_crd(rayjob_validator):
    errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
              for e in rayjob_validator.iter_errors(load("rayjob.yaml"))]
    assert errors == []


def test_the_crd_check_catches_a_misspelled_field(rayjob_validator):
    job = load("rayjob.yaml")
    job["spec"]["rayClusterSpec"]["authOptions"]["secretNme"] = "x"
    assert any("secretNme" in e.message for e in rayjob_validator.iter_errors(job))


def test_rayjob_wires_token_auth_through_the_documented_secret():
    job = load("rayjob.yaml")
    auth = job["spec"]["rayClusterSpec"]["authOptions"]
    assert auth["mode"] == "token"
    steps = (CLUSTER / "rayjob.yaml").read_text() + (CLUSTER / "README.md").read_text()
    create = f"kubectl create secret generic {auth['secretName']} --from-literal={AUTH_SECRET_KEY}="
    assert create in steps, "the Secret authOptions names must be created in the documented steps"


def test_rayjob_command_is_kuberays_unless_annotated():
    job = load("rayjob.yaml")
    annotated = job["metadata"].get("annotations", {}).get("ray.io/overwrite-container-cmd") == "true"
    for pod in pods(job):
        for c in pod["containers"]:
            assert annotated or not ("command" in c or "args" in c), \
                f"{c['name']} overrides the command without ray.io/overwrite-container-cmd: \"true\""


def test_rayjob_runs_the_image_built_from_this_working_copy():
    job = load("rayjob.yaml")
    images = {c["image"] for pod in pods(job) for c in pod["containers"]}
    assert len(images) == 1
    assert "rayproject/ray" not in images.pop()  # Ray's image lacks retrain-ray; the build adds it
    text = (CLUSTER / "rayjob.yaml").read_text()
    assert "docker build -f cluster/Dockerfile" in text and "pip install" not in text


def test_rayjob_head_takes_no_runs_and_gpu_workers_scale_from_zero():
    spec = load("rayjob.yaml")["spec"]["rayClusterSpec"]
    assert spec["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"
    assert spec["enableInTreeAutoscaling"] is True
    for group in spec["workerGroupSpecs"]:
        assert group["minReplicas"] == 0 and group["replicas"] == 0 and group["maxReplicas"] >= 1


def test_rayjob_resources_match_the_instance_types():
    for pod in pods(load("rayjob.yaml")):
        vcpu, gpus, mem = INSTANCES[pod["nodeSelector"]["node.kubernetes.io/instance-type"]]
        (c,) = pod["containers"]
        res = c["resources"]
        assert res["requests"] == res["limits"], "requests = limits: Ray sees what the pod is guaranteed"
        limits = res["limits"]
        cpu = int(limits["cpu"])  # whole CPUs, no "500m"
        assert 0.7 * vcpu <= cpu < vcpu, (c["name"], cpu, vcpu)  # most of the node, less the kubelet reserve
        assert int(limits.get("nvidia.com/gpu", 0)) == gpus  # every GPU of the node, never part of it
        assert 0.7 * mem <= gib(limits["memory"]) < mem


def test_rayjob_checkpoints_go_to_the_shared_claim_on_every_pod():
    job = load("rayjob.yaml")
    root = shlex.split(job["spec"]["entrypoint"])
    results = root[root.index("--root") + 1]
    for pod in pods(job):
        claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"]
                  if "persistentVolumeClaim" in v}
        (c,) = pod["containers"]
        mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
        mount = next(p for p in mounts if results.startswith(p + "/"))
        assert claims[mounts[mount]] == "retrain-results"
    pvc = load("results-pvc.yaml")
    assert pvc["metadata"]["name"] == "retrain-results" and pvc["spec"]["accessModes"] == ["ReadWriteMany"]


# ---- Ray cluster launcher -------------------------------------------------------------------------
def test_launcher_config_is_valid_for_rays_schema(launcher_schema):
    jsonschema.validate(load("ray-cluster.yaml"), launcher_schema)


def test_the_launcher_check_catches_a_misspelled_field(launcher_schema):
    cfg = load("ray-cluster.yaml")
    cfg["available_node_types"]["gpu_g5_12xlarge"]["min_worker"] = 0
    with pytest.raises(jsonschema.ValidationError, match="min_worker"):
        jsonschema.validate(cfg, launcher_schema)


def test_launcher_nodes_declare_their_whole_instance_and_the_head_takes_no_runs():
    cfg = load("ray-cluster.yaml")
    types = cfg["available_node_types"]
    head = types[cfg["head_node_type"]]
    assert head["resources"]["CPU"] == 0
    assert any("--num-cpus=0" in cmd for cmd in cfg["head_start_ray_commands"])
    for name, node in types.items():
        vcpu, gpus, _ = INSTANCES[node["node_config"]["InstanceType"]]
        if node is head:
            continue
        assert node["resources"] == {"CPU": vcpu, "GPU": gpus}, name
        assert node["min_workers"] == 0, f"{name} must scale from zero"


def test_launcher_uses_the_built_image_and_mounts_storage_on_the_host():
    cfg = load("ray-cluster.yaml")
    assert "rayproject/ray" not in cfg["docker"]["image"]
    assert not cfg["setup_commands"], "the image holds the package; nothing is pip-installed at start"
    assert any("mount" in cmd for cmd in cfg["initialization_commands"])  # host side, before docker
    assert "--volume /mnt/shared:/mnt/shared" in cfg["docker"]["run_options"]


# ---- Dockerfile ---------------------------------------------------------------------------------
def dockerfile() -> tuple[dict[str, str], list[list[str]], list[str]]:
    """(ARG defaults, COPY sources, RUN commands) of cluster/Dockerfile (continuations joined)."""
    text = re.sub(r"\\\n\s*", " ", (CLUSTER / "Dockerfile").read_text())
    args, copies, runs = {}, [], []
    for line in text.splitlines():
        word, _, rest = line.strip().partition(" ")
        if word == "ARG" and "=" in rest:
            key, value = rest.split("=", 1)
            args[key] = value
        elif word == "COPY":
            parts = [p for p in shlex.split(rest) if not p.startswith("--")]
            copies.append(parts[:-1])
        elif word == "RUN":
            runs.append(rest)
    return args, copies, runs


def test_dockerfile_starts_from_rays_gpu_image_matching_the_manifests():
    args, _, _ = dockerfile()
    base = args["RAY_IMAGE"]
    assert base.startswith("rayproject/ray:2.60.") and base.endswith("-gpu")
    assert load("rayjob.yaml")["spec"]["rayClusterSpec"]["rayVersion"] == base.split(":")[1].split("-")[0]


def test_dockerfile_installs_the_working_copy_with_the_gpu_extra_and_the_trackers():
    args, _, runs = dockerfile()
    extras = args["EXTRAS"].split(",")
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert {"gpu", "wandb", "mlflow", "tensorboard"} <= set(extras) <= set(declared)
    assert any('pip install --no-cache-dir -c constraints/gpu.txt ".[${EXTRAS}]"' in run for run in runs)
    assert "--build-arg EXTRAS" in (CLUSTER / "README.md").read_text()  # docs say how to change them


@pytest.mark.slow
def test_the_files_the_dockerfile_copies_build_the_package(tmp_path):
    """The image's `pip install .[...]` step, minus the dependencies: a wheel from only the copied files."""
    _, copies, _ = dockerfile()
    context = tmp_path / "context"
    context.mkdir()
    for sources in copies:
        for src in sources:
            target = context / src
            if (ROOT / src).is_dir():
                shutil.copytree(ROOT / src, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / src, target)
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                          "-w", str(tmp_path / "wheel"), str(context)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    (wheel,) = (tmp_path / "wheel").glob("retrain_ray-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "retrain_ray/cli/__init__.py" in names and "retrain_ray/trackers/build.py" in names
    assert any(n.endswith("entry_points.txt") for n in names)
    shipped = {Path(n).name for n in names if n.startswith("retrain_ray/configs/")}
    assert shipped >= {p.name for p in (ROOT / "configs").glob("*.toml")} != set()  # the example configs
    meta = next(n for n in names if n.endswith("METADATA"))
    extras = re.findall(r"^Provides-Extra: (\S+)$", zipfile.ZipFile(wheel).read(meta).decode(), re.M)
    assert {"gpu", "wandb", "mlflow", "tensorboard"} <= set(extras)


def test_dockerignore_sends_only_what_the_dockerfile_copies():
    _, copies, _ = dockerfile()
    allowed = {line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.startswith("!")}
    assert {src.rstrip("/") for sources in copies for src in sources} == allowed
    assert "*" in (ROOT / ".dockerignore").read_text().splitlines()  # everything else stays out

