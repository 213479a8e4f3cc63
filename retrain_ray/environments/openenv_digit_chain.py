"""`digit_chain` as an OpenEnv environment: written on openenv-core's own API (`openenv.core.env_server`:
an `Environment` with its `Action` and `Observation` models) and served by openenv-core's own server
(`create_app` under uvicorn), so an `[environment] provider = "openenv"` run can be tried against a real
OpenEnv server without Docker. The OpenEnv tests run against it, and configs/openenv.toml trains on it.

    pip install 'retrain-ray[environments]'                  # openenv-core
    python -m retrain_ray.environments.openenv_digit_chain   # http://127.0.0.1:8000
    python -m retrain_ray.environments.openenv_digit_chain --port 8123 --digits 4 --max-sessions 64

Reset `{"seed": s}` starts the digit_chain episode of digit string number `s` (the same for the same seed
and `--digits`); a step's action is `{"message": completion}`. Observations carry `prompt` (digit_chain's
prompt: the conversation so far) and `turn`; each step's reward is digit_chain's turn reward divided by
its two turns, so an episode's summed reward is digit_chain's episode reward. Every WebSocket connection
is a session with an environment of its own, at most `--max-sessions` at once (openenv-core's
`max_concurrent_envs`; a run holds `batch_size x group_size` at once).
"""

from __future__ import annotations

import argparse
import random
from typing import Any

from pydantic import Field

try:  # openenv-core is an optional extra: only this server needs it, the client does not
    from openenv.core.env_server.http_server import create_app
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import Action, Observation, State
except ImportError as missing:
    raise ImportError(f"{missing}: the OpenEnv digit_chain server needs openenv-core; "
                      "pip install 'retrain-ray[environments]'") from missing

from retrain_ray.data.types import Example
from retrain_ray.environments.digit_chain import DIGITS, TURNS, DigitChain, DigitChainEpisode

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_MAX_SESSIONS = 64


class DigitChainAction(Action):
    """The model's completion, verbatim."""

    message: str = Field(..., description="the completion: \\boxed{d} or a digit first")


class DigitChainObservation(Observation):
    """The next prompt (the conversation so far) and the turn it is for."""

    prompt: str = Field(default="", description="the prompt of the next turn")
    turn: int = Field(default=0, ge=0, description="turns played so far")


def seed_example(seed: int, digits: int) -> Example:
    """The digit string a reset with `seed` plays."""
    rng = random.Random(f"openenv-digit-chain:{digits}:{seed}")
    text = str(rng.randint(1, 9)) + "".join(rng.choice(DIGITS) for _ in range(digits - 1))
    return Example(text, text[0])


class DigitChainEnvironment(Environment[DigitChainAction, DigitChainObservation, State]):
    """One session's digit_chain episodes (one instance per WebSocket connection)."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # no state is shared between instances
    DIGITS = 3

    def __init__(self) -> None:
        super().__init__()
        self.game = DigitChain({"digits": self.DIGITS})
        self.episode: DigitChainEpisode | None = None
        self._state = State(step_count=0)

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> DigitChainObservation:
        self.episode = self.game.reset(seed_example(seed or 0, self.DIGITS))
        self._state = State(episode_id=episode_id, step_count=0)
        return DigitChainObservation(prompt=self.episode.prompt(), turn=0)

    def step(self, action: DigitChainAction, timeout_s: float | None = None, **kwargs: Any) -> DigitChainObservation:
        if self.episode is None:
            raise RuntimeError("step before reset: send a reset first")
        result = self.episode.step(action.message)
        self._state.step_count += 1
        return DigitChainObservation(prompt=result.observation or "", turn=len(self.episode.answers),
                                     reward=result.reward / TURNS, done=result.done)

    @property
    def state(self) -> State:
        return self._state


def environment_class(digits: int) -> type[DigitChainEnvironment]:
    """The environment class for `digits`-long strings (openenv-core builds one instance per session)."""
    if not 1 <= digits <= 6:
        raise ValueError(f"--digits {digits}: the digit string length must be 1-6")
    return type("DigitChainEnvironment", (DigitChainEnvironment,), {"DIGITS": digits})


def make_app(digits: int = 3, max_sessions: int = DEFAULT_MAX_SESSIONS) -> Any:
    """openenv-core's FastAPI app serving the environment (`/ws`, `/reset`, `/step`, `/health`, ...)."""
    return create_app(environment_class(digits), DigitChainAction, DigitChainObservation,
                      env_name="digit_chain", max_concurrent_envs=max_sessions)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m retrain_ray.environments.openenv_digit_chain",
                                description="Serve digit_chain with openenv-core's server.")
    p.add_argument("--host", default=DEFAULT_HOST)
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--digits", type=int, default=3, help="digit string length, 1-6")
    p.add_argument("--max-sessions", type=int, default=DEFAULT_MAX_SESSIONS,
                   help="WebSocket sessions at once (at least batch_size x group_size)")
    args = p.parse_args(argv)
    # deferred: uvicorn loads only where the server runs
    import uvicorn

    uvicorn.run(make_app(args.digits, args.max_sessions), host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
