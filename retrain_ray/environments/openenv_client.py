"""A client of OpenEnv's WebSocket protocol (meta-pytorch/OpenEnv, `openenv.core.env_client`), written
against the protocol rather than importing the `openenv` package, and tested against openenv-core's own
server (`openenv.core.env_server.http_server`, openenv-core 0.2.1; tests/environments/test_openenv.py).

The wire protocol: a server serves one environment instance per WebSocket connection at `<base>/ws`
(an `http://` base URL is reached as `ws://`, `https://` as `wss://`). The client sends JSON text
messages `{"type": "reset", "data": {reset kwargs, e.g. "seed"}}`, `{"type": "step", "data": {action
fields}}` and `{"type": "close"}`; the server answers each reset and step with `{"type": "observation",
"data": {"observation": {...}, "reward": number | null, "done": bool}}` and a failure with `{"type":
"error", "data": {"message": ..., "code": ...}}` (a VALIDATION_ERROR also carries pydantic's `errors`,
which the error here quotes). An observation's `reward` may be a boolean (openenv-core's
`Observation.reward` is `bool | int | float | None`): it counts 1 or 0. A server at capacity
(`max_concurrent_envs` sessions open) sends error `CAPACITY_REACHED` as soon as a connection opens and
closes it; sessions just closed may still count there for a moment, so that is retried like a dropped
connection. The WebSocket is the only way to play more than one turn: OpenEnv's HTTP `/reset` and
`/step` build a fresh environment for every request.

A `Session` is one episode that survives connection drops: every wait has a timeout, and a connection
that fails (refused, dropped, silent past its timeout) is opened again with exponential backoff, at most
`retries` more times; a session already in an episode replays its reset and steps on the new connection
and checks that the server answers them as before (an environment that is not reproducible from its
reset arguments is an error, not a silent different episode). Past the retries, the error names the
URL, what failed and the keys that tune it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

MAX_BACKOFF_S = 8.0
MAX_MESSAGE_BYTES = 100 * 1024 * 1024  # OpenEnv's own client default: observations may hold screenshots


class OpenEnvError(ConnectionError):
    """The OpenEnv server could not be reached, kept dropping, or answered with an error; the message
    names `[environment] id`, the URL and the fix."""


@dataclass(frozen=True)
class Reply:
    """The server's answer to a reset or a step."""

    observation: dict[str, Any]
    reward: float | None
    done: bool


@dataclass(frozen=True)
class Link:
    """Where the server is and how long to wait for it (`[environment] id` and args)."""

    url: str
    connect_timeout_s: float = 10.0
    message_timeout_s: float = 60.0
    retries: int = 3
    backoff_s: float = 0.5

    @property
    def ws_url(self) -> str:
        return ws_url(self.url)

    def error(self, what: str) -> OpenEnvError:
        return OpenEnvError(f"environment.id = {self.url!r}: the OpenEnv server at {self.ws_url} {what}")


def ws_url(url: str) -> str:
    """The WebSocket endpoint of an OpenEnv base URL: http -> ws, https -> wss, `/ws` appended."""
    parts = urlsplit(url.strip())
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    path = parts.path.rstrip("/")
    if not path.endswith("/ws"):
        path += "/ws"
    return urlunsplit((scheme, parts.netloc, path, parts.query, ""))


class _Dropped(Exception):
    """A connection that failed in a way another connection may not (refused, closed, timed out)."""


class _Busy(_Dropped):
    """The server refused a session at capacity (openenv-core's CAPACITY_REACHED), which frees up as other
    sessions close."""


class _Socket:
    """One open WebSocket connection: one environment instance on the server."""

    def __init__(self, link: Link) -> None:
        # deferred: the websockets client loads only for runs with an OpenEnv environment
        from websockets.exceptions import InvalidHandshake, InvalidStatus, InvalidURI
        from websockets.sync.client import connect

        self.link = link
        host = urlsplit(link.ws_url).hostname or ""
        try:
            self.ws = connect(link.ws_url, open_timeout=link.connect_timeout_s, close_timeout=1.0,
                              max_size=MAX_MESSAGE_BYTES, proxy=None if _is_loopback(host) else True)
        except InvalidURI as exc:
            raise link.error(f"is no valid WebSocket URL ({exc}); write it as http(s)://host:port") from None
        except InvalidStatus as exc:
            status = exc.response.status_code
            raise link.error(f"refused the WebSocket handshake with HTTP {status}: is it an OpenEnv server "
                             "(one that serves /ws)?") from None
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            raise _Dropped(f"connecting failed ({_describe(exc)})") from exc

    def request(self, message: dict[str, Any]) -> Reply:
        # deferred: as in __init__
        from websockets.exceptions import ConnectionClosed

        try:
            self.ws.send(json.dumps(message))
            raw = self.ws.recv(timeout=self.link.message_timeout_s)
        except TimeoutError:
            raise _Dropped(f"gave no answer to a {message['type']} within {self.link.message_timeout_s:g} s "
                           "(message_timeout_s)") from None
        except (ConnectionClosed, OSError) as exc:
            said = self._last_words()  # a server that refuses a session says why, then closes
            if said is not None:
                return _reply(self.link, message["type"], said)
            raise _Dropped(f"the connection dropped during a {message['type']} ({_describe(exc)})") from exc
        return _reply(self.link, message["type"], raw)

    def _last_words(self) -> str | bytes | None:
        """A message the server sent before it closed the connection, if one is still buffered."""
        try:
            return self.ws.recv(timeout=0)
        except Exception:  # noqa: BLE001  (nothing was left, or the socket is gone: there is nothing to read)
            return None

    def close(self) -> None:
        try:
            self.ws.send(json.dumps({"type": "close"}))
        except Exception:  # noqa: BLE001  (best effort: the server may be gone already)
            pass
        self.ws.close()


