"""A torch-only Llama for the built-in models: transformers' `LlamaForCausalLM` forward, without transformers.

Importing transformers 5.x costs seconds (it pulls torch._dynamo and torch.distributed.tensor), which was
most of a tiny run's time to its first step (issue 13). This module computes what transformers' Llama
computes with the sdpa attention it picks on CPU and CUDA, op for op: RMSNorm in float32, rotary
embeddings from `position_ids`, the boolean causal-and-padding mask (or none, with sdpa's `is_causal`,
exactly where transformers skips it), SwiGLU MLP, tied embeddings, a concatenating KV cache. So on the
same weights its logits equal transformers' bit for bit on CPU (tests/models/test_lean_llama.py).

Parameter names, their order and `padding_idx` are transformers' own, so the same safetensors load into
both, a full fine-tuning checkpoint (`model.safetensors` of the trainable parameters) is the same file
whichever model wrote it, the optimizer state lines up, and `save_pretrained` writes a folder that
`AutoModelForCausalLM.from_pretrained` loads. Loading and saving live in `lean_loading.py`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from safetensors.torch import save_file  # pyright: ignore[reportUnknownVariableType]
from torch import nn
from torch.utils.checkpoint import checkpoint

WEIGHTS_FILE = "model.safetensors"


@dataclass
class LeanLlamaConfig:
    """The config.json fields the lean model reads; `raw` is the whole file (written back by save)."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    tie_word_embeddings: bool
    pad_token_id: int | None
    bos_token_id: int | None
    eos_token_id: int | list[int] | None
    use_cache: bool
    raw: dict[str, Any]


@dataclass
class GenerationSettings:
    """generation_config.json's token ids (the engine reads `eos_token_id`); `raw` is the whole file."""

    eos_token_id: int | list[int] | None
    pad_token_id: int | None
    bos_token_id: int | None
    raw: dict[str, Any]


@dataclass
class LeanOutput:
    """What the engine and scoring read of transformers' CausalLMOutputWithPast."""

    logits: torch.Tensor
    past_key_values: KVCache | None


class KVCache:
    """transformers' DynamicCache as the engine uses it: per layer, keys and values concatenated on dim -2."""

    def __init__(self) -> None:
        self.layers: list[tuple[torch.Tensor, torch.Tensor]] = []

    def get_seq_length(self) -> int:
        return self.layers[0][0].shape[-2] if self.layers else 0

    def update(self, keys: torch.Tensor, values: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        if layer == len(self.layers):
            self.layers.append((keys, values))
        else:
            old_k, old_v = self.layers[layer]
            self.layers[layer] = (torch.cat([old_k, keys], dim=-2), torch.cat([old_v, values], dim=-2))
        return self.layers[layer]


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.variance_epsilon = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * x.to(dtype)


class RotaryEmbedding(nn.Module):
    def __init__(self, config: LeanLlamaConfig) -> None:
        super().__init__()
        self.inv_freq = nn.Buffer(inverse_frequencies(config), persistent=False)

    @torch.no_grad()
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = position_ids[..., None].float() * self.inv_freq.to(device=x.device, dtype=torch.float)
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * 1.0).to(dtype=x.dtype), (emb.sin() * 1.0).to(dtype=x.dtype)


def inverse_frequencies(config: LeanLlamaConfig) -> torch.Tensor:
    steps = torch.arange(0, config.head_dim, 2, dtype=torch.float)
    return 1.0 / (config.rope_theta ** (steps / config.head_dim))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, config: LeanLlamaConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.head_dim = config.head_dim
        self.groups = config.num_attention_heads // config.num_key_value_heads
        self.scaling = config.head_dim ** -0.5
        hidden, heads, kv_heads = config.hidden_size, config.num_attention_heads, config.num_key_value_heads
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None,
                cache: KVCache | None) -> torch.Tensor:
        shape = (*x.shape[:-1], -1, self.head_dim)
        q = self.q_proj(x).view(shape).transpose(1, 2)
        k = self.k_proj(x).view(shape).transpose(1, 2)
        v = self.v_proj(x).view(shape).transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q, k = (q * cos) + (_rotate_half(q) * sin), (k * cos) + (_rotate_half(k) * sin)
        if cache is not None:
            k, v = cache.update(k, v, self.layer)
        kwargs: dict[str, Any] = {}
        if self.groups > 1:  # transformers' choice: sdpa's own GQA without a mask, repeated heads with one
            if mask is None and self.head_dim <= 256:
                kwargs["enable_gqa"] = True
            else:
                k, v = (t.repeat_interleave(self.groups, dim=1) for t in (k, v))
        if _upcast_attention(q):
            q, k, v = q.float(), k.float(), v.float()
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.0, scale=self.scaling,
                                             is_causal=mask is None and q.shape[2] > 1, **kwargs)
        out = out.transpose(1, 2).to(x.dtype).contiguous()
        return self.o_proj(out.reshape(*x.shape[:-1], -1).contiguous())


def _upcast_attention(q: torch.Tensor) -> bool:
    """Training a bf16 model on the CPU: attention in float32, whose backward torch's CPU kernel runs about 3x
    faster than its bf16 one (17 against 6 ms a layer on a SmolLM2 step of 8 x 70 tokens)."""
    return q.dtype == torch.bfloat16 and q.device.type == "cpu" and torch.is_grad_enabled()


