"""The LoRA adapter layout, shared by the trainer (backends/local), the samplers (engines/), the server
(serve/) and the capacity estimates (backpressure/, campaign/capacity/): rank, alpha, targets. Pure data,
no torch. The two rules of the layout are written here once: which modules get adapters
(`lora_targets`) and the alpha a rank gets by default (`effective_alpha`)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_TARGET_MODULES: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def lora_targets(option: str = "") -> tuple[str, ...]:
    """The target modules a comma-separated `lora_target_modules` option names; empty: the default ones."""
    names = tuple(n.strip() for n in option.split(",") if n.strip())
    return names or DEFAULT_TARGET_MODULES


def effective_alpha(alpha: float, rank: int) -> float:
    """LoRA's alpha as the original sets it: the configured one, else 2 x rank (spec 1.7)."""
    return alpha if alpha > 0 else 2 * rank


@dataclass(frozen=True)
class LoraSettings:
    """LoRA shape. Picklable, so a split-mode sampler actor can rebuild the same adapter layout."""

    rank: int = 32
    alpha: float = 0.0
    dropout: float = 0.0
    target_modules: tuple[str, ...] = DEFAULT_TARGET_MODULES
    layers_to_transform: tuple[int, ...] = ()
    """Only these decoder layers get adapters (backend option lora_layers_to_transform); empty = all."""
    layers_pattern: str = "layers"
    freeze_a: bool = False
    """Train only the B matrices (backend option lora_freeze_a): A keeps its random init."""

    @property
    def effective_alpha(self) -> float:
        return float(effective_alpha(self.alpha, self.rank))
