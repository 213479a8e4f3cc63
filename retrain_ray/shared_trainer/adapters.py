"""One member run's resident state in the shared trainer: its LoRA A and B per target module, its AdamW,
its loss generator and update count, under the names and in the order its solo model has them.

`new_adapter` draws the adapter exactly as the solo run's model does (models/lean_lora.py): under a
forked RNG seeded with the run's seed, each target module in `named_modules` order gets a `LoraLinear`
built on the same base Linear (nn.Linear's init for A then B, then kaiming A, zeros B), and the adapter
keeps those two weights. So one seed gives the solo run's initial adapter bit for bit, the trainable
parameters come in the solo model's order (the optimizer state's indices), and their names are the solo
model's (`base_model.model.<module>.lora_A.default.weight`), which checkpoints and weight syncs use.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from retrain_ray.backends.local.backend import PlainAdamW, make_adamw
from retrain_ray.backends.local.policy import PolicySettings
from retrain_ray.models.lean_lora import ADAPTER, LoraLinear

PREFIX = "base_model.model."


def param_name(key: str, matrix: str) -> str:
    """The solo model's parameter name of module `key`'s LoRA `matrix` ("A" or "B")."""
    return f"{PREFIX}{key}.lora_{matrix}.{ADAPTER}.weight"


@dataclass
class RunAdapter:
    """A member run's adapter (`a`, `b`: module key -> weight), optimizer and counters; resident in the
    trainer between steps. `named` is every LoRA weight by its solo name (frozen A too, as files hold it)."""

    run_id: str
    settings: PolicySettings
    a: dict[str, nn.Parameter]
    b: dict[str, nn.Parameter]
    params: list[nn.Parameter]
    optimizer: PlainAdamW | torch.optim.AdamW
    generator: torch.Generator
    version: int = 0

    @property
    def rank(self) -> int:
        return self.settings.lora.rank

    @property
    def scaling(self) -> float:
        return self.settings.lora.effective_alpha / self.settings.lora.rank

    @property
    def named(self) -> dict[str, nn.Parameter]:
        out: dict[str, nn.Parameter] = {}
        for key in self.a:
            out[param_name(key, "A")] = self.a[key]
            out[param_name(key, "B")] = self.b[key]
        return out

    def trainable(self) -> dict[str, nn.Parameter]:
        """The weights the run trains, by solo name (what its weight sync carries)."""
        return {name: p for name, p in self.named.items() if p.requires_grad}

    def padded(self, key: str, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(A, B) of module `key`, zero-padded to `rank` (still differentiable in the real part)."""
        a, b = self.a[key], self.b[key]
        extra = rank - a.shape[0]
        if extra == 0:
            return a, b
        return torch.nn.functional.pad(a, (0, 0, 0, extra)), torch.nn.functional.pad(b, (0, extra))


def new_adapter(run_id: str, settings: PolicySettings, bases: Mapping[str, nn.Linear], keys: Sequence[str],
                device: torch.device) -> RunAdapter:
    """The run's initial adapter, drawn as its solo model draws it from `settings.seed` (module docstring)."""
    lora = settings.lora
    a: dict[str, nn.Parameter] = {}
    b: dict[str, nn.Parameter] = {}
    with torch.random.fork_rng(devices=[]):  # pyright: ignore[reportUnknownMemberType]
        torch.manual_seed(settings.seed)  # pyright: ignore[reportUnknownMemberType]
        for key in keys:
            layer = LoraLinear(bases[key], lora.rank, lora.effective_alpha / lora.rank, 0.0)
            a[key] = _weight(layer.lora_A, device)
            b[key] = _weight(layer.lora_B, device)
    trainable: list[nn.Parameter] = []
    for key in keys:
        a[key].requires_grad_(not lora.freeze_a)
        b[key].requires_grad_(True)
        trainable += [p for p in (a[key], b[key]) if p.requires_grad]
    optim = settings.optimizer
    generator = torch.Generator(device=device)
    generator.manual_seed(settings.seed)
    return RunAdapter(run_id, settings, a, b, trainable,
                      make_adamw(trainable, betas=(optim.beta1, optim.beta2), eps=optim.eps), generator)


def _weight(modules: nn.ModuleDict, device: torch.device) -> nn.Parameter:
    module = modules[ADAPTER]
    assert isinstance(module, nn.Linear)
    return nn.Parameter(module.weight.detach().to(device, copy=True))
