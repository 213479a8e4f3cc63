"""A local stand-in for an OpenEnv server: it speaks OpenEnv's WebSocket protocol
(environments/openenv_client.py) and serves the built-in `digit_chain` task, so that an
`provider = "openenv"` run can be tried, demonstrated and tested without Docker or the `openenv`
package. It is no OpenEnv server: it serves `/ws` and `GET /health` only (not OpenEnv's stateless HTTP
`/reset` and `/step`, its web UI or MCP), on any number of sessions at once.

    python -m retrain_ray.environments.openenv_standin            # http://127.0.0.1:8000 (configs/openenv.toml)
    python -m retrain_ray.environments.openenv_standin --port 8123 --digits 4

Reset `{"seed": s}` starts the digit_chain episode of digit string number `s` (the same for the same
seed and `--digits`); a step's action is `{"message": completion}`. Observations are `{"prompt": text,
"turn": t}`, the prompt being digit_chain's (the conversation so far); each step's reward is digit_chain's
turn reward divided by its two turns, so an episode's summed reward is digit_chain's episode reward.
`--drop-every N` closes the connection abruptly on every Nth step message (counted over all sessions),
as a crashing server or a broken network would, to exercise a client's reconnects.
"""

from __future__ import annotations

import argparse
import json
import random
import socket
import sys
import threading
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from retrain_ray.data.types import Example
from retrain_ray.environments.digit_chain import DIGITS, TURNS, DigitChain, DigitChainEpisode

if TYPE_CHECKING:
    from websockets.http11 import Request, Response
    from websockets.sync.server import Server, ServerConnection

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


def seed_example(seed: int, digits: int) -> Example:
    """The digit string a reset with `seed` plays."""
    rng = random.Random(f"openenv-standin:{digits}:{seed}")
    text = str(rng.randint(1, 9)) + "".join(rng.choice(DIGITS) for _ in range(digits - 1))
    return Example(text, text[0])


class StandIn:
    """The stand-in server; `start()` serves it on a thread, `stop()` ends it (also a context manager)."""

    def __init__(self, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, *, digits: int = 3,
                 drop_every: int = 0) -> None:
        self.host, self.port = host, port
        self.env = DigitChain({"digits": digits})
        self.drop_every = drop_every
        self.steps = 0  # step messages received, over all sessions
        self.sessions = 0  # connections accepted
        self._lock = threading.Lock()
        self._server: Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> StandIn:
        # deferred: the websockets server loads only where a stand-in runs
        from websockets.sync.server import serve

        self._server = serve(self._session, self.host, self.port, process_request=_health)
        self.port = int(self._server.socket.getsockname()[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="openenv-standin", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def __enter__(self) -> StandIn:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _session(self, connection: ServerConnection) -> None:
        """One WebSocket connection: one environment instance, until the client closes it."""
        with self._lock:
            self.sessions += 1
        episode: DigitChainEpisode | None = None
        for raw in connection:
            try:
                message = json.loads(raw)
                kind = message.get("type") if isinstance(message, dict) else None
                if kind == "close":
                    return
                if kind == "step" and self._drops():
                    connection.socket.shutdown(socket.SHUT_RDWR)  # abrupt: no close frame, as a crash
                    return
                episode, answer = self._answer(kind, message, episode)
            except Exception as exc:  # noqa: BLE001  (the protocol reports any failure as an error message)
                code = "INVALID_JSON" if isinstance(exc, json.JSONDecodeError) else "EXECUTION_ERROR"
                answer = {"type": "error", "data": {"message": str(exc), "code": code}}
            connection.send(json.dumps(answer))

    def _answer(self, kind: object, message: dict[str, Any],
                episode: DigitChainEpisode | None) -> tuple[DigitChainEpisode | None, dict[str, Any]]:
        data = message.get("data") or {}
        if kind == "reset":
            episode = self.env.reset(seed_example(int(data.get("seed", 0)), self.env.digits))
            return episode, _observation({"prompt": episode.prompt(), "turn": 0}, None, False)
        if kind == "step":
            if episode is None:
                raise RuntimeError("step before reset")
            if "message" not in data:
                return episode, {"type": "error", "data": {"message": "the action has no field 'message'",
                                                           "code": "VALIDATION_ERROR"}}
            result = episode.step(str(data["message"]))
            text = "" if result.observation is None else result.observation
            return episode, _observation({"prompt": text, "turn": len(episode.answers)}, result.reward / TURNS,
                                         result.done)
        if kind == "state":
            state = {"step_count": 0 if episode is None else len(episode.answers)}
            return episode, {"type": "state", "data": state}
        return episode, {"type": "error", "data": {"message": f"Unknown message type: {kind}", "code": "UNKNOWN_TYPE"}}

    def _drops(self) -> bool:
        with self._lock:
            self.steps += 1
            return self.drop_every > 0 and self.steps % self.drop_every == 0


def _observation(observation: dict[str, Any], reward: float | None, done: bool) -> dict[str, Any]:
    return {"type": "observation", "data": {"observation": observation, "reward": reward, "done": done}}


def _health(connection: ServerConnection, request: Request) -> Response | None:
    if request.path == "/health":
        return connection.respond(HTTPStatus.OK, '{"status": "healthy"}\n')
    if request.path.split("?")[0] != "/ws":
        return connection.respond(HTTPStatus.NOT_FOUND, "this stand-in serves /ws and /health\n")
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m retrain_ray.environments.openenv_standin",
                                description="Serve digit_chain over OpenEnv's WebSocket protocol.")
    p.add_argument("--host", default=DEFAULT_HOST)
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--digits", type=int, default=3, help="digit string length, 1-6")
    p.add_argument("--drop-every", type=int, default=0, metavar="N",
                   help="drop the connection on every Nth step message (0: never)")
    args = p.parse_args(argv)
    server = StandIn(args.host, args.port, digits=args.digits, drop_every=args.drop_every)
    try:
        server.start()
    except OSError as exc:
        print(f"error: cannot serve on {args.host}:{args.port} ({exc}); choose another --host or --port",
              file=sys.stderr)
        return 1
    print(f"OpenEnv stand-in (digit_chain, {args.digits} digits) at {server.url} (WebSocket {server.url}/ws); "
          "Ctrl-C stops it", flush=True)
    try:
        while True:
            threading.Event().wait(3600.0)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
