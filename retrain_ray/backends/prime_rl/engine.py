"""The sampler of the prime_rl backend: PRIME-RL's inference server is vLLM's OpenAI-compatible server,
so sampling is `OpenAIEngine`'s (`/v1/completions` with token ids in, token ids and per-token logprobs
out); only weight sync differs.

Weight sync, as PRIME-RL's orchestrator does it (PrimeIntellect-ai/prime-rl
`src/prime_rl/orchestrator/watcher.py` `apply_policy_update`, `src/prime_rl/utils/client.py`
`update_weights`): wait until the trainer has broadcast policy version n (`broadcasts/step_<n>/STABLE`
exists), then `POST /update_weights {"weight_dir": "<run dir>/broadcasts/step_<n>"}` on the inference
server. The wait polls every `sync_poll_s` and gives up after `sync_wait_s` with an error naming the
marker it waited for.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Unpack

from retrain_ray.backends.prime_rl.wire import STABLE_MARKER, broadcast_dir
from retrain_ray.engines.openai.engine import OpenAIEngine, OpenAIEngineOptions
from retrain_ray.engines.types import WeightUpdate

if TYPE_CHECKING:
    from retrain_ray.backends.prime_rl.standin import PrimeRLStandin


def wait_for_broadcast(run_dir: Path, version: int, *, wait_s: float, poll_s: float) -> Path:
    """The broadcast folder of `version` once its STABLE marker exists (TimeoutError after `wait_s`)."""
    folder = broadcast_dir(run_dir, version)
    deadline = time.monotonic() + wait_s
    while not (folder / STABLE_MARKER).exists():
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"prime_rl: the PRIME-RL trainer did not broadcast policy version {version} within {wait_s:g} s "
                f"({folder / STABLE_MARKER} does not exist); check that its trainer reads this run's batches "
                "(transport, output dir, run_id) and is not stalled, or raise [backend.options] sync_wait_s")
        time.sleep(poll_s)
    return folder


class PrimeRLEngine(OpenAIEngine):
    """Samples from PRIME-RL's inference server; loads the trainer's broadcasts with `/update_weights`."""

    def __init__(self, url: str, *, run_dir: Path, sync_wait_s: float, sync_poll_s: float, standin: PrimeRLStandin | None = None,
                 **kwargs: Unpack[OpenAIEngineOptions]) -> None:
        super().__init__(url, **kwargs)
        self.run_dir, self.sync_wait_s, self.sync_poll_s = Path(run_dir), sync_wait_s, sync_poll_s
        self.standin = standin  # the local stand-in this engine talks to (tests), kept alive with the engine

    def load_weights(self, update: WeightUpdate) -> None:
        folder = wait_for_broadcast(self.run_dir, update.version, wait_s=self.sync_wait_s, poll_s=self.sync_poll_s)
        self._request("POST", "/update_weights", f"/update_weights on {self.shown_url}",
                      json={"weight_dir": folder.as_posix()})
        self._version = update.version

    def close(self) -> None:
        super().close()
        if self.standin is not None:
            self.standin.close()
