"""Test plugin backends (tests/test_plugin_backend.py): factories called as `factory(config, context)`.

`make_backend` wraps the built-in local backend: it counts the updates it forwards, keeps the count
in each checkpoint, and returns bare float losses (the plugin contract accepts them). Its capability
hook is on the factory itself, so `undeclared` (same backend, no hook) gets the conservative default.
"""

from __future__ import annotations

import json
from pathlib import Path

UPDATES: list[int] = []  # rows of every update this process forwarded


class CountingBackend:
    def __init__(self, inner):
        self.inner = inner
        self.updates = 0

    @property
    def version(self):
        return self.inner.version

    def train_step(self, batch, *, lr, weight_decay):
        self.updates += 1
        UPDATES.append(len(batch.tokens_D))
        return self.inner.train_step(batch, lr=lr, weight_decay=weight_decay).loss

    def sft_step(self, batch, *, lr, weight_decay):
        return self.inner.sft_step(batch, lr=lr, weight_decay=weight_decay)

    def export_weights(self):
        return self.inner.export_weights()

    def save_checkpoint(self, directory):
        self.inner.save_checkpoint(directory)
        (Path(directory) / "counting_backend.json").write_text(json.dumps({"updates": self.updates}))

    def load_checkpoint(self, directory):
        self.inner.load_checkpoint(directory)
        self.updates = json.loads((Path(directory) / "counting_backend.json").read_text())["updates"]


def make_backend(config, context):
    return CountingBackend(context.builtin_policy().backend)


make_backend.retrain_backend_capabilities = {"preserves_token_advantages": True, "checkpoint_resume_mode": "exact"}


def undeclared(config, context):
    return CountingBackend(context.builtin_policy().backend)


def whole_policy(config, context):
    """Returns the whole Policy: the built-in engine samples, the wrapped backend trains."""
    policy = context.builtin_policy()
    return policy._replace(backend=CountingBackend(policy.backend))


whole_policy.retrain_backend_capabilities = {"preserves_token_advantages": True}


class HalfHelper:
    """Only part of the original's TrainHelper (no save_adapter / load_state)."""

    def checkpoint(self, name): ...

    def sample(self, prompt_ids_list, num_samples, max_tokens, temperature, top_p): ...

    def train_step(self, all_tokens, all_logprobs, all_advantages, lr, weight_decay): ...


def half_helper(config):
    return HalfHelper()


def alone(config, context):
    """A backend built without the built-in policy: nothing would sample for it."""
    from types import SimpleNamespace

    return CountingBackend(SimpleNamespace(version=0))


def remote(config):
    raise AssertionError("placement must not construct the backend")


remote.retrain_backend_resources = {"gpus": 0}


def two_gpus(config):
    raise AssertionError("placement must not construct the backend")


two_gpus.retrain_backend_resources = lambda options: {"gpus": int(options.get("gpus_per_run", 2))}
two_gpus.retrain_backend_option_schema = {"gpus_per_run": {"type": "int", "default": 2}}


def bad_resources(config):
    raise AssertionError("placement must not construct the backend")


bad_resources.retrain_backend_resources = {"gpu": 1}


def on_two_gpus(config, context):
    """Trains on the CPU like make_backend, after writing which GPUs Ray gave this run's process."""
    import json
    import os

    import ray

    record = {"gpu_ids": [str(i) for i in ray.get_gpu_ids()], "cuda_visible": os.environ.get("CUDA_VISIBLE_DEVICES")}
    log_dir = Path(context.config.logging.log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / "plugin_gpus.json").write_text(json.dumps(record))
    return make_backend(config, context)


on_two_gpus.retrain_backend_resources = {"gpus": 2}
on_two_gpus.retrain_backend_capabilities = {"preserves_token_advantages": True}
