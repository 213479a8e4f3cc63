"""Trainer state: the counters a run needs to continue exactly where it stopped.

Written as `trainer_state.json` with the original's fields (spec section 10) plus what exact resume
needs and the original dropped: back-pressure controller state, RNG states and the weights version.
"""

from __future__ import annotations

import base64
import json
import pickle
import random
from dataclasses import asdict, dataclass, field

import numpy as np
import torch


@dataclass
class TrainerState:
    """Mutable run counters. `step` is the 0-based index of the last completed step (-1: none yet)."""

    step: int = -1
    example_idx: int = 0
    total_correct: int = 0
    total_completions: int = 0
    current_batch_size: int = 8
    current_group_size: int = 16
    checkpoint_name: str = ""
    checkpoint_path: str = ""
    resume_mode: str = "exact"
    sepa: dict[str, object] = field(default_factory=dict)
    backpressure: dict[str, object] = field(default_factory=dict)
    rng: dict[str, str] = field(default_factory=dict)
    weights_version: int = 0
    wall_time_s: float = 0.0
    sft_finished: bool = False
    delight_eta_ema: float | None = None  # the last step's delight eta; an adaptive eta smooths towards it
    tl_grpo_ema: float | None = None  # TL-GRPO's EMA of episode rewards (its outcome baseline); None: off

    @property
    def next_step(self) -> int:
        return self.step + 1

    @property
    def running_correct_rate(self) -> float:
        return correct_rate(self.total_correct, self.total_completions)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TrainerState:
        data = json.loads(text)
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


def correct_rate(correct: int, completions: int) -> float:
    """The share of correct completions (0 before any)."""
    return correct / completions if completions else 0.0


def engine_generators(engine: object) -> dict[str, torch.Generator]:
    """The sampler's own generator, by name, when the engine has one (local engines, split proxies)."""
    gen = getattr(engine, "generator", None)
    return {"engine": gen} if gen is not None else {}


def capture_rng_state(extra_generators: dict[str, torch.Generator] | None = None) -> dict[str, str]:
    """Python, NumPy, torch (and CUDA) RNG states, plus named generators, as base64 text."""
    states: dict[str, object] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    for name, gen in (extra_generators or {}).items():
        states[f"gen:{name}"] = gen.get_state()
    return {k: base64.b64encode(pickle.dumps(v)).decode("ascii") for k, v in states.items()}


def restore_rng_state(encoded: dict[str, str], extra_generators: dict[str, torch.Generator] | None = None) -> None:
    states = {k: pickle.loads(base64.b64decode(v)) for k, v in encoded.items()}
    if "python" in states:
        random.setstate(states["python"])
    if "numpy" in states:
        np.random.set_state(states["numpy"])
    if "torch" in states:
        torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    for name, gen in (extra_generators or {}).items():
        if f"gen:{name}" in states:
            gen.set_state(states[f"gen:{name}"])


def seed_everything(seed: int) -> None:
    """Seeds Python, NumPy and torch; a negative seed (the original's -1) leaves them unseeded."""
    if seed < 0:
        return
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # pyright: ignore[reportUnknownMemberType]
