"""The tinker backend (a remote training API): its spec, capabilities, factory, and its `[backend.options]`:
what they mean, their defaults, their validation.

The original's option schema for tinker is empty (any key errors, spec 1.6). We add these keys:

* `on_sample_failure` = "error" | "empty_group" (default "error"): what a prompt whose sampling still
  fails after every retry becomes. "error" raises (the run fails and is retried from its last
  checkpoint); "empty_group" returns an empty group for that prompt, as the original did silently;
  here it is counted in `tinker_failed_samples` and logged.
* `client` = "sdk" | "standin" (default "sdk"): "standin" swaps the official SDK's ServiceClient for
  the local stand-in in `retrain_ray.backends.tinker.standin`. For testing only.
* `max_attempts` (default 5): attempts per SDK call (or per prompt) before a transient failure
  (HTTP 502/503/504, timeouts, dropped connections) becomes a failure.
* `backoff_s` (default 1.0): the first retry waits this long; each next wait doubles (capped at 30 s).
* `sample_timeout_s` (default 300.0): how long one sampling future may take (the original's 300 s).
* `call_timeout_s` (default 600.0): how long any other SDK future may take.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

from retrain_ray.backends.types import BackendCapabilities, OptionsTable, parse_options, parsed_issues

SampleFailure = Literal["error", "empty_group"]
ClientKind = Literal["sdk", "standin"]

_CHOICES: dict[str, tuple[str, ...]] = {
    "on_sample_failure": ("error", "empty_group"),
    "client": ("sdk", "standin"),
}


@dataclass(frozen=True)
class TinkerOptions:
    """Validated `[backend.options]` of the tinker backend. Frozen and picklable."""

    on_sample_failure: SampleFailure = "error"
    client: ClientKind = "sdk"
    max_attempts: int = 5
    backoff_s: float = 1.0
    sample_timeout_s: float = 300.0
    call_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        for key, allowed in _CHOICES.items():
            value = getattr(self, key)
            if value not in allowed:
                raise ValueError(
                    f"[backend.options] {key} = {value!r} is not allowed for the tinker backend; "
                    f"use one of {', '.join(repr(a) for a in allowed)}"
                )
        if not isinstance(self.max_attempts, int) or self.max_attempts < 1:  # pyright: ignore[reportUnnecessaryIsInstance]  # a TOML value may be any type
            raise ValueError(f"[backend.options] max_attempts = {self.max_attempts!r}: use an integer >= 1")
        for key in ("backoff_s", "sample_timeout_s", "call_timeout_s"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"[backend.options] {key} = {value!r}: use a number >= 0 (seconds)")
        if self.sample_timeout_s == 0 or self.call_timeout_s == 0:
            raise ValueError("[backend.options] sample_timeout_s and call_timeout_s must be > 0: every wait has a timeout")


TINKER_OPTION_DEFAULTS: dict[str, object] = {f.name: f.default for f in fields(TinkerOptions)}


def parse_tinker_options(options: dict[str, object] | None) -> TinkerOptions:
    """`[backend.options]` table -> TinkerOptions; unknown keys are an error with a did-you-mean hint."""
    return parse_options(TinkerOptions, options, "tinker")


CAPABILITIES = BackendCapabilities(reports_sync_loss=True, preserves_token_advantages=True,
                                   supports_checkpoint_resume=True, resume_runtime_dependent=True,
                                   checkpoint_resume_mode="exact")

# the original's tinker schema is empty: no options, no keys
OPTIONS = OptionsTable(lambda options: dict(TINKER_OPTION_DEFAULTS) if options else {},
                         value_issues=parsed_issues(parse_tinker_options, "see the tinker backend's option list"))
