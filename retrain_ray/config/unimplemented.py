"""Keys of the original that retrain-ray accepts in a file but does not carry out: refused at load time.

A key listed here may keep its default (so the original's files, which spell every key, still load);
any other value is a `ConfigIssue` naming the key and why, instead of a run that silently trains
something else than its file says. `REFUSED` maps (section, key) to the reason; a callable reason
decides per value (a key that is implemented for some values only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from retrain_ray.config.errors import ConfigIssue

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig

_HUB = ("installing environments from the Prime Intellect hub needs the hub, which retrain-ray does not call; "
        "install the environment's package yourself (pip install ...) and name it in [environment] id")
_ENV_WORKERS = "episodes step in the run's own process, one batch of turns at a time"
_OPT_BATCH = "optimizer-batch capture and replay are not implemented"

REFUSED: dict[tuple[str, str], str] = {
    ("training", "trainer"): "only the built-in RL trainer runs (the original's sft/command/ttt_discover runners "
                             "are not implemented)",
    ("training", "trainer_command"): "the command runner is not implemented",
    ("backend", "throttle_dir"): "the file-lock throttle is replaced by the campaign's throttle actor "
                                 "(its capacity is [backend] max_concurrent)",
    ("logging", "generation_top_surprisal_limit"): "per-token surprisal excerpts are not logged",
    ("planning", "model"): "only the regex planning detector is implemented (this is the semantic detector's model)",
    ("planning", "threshold"): "only the regex planning detector is implemented (this is the semantic "
                               "detector's threshold)",
    ("environment", "auto_install"): _HUB,
    ("environment", "rollout_env_workers"): _ENV_WORKERS,
    ("environment", "rollout_buffer_size"): _ENV_WORKERS,
    **{("optimizer_batch", k): _OPT_BATCH for k in ("capture", "replay_path", "expected_logical_sha256",
                                                     "expected_manifest_sha256", "allow_config_differences")},
    ("plugins", "strict"): "plugin errors always stop the run (the original raises in both modes as well)",
}

ValueRule = Callable[[Any], str]


def _detector(value: Any) -> str:
    return "" if value in ("regex", "none", "") or "." in str(value) else \
        "only the regex planning detector (or a dotted plugin path) is implemented"


def _sft_loss(value: Any) -> str:
    return "" if value in ("auto", "cross_entropy") else \
        "the warm start trains with cross-entropy only (\"auto\" means cross_entropy here)"


def _sft_order(value: Any) -> str:
    return "" if value in ("shuffle", "sequential") else "length-aware SFT ordering is not implemented"


def _provider(value: Any) -> str:
    if value == "openenv":
        return (f"the {value} adapter is not built yet (the built-in environments run: provider = \"builtin\", "
                "and verifiers environments: provider = \"verifiers\")")
    return ""


def _echo_loss(value: Any) -> str:
    return "" if value == "cross_entropy" else "ECHO trains its targets with cross_entropy only"


BY_VALUE: dict[tuple[str, str], ValueRule] = {
    ("echo", "loss_fn"): _echo_loss,
    ("environment", "provider"): _provider,
    ("planning", "detector"): _detector,
    ("training", "sft_loss_fn"): _sft_loss,
    ("training", "sft_batch_order"): _sft_order,
}


def _default(section: Any, key: str) -> Any:
    for name, info in type(section).model_fields.items():
        if (info.alias or name) == key:
            return info.get_default(call_default_factory=True), getattr(section, name)
    raise KeyError(key)


def refused_keys(cfg: RetrainConfig) -> list[ConfigIssue]:
    """An issue for every refused key set away from its default, and every refused value."""
    issues = []
    for (section_name, key), why in REFUSED.items():
        default, value = _default(getattr(cfg, section_name), key)
        if value != default:
            issues.append(ConfigIssue(f"{section_name}.{key}", value, f"not implemented by retrain-ray: {why}",
                                      f"remove the key (default {default!r})"))
    for (section_name, key), rule in BY_VALUE.items():
        _, value = _default(getattr(cfg, section_name), key)
        why = rule(value)
        if why:
            issues.append(ConfigIssue(f"{section_name}.{key}", value, f"not implemented by retrain-ray: {why}",
                                      "choose a supported value"))
    return issues