CAPACITY_HINT = ("it serves no more sessions at once: raise its max_concurrent_envs (openenv-core's create_app) "
                 "to at least batch_size x group_size, every episode of a step being one session")


def _reply(link: Link, kind: str, raw: str | bytes) -> Reply:
    try:
        message: Any = json.loads(raw)
    except ValueError:
        raise link.error(f"answered a {kind} with text that is not JSON: {str(raw)[:80]!r}") from None
    data: Any = message.get("data") if isinstance(message, dict) else None
    if not isinstance(data, dict):
        raise link.error(f"answered a {kind} with {str(raw)[:80]!r}, not an OpenEnv message")
    if message.get("type") == "error":
        _raise_error(link, kind, data)
    if message.get("type") != "observation":
        raise link.error(f"answered a {kind} with {str(raw)[:80]!r}, not an observation")
    return _observation(link, kind, data)


def _raise_error(link: Link, kind: str, data: dict[str, Any]) -> None:
    """openenv-core's error message (`{"type": "error", "data": {"message", "code", ...}}`) as an error."""
    code, text = data.get("code", "UNKNOWN"), data.get("message", data)
    if code == "CAPACITY_REACHED":
        # sessions the client closed a moment ago may still count on the server: worth another try
        raise _Busy(f"refused a session at capacity ({text}); {CAPACITY_HINT}")
    details = _validation_details(data.get("errors"))
    hint = ("; set [environment] args.action_key to the field the server's action takes"
            if code == "VALIDATION_ERROR" and kind == "step" else "")
    raise link.error(f"answered a {kind} with error {code}: {text}{details}{hint}")


def _validation_details(errors: Any) -> str:
    """pydantic's errors (openenv-core sends `e.errors()` with a VALIDATION_ERROR), as `(field: why; ...)`."""
    if not isinstance(errors, list):
        return ""
    parts = [f"{'.'.join(str(x) for x in e.get('loc', ())) or '?'}: {e.get('msg', '')}"
             for e in errors if isinstance(e, dict)]  # pyright: ignore[reportUnknownVariableType]
    return f" ({'; '.join(parts)})" if parts else ""


def _observation(link: Link, kind: str, data: dict[str, Any]) -> Reply:
    observation: Any = data.get("observation", {})
    reward: Any = data.get("reward")
    if not isinstance(observation, dict):
        raise link.error(f"answered a {kind} with observation {observation!r}, not a JSON object")
    # openenv-core's Observation.reward is `bool | int | float | None`: a boolean reward counts 1 or 0
    if reward is not None and not isinstance(reward, bool | int | float):
        raise link.error(f"answered a {kind} with reward {reward!r}, not a number")
    return Reply({str(k): v for k, v in observation.items()},
                 None if reward is None else float(reward), bool(data.get("done", False)))


@dataclass
class Session:
    """One episode on the server, kept across connection drops (see the module docstring)."""

    link: Link
    _socket: _Socket | None = None
    _played: list[tuple[dict[str, Any], Reply]] = field(default_factory=list[tuple[dict[str, Any], Reply]])

    def reset(self, data: dict[str, Any]) -> Reply:
        self._played = []
        return self._call({"type": "reset", "data": data})

    def step(self, action: dict[str, Any]) -> Reply:
        if not self._played:
            raise RuntimeError("OpenEnv session: step before reset")
        return self._call({"type": "step", "data": action})

    def close(self) -> None:
        if self._socket is not None:
            socket, self._socket = self._socket, None
            socket.close()

    def _call(self, message: dict[str, Any]) -> Reply:
        last = _Dropped("")
        for attempt in range(self.link.retries + 1):
            if attempt:
                time.sleep(min(MAX_BACKOFF_S, self.link.backoff_s * 2 ** (attempt - 1)))
            try:
                socket = self._socket or self._reopen()
                reply = socket.request(message)
            except _Dropped as exc:
                last = exc
                self._discard()
                continue
            self._played.append((message, reply))
            return reply
        tries = self.link.retries + 1
        times = f"{tries} time{'s' if tries > 1 else ''} in a row"
        if isinstance(last, _Busy):
            raise self.link.error(f"{last} ({times}; waits and retries: [environment] args retries)")
        raise self.link.error(f"failed {times} (last: {last}); check that it runs and that [environment] id "
                              "points at it (waits and retries: [environment] args connect_timeout_s, "
                              "message_timeout_s, retries)")

    def _reopen(self) -> _Socket:
        """A new connection, with this session's episode so far replayed on it."""
        socket = _Socket(self.link)
        self._socket = socket
        for message, before in self._played:
            again = socket.request(message)
            if again != before:
                self._discard()
                raise self.link.error(
                    f"dropped the connection mid-episode, and replaying the episode on a new connection gave "
                    f"{again} where it first gave {before}: its environment is not reproducible from the reset "
                    "arguments, so the episode cannot continue; keep the server up or make reset(seed) "
                    "deterministic")
        return socket

    def _discard(self) -> None:
        socket, self._socket = self._socket, None
        if socket is not None:
            try:
                socket.ws.close()
            except Exception:  # noqa: BLE001  (it failed already; closing is best effort)
                pass


def _is_loopback(host: str) -> bool:
    return host in ("localhost", "::1") or host.startswith("127.")


def _describe(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
