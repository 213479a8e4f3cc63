"""docs/architecture.md stays a true map: every package it names exists and every package is named; and
the package root holds no loose module, so every module has a package on the map."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAP = ROOT / "docs" / "architecture.md"


def _packages() -> set[str]:
    return {".".join(init.parent.relative_to(ROOT).parts) for init in (ROOT / "retrain_ray").rglob("__init__.py")}


def _named_in_table() -> set[str]:
    return set(re.findall(r"^\| `(retrain_ray(?:\.\w+)*)` ", MAP.read_text(encoding="utf-8"), flags=re.MULTILINE))


def test_every_package_named_on_the_map_exists():
    missing = _named_in_table() - _packages()
    assert not missing, f"docs/architecture.md names packages that do not exist: {sorted(missing)}"


def test_every_package_is_on_the_map():
    unnamed = _packages() - _named_in_table()
    assert not unnamed, f"packages missing from docs/architecture.md's table: {sorted(unnamed)}"


def test_every_module_path_on_the_map_exists():
    paths = set(re.findall(r"`((?:[a-z_]+/)+[a-z_]+\.py)`", MAP.read_text(encoding="utf-8")))
    missing = sorted(p for p in paths if not (ROOT / "retrain_ray" / p).exists() and not (ROOT / p).exists())
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_the_package_root_holds_only_packages():
    loose = sorted(p.name for p in (ROOT / "retrain_ray").iterdir()
                   if p.is_file() and p.name not in ("__init__.py", "__main__.py", "py.typed"))
    assert not loose, f"modules at the package root belong in a package (cli/, util/, ...): {loose}"


def test_the_campaign_package_keeps_only_the_driver_path():
    """Reading results back lives in results/, recovery in campaign/resume/, and each concern of the driver
    in its own subpackage: campaign/ itself stays small enough to read (issue 22: at most 18 modules)."""
    modules = sorted(p.name for p in (ROOT / "retrain_ray" / "campaign").glob("*.py"))
    assert len(modules) <= 18, f"campaign/ has {len(modules)} modules; move a concern to a subpackage: {modules}"


def test_the_readme_layout_names_every_top_level_package():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    layout = readme[readme.index("## Layout"):]
    top = {p.name for p in (ROOT / "retrain_ray").iterdir() if (p / "__init__.py").is_file()}
    unnamed = sorted(name for name in top if f"`{name}/`" not in layout)
    assert not unnamed, f"README.md's Layout does not name: {unnamed}"
