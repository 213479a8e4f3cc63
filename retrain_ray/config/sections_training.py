"""Section models for what is trained and how: [training], [algorithm], [optimizer], [lora], [gtpo],
[hicra], [sepa], [model], [backend] (spec section 7, same keys and defaults as the original).

Single-key bounds live here as field constraints; rules that tie several keys together live in
`retrain_ray/checks/rules.py`. Keys that are ours, not the original's, are marked "ours".
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from retrain_ray.config.base import Bool, Float, Int, IntList, Section, Table, check_choice, one_of
from retrain_ray.config.names import (
    SEPA_SCHEDULES,
    SFT_BATCH_ORDERS,
    SFT_LOSS_FNS,
    TL_GRPO_BRANCH_MODES,
    UNCERTAINTY_ALIASES,
    canonical_uncertainty,
    valid_devices,
)

SEED_MAX = 2**32 - 1



class TrainingSection(Section):
    seed: Int = Field(default=-1, ge=-1, le=SEED_MAX)
    max_steps: Int = Field(default=500, gt=0)
    batch_size: Int = Field(default=8, gt=0)
    group_size: Int = Field(default=16, gt=0)
    max_tokens: Int = Field(default=10240, gt=0)
    temperature: Float = Field(default=0.7, ge=0.0)
    top_p: Float = Field(default=0.95, gt=0.0, le=1.0)
    lr: Float = Field(default=4e-5, gt=0.0)
    weight_decay: Float = 0.0
    clip_eps: Float = Field(default=0.0, ge=0.0)
    clip_eps_high: Float = Field(default=0.0, ge=0.0)
    clip_ratio_c: Float = Field(default=0.0, ge=0.0)
    policy_loss_mode: Literal["standard", "kl_cov", "clip_cov"] = "standard"
    kl_cov_percent: Float = Field(default=0.2, ge=0.0, le=100.0)
    kl_cov_coef: Float = Field(default=1.0, ge=0.0)
    clip_cov_ratio: Float = Field(default=0.0002, ge=0.0, le=1.0)
    clip_cov_min: Float = 1.0
    clip_cov_max: Float = 5.0
    adv_clip_max: Float = Field(default=0.0, ge=0.0)
    batch_advantage_norm: Bool = False
    max_examples: Int = Field(default=0, ge=0)
    save_every: Int = Field(default=20, ge=0)
    trainer: str = "retrain"
    trainer_command: str = ""
    tl_grpo: Bool = False
    tl_grpo_branch_mode: Annotated[str, one_of(TL_GRPO_BRANCH_MODES, "tl_grpo_branch_mode", dotted=False)] = "action_space"
    tl_grpo_branch_size: Int = Field(default=4, ge=2)
    tl_grpo_lookahead_steps: Int = Field(default=2, ge=0)
    tl_grpo_ema_decay: Float = Field(default=0.9, gt=0.0, lt=1.0)
    tl_grpo_ema_init: Float = 0.5
    sft_warmup_steps: Int = Field(default=0, ge=0)
    sft_data_path: str = ""
    sft_data_sha256: str = ""
    sft_data_rows: Int = Field(default=0, ge=0)
    sft_audit_path: str = ""
    sft_audit_sha256: str = ""
    sft_token_audit_path: str = ""
    sft_token_audit_sha256: str = ""
    sft_batch_size: Int = Field(default=0, ge=0)
    sft_max_tokens: Int = Field(default=0, ge=0)
    sft_lr: Float = Field(default=0.0, ge=0.0)
    sft_loss_fn: Annotated[str, one_of(SFT_LOSS_FNS, "sft_loss_fn", dotted=False)] = "auto"
    sft_batch_order: Annotated[str, one_of(SFT_BATCH_ORDERS, "sft_batch_order", dotted=False)] = "shuffle"
    sft_length_bucket_size: Int = Field(default=0, ge=0)
    sft_reshuffle_each_epoch: Bool = False
    # ours
    eval_every: Int = Field(default=0, ge=0)
    eval_examples: Int = Field(default=64, gt=0)
    # One greedy evaluation of the untrained model before the first step (logged as step -1), so the eval
    # curve and `results`' held-out before/after start from the base model.
    eval_at_start: Bool = False
    log_every: Int = Field(default=1, gt=0)
    # Rows (completions) per forward/backward on the local backend (0 = the whole step at once) and the
    # number of such parts one optimizer step accumulates; seed 001's effective batch, micro x
    # accumulation, is the step's batch_size x group_size (checks/rules.py refuses other products).
    micro_batch_size: Int = Field(default=0, ge=0)
    gradient_accumulation_steps: Int = Field(default=1, ge=1)
    # Seed 001's training keys (its other names are aliases: config/key_names.py). num_epochs > 0 caps the
    # steps at the passes over the data (reshuffled per epoch, seeded); checkpoint_dir holds the
    # checkpoints instead of <log_dir>/checkpoints and is resumed from automatically.
    num_epochs: Int = Field(default=0, ge=0)
    checkpoint_dir: str = ""
    # The learning rate per step (run/loop.py): linear warmup over warmup_steps (or
    # warmup_ratio of the run's steps), then constant, linear decay to 0 or cosine decay to 0.
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    warmup_steps: Int = Field(default=0, ge=0)
    warmup_ratio: Float = Field(default=0.0, ge=0.0, lt=1.0)
    keep_last_checkpoints: Int = Field(default=3, ge=0)
    # Steps that checkpoint besides the multiples of save_every (a checkpoint after step N, 1-based); an
    # adaptive campaign fills it with its rungs (config/matrix.py), so a rung need not divide save_every.
    checkpoint_steps: IntList = Field(default_factory=list)
    # Warm start "until sampled accuracy reaches X": after each SFT step, sample the eval prompts at the
    # run's temperature and switch to RL once the correct rate reaches this (0 = run all SFT steps).
    sft_target_correct_rate: Float = Field(default=0.0, ge=0.0, le=1.0)
    # Divergence watch (run/divergence.py): a trained step whose weight norm grows more than this factor
    # in one update, or whose gradient or weight norm exceeds this factor times its running median, is
    # diverging (0 = only non-finite values count). A warning at each onset; an error with the flag on.
    divergence_factor: Float = Field(default=100.0, ge=0.0)
    stop_on_divergence: Bool = False




    @field_validator("divergence_factor")
    @classmethod
    def _divergence_factor(cls, v: float) -> float:
        if 0 < v <= 1:
            raise ValueError(f"divergence_factor = {v} would call every update diverging; use a factor above 1 "
                             "(default 100) or 0 to check only for non-finite values")
        return v

    @property
    def rows_per_step(self) -> int:
        """Datums of one full step: batch_size prompts x group_size completions."""
        return self.batch_size * self.group_size


class AlgorithmSection(Section):
    algorithm_mode: str = ""
    advantage_mode: str = "maxrl"
    transform_mode: str = "gtpo_sepa"
    uncertainty_kind: str = "surprisal"
    surprisal_mask_rho: Float = Field(default=0.0, ge=0.0, le=1.0)
    entropy_mask_rho: Float = Field(default=0.0, ge=0.0, le=1.0)
    params: Table = Field(default_factory=dict)
    advantage_params: Table = Field(default_factory=dict)
    transform_params: Table = Field(default_factory=dict)




    @field_validator("uncertainty_kind")
    @classmethod
    def _uncertainty(cls, v: str) -> str:
        if v == "varentropy":
            raise ValueError("uncertainty kind 'varentropy' is an alias without an implementation")
        check_choice(v, frozenset(UNCERTAINTY_ALIASES), "uncertainty_kind")
        return canonical_uncertainty(v)


class OptimizerSection(Section):
    beta1: Float = Field(default=0.9, ge=0.0, lt=1.0)
    beta2: Float = Field(default=0.95, ge=0.0, lt=1.0)
    eps: Float = Field(default=1e-8, gt=0.0)
    grad_clip_norm: Float = Field(default=0.0, ge=0.0)


class LoraSection(Section):
    alpha: Int = Field(default=0, ge=0)
    dropout: Float = Field(default=0.0, ge=0.0, lt=1.0)


class GtpoSection(Section):
    beta: Float = Field(default=0.1, ge=0.0)


class HicraSection(Section):
    alpha: Float = Field(default=0.2, ge=0.0)


class SepaSection(Section):
    steps: Int = Field(default=500, ge=0)
    schedule: Annotated[str, one_of(SEPA_SCHEDULES, "sepa schedule", dotted=False)] = "linear"
    delay_steps: Int = Field(default=50, ge=0)
    correct_rate_gate: Float = Field(default=0.1, ge=0.0, le=1.0)



class ModelSection(Section):
    model: str = "Qwen/Qwen3-4B-Instruct-2507"
    """A hub id, a local directory, `builtin:<name>` (e.g. builtin:tiny) or `smollm2:135m`."""
    revision: str = ""
    local_files_only: Bool = False
    base_url: str = ""
    lora_rank: Int = Field(default=32, gt=0)
    finetune: Literal["lora", "full"] = "lora"  # ours


class BackendSection(Section):
    backend: str = "local"
    devices: str = "gpu:0"
    adapter_path: str = "/tmp/retrain_adapter"
    throttle_dir: str = ""
    max_concurrent: Int = Field(default=4, gt=0)
    options: Table = Field(default_factory=dict)
    lease_ttl_s: Float = Field(default=30.0, gt=0.0)  # ours
    acquire_timeout_s: Float = Field(default=600.0, gt=0.0)  # ours

    @field_validator("devices")
    @classmethod
    def _devices(cls, v: str) -> str:
        if not valid_devices(v):
            raise ValueError("devices must be `cpu`, `gpu:N`, or a comma list like `gpu:0,gpu:1`")
        return v.replace(" ", "")
