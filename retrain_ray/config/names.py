"""Names the configuration accepts for modes, kinds and backends (spec sections 2 and 7).

These sets describe what a TOML file may say; the algorithm registries resolve the names at run time.
A dotted path (`pkg.module.name` or `pkg.module:name`) is always accepted as a plugin.
"""

from __future__ import annotations

import re
from typing import NamedTuple

ADVANTAGE_MODES = frozenset({"grpo", "maxrl", "reinforce_pp"})
TRANSFORM_MODES = frozenset(
    {
        "none", "gtpo", "entropy_mask", "gtpo_hicra", "gtpo_sepa", "gtpo_sepa_amp", "gtpo_sepa_amp_c",
        "delight", "delight_sepa", "hard_delight",
    }
)
ALGORITHM_MODES = frozenset(
    {
        "", "grpo_none", "maxrl_none", "maxrl_gtpo", "maxrl_gtpo_hicra", "maxrl_gtpo_sepa",
        "reinforce_pp_none", "reinforce_pp_gtpo", "reinforce_pp_gtpo_sepa", "reinforce_pp_delight",
        "reinforce_pp_delight_sepa", "discover_entropic", "ttt_discover_entropic",
    }
)
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
SUPPORTED_BACKENDS = frozenset({"local", "tinker", "prime_rl"})
"""The built-in backends: backends/registry.py's `BACKEND_SPECS` (config/ sits below it; a test keeps the two
equal until the names are checked against the registries above the components)."""
ORIGINAL_ONLY_BACKENDS = frozenset({"unsloth"})
INFERENCE_ENGINES = frozenset({"pytorch", "vllm-embedded", "openai", "vllm", "sglang", "max", "mlx", "trtllm"})
"""The built-in engines (engines/registry.py holds what each one is)."""
PLANNING_DETECTORS = frozenset({"regex", "semantic", "none"})
REWARD_TYPES = frozenset({"match", "math", "judge", "custom"})
SHARED_BATCHING_MODES = frozenset({"batch", "serial"})  # [inference] shared_batching
DATA_SOURCES = frozenset({"math", "builtin", "file"})
ENVIRONMENT_PROVIDERS = frozenset({"", "builtin", "verifiers", "openenv"})
TL_GRPO_BRANCH_MODES = frozenset({"action_space", "llm"})
CHECKPOINT_ARTIFACTS = frozenset({"auto", "off", "wandb"})
WANDB_MODES = frozenset({"online", "offline", "disabled"})
ECHO_TARGET_RETENTION = frozenset({"all", "bounded"})
ECHO_LOSS_FNS = frozenset({"cross_entropy"})
"""The only ECHO loss the original names (spec sections 7 and 15: "same-rollout cross-entropy"); its one
installable release, 0.3.0, has no ECHO at all."""
SEPA_SCHEDULES = frozenset({"linear", "auto"})
TRAINERS = frozenset({"retrain", "sft", "ttt_discover", "command"})
"""`[training] trainer`: what runs a run (run/runners.py); a dotted path names a plugin runner class."""
SFT_LOSS_FNS = frozenset({"auto", "cross_entropy", "importance_sampling"})
"""`auto` is cross_entropy (run/warm_start.py: sft_loss)."""
SFT_BATCH_ORDERS = frozenset({"shuffle", "sequential", "length_asc"})


class PluginKey(NamedTuple):
    """A config key that takes a dotted plugin path as well as its built-in names."""

    component: str  # its name in `retrain-ray plugins`
    label: str  # how messages name the key
    section: str
    key: str
    builtin: frozenset[str]

    @property
    def config_key(self) -> str:
        return f"{self.section}.{self.key}"


PLUGIN_KEYS: tuple[PluginKey, ...] = (
    PluginKey("advantage_mode", "advantage_mode", "algorithm", "advantage_mode", ADVANTAGE_MODES),
    PluginKey("transform_mode", "transform_mode", "algorithm", "transform_mode", TRANSFORM_MODES),
    PluginKey("algorithm_mode", "algorithm_mode", "algorithm", "algorithm_mode", ALGORITHM_MODES - {""}),
    PluginKey("uncertainty_kind", "uncertainty_kind", "algorithm", "uncertainty_kind",
              frozenset(UNCERTAINTY_ALIASES.values())),
    PluginKey("backend", "[backend] backend", "backend", "backend", SUPPORTED_BACKENDS),
    PluginKey("inference_engine", "[inference] engine", "inference", "engine", INFERENCE_ENGINES),
    PluginKey("reward", "[reward] type", "reward", "type", REWARD_TYPES),
    PluginKey("data_source", "[data] source", "data", "source", DATA_SOURCES),
    PluginKey("planning_detector", "[planning] detector", "planning", "detector", PLANNING_DETECTORS),
    PluginKey("trainer", "[training] trainer", "training", "trainer", TRAINERS),
)
"""Every key that takes a dotted plugin path: `retrain-ray plugins` checks them, a campaign ships their code."""

_DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*[:.][A-Za-z_]\w*$")
_DEVICES = re.compile(r"^(cpu|gpu:\d+(,\s*gpu:\d+)*)$")


def is_dotted_path(name: str) -> bool:
    """True for a plugin reference like `my_pkg.transforms:scaled` or `my_pkg.transforms.scaled`."""
    return bool(_DOTTED.match(name))


def is_known_or_dotted(name: str, known: frozenset[str]) -> bool:
    return name in known or is_dotted_path(name)


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
