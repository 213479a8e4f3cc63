"""No module outside its registry compares an engine, backend, endpoint or trainer name with a string
(issues 22.3 and 33.1).

Each built-in engine and backend is a spec in `retrain_ray/backends/registry.py` (which also names the throttled
endpoints, "tinker" and "inference"), each trainer one in `retrain_ray/run/trainers/registry.py`; code elsewhere
asks the spec (`backend_spec(name).trains_locally`, `engine_spec(name).is_http`, `trainer_spec(name).loads_plugin`...)
instead of testing the name."""

from __future__ import annotations

import ast
from pathlib import Path

import retrain_ray

PACKAGE = Path(retrain_ray.__file__).parent
REGISTRY = PACKAGE / "backends" / "registry.py"
TRAINER_REGISTRY = PACKAGE / "run" / "trainers" / "registry.py"
NAMES = frozenset({"engine", "backend", "endpoint"})
TRAINER_NAMES = frozenset({"trainer"})


def _names_engine_or_backend(node: ast.expr, names: frozenset[str] = NAMES) -> bool:
    """`x.engine`, `x.backend`, `x.endpoint`, or a variable called so (with `names`: one of those)."""
    if isinstance(node, ast.Attribute):
        return node.attr in names
    return isinstance(node, ast.Name) and node.id in names


def _is_string_literal(node: ast.expr) -> bool:
    """A string constant, or a tuple / list / set of them."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return bool(node.elts) and all(_is_string_literal(e) for e in node.elts)
    return False


def _pattern_has_string(pattern: ast.pattern) -> bool:
    return any(isinstance(n, ast.MatchValue) and _is_string_literal(n.value) for n in ast.walk(pattern))


def name_comparisons(source: str, names: frozenset[str] = NAMES) -> list[int]:
    """Line numbers where an engine/backend/endpoint name (or one of `names`) is compared with a string
    literal (==, !=, in, not in, match/case)."""
    lines: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for op, left, right in zip(node.ops, operands, operands[1:], strict=False):
                if not isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)):
                    continue
                if (_names_engine_or_backend(left, names) and _is_string_literal(right)) or (
                        isinstance(op, (ast.Eq, ast.NotEq)) and _names_engine_or_backend(right, names)
                        and _is_string_literal(left)):
                    lines.append(node.lineno)
        elif isinstance(node, ast.Match) and _names_engine_or_backend(node.subject, names):
            lines.extend(case.pattern.lineno for case in node.cases if _pattern_has_string(case.pattern))
    return sorted(lines)


def test_the_counter_catches_every_form_and_nothing_else() -> None:
    planted = "\n".join([
        'if cfg.backend.backend == "tinker": pass',  # 1
        'if engine != "local": pass',  # 2
        'if cfg.inference.engine in ("openai", "vllm"): pass',  # 3
        'if backend not in ["local"]: pass',  # 4
        'if "tinker" == backend: pass',  # 5
        "match cfg.backend.backend:",  # 6
        '    case "local": pass',  # 7
        "    case _: pass",  # 8
        # unrelated: not an engine/backend name, not a literal, or another operator
        'if address == "local": pass',  # 9
        "if cfg.backend.backend == other: pass",  # 10
        'if cfg.backend.devices == "cpu": pass',  # 11
        'if backend_name == "tinker": pass',  # 12
        'if "x" in cfg.backend.options: pass',  # 13
        "if cfg.backend.backend in KNOWN: pass",  # 14
    ])
    assert name_comparisons(planted) == [1, 2, 3, 4, 5, 7]


def test_no_engine_or_backend_name_is_compared_outside_the_registry() -> None:
    found = {
        f"{path.relative_to(PACKAGE.parent)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py")) if path != REGISTRY
        for line in name_comparisons(path.read_text(encoding="utf-8"))
    }
    assert not found, f"ask the spec in backends/registry.py instead of comparing names: {sorted(found)}"



def test_the_counter_catches_endpoint_and_trainer_names() -> None:
    endpoints = "\n".join([
        'if endpoint == "tinker": pass',  # 1
        'if throttled.endpoint in ("tinker", "inference"): pass',  # 2
        'if endpoint_name == "inference": pass',  # 3: not an endpoint variable
    ])
    assert name_comparisons(endpoints) == [1, 2]
    trainers = "\n".join([
        'if cfg.training.trainer == "command": pass',  # 1
        'if trainer in ("sft", "ttt_discover"): pass',  # 2
        '    ',  # 3
        'if "retrain" != trainer: pass',  # 4
        "match t.trainer:",  # 5
        '    case "sft": pass',  # 6
        'if trainer_command == "x": pass',  # 7: not a trainer name
    ])
    assert name_comparisons(trainers, TRAINER_NAMES) == [1, 2, 4, 6]


def test_no_trainer_name_is_compared_outside_the_trainer_registry() -> None:
    found = {
        f"{path.relative_to(PACKAGE.parent)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py")) if path != TRAINER_REGISTRY
        for line in name_comparisons(path.read_text(encoding="utf-8"), TRAINER_NAMES)
    }
    assert not found, f"ask the spec in run/trainers/registry.py instead of comparing names: {sorted(found)}"
