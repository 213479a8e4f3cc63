"""Test plugin engines (tests/test_plugin_engine.py): factories called as `factory(config, context)`.

`make_engine` wraps the built-in PyTorch engine of `context.builtin_policy()` (which shares its model
with the local backend); `own_copy` builds a sampler with its own copy of the model, so the local
trainer exports its weights as tensors after every step.
"""

from __future__ import annotations

GENERATED: list[tuple[int, int, int]] = []  # (prompts, samples per prompt, weights version) of each call
LOADED: list[tuple[int, int]] = []  # (version, number of tensors) of each weight update


class RecordingEngine:
    def __init__(self, inner):
        self.inner = inner

    @property
    def weights_version(self):
        return self.inner.weights_version

    def generate(self, prompt_ids_P, num_samples, params):
        GENERATED.append((len(prompt_ids_P), num_samples, self.inner.weights_version))
        return self.inner.generate(prompt_ids_P, num_samples, params)

    def load_weights(self, update):
        LOADED.append((update.version, len(update.tensors)))
        self.inner.load_weights(update)


def make_engine(config, context):
    return RecordingEngine(context.builtin_policy().engine)


def own_copy(config, context):
    from retrain_ray.backends.local import build_split_engine, settings_from_config

    engine, _ = build_split_engine(context.config.model.model, settings_from_config(context.config),
                                   device=context.device)
    return RecordingEngine(engine)


def not_an_engine(config):
    return {"generate": "no"}