class MLP(nn.Module):
    def __init__(self, config: LeanLlamaConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, config: LeanLlamaConfig, layer: int) -> None:
        super().__init__()
        self.self_attn = Attention(config, layer)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor | None,
                cache: KVCache | None) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaBody(nn.Module):
    """transformers' `LlamaModel` (the `model.` prefix of every parameter name)."""

    def __init__(self, config: LeanLlamaConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size, config.pad_token_id)
        self.layers = nn.ModuleList([DecoderLayer(config, i) for i in range(config.num_hidden_layers)])
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(config)


def attention_mask_4d(mask_2d: torch.Tensor | None, q_len: int, past_len: int) -> torch.Tensor | None:
    """transformers' sdpa mask: None (sdpa's `is_causal` or no mask) when nothing is padded and the queries
    are one token or the whole sequence; else bool (B, 1, q, kv): causal and not a padded key."""
    kv_len = past_len + q_len
    pad = None if mask_2d is None else mask_2d.to(torch.bool)
    if pad is not None and pad.shape[-1] != kv_len:
        raise ValueError(f"attention_mask covers {pad.shape[-1]} positions, but the keys are {kv_len} "
                         f"({past_len} cached + {q_len} new): pass the mask of the whole sequence so far")
    if (pad is None or bool(pad.all())) and (q_len == 1 or kv_len == q_len):
        return None
    device = mask_2d.device if mask_2d is not None else None
    q_pos = torch.arange(q_len, device=device) + past_len
    causal = torch.arange(kv_len, device=device)[None, :] <= q_pos[:, None]
    mask = causal[None, None]
    return mask if pad is None else mask & pad[:, None, None, :]


class LeanLlamaForCausalLM(nn.Module):
    """`model(input_ids, attention_mask=, position_ids=, past_key_values=, use_cache=)` -> `.logits`,
    `.past_key_values`, as transformers' LlamaForCausalLM (sdpa attention, no dropout)."""

    def __init__(self, config: LeanLlamaConfig, generation: GenerationSettings | None = None) -> None:
        super().__init__()
        self.config = config
        self.generation_config = generation or GenerationSettings(
            config.eos_token_id, config.pad_token_id, config.bos_token_id, {})
        self.model = LlamaBody(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.tie_weights()
        self._checkpointing: dict[str, Any] | None = None
        self.name_or_path = ""  # the folder it was loaded from (an adapter's base_model_name_or_path)

    def tie_weights(self) -> None:
        if self.config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @property
    def is_gradient_checkpointing(self) -> bool:
        return self._checkpointing is not None

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: dict[str, Any] | None = None) -> None:
        """Recompute each decoder layer's activations in backward (train mode only, as transformers)."""
        self._checkpointing = {"use_reentrant": True, **(gradient_checkpointing_kwargs or {})}

    def enable_input_require_grads(self) -> None:
        """Embeddings output requires grad, so reentrant checkpointing sees a differentiable input."""
        self.model.embed_tokens.register_forward_hook(lambda _m, _i, out: out.requires_grad_(True))

    def save_pretrained(self, directory: str | Path) -> None:
        """config.json, generation_config.json and model.safetensors as transformers writes them (the tied
        `lm_head.weight` left out), loadable by `AutoModelForCausalLM.from_pretrained`."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        raw = {**self.config.raw, "dtype": str(self.model.embed_tokens.weight.dtype).removeprefix("torch.")}
        (directory / "config.json").write_text(json.dumps(raw, indent=2, sort_keys=True) + "\n")
        if self.generation_config.raw:
            text = json.dumps(self.generation_config.raw, indent=2, sort_keys=True) + "\n"
            (directory / "generation_config.json").write_text(text)
        tied = self.config.tie_word_embeddings
        tensors = {k: v.detach().contiguous() for k, v in self.state_dict().items()
                   if not (tied and k == "lm_head.weight")}
        save_file(tensors, str(directory / WEIGHTS_FILE), metadata={"format": "pt"})

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        past_key_values: KVCache | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int = 0,
    ) -> LeanOutput:
        """`logits_to_keep` as transformers': 0 projects every position, k > 0 only the last k (sampling
        needs the last one: the vocabulary projection of a prompt's other positions is wasted work)."""
        checkpointing = self._checkpointing is not None and self.training and torch.is_grad_enabled()
        use_cache = (self.config.use_cache if use_cache is None else use_cache) and not checkpointing
        x = self.model.embed_tokens(input_ids)
        cache = (past_key_values or KVCache()) if use_cache else past_key_values
        past_len = cache.get_seq_length() if cache is not None else 0
        if position_ids is None:
            position_ids = (torch.arange(x.shape[1], device=x.device) + past_len).unsqueeze(0)
        mask = attention_mask_4d(attention_mask, x.shape[1], past_len)
        cos, sin = self.model.rotary_emb(x, position_ids)
        for layer in self.model.layers:
            if checkpointing:
                x = checkpoint(layer, x, cos, sin, mask, None, **(self._checkpointing or {}))
            else:
                x = layer(x, cos, sin, mask, cache)
        logits = self.lm_head(self.model.norm(x[:, -logits_to_keep:] if logits_to_keep else x))
        return LeanOutput(logits=logits, past_key_values=cache if use_cache else None)
