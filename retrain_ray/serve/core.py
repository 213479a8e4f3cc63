"""The endpoint's model side, without Ray or HTTP: completions, adapters, in-flight counters.

Completions follow the OpenAI `/v1/completions` shape with token ids in and out: `prompt` is a list
of token ids (or a text, which the endpoint's tokenizer encodes: what an LLM judge sends), `n` samples are drawn in one batch by the PyTorch engine, and each choice carries
`token_ids` plus `logprobs.tokens` ("token_id:<id>", vLLM's `return_tokens_as_token_ids` form) and
`logprobs.token_logprobs` (log-probabilities under the tempered, top-p renormalised distribution the
token was drawn from). A request's `seed` seeds that request's generator, so the same seed, weights
version and prompt give the same tokens and logprobs as `PyTorchEngine(model, seed=seed)`.
`/v1/chat/completions` takes `messages`, renders them with the tokenizer's chat template (or, for a
tokenizer without one, the contents one per line) and answers in the chat shape (`message.content`).

Adapters: every uploaded name gets its own copy of the base model (PEFT-wrapped for LoRA, plain for
full weights of tiny models), with strict name/shape checks on install; `model` = adapter name picks
it, the base model name (or "") picks the base model (version 0). This costs one model copy per
adapter name: right for tiny and small models, not for large ones (vLLM does it properly).

It also answers the weight-sync calls of the servers retrain-ray samples from, as a stand-in for them
(engines/adapters.py has the folder layouts):
* vLLM / MAX: `/v1/load_lora_adapter` with JSON `{"lora_name", "lora_path"}` loads a PEFT folder
  under that name (`load_adapter_folder`);
* TensorRT-LLM (`trtllm-serve`): a completion whose body has `lora_request: {lora_name, lora_int_id,
  lora_path}` samples from that PEFT folder; `lora_int_id` is its version (a new id, new weights);
* MLX-LM (`mlx_lm.server`): a completion whose body has `adapters: <folder>` samples from that MLX
  adapter folder;
* PRIME-RL: `/update_weights {"weight_dir"}` replaces the base model's weights with the folder's
  `model.safetensors` (`update_weights`); the folder `step_<n>` becomes version n.
A folder is read once per (name, path, modification time). Versions of folders loaded without one
(vLLM/MAX/MLX) are not reported (`weights_version` is null).
"""

from __future__ import annotations

import copy
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file  # pyright: ignore[reportUnknownVariableType]

from retrain_ray.engines.adapters import AdapterSpec, decode_adapter, read_mlx_folder, read_peft_folder
from retrain_ray.engines.pytorch.engine import PyTorchEngine
from retrain_ray.engines.types import SamplingParams
from retrain_ray.engines.weights import install_weights


@dataclass
class _Slot:
    model: torch.nn.Module
    version: int | None
    spec: AdapterSpec | None
    lock: threading.Lock = field(default_factory=threading.Lock)
    source: tuple[str, float] | None = None  # (folder, mtime) of a path-loaded adapter


class InFlight:
    """Requests inside the handler now, their peak, and the total (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = self.peak = self.total = 0

    def enter(self) -> None:
        with self._lock:
            self.now += 1
            self.total += 1
            self.peak = max(self.peak, self.now)

    def leave(self) -> None:
        with self._lock:
            self.now -= 1

    def snapshot(self, reset_peak: bool = False) -> dict[str, int]:
        with self._lock:
            out = {"in_flight": self.now, "peak_in_flight": self.peak, "requests_total": self.total}
            if reset_peak:
                self.peak, self.total = self.now, 0
            return out


def _prompt_ids(prompt: Any, tokenizer: Any) -> list[int]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], list | str):
        prompt = prompt[0]
    if isinstance(prompt, str) and prompt:
        return list(tokenizer.encode(prompt))
    if not isinstance(prompt, list) or not prompt or not all(isinstance(t, int) for t in prompt):
        raise ValueError("'prompt' must be a non-empty text or list of token ids")
    return prompt


def chat_prompt(messages: Any, tokenizer: Any) -> str:
    """The text a chat request stands for: the tokenizer's chat template, else the contents by line."""
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ValueError("'messages' must be a non-empty list of {role, content} objects")
    if getattr(tokenizer, "chat_template", None):
        return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
    return "\n".join(str(m.get("content", "")) for m in messages) + "\n"


