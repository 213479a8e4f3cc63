"""The LoRA adapter layout, shared by the trainer (backends/local), the samplers (engines/) and the
server (serve/): rank, alpha, targets. Pure data, no torch."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_TARGET_MODULES: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


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
        return self.alpha if self.alpha > 0 else 2.0 * self.rank
