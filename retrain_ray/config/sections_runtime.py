"""Section models around the trainer: [inference], [backpressure], [planning], [data], [environment],
[reward], [resume], [logging], [echo], [optimizer_batch], [plugins] (spec section 7).

Keys that are ours, not the original's, are marked "ours". `[resume] from` is a Python keyword: the
attribute is `from_`, the TOML key (and the dump alias) is `from`.
"""

from __future__ import annotations

import json
from typing import Annotated

from pydantic import ConfigDict, Field, field_validator

from retrain_ray.config.base import Bool, Float, Int, Section, StrList, Table, check_choice, one_of
from retrain_ray.config.names import (
    CHECKPOINT_ARTIFACTS,
    ECHO_LOSS_FNS,
    ECHO_TARGET_RETENTION,
    SHARED_BATCHING_MODES,
    WANDB_MODES,
)
from retrain_ray.util.judge_prompt import DEFAULT_JUDGE_PROMPT, JUDGE_APIS, check_prompt


class InferenceSection(Section):
    engine: str = "pytorch"
    url: str = ""
    attention_kernel: str = "default"
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    prefix_caching: Bool = True
    max_concurrent: Int = Field(default=4, gt=0)  # ours: shared endpoint throttle capacity
    one_step_off: Bool = False  # ours
    # ours: more vLLM engine arguments for engine = "vllm-embedded" (e.g. max_model_len, gpu_memory_utilization)
    engine_args: Table = Field(default_factory=dict)
    # ours: in a campaign, every run samples through ONE vLLM engine with its own LoRA adapter
    shared: Bool = False
    # ours: "batch" serves the runs' concurrent requests in one vLLM generate; "serial" one run at a time
    shared_batching: Annotated[str, one_of(SHARED_BATCHING_MODES, "[inference] shared_batching mode", dotted=False)] = "batch"
    shared_batch_window_ms: Float = Field(default=20.0, ge=0.0, le=10_000.0)  # ours: wait for the other runs




class BackpressureSection(Section):
    enabled: Bool = False
    warmup_steps: Int = Field(default=10, ge=0)
    ema_decay: Float = Field(default=0.9, ge=0.0, lt=1.0)
    throttle_margin: Float = Field(default=0.85, gt=0.0, le=1.0)
    increase_margin: Float = Field(default=0.5, gt=0.0, le=1.0)
    min_batch_size: Int = Field(default=1, ge=1)
    max_batch_size: Int = Field(default=64, ge=1)
    peak_gflops: Float = Field(default=0.0, ge=0.0)
    peak_bw_gb_s: Float = Field(default=0.0, ge=0.0)
    pooled: Bool = True  # ours
    error_cut: Float = Field(default=0.5, gt=0.0)  # ours


class PlanningSection(Section):
    detector: str = "regex"
    model: str = "all-MiniLM-L6-v2"
    threshold: Float = 0.02



class DataSection(Section):
    source: str = "math"
    task: str = "first_digit"  # ours (the rest of this section too)
    level: Int = Field(default=1, ge=1)
    path: str = ""
    prompt_column: str = "prompt"
    reference_column: str = "reference"
    eval_path: str = ""
    num_examples: Int = Field(default=512, gt=0)
    num_eval_examples: Int = Field(default=64, ge=0)
    # ours: a prompt longer than the model's context minus [training] max_tokens keeps its last tokens
    # (with a warning) instead of being refused at load
    truncate_prompts: Bool = False



class EnvironmentSection(Section):
    provider: str = ""
    id: str = ""
    args: str = ""
    """A JSON object as text; a TOML table here is JSON-dumped on load (as the original does)."""
    max_turns: Int = -1
    auto_install: Bool = False
    rollout_env_workers: Int = Field(default=1, ge=1)
    rollout_buffer_size: Int = Field(default=0, ge=0)


    @field_validator("args", mode="before")
    @classmethod
    def _args(cls, v: object) -> object:
        if isinstance(v, dict):
            return json.dumps(v, sort_keys=True)
        if isinstance(v, str) and v.strip():
            try:
                parsed = json.loads(v)
            except json.JSONDecodeError as exc:
                raise ValueError(f"args is not valid JSON ({exc.msg})") from None
            if not isinstance(parsed, dict):
                raise ValueError("args must be a JSON object (a TOML table)")
        return v


