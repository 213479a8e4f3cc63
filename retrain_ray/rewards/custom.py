"""`custom` reward: a user function `fn(completion, reference) -> float-like`, sync or async.

As the original: `custom_module`'s `<custom_function>` (default "score"), the module imported through the
plugin loader (under `[plugins] search_paths`, then as given, as every plugin), coroutines awaited, `float()` of the result. Additions: `module:function` shorthand, failures to
import or find the function are reported at build time naming the module, and a batch's
coroutines run concurrently on one event loop (a helper thread when the caller is itself inside
a running loop, e.g. a Ray async actor), waited on for at most `timeout_s`. Synchronous calls are
bounded too: the batch runs on a daemon thread, and a batch still running after `timeout_s` raises
`RewardTimeoutError` naming the function (the thread cannot be stopped; the run fails and its
process ends, which ends the thread).

With `[reward] workers = N` > 1 a synchronous function is called item by item across N worker
processes (`rewards/parallel.py`), each item bounded by `timeout_s`; the module must be importable
in a fresh process (it is: the workers inherit `sys.path`, and are given the folder it was found in). An async function keeps the one event
loop and its concurrency: `workers` does not apply to it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from retrain_ray.plugins.loader import LOADER, PluginLoader
from retrain_ray.rewards.parallel import ItemTimeoutError, WorkerPool
from retrain_ray.rewards.types import check_batch

_WORKER_FUNCTIONS: dict[tuple[str, str], Callable[..., Any]] = {}


def _import(module_name: str, loader: PluginLoader) -> ModuleType:
    module, _ = loader.find(module_name, module_name, "[reward] custom_module")
    return module


def import_root(module: ModuleType) -> str:
    """The folder `module` imports from as its own name (what a worker process needs to import it too)."""
    file = Path(getattr(module, "__file__", None) or ".").absolute()
    depth = len(module.__name__.split(".")) - (0 if file.name == "__init__.py" else 1)
    return str(file.parents[depth]) if depth < len(file.parents) else ""


def resolve_module(module_name: str, function_name: str, loader: PluginLoader = LOADER) -> tuple[ModuleType, str]:
    """The module of `custom_module` (imported by `loader`) and the function name, with errors that say what
    to fix."""
    if ":" in module_name:
        module_name, function_name = module_name.split(":", 1)
    if not module_name:
        raise ValueError(
            "[reward] type = \"custom\" needs custom_module (e.g. custom_module = \"my_rewards:score\" "
            "or custom_module = \"my_rewards\" with custom_function = \"score\")"
        )
    try:
        return _import(module_name, loader), function_name
    except (ImportError, SyntaxError, ValueError) as exc:
        raise ImportError(
            f"custom reward module {module_name!r} could not be imported ({exc}); make sure it is on "
            "PYTHONPATH (or installed) on every node, and check [reward] custom_module"
        ) from exc


def resolve_function(module_name: str, function_name: str, loader: PluginLoader = LOADER) -> Callable[..., Any]:
    """Import `module_name` and return its `function_name`, with errors that say what to fix."""
    module, function_name = resolve_module(module_name, function_name, loader)
    return _function_of(module, module_name.partition(":")[0], function_name)


def _function_of(module: ModuleType, module_name: str, function_name: str) -> Callable[..., Any]:
    fn = getattr(module, function_name or "score", None)
    if not callable(fn):
        raise AttributeError(
            f"custom reward module {module_name!r} has no callable {function_name!r}; "
            "check [reward] custom_function"
        )
    return fn


class RewardTimeoutError(TimeoutError):
    """A custom reward took longer than its timeout for one batch."""


class RewardFunctionError(ValueError):
    """A custom reward raised; the message names the function and the completion, the cause is chained."""


def _call_bounded(fn: Callable[[str, str], Any], pairs: list[tuple[str, str]], timeout_s: float, label: str) -> list[Any]:
    """`[fn(c, r) for c, r in pairs]` on a daemon thread, waited on for at most `timeout_s`."""
    box: dict[str, Any] = {}

    def work() -> None:
        results = []
        try:
            for c, r in pairs:
                results.append(fn(c, r))
        except Exception as exc:  # re-raised in the caller's thread
            error = RewardFunctionError(f"custom reward {label} raised {type(exc).__name__}: {exc} "
                                        f"(completion {len(results)}: {c[:80]!r}); fix the reward function")
            error.__cause__ = exc
            box["error"] = error
        box["results"] = results

    thread = threading.Thread(target=work, name=f"reward-{label}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise RewardTimeoutError(
            f"custom reward {label} did not return within {timeout_s:g} s for a batch of {len(pairs)} completions; "
            "make it faster, raise [reward] timeout_s, or return a coroutine and it will be awaited with the same limit"
        )
    if "error" in box:
        raise box["error"]
    return box["results"]


async def _gather(awaitables: list[Any]) -> list[Any]:
    return list(await asyncio.gather(*awaitables))


def _run_coroutines(awaitables: list[Any], timeout_s: float) -> list[Any]:
    bounded = asyncio.wait_for(_gather(awaitables), timeout_s)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(bounded)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, bounded).result()


def _score_in_worker(module: str, function: str, root: str, label: str, completion: str, reference: str) -> float:
    """One pair, in a worker process (the function is imported once per process, as its module was found:
    by its full name, from `root` first)."""
    key = (module, function)
    if key not in _WORKER_FUNCTIONS:
        loader = PluginLoader((), (root,) if root else (), roots_first=True)
        _WORKER_FUNCTIONS[key] = resolve_function(module, function, loader)
    try:
        value = _WORKER_FUNCTIONS[key](completion, reference)
        if inspect.isawaitable(value):
            value = asyncio.run(_gather([value]))[0]
    except Exception as exc:
        raise RewardFunctionError(f"custom reward {label} raised {type(exc).__name__}: {exc} "
                                  f"(completion {completion[:80]!r}); fix the reward function") from exc
    return to_float(value, label)


def to_float(value: Any, label: str) -> float:
    """`float(value)`, or an error naming the reward function."""
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(
            f"custom reward {label} returned {value!r}, which is not a number; return a float"
        ) from exc


class CustomReward:
    """Calls a user function per pair; awaits coroutine results together."""

    name = "custom"

    def __init__(self, module: str, function: str = "score", timeout_s: float = 300.0, workers: int = 1) -> None:
        found, function = resolve_module(module, function)
        self.fn = _function_of(found, module.partition(":")[0], function)
        self.label = f"{module}:{function}" if ":" not in module else module
        self.timeout_s = timeout_s
        self._target = (found.__name__, function or "score", import_root(found))
        parallel = workers > 1 and not inspect.iscoroutinefunction(self.fn)
        self._workers = WorkerPool(workers, _score_in_worker, self.label) if parallel else None

    def score_batch(self, completions: list[str], references: list[str]) -> list[float]:
        check_batch(completions, references)
        pairs = list(zip(completions, references, strict=True))
        if self._workers is not None:
            return self._score_in_workers(self._workers, pairs)
        results = _call_bounded(self.fn, pairs, self.timeout_s, self.label)
        pending = [i for i, value in enumerate(results) if inspect.isawaitable(value)]
        if pending:
            awaited = _run_coroutines([results[i] for i in pending], self.timeout_s)
            for i, value in zip(pending, awaited, strict=True):
                results[i] = value
        return [to_float(value, self.label) for value in results]

    def _score_in_workers(self, workers: WorkerPool, pairs: list[tuple[str, str]]) -> list[float]:
        items = [(*self._target, self.label, c, r) for c, r in pairs]
        try:
            return workers.map(items, timeout_s=self.timeout_s)
        except ItemTimeoutError as exc:
            raise RewardTimeoutError(
                f"custom reward {self.label} did not return within {self.timeout_s:g} s for completion "
                f"{exc.index} of a batch of {len(pairs)}; make it faster"
            ) from None

    def close(self) -> None:
        """Stop the worker processes, if any were started."""
        if self._workers is not None:
            self._workers.close()
