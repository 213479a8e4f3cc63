"""The import graph of retrain_ray has no cycle, at module or sub-package level.

Imports inside functions count (a lazy import hides a cycle, it does not remove it);
imports under ``if TYPE_CHECKING:`` do not (they never run). An import stays inside a function
only to defer a heavy or optional library, and a comment on its line or the line above says so.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import retrain_ray

ROOT = Path(retrain_ray.__file__).parent
PACKAGE = "retrain_ray"


def discover_modules() -> dict[str, Path]:
    modules = {}
    for path in ROOT.rglob("*.py"):
        parts = (PACKAGE, *path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _is_type_checking_block(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
    return name == "TYPE_CHECKING"


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        if _is_type_checking_block(node):
            stack.extend(node.orelse)  # type: ignore[attr-defined]
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append(node)
        stack.extend(ast.iter_child_nodes(node))
    return found


def _imported_names(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        anchor = module.split(".") if is_package else module.split(".")[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    # `from pkg import name` imports pkg.name when that is a module, else pkg itself.
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def _owning_module(name: str, modules: dict[str, Path]) -> str | None:
    while name not in modules and "." in name:
        name = name.rsplit(".", 1)[0]
    return name if name in modules else None


def module_graph() -> dict[str, set[str]]:
    modules = discover_modules()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        deps: set[str] = set()
        for node in _runtime_imports(ast.parse(path.read_text(), str(path))):
            names = _imported_names(module, is_package, node)
            if isinstance(node, ast.ImportFrom):
                # keep submodules actually named; fall back to the package only if none is
                submodules = [n for n in names[:-1] if n in modules]
                names = submodules or names[-1:]
            for name in names:
                owner = _owning_module(name, modules) if name.startswith(PACKAGE) else None
                if owner and owner != module:
                    deps.add(owner)
        graph[module] = deps
    return graph


def package_of(module: str) -> str:
    return ".".join(module.split(".")[:2])


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    packages: dict[str, set[str]] = {}
    for module, deps in graph.items():
        edges = packages.setdefault(package_of(module), set())
        edges.update(package_of(d) for d in deps if package_of(d) != package_of(module))
    return packages


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path ``[a, b, ..., a]``, or None (iterative DFS, colours)."""
    state: dict[str, int] = {}  # 1 on stack, 2 done
    for start in sorted(graph):
        if start in state:
            continue
        path = [start]
        iters = [iter(sorted(graph[start]))]
        state[start] = 1
        while iters:
            nxt = next(iters[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                iters.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                iters.append(iter(sorted(graph.get(nxt, ()))))
    return None


def test_cycle_finder_reports_the_path() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_graph_sees_function_level_and_skips_type_checking_imports() -> None:
    graph = module_graph()
    assert "retrain_ray.run.types" in graph
    # run.loop is the Ray-free core; it must at least reach run.types
    assert any(d.startswith("retrain_ray.") for d in graph["retrain_ray.run.loop"])


def test_no_module_import_cycle() -> None:
    cycle = find_cycle(module_graph())
    assert cycle is None, "module import cycle: " + " -> ".join(cycle or [])


def test_no_subpackage_import_cycle() -> None:
    cycle = find_cycle(package_graph(module_graph()))
    assert cycle is None, "sub-package import cycle: " + " -> ".join(cycle or [])


def _function_level_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    found: list[ast.Import | ast.ImportFrom] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found += [n for n in _runtime_imports(node) if isinstance(n, (ast.Import, ast.ImportFrom))]
    return list({(n.lineno, n.col_offset): n for n in found}.values())  # nested functions: once


def _comment_lines(source: str) -> set[int]:
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    return {tok.start[0] for tok in tokens if tok.type == tokenize.COMMENT}


def uncommented_function_level_imports() -> list[str]:
    """`file:line: import ...` for each import inside a function with no comment on its own lines nor a
    comment line right above it; a comment line above a block of consecutive imports covers the block."""
    bare = []
    for path in sorted(discover_modules().values()):
        source = path.read_text()
        comments = _comment_lines(source)
        lines = source.splitlines()
        covered_until = 0  # last line of the latest commented import (a block continues from it)
        for node in sorted(_function_level_imports(ast.parse(source, str(path))), key=lambda n: n.lineno):
            end = node.end_lineno or node.lineno
            above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
            if comments & set(range(node.lineno, end + 1)) or above.startswith("#") or covered_until == node.lineno - 1:
                covered_until = end
            else:
                bare.append(f"{path.relative_to(ROOT.parent)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    return sorted(bare)


def test_function_level_import_check_sees_comments_on_the_line_or_above(tmp_path, monkeypatch) -> None:
    source = ("def f():\n    # heavy\n    import torch\n    import peft\n\n    import json\n"
              "    import ray  # optional\n    if x:  # about x\n        import os\n")
    assert sorted(n.lineno for n in _function_level_imports(ast.parse(source))) == [3, 4, 6, 7, 9]
    assert _comment_lines(source) == {2, 7, 8}
    (tmp_path / "m.py").write_text(source)
    monkeypatch.setattr(f"{__name__}.discover_modules", lambda: {"m": tmp_path / "m.py"})
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path / "pkg")
    assert uncommented_function_level_imports() == ["m.py:6: import json", "m.py:9: import os"]


def test_every_function_level_import_says_why_it_is_deferred() -> None:
    bare = uncommented_function_level_imports()
    assert not bare, (
        "imports inside functions need a comment (on the line or the line above) saying why they are "
        "deferred (a heavy or optional library); cheap ones belong at the top of the module:\n"
        + "\n".join(bare))


def _top_level_imports(path: Path) -> set[str]:
    """Every module a file imports when it is imported (not inside functions, not under TYPE_CHECKING)."""
    tree = ast.parse(path.read_text(), str(path))
    inside = {(n.lineno, n.col_offset) for n in _function_level_imports(tree)}
    names: set[str] = set()
    for node in _runtime_imports(tree):
        if (node.lineno, node.col_offset) in inside:
            continue
        names.update(alias.name for alias in node.names) if isinstance(node, ast.Import) else names.add(node.module or "")
    return names


def test_results_reads_a_campaign_back_without_ray_or_the_driver() -> None:
    """retrain_ray.results (and every module of the package it imports) loads neither Ray nor the campaign
    driver: reading results needs only the manifest and the logs (a deferred import of Ray for Tune's
    `Checkpoint` is allowed, with its comment)."""
    graph, modules = module_graph(), discover_modules()
    reached, todo = set(), [m for m in modules if m.startswith("retrain_ray.results")]
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo += graph[module]
    driver = sorted(m for m in reached if m.startswith("retrain_ray.campaign"))
    assert not driver, f"retrain_ray.results reaches the campaign driver: {driver}"
    ray = sorted(f"{m}: {n}" for m in reached for n in _top_level_imports(modules[m]) if n.split(".")[0] == "ray")
    assert not ray, f"retrain_ray.results imports Ray when it is imported: {ray}"


ARCHITECTURE = ROOT.parent / "docs" / "architecture.md"


def documented_layers(text: str) -> dict[str, int]:
    """Package (short name) -> its layer, from the ```layers block of docs/architecture.md."""
    block = re.search(r"^```layers\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)
    assert block, "docs/architecture.md has no ```layers block"
    layers: dict[str, int] = {}
    for line in block.group(1).splitlines():
        level, _, names = line.partition(":")
        for name in names.split():
            assert name not in layers, f"{name} is on two layers of docs/architecture.md"
            layers[name] = int(level)
    return layers


def upward_imports(packages: dict[str, set[str]], layers: dict[str, int]) -> list[str]:
    """`a -> b (layer i -> j)` for every package import that goes up the layers. The package root registers
    the check pass and `__main__` runs the CLI: both sit above every layer. Importing the root itself (its
    `__version__`) is no edge: every `import retrain_ray.x` runs it anyway."""
    top = max(layers.values()) + 1
    def level(package: str) -> int:
        short = package.removeprefix(f"{PACKAGE}.")
        return top if short in (PACKAGE, "__main__") else layers[short]
    return sorted(f"{a} -> {b} (layer {level(a)} -> {level(b)})" for a, deps in packages.items() for b in deps
                  if b != PACKAGE and level(b) > level(a))


def test_every_package_has_a_documented_layer() -> None:
    layers = documented_layers(ARCHITECTURE.read_text(encoding="utf-8"))
    packages = {p.removeprefix(f"{PACKAGE}.") for p in package_graph(module_graph())} - {PACKAGE, "__main__"}
    assert packages <= set(layers), f"packages missing from the ```layers block: {sorted(packages - set(layers))}"
    assert set(layers) <= packages, f"the ```layers block names packages that do not exist: {sorted(set(layers) - packages)}"


def test_no_import_goes_up_the_layers() -> None:
    layers = documented_layers(ARCHITECTURE.read_text(encoding="utf-8"))
    upward = upward_imports(package_graph(module_graph()), layers)
    assert not upward, "imports that go up the layers of docs/architecture.md:\n" + "\n".join(upward)


def test_a_planted_upward_import_is_caught(tmp_path, monkeypatch) -> None:
    """A module of config/ (layer 1) that imports the campaign driver (layer 5) is refused, naming the edge."""
    planted = ROOT / "config" / "_planted_upward.py"
    monkeypatch.setattr(f"{__name__}.discover_modules",
                        lambda: {**_real_discover(), f"{PACKAGE}.config._planted_upward": planted})
    monkeypatch.setattr(Path, "read_text", _reading(planted, "from retrain_ray.campaign import driver\n"))
    layers = documented_layers(ARCHITECTURE.read_text(encoding="utf-8"))
    assert "retrain_ray.config -> retrain_ray.campaign (layer 1 -> 5)" in upward_imports(
        package_graph(module_graph()), layers)


_real_discover = discover_modules


def _reading(planted: Path, source: str):
    original = Path.read_text

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        return source if self == planted else original(self, *args, **kwargs)
    return read_text


def test_config_imports_only_config_and_util_and_algorithms_only_util() -> None:
    """config/ is the schema: below every component, it reaches only util/; algorithms/ is pure."""
    packages = package_graph(module_graph())
    assert packages[f"{PACKAGE}.config"] <= {f"{PACKAGE}.util"}, packages[f"{PACKAGE}.config"]
    assert packages[f"{PACKAGE}.algorithms"] <= {f"{PACKAGE}.util"}, packages[f"{PACKAGE}.algorithms"]
