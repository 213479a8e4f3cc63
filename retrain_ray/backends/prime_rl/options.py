"""The prime_rl backend (a running PRIME-RL trainer and inference server): its spec, capabilities, factory,
and its `[backend.options]`: what they mean, their defaults, their validation.

The original's option names (seed 002), with its defaults where it had them:

* `transport` = "filesystem" | "zmq" (default "filesystem"): how `TrainingBatch` messages reach the
  PRIME-RL trainer. "filesystem" writes `<run dir>/rollouts/step_<n>/train_rollouts.bin`; "zmq" pushes
  `[sender id, payload]` to `tcp://zmq_host:zmq_port` (the trainer's PULL socket binds there).
* `strict_advantages` (default true): one advantage per sample is all the transport carries for a
  scalar algorithm, so a batch whose completion advantages vary within a sample is refused (and a
  token-varying transform fails preflight). false is refused: it would aggregate silently.
* `zmq_host` (default "localhost"), `zmq_port` (default 5555), `zmq_hwm` (default 10): the zmq endpoint
  and the send high-water mark.
* `sync_wait_s` (default 600.0): how long weight sync waits for the trainer's broadcast
  `broadcasts/step_<n>/STABLE`; `sync_poll_s` (default 1.0): how often it looks.

Ours:

* `run_id` (default ""): the run's directory under `[backend] adapter_path` (PRIME-RL's trainer output
  dir), e.g. "run_default"; empty: `adapter_path` is the run directory itself.
* `env_name` (default "retrain"): the `env_name` every `TrainingSample` carries.
* `standin` (default false): start the local PRIME-RL stand-in (`retrain_ray.backends.prime_rl.standin`)
  in this process and talk to it through the same files, sockets and HTTP calls. For testing only:
  it is not PRIME-RL.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from retrain_ray.backends.types import BackendCapabilities, OptionsTable, parse_options, parsed_issues

Transport = Literal["filesystem", "zmq"]


@dataclass(frozen=True)
class PrimeRLOptions:
    """Validated `[backend.options]` of the prime_rl backend. Frozen and picklable."""

    transport: Transport = "filesystem"
    strict_advantages: bool = True
    zmq_host: str = "localhost"
    zmq_port: int = 5555
    zmq_hwm: int = 10
    sync_wait_s: float = 600.0
    sync_poll_s: float = 1.0
    run_id: str = ""
    env_name: str = "retrain"
    standin: bool = False

    def __post_init__(self) -> None:
        if self.transport not in ("filesystem", "zmq"):
            raise ValueError(f"[backend.options] transport = {self.transport!r} is not a PRIME-RL transport; "
                             "use 'filesystem' or 'zmq'")
        if self.strict_advantages is not True:
            raise ValueError("[backend.options] strict_advantages = false is refused: PRIME-RL gets one advantage "
                             "per sample, and token-varying advantages would be averaged away silently; remove "
                             "the key (default true) or use a transform without token-level credit")
        for key in ("zmq_port", "zmq_hwm"):
            value = getattr(self, key)
            if type(value) is not int or value < 1 or (key == "zmq_port" and value > 65534):
                raise ValueError(f"[backend.options] {key} = {value!r}: use an integer >= 1"
                                 + (" and <= 65534" if key == "zmq_port" else ""))
        for key in ("sync_wait_s", "sync_poll_s"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"[backend.options] {key} = {value!r}: use a number of seconds > 0 "
                                 "(every wait has a timeout)")
        if "/" in self.run_id or self.run_id in (".", ".."):
            raise ValueError(f"[backend.options] run_id = {self.run_id!r}: use a directory name, not a path")


PRIME_RL_OPTION_DEFAULTS: dict[str, object] = {f.name: f.default for f in fields(PrimeRLOptions)}


def parse_prime_rl_options(options: dict[str, object] | None) -> PrimeRLOptions:
    """`[backend.options]` table -> PrimeRLOptions; unknown keys are an error with a did-you-mean hint."""
    return parse_options(PrimeRLOptions, options, "prime_rl")


# PRIME-RL's trainer optimizes asynchronously (a placeholder loss) on one advantage per sample. Our
# checkpoint holds the batch counter and the run directory only (backend.py save_checkpoint): the weights
# and the optimizer are in PRIME-RL's own checkpoints, which the trainer (not retrain-ray) resumes from, so
# a resume is `adapter_only` (the original's mode for prime_rl) and depends on that runtime
# (tests/backends/test_capabilities_honest.py compares these flags with what a checkpoint holds)
CAPABILITIES = BackendCapabilities(reports_sync_loss=False, preserves_token_advantages=False,
                                   supports_checkpoint_resume=True, resume_runtime_dependent=True,
                                   checkpoint_resume_mode="adapter_only")

OPTIONS = OptionsTable(lambda options: dict(PRIME_RL_OPTION_DEFAULTS),
                         value_issues=parsed_issues(parse_prime_rl_options,
                                                    "see the prime_rl backend's options in docs/configuration.md"))
