"""Every built-in backend's capability flags say what its code does: each backend in `BACKEND_SPECS` trains
a step, saves a checkpoint, and the files it wrote (and the state they point to outside the directory) are
read back to derive the resume mode, then compared with the mode and flags its spec claims (issue 37: the
prime_rl backend claimed `exact` while saving a batch counter only).

The modes, derived from the files: `exact` when the checkpoint holds the trained weights and the
optimizer's moments (in its directory or in the state it names); `adapter_only` when a fresh backend
resumes from it but without the optimizer's moments; `resume_runtime_dependent` when it names state
outside its directory (a service's store, another trainer's run directory)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from retrain_ray.backends.registry import BACKEND_SPECS
from retrain_ray.backends.types import TrainBackend, TrainBatch, resume_caveat

PROMPT_LEN = 3


def _batch(varying: bool = False) -> TrainBatch:
    """Two samples of the tiny model's tokens; `varying`: advantages that change inside a completion."""
    tokens = [[1, 5, 6, 7, 8, 9], [1, 5, 6, 9, 8, 7]]
    advantages = [[0.0] * PROMPT_LEN + ([1.0, -0.5, 2.0] if varying else [1.0] * 3), [0.0] * PROMPT_LEN + [-1.0] * 3]
    logprobs = [[0.0] * PROMPT_LEN + [-2.0, -2.5, -3.0] for _ in tokens]
    return TrainBatch(tokens, logprobs, advantages, [PROMPT_LEN, PROMPT_LEN])


@dataclass
class Holdings:
    """What a checkpoint holds, read from its files."""

    weights: bool = False
    optimizer: bool = False
    outside: list[str] | None = None  # state it names outside its own directory

    def mode(self) -> str:
        return "exact" if self.weights and self.optimizer else "adapter_only"


def _read_torch(path: Path, found: Holdings) -> None:
    saved = torch.load(path, map_location="cpu", weights_only=False)
    if isinstance(saved, dict):
        found.weights |= bool(saved.get("weights"))
        optimizer = saved.get("optimizer")
        found.optimizer |= isinstance(optimizer, dict) and bool(optimizer.get("state"))


def holdings(directory: Path, resolve: Callable[[str], Path | None]) -> Holdings:
    """Every file of the checkpoint, and every file a JSON record in it names (`resolve` maps a name to
    the file it stands for, None where nothing here can be read)."""
    found = Holdings(outside=[])
    for path in sorted(directory.rglob("*")):
        if path.suffix == ".safetensors":
            found.weights |= bool(load_file(str(path)))
        elif path.suffix == ".pt":
            _read_torch(path, found)
        elif path.suffix == ".json" and path.name != "adapter_config.json":
            for value in json.loads(path.read_text()).values():
                if isinstance(value, str) and ("://" in value or Path(value).is_absolute()):
                    if not Path(value).is_relative_to(directory):
                        found.outside.append(value)
                        target = resolve(value)
                        if target is not None and target.suffix == ".pt":
                            _read_torch(target, found)
    return found


@dataclass
class Trial:
    """One backend made twice (the second as after a restart) and how to read what it names."""

    make: Callable[[], TrainBackend]
    resolve: Callable[[str], Path | None]


def _local(tmp_path: Path, tiny_cache: Path) -> Trial:
    from retrain_ray.backends.local import LoraSettings, PolicySettings, build_shared_policy

    settings = PolicySettings(finetune="lora", lora=LoraSettings(rank=4, alpha=32))
    return Trial(lambda: build_shared_policy("builtin:tiny", settings, device="cpu", cache_dir=tiny_cache)[1],
                 lambda _: None)


def _tinker(tmp_path: Path, tiny_cache: Path) -> Trial:
    from retrain_ray.backends.tinker import ClipSettings, TinkerBackend, TinkerOptions, TinkerSession
    from retrain_ray.backends.tinker.standin import StandinServiceClient

    store = tmp_path / "store"

    def make() -> TrainBackend:
        service = StandinServiceClient(store_dir=store, cache_dir=tiny_cache)
        session = TinkerSession(service, base_model="builtin:tiny", rank=4,
                                options=TinkerOptions(backoff_s=0.0, max_attempts=1))
        return TinkerBackend(session, clip=ClipSettings(), beta1=0.9, beta2=0.95, eps=1e-8, grad_clip_norm=1.0)

    def resolve(uri: str) -> Path | None:  # the stand-in service's store: tinker://<run>/<kind>/<name>
        return store / f"{uri.removeprefix('tinker://')}.pt" if uri.startswith("tinker://") else None

    return Trial(make, resolve)


def _prime_rl(tmp_path: Path, tiny_cache: Path) -> Trial:
    from retrain_ray.backends.prime_rl.backend import PrimeRLBackend
    from retrain_ray.backends.prime_rl.wire import FileSystemSender

    run_dir = tmp_path / "prime"
    # PRIME-RL's trainer (not running here) reads the batches and keeps its own checkpoints in run_dir
    return Trial(lambda: PrimeRLBackend(FileSystemSender(run_dir), run_dir), lambda _: None)


TRIALS = {"local": _local, "tinker": _tinker, "prime_rl": _prime_rl}


def test_every_builtin_backend_has_a_trial():
    assert set(TRIALS) == set(BACKEND_SPECS)


@pytest.mark.parametrize("name", sorted(BACKEND_SPECS))
def test_the_claimed_resume_mode_is_what_the_checkpoint_holds(name, tmp_path, tiny_cache):
    claimed = BACKEND_SPECS[name].capabilities
    assert claimed is not None
    trial = TRIALS[name](tmp_path, tiny_cache)
    backend = trial.make()
    result = backend.train_step(_batch(), lr=1e-2, weight_decay=0.0)
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    backend.save_checkpoint(checkpoint)
    found = holdings(checkpoint, trial.resolve)
    assert claimed.checkpoint_resume_mode == found.mode(), found
    assert claimed.resume_runtime_dependent == bool(found.outside), found
    assert backend.capabilities == claimed  # the class reports its spec's flags
    # a fresh backend resumes from it: the counters come back (supports_checkpoint_resume)
    resumed = trial.make()
    resumed.load_checkpoint(checkpoint)
    assert claimed.supports_checkpoint_resume and resumed.version == backend.version == 1
    # a synchronous loss is reported, or a placeholder 0 is (reports_sync_loss)
    assert claimed.reports_sync_loss == (result.loss != 0.0), result
    # advantages that vary inside a completion are trained on, or refused (preserves_token_advantages)
    try:
        backend.train_step(_batch(varying=True), lr=1e-2, weight_decay=0.0)
        took = True
    except ValueError:
        took = False
    assert claimed.preserves_token_advantages == took
    # the warning a resumed run logs says exactly what is not restored
    caveat = resume_caveat(claimed)
    assert ("optimizer" in caveat) == (found.mode() != "exact")
    assert ("outside the checkpoint" in caveat) == bool(found.outside)
