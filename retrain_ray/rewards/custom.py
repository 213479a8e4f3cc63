"""`custom` reward: a user function `fn(completion, reference) -> float-like`, sync or async.

As the original: `importlib.import_module(custom_module).<custom_function>` (default "score"),
coroutines awaited, `float()` of the result. Additions: `module:function` shorthand, failures to
import or find the function are reported at build time naming the module, and a batch's
coroutines run concurrently on one event loop (a helper thread when the caller is itself inside
a running loop, e.g. a Ray async actor), waited on for at most `timeout_s`. Synchronous calls are
bounded too: the batch runs on a daemon thread, and a batch still running after `timeout_s` raises
`RewardTimeoutError` naming the function (the thread cannot be stopped; the run fails and its
process ends, which ends the thread).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import inspect
import threading
from collections.abc import Callable
from typing import Any

from retrain_ray.rewards.types import check_batch


def resolve_function(module_name: str, function_name: str) -> Callable[..., Any]:
    """Import `module_name` and return its `function_name`, with errors that say what to fix."""
    if ":" in module_name:
        module_name, function_name = module_name.split(":", 1)
    if not module_name:
        raise ValueError(
            "[reward] type = \"custom\" needs custom_module (e.g. custom_module = \"my_rewards:score\" "
            "or custom_module = \"my_rewards\" with custom_function = \"score\")"
        )
    try:
        module = importlib.import_module(module_name)
    except (ImportError, SyntaxError) as exc:
        raise ImportError(
            f"custom reward module {module_name!r} could not be imported ({exc}); make sure it is on "
            "PYTHONPATH (or installed) on every node, and check [reward] custom_module"
        ) from exc
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


class CustomReward:
    """Calls a user function per pair; awaits coroutine results together."""

    name = "custom"

    def __init__(self, module: str, function: str = "score", timeout_s: float = 300.0) -> None:
        self.fn = resolve_function(module, function)
        self.label = f"{module}:{function}" if ":" not in module else module
        self.timeout_s = timeout_s

    def score_batch(self, completions: list[str], references: list[str]) -> list[float]:
        check_batch(completions, references)
        pairs = list(zip(completions, references, strict=True))
        results = _call_bounded(self.fn, pairs, self.timeout_s, self.label)
        pending = [i for i, value in enumerate(results) if inspect.isawaitable(value)]
        if pending:
            awaited = _run_coroutines([results[i] for i in pending], self.timeout_s)
            for i, value in zip(pending, awaited, strict=True):
                results[i] = value
        return [self._to_float(value) for value in results]

    def _to_float(self, value: Any) -> float:
        try:
            return float(value)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"custom reward {self.label} returned {value!r}, which is not a number; return a float"
            ) from exc
