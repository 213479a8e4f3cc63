"""A plugin engine that declares per-token entropies (tests/test_plugin_engine.py): it wraps the built-in
PyTorch engine and reports every token's entropy as `ENTROPY` (the real ones are recorded in `ASKED`), so
a run's `exec_surprisal_mean` under `uncertainty_kind = "shannon_entropy"` shows they reached the credit
transform."""

from __future__ import annotations

import dataclasses

RETRAIN_ENGINE_CAPABILITIES = {"returns_token_entropies": True}
ENTROPY = 0.625
ASKED: list[bool] = []  # params.compute_entropy of each generate call


class ConstantEntropyEngine:
    def __init__(self, inner):
        self.inner = inner

    @property
    def weights_version(self):
        return self.inner.weights_version

    def generate(self, prompt_ids_P, num_samples, params):
        ASKED.append(params.compute_entropy)
        groups = self.inner.generate(prompt_ids_P, num_samples, params)
        return [[dataclasses.replace(r, entropies=(ENTROPY,) * len(r.token_ids)) for r in group] for group in groups]

    def load_weights(self, update):
        self.inner.load_weights(update)


def make_engine(config, context):
    return ConstantEntropyEngine(context.builtin_policy().engine)


def bad_hook(config, context):
    return ConstantEntropyEngine(context.builtin_policy().engine)


bad_hook.retrain_engine_capabilities = {"entropies": "yes"}  # the hook on the factory wins over the module's


def section_hook(config, context):
    return ConstantEntropyEngine(context.builtin_policy().engine)


# a callable hook: it declares entropies only when given its own [inference] section, as preflight gives it
section_hook.retrain_engine_capabilities = lambda inference: {
    "returns_token_entropies": inference.get("engine") == "entropy_engine.section_hook"}
