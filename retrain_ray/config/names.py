"""Value sets of the schema's own keys (spec sections 2 and 7): uncertainty aliases, policy losses, the
original-only backends, echo, SFT and logging choices, and the device syntax.

The names of components (engines, backends, rewards, advantage / transform / algorithm modes, data
sources, environment providers, planning detectors, trainers) are not here: each lives with its component's
registry, and the check pass (checks/rules.py) checks a config against them. A dotted path
(`pkg.module.name` or `pkg.module:name`, plugins/loader.py) is always accepted as a plugin.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from retrain_ray.config.sections_training import AlgorithmSection

UNCERTAINTY_ALIASES: dict[str, str] = {
    "surprisal": "surprisal", "token_surprisal": "surprisal", "neg_logprob": "surprisal",
    "negative_logprob": "surprisal", "nll": "surprisal",
    "predictive_variance": "predictive_variance", "pred_var": "predictive_variance",
    "bernoulli_variance": "predictive_variance",
    "shannon_entropy": "shannon_entropy", "shannon": "shannon_entropy", "entropy": "shannon_entropy",
    "token_entropy": "shannon_entropy",
}
UNCERTAINTY_PARAM_KEYS = ("uncertainty_kind", "uncertainty_metric", "token_uncertainty")
POLICY_LOSS_MODES = frozenset({"standard", "kl_cov", "clip_cov"})
ORIGINAL_ONLY_BACKENDS = frozenset({"unsloth"})
SHARED_BATCHING_MODES = frozenset({"batch", "serial"})  # [inference] shared_batching
TL_GRPO_BRANCH_MODES = frozenset({"action_space", "llm"})
CHECKPOINT_ARTIFACTS = frozenset({"auto", "off", "wandb"})
WANDB_MODES = frozenset({"online", "offline", "disabled"})
ECHO_TARGET_RETENTION = frozenset({"all", "bounded"})
ECHO_LOSS_FNS = frozenset({"cross_entropy"})
"""The only ECHO loss the original names (spec sections 7 and 15: "same-rollout cross-entropy"); its one
installable release, 0.3.0, has no ECHO at all."""
SEPA_SCHEDULES = frozenset({"linear", "auto"})
SFT_LOSS_FNS = frozenset({"auto", "cross_entropy", "importance_sampling"})
"""`auto` is cross_entropy (run/trainers/sft.py: sft_loss)."""
SFT_BATCH_ORDERS = frozenset({"shuffle", "sequential", "length_asc"})


_DEVICES = re.compile(r"^(cpu|gpu:\d+(,\s*gpu:\d+)*)$")


def canonical_uncertainty(kind: str) -> str:
    """The canonical kind for an alias; plugins (dotted paths) and unknown names pass through."""
    return UNCERTAINTY_ALIASES.get(kind, kind)


def valid_devices(devices: str) -> bool:
    """`cpu`, `gpu:N`, or a comma list `gpu:0,gpu:1` (split mode)."""
    return bool(_DEVICES.match(devices.strip()))


def gpu_count(devices: str) -> int:
    """GPUs a run needs for a `backend.devices` string: cpu -> 0, gpu:0 -> 1, gpu:0,gpu:1 -> 2."""
    text = devices.strip()
    if text == "cpu":
        return 0
    return len([d for d in text.split(",") if d.strip()])


class HasAlgorithm(Protocol):
    """A config's `[algorithm]` section: all `effective_uncertainty_kind` reads."""

    @property
    def algorithm(self) -> AlgorithmSection: ...


def effective_uncertainty_kind(cfg: HasAlgorithm) -> str:
    """The kind in force: a transform_params override replaces the default `surprisal` (spec 7)."""
    return uncertainty_kind_in_force(cfg.algorithm)


def uncertainty_kind_in_force(algorithm: AlgorithmSection) -> str:
    """`effective_uncertainty_kind` of one [algorithm] section."""
    for key in UNCERTAINTY_PARAM_KEYS:
        if key in algorithm.transform_params:
            return canonical_uncertainty(str(algorithm.transform_params[key]))
    return algorithm.uncertainty_kind
