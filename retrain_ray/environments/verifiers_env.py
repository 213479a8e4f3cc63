"""`provider = "verifiers"`: an environment of the `verifiers` package (0.1.10, the extra
`retrain-ray[environments]`) behind the `Environment` protocol, so its episodes run in the same
multi-turn rollout as the built-in ones (run/multiturn.py).

`[environment] id` names an installed environment package (`vf.load_environment(id, **args)` imports
the module `id` with "-" as "_" and calls its `load_environment`). Nothing here calls a model server:
the run's own engine samples every turn, and the adapter drives the environment's own methods, as
verifiers' `MultiTurnEnv.rollout` does with a client (`init_state`, `setup_state`, `get_prompt_messages`
which asks `env_response` for the environment's reply, `add_trajectory_step`, `is_completed`), then
scores with the environment's rubric. A `SingleTurnEnv` is the one-turn case of the same loop.

  * Prompts: our engine takes a prompt as text, so a turn's prompt is the conversation so far, each
    message's content on its own line (a chat template, where the model has one, wraps that text as
    one user message).
  * Rewards: the cumulative reward after a turn is the rubric's score of the conversation so far; a
    turn's reward is its increase, so the turns sum to the episode's reward (the rubric's score of the
    whole episode).
  * TL-GRPO (`tl_grpo_branch_mode = "llm"`): an action is a completion's text; a replay plays the
    given completions from a fresh state of the same example and scores it, so an alternative sees the
    same environment replies the primary did only when the environment is deterministic.
  * MT-GRPO: per-turn advantages are the episode state's `turn_advantages` when the environment's
    rubric writes them (the original's convention), else none.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import tempfile
from collections.abc import Awaitable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, TypeVar

from retrain_ray.data.types import Example
from retrain_ray.environments.types import Episode, TurnResult
from retrain_ray.throttle.filelock import FileLockThrottle

VERIFIERS_REQUIREMENT = "verifiers>=0.1.10,<0.1.11"
INSTALL_HINT = "pip install 'retrain-ray[environments]' (verifiers 0.1.10)"
INSTALL_TIMEOUT_S = 900.0  # another run on this machine installing the environment: wait this long at most
INPUT_KEYS = ("prompt", "answer", "task", "info", "example_id")
T = TypeVar("T")


def require_verifiers() -> ModuleType:
    """The `verifiers` module; an error naming the extra to install when it is missing."""
    try:
        return importlib.import_module("verifiers")
    except ModuleNotFoundError:
        raise ValueError(f"environment.provider: \"verifiers\" needs the verifiers package, which is not "
                         f"installed; {INSTALL_HINT}") from None


def _quiet_datasets() -> None:
    """No `datasets` progress bar per dataset map (verifiers formats each split with one): the run has its own."""
    try:
        importlib.import_module("datasets").disable_progress_bars()
    except (ImportError, AttributeError):
        pass


@contextmanager
def _keeping_signal_handlers() -> Iterator[None]:
    """verifiers' `Environment.__post_init__` installs its own SIGINT/SIGTERM handlers (its teardown, then
    exit): they would replace the run's own, and `signal.signal` fails outside the main thread, where a Ray
    actor runs. While an environment loads, its module sees a `signal` whose `signal()` installs nothing
    (its atexit teardown still runs)."""
    namespace = vars(importlib.import_module("verifiers.envs.environment"))
    real = namespace["signal"]
    namespace["signal"] = SimpleNamespace(signal=lambda *_: None, SIGINT=real.SIGINT, SIGTERM=real.SIGTERM,
                                          default_int_handler=real.default_int_handler)
    try:
        yield
    finally:
        namespace["signal"] = real


def module_name(env_id: str) -> str:
    """The module verifiers imports for an id ("owner/my-env@0.2" -> "my_env")."""
    return unversioned(env_id).replace("-", "_").split("/")[-1]


def is_hub_id(env_id: str) -> bool:
    """An Environments Hub id (`owner/name[@version]`), which `auto_install` installs at run start."""
    return "/" in env_id and not env_id.startswith(("./", "/"))


def unversioned(env_id: str) -> str:
    """A hub id without its version ("owner/my-env@0.2" -> "owner/my-env"), as verifiers loads it."""
    return env_id.split("@", 1)[0]


def install_from_hub(env_id: str) -> None:
    """`[environment] auto_install = true`: a hub id (`owner/name[@version]`) whose package is not installed
    here is installed from Prime Intellect's Environments Hub with verifiers' own installer, as the original
    does; a local id, or one already installed, is left alone. Each machine that runs the environment
    installs it (a campaign's runs on other nodes each check), one process per machine at a time."""
    require_verifiers()
    tools = importlib.import_module("verifiers.utils.install_utils")
    if not is_hub_id(env_id) or missing_package(env_id) is None:  # importable: installed already
        return
    lock = FileLockThrottle(Path(tempfile.gettempdir()) / "retrain-ray-environment-install", 1,
                            timeout_s=INSTALL_TIMEOUT_S)
    with lock.hold():
        if missing_package(env_id) is None:  # another run on this machine installed it meanwhile
            return
        try:
            installed = bool(tools.install_from_hub(env_id))
        except Exception as exc:  # verifiers' installer: network, hub and uv errors alike
            installed, why = False, f" ({type(exc).__name__}: {exc})"
        else:
            why = ""
    if not installed:
        raise ValueError(f"environment.auto_install: could not install {env_id!r} from the Environments Hub{why}; "
                         "it needs the hub (network) and `uv` on PATH. Check the id, or install the package "
                         f"yourself (`prime env install {env_id}`) and set auto_install = false")
    importlib.invalidate_caches()


def missing_package(env_id: str) -> str | None:
    """Why `env_id` cannot load here (None: verifiers and the id's module are importable)."""
    if importlib.util.find_spec("verifiers") is None:
        return f"environment.provider: the verifiers package is not installed; {INSTALL_HINT}"
    name = module_name(env_id)
    if not name or importlib.util.find_spec(name) is None:
        return (f"environment.id: no installed verifiers environment {env_id!r} (no module {name!r}); install "
                f"its package (pip install {env_id.split('/')[-1]}, or `prime env install {env_id}` for a "
                "hub environment) or put its folder on PYTHONPATH")
    return None


def render(messages: object) -> str:
    """A conversation as one prompt text: each message's content on its own line."""
    if isinstance(messages, str):
        return messages
    if not isinstance(messages, list):
        return str(messages)
    parts: list[str] = []
    for message in messages:  # pyright: ignore[reportUnknownVariableType]
        content: object = message.get("content", "") if isinstance(message, Mapping) else message  # pyright: ignore[reportUnknownMemberType]
        parts.append(content if isinstance(content, str) else str(content))
    return "\n".join(parts)


class VerifiersEpisode:
    """One rollout of one dataset row: the verifiers state and the prompt of the turn to come."""

    def __init__(self, owner: VerifiersEnvironment, row: Mapping[str, object]) -> None:
        self.owner = owner
        self.state: Any = owner.run(owner.start(row))
        self.messages: object = owner.run(owner.env.get_prompt_messages(self.state))
        self.cumulative = 0.0
        self.done = False

    def prompt(self) -> str:
        return render(self.messages)

    def step(self, completion: str) -> TurnResult:
        if self.done:
            raise RuntimeError(f"environment {self.owner.name}: step after the episode is done")
        self.done, self.messages = self.owner.run(self.owner.advance(self.state, self.messages, completion))
        total = self.owner.run(self.owner.score(self.state))
        delta, self.cumulative = total - self.cumulative, total
        return TurnResult(completion, delta, self.done, None if self.done else render(self.messages))

    def reward(self) -> float:
        return self.cumulative


class VerifiersEnvironment:
    """A loaded verifiers environment (see the module docstring)."""

    def __init__(self, env_id: str, args: Mapping[str, object], *, auto_install: bool = False) -> None:
        vf = require_verifiers()
        if auto_install:
            install_from_hub(env_id)
        missing = missing_package(env_id)
        if missing:
            raise ValueError(missing)
        _quiet_datasets()
        try:
            with _keeping_signal_handlers():
                self.env: Any = vf.load_environment(unversioned(env_id), **args)
        except Exception as exc:  # the environment's own code: its message is the diagnosis
            raise ValueError(f"environment.id: verifiers environment {env_id!r} did not load with args "
                             f"{dict(args)!r}: {exc}; check [environment] args against its load_environment") from exc
        if not isinstance(self.env, vf.MultiTurnEnv):
            raise ValueError(f"environment.id: {env_id!r} is a {type(self.env).__name__}, not a verifiers "
                             "MultiTurnEnv (or SingleTurnEnv); retrain-ray drives those only")
        self.name = env_id
        self.vf = vf
        self._loop = asyncio.new_event_loop()
        self._rows: dict[Example, Mapping[str, object]] = {}

    def run(self, step: Awaitable[T]) -> T:
        """Runs one of the environment's coroutines on this environment's own event loop."""
        async def wrapped() -> T:
            return await step
        return self._loop.run_until_complete(wrapped())

    def examples(self) -> tuple[list[Example], list[Example]]:
        train = self._examples(self.env.get_dataset())
        self.env.build_eval_dataset()
        held_out = [] if self.env.eval_dataset is None else self._examples(self.env.eval_dataset)
        return train, held_out

    def _examples(self, rows: Iterable[Mapping[str, object]]) -> list[Example]:
        out: list[Example] = []
        for row in rows:
            example = Example(render(row.get("prompt", row.get("question", ""))), str(row.get("answer", "")))
            self._rows.setdefault(example, dict(row))
            out.append(example)
        return out

    def reset(self, example: Example) -> VerifiersEpisode:
        if not self._rows:
            self.examples()
        row = self._rows.get(example)
        if row is None:
            raise KeyError(f"environment {self.name}: no dataset row has the prompt {example.prompt[:60]!r}")
        return VerifiersEpisode(self, row)

    def turn_advantages(self, episodes: Sequence[Episode]) -> list[list[float]]:
        out: list[list[float]] = []
        for episode in episodes:
            given = episode.state.get("turn_advantages") if isinstance(episode, VerifiersEpisode) else None
            out.append([float(a) for a in given] if isinstance(given, list) else [])  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
        return out

    # TL-GRPO (Branchable): actions are completions, replayed from a fresh state of the example.
    def legal_actions(self, example: Example, before: Sequence[str]) -> list[str]:
        raise ValueError("training.tl_grpo_branch_mode: a verifiers environment names no action space; "
                         "set tl_grpo_branch_mode = \"llm\"")

    def replay(self, example: Example, actions: Sequence[str]) -> float:
        episode = self.reset(example)
        for action in actions:
            if episode.done:
                break
            episode.step(action)
        return episode.reward()

    def parse_action(self, completion: str) -> str | None:
        return completion

    # the environment's own steps, in the order MultiTurnEnv.rollout takes them
    async def start(self, row: Mapping[str, object]) -> Any:
        rollout_input = {k: row[k] for k in INPUT_KEYS if k in row}
        state = await self.env.init_state(rollout_input, client=None, model="retrain-ray", sampling_args=None)
        try:
            return await self.env.setup_state(state)
        except self.vf.Error as exc:
            state["error"] = exc
            return state

    async def advance(self, state: Any, messages: object, completion: str) -> tuple[bool, object]:
        """Adds the turn's completion; returns whether the episode is done and the next prompt."""
        said: object = completion if self.env.message_type == "completion" else \
            [{"role": "assistant", "content": completion}]
        step = self.vf.TrajectoryStep(prompt=messages, completion=said, response=None, tokens=None, reward=None,
                                      advantage=None, is_truncated=False, trajectory_id=state["trajectory_id"],
                                      extras={})
        await self.env.add_trajectory_step(state, step)
        if await self.env.is_completed(state):
            return True, None
        try:
            following = await self.env.get_prompt_messages(state)
        except self.vf.Error as exc:
            state["error"] = exc
            following = None
        # a final reply from env_response (final_env_response) or an error ends the episode here
        return await self.env.is_completed(state), following

    async def score(self, state: Any) -> float:
        await self.env.render_completion(state)
        await self.env.rubric.score_group([state])
        reward = state.get("reward")
        return float(reward) if isinstance(reward, int | float) else 0.0