def _request_params(body: dict[str, Any], tokenizer: Any) -> tuple[list[int], int, SamplingParams, int]:
    prompt = _prompt_ids(body.get("prompt"), tokenizer)
    params = SamplingParams(
        max_tokens=int(body.get("max_tokens", 16)),
        temperature=float(body.get("temperature", 1.0)),
        top_p=float(body.get("top_p", 1.0)),
    )
    return prompt, int(body.get("n", 1)), params, int(body.get("seed", 0))


class CompletionServer:
    """Holds the base model and the uploaded adapters; serves completions from any of them."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, *, model_name: str) -> None:
        self.base = model.eval()
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.slots: dict[str, _Slot] = {model_name: _Slot(self.base, 0, None)}
        self.in_flight = InFlight()
        self._slots_lock = threading.Lock()

    def _slot(self, name: str) -> _Slot:
        slot = self.slots.get(name or self.model_name)
        if slot is None:
            raise KeyError(f"model {name!r} is not loaded here; loaded: {sorted(self.slots)}")
        return slot

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt, n, params, seed = _request_params(body, self.tokenizer)
        slot = self._request_slot(body)
        tok = self.tokenizer
        with slot.lock:
            engine = PyTorchEngine(slot.model, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, seed=seed)
            results = engine.generate([prompt], n, params)[0]
            version = slot.version
        choices = [
            {
                "index": i, "text": tok.decode(list(r.token_ids)), "token_ids": list(r.token_ids),
                "logprobs": {"tokens": [f"token_id:{t}" for t in r.token_ids], "token_logprobs": list(r.logprobs)},
                "finish_reason": r.finish_reason,
            }
            for i, r in enumerate(results)
        ]
        completion_tokens = sum(len(r.token_ids) for r in results)
        return {
            "id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
            "model": body.get("model") or self.model_name, "weights_version": version, "choices": choices,
            "usage": {"prompt_tokens": len(prompt), "completion_tokens": completion_tokens,
                      "total_tokens": len(prompt) + completion_tokens},
        }

    def _request_slot(self, body: dict[str, Any]) -> _Slot:
        """The model a completion asks for: TensorRT-LLM's `lora_request`, MLX-LM's `adapters`, else `model`."""
        request = body.get("lora_request")
        if isinstance(request, dict):
            return self.load_adapter_folder(str(request["lora_name"]), Path(str(request["lora_path"])), "peft",
                                            version=int(request.get("lora_int_id", 0)))
        if body.get("adapters"):
            folder = str(body["adapters"])
            return self.load_adapter_folder(folder, Path(folder), "mlx")
        return self._slot(str(body.get("model", "")))

    def load_adapter_folder(self, name: str, folder: Path, layout: str, version: int | None = None) -> _Slot:
        """The slot `name` holding the adapter in `folder` ("peft" or "mlx" layout), read if it changed."""
        if name == self.model_name:
            raise ValueError(f"adapter name {name!r} is the base model's name; pick another")
        if not folder.is_dir():
            raise FileNotFoundError(f"adapter folder {folder} does not exist on the server")
        source = (str(folder.resolve()), folder.stat().st_mtime)
        with self._slots_lock:
            slot = self.slots.get(name)
            if slot is not None and slot.source == source and slot.version == version:
                return slot
            lora, tensors = read_mlx_folder(folder) if layout == "mlx" else read_peft_folder(folder)
            spec = AdapterSpec(name, version or 0, "lora", lora)
            if slot is None or slot.spec is None or slot.spec.lora != lora:
                slot = _Slot(self._fresh_model(spec), version, spec)
                self.slots[name] = slot
        with slot.lock:
            install_weights(slot.model, tensors)
            slot.version, slot.source = version, source
        return slot

    def load_adapter_json(self, body: dict[str, Any]) -> dict[str, Any]:
        """vLLM's and MAX's `/v1/load_lora_adapter` form: `{"lora_name", "lora_path"}`, a PEFT folder."""
        name, path = str(body.get("lora_name") or ""), str(body.get("lora_path") or "")
        if not name or not path:
            raise ValueError("load_lora_adapter needs 'lora_name' and 'lora_path'")
        self.load_adapter_folder(name, Path(path), "peft")
        return {"lora_name": name, "lora_path": path}

    def update_weights(self, weights_file: Path) -> int:
        """PRIME-RL's `/update_weights`: the base model takes every weight in `weights_file`; its folder
        `step_<n>` names the new version (otherwise the version goes up by one)."""
        if not weights_file.is_file():
            raise FileNotFoundError(f"{weights_file} does not exist: weight_dir must hold the broadcast weights")
        tensors = load_file(str(weights_file))
        params = dict(self.base.named_parameters())
        if set(tensors) != set(params):
            raise KeyError(f"{weights_file}: its tensors do not name this model's parameters "
                           f"(unknown {sorted(set(tensors) - set(params))[:3]}, missing {sorted(set(params) - set(tensors))[:3]})")
        slot = self.slots[self.model_name]
        match = re.fullmatch(r"step_(\d+)", weights_file.parent.name)
        with slot.lock, torch.no_grad():
            for name, tensor in tensors.items():
                params[name].copy_(tensor.to(params[name].dtype))
            slot.version = int(match[1]) if match else (slot.version or 0) + 1
        return slot.version

    def chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """`/v1/chat/completions`: the messages as one text prompt, answered in the chat shape."""
        out = self.complete({**body, "prompt": chat_prompt(body.get("messages"), self.tokenizer)})
        choices = [{"index": c["index"], "message": {"role": "assistant", "content": c["text"]},
                    "finish_reason": c["finish_reason"]} for c in out["choices"]]
        return {**out, "object": "chat.completion", "choices": choices}

    def load_adapter(self, payload: bytes) -> dict[str, Any]:
        spec, tensors = decode_adapter(payload)
        if spec.lora_name == self.model_name:
            raise ValueError(f"adapter name {spec.lora_name!r} is the base model's name; pick another")
        with self._slots_lock:
            slot = self.slots.get(spec.lora_name)
            if slot is None or slot.spec is None or slot.spec.finetune != spec.finetune or slot.spec.lora != spec.lora:
                slot = _Slot(self._fresh_model(spec), 0, spec)
                self.slots[spec.lora_name] = slot
        with slot.lock:
            install_weights(slot.model, tensors)
            slot.version = spec.version
        return {"lora_name": spec.lora_name, "version": spec.version}

    def _fresh_model(self, spec: AdapterSpec) -> torch.nn.Module:
        # deferred: loads transformers, which importing this module does not need
        from retrain_ray.models.lean_lora import prepare_trainable

        model = prepare_trainable(copy.deepcopy(self.base), spec.finetune, spec.lora)
        return model.eval()

    def unload_adapter(self, name: str) -> dict[str, Any]:
        with self._slots_lock:
            if name == self.model_name or name not in self.slots:
                raise KeyError(f"no adapter named {name!r} is loaded; loaded: {sorted(self.slots)}")
            del self.slots[name]
        return {"lora_name": name, "unloaded": True}

    def models(self) -> dict[str, Any]:
        data = [
            {"id": name, "object": "model", "owned_by": "retrain-ray", "version": slot.version,
             "parent": None if slot.spec is None else self.model_name}
            for name, slot in sorted(self.slots.items())
        ]
        return {"object": "list", "data": data}
