"""The plugin loader imports from ./plugins and its roots without touching sys.path (issue 22.5)."""

from __future__ import annotations

import sys

from retrain_ray.plugins.loader import PluginLoader


def test_loading_plugins_leaves_sys_path_unchanged(tmp_path, monkeypatch):
    (tmp_path / "plugins").mkdir()  # a namespace package, as the original's ./plugins
    (tmp_path / "plugins" / "loader_ns_mod.py").write_text("VALUE = 1\n")
    root = tmp_path / "elsewhere"
    (root / "loader_pkg_x").mkdir(parents=True)
    (root / "loader_pkg_x" / "__init__.py").write_text("VALUE = 2\n")
    monkeypatch.chdir(tmp_path)
    for name in [m for m in sys.modules if m.startswith(("plugins", "loader_"))]:  # earlier tests' imports
        monkeypatch.delitem(sys.modules, name)
    path_before, modules_before = list(sys.path), set(sys.modules)

    loader = PluginLoader(roots=(str(root),))
    module, prefix = loader.find("loader_ns_mod", "loader_ns_mod.VALUE", "test")
    package, _ = loader.find("loader_pkg_x", "loader_pkg_x.VALUE", "test")

    assert (module.VALUE, prefix, package.VALUE) == (1, "plugins", 2)
    assert sys.path == path_before
    assert set(sys.modules) - modules_before == {"plugins", "plugins.loader_ns_mod", "loader_pkg_x"}
    for name in ("plugins", "plugins.loader_ns_mod", "loader_pkg_x"):
        monkeypatch.delitem(sys.modules, name)