class RewardSection(Section):
    type: str = "match"
    judge_model: str = ""
    judge_url: str = "https://api.openai.com/v1"  # ours: the judge's OpenAI-compatible endpoint (the original's client default)
    judge_api: str = "chat"  # ours: "chat" (/v1/chat/completions) or "completions" (/v1/completions, text prompt)
    judge_prompt: str = DEFAULT_JUDGE_PROMPT  # ours: {question}, {answer} (the reference) and {response}; verifiers' default
    judge_max_tokens: Int = Field(default=16, ge=1)  # ours: the judge's reply length
    custom_module: str = ""
    custom_function: str = "score"
    workers: Int = Field(default=1, ge=1)  # ours: worker processes scoring a batch (math, custom)
    timeout_s: Float = Field(default=300.0, gt=0.0, allow_inf_nan=False)  # ours: a custom reward's limit per batch (the original's 300 s)


    @field_validator("judge_api")
    @classmethod
    def _judge_api(cls, v: str) -> str:
        if v not in JUDGE_APIS:
            raise ValueError(f"judge_api {v!r} is not known; use one of {list(JUDGE_APIS)}")
        return v

    @field_validator("judge_prompt")
    @classmethod
    def _judge_prompt(cls, v: str) -> str:
        check_prompt(v)
        return v


class ResumeSection(Section):
    model_config = ConfigDict(frozen=True, extra="forbid", validate_by_name=True, validate_by_alias=True,
                              serialize_by_alias=True)

    from_: str = Field(default="", alias="from")


class LoggingSection(Section):
    log_dir: str = "logs/train"
    wandb_project: str = ""
    wandb_run_name: str = ""
    wandb_entity: str = ""
    wandb_group: str = ""
    wandb_tags: str = ""
    wandb_mode: str = ""
    checkpoint_artifacts: Annotated[str, one_of(CHECKPOINT_ARTIFACTS, "checkpoint_artifacts", dotted=False)] = "auto"
    mlflow_tracking_uri: str = ""
    mlflow_experiment: str = ""
    tensorboard: Bool = False
    log_generations: Bool = True
    jsonl: Bool = True  # ours: metrics.jsonl beside the Arrow log, one line per step (docs/logs.md)
    generation_log_samples_per_prompt: Int = Field(default=1, ge=0)
    generation_top_surprisal_limit: Int = Field(default=0, ge=0)
    strategic_grams: str = ""


    @field_validator("wandb_mode")
    @classmethod
    def _wandb_mode(cls, v: str) -> str:
        return v if v == "" else check_choice(v, WANDB_MODES, "wandb_mode", dotted=False)


class EchoSection(Section):
    enabled: Bool = False
    weight: Float = Field(default=0.05, ge=0.0, le=1.0)
    loss_fn: Annotated[str, one_of(ECHO_LOSS_FNS, "echo loss_fn (ECHO is cross-entropy on the observation tokens)", dotted=False)] = "cross_entropy"
    target_retention: Annotated[str, one_of(ECHO_TARGET_RETENTION, "echo target_retention", dotted=False)] = "bounded"
    max_tokens_per_step: Int = Field(default=2048, ge=0)
    max_token_ratio: Float = Field(default=0.5, ge=0.0)
    entropy_floor: Float = Field(default=0.01, ge=0.0)
    min_prompt_overlap: Float = Field(default=0.5, ge=0.0, le=1.0)
    require_live_observation_bridge: Bool = False




class OptimizerBatchSection(Section):
    capture: Bool = False
    replay_path: str = ""
    expected_logical_sha256: str = ""
    expected_manifest_sha256: str = ""
    allow_config_differences: StrList = Field(default_factory=list)


class PluginsSection(Section):
    search_paths: StrList = Field(default_factory=lambda: ["plugins"])
    strict: Bool = True
