"""The RunLoop: one RL run, step by step (spec 1.4). It knows nothing about Ray.

    sync_weights -> rollout (sample, decode, score) -> assign_credit -> update -> record -> advise
    -> apply to the run state -> maybe_evaluate -> maybe_checkpoint

Everything with side effects comes in from outside (engine, backend, reward, observers, back-pressure
advisor, throttle), so the same loop runs in a single process, in a Ray Tune trial, or against remote
actors in split placement. The step's verbs read the run state and return what they made (frozen
records); `RunLoop.apply` is the one place the run state (`TrainerState`) changes.
Departures from the original, deliberately:
  * the trainer scores log-probs under the sampler's tempered distribution (ratio 1 on-policy);
  * checkpoints hold optimizer, RNG and back-pressure state, so resume is exact;
  * SFT warm-start steps build their targets from the task when no SFT file is given.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from retrain_ray.algorithms.sepa import SEPAController
from retrain_ray.backends.types import TrainBackend, TrainBatch, TrainStepResult
from retrain_ray.backpressure.types import BackPressureAdvisor, Decision, StepObservation
from retrain_ray.data import next_batch
from retrain_ray.data.types import Example
from retrain_ray.engines.types import SampleResult, SamplingEngine, SamplingParams, WeightUpdate
from retrain_ray.environments.types import Environment
from retrain_ray.logs.observers import TopSurprisal, select_generation_samples, top_surprisal_tokens
from retrain_ray.rewards.types import Reward
from retrain_ray.run.credit import CreditSettings, assign_credit, logical_batch_sha256
from retrain_ray.run.divergence import DivergenceError, DivergenceWatch, stop_message
from retrain_ray.run.multiturn import Branching, multiturn_rollout
from retrain_ray.run.optimizer_batch import (
    Capture,
    CaptureSettings,
    OptimizerBatchError,
    load_replay,
    write_capture,
)
from retrain_ray.run.resume.checkpoint import CheckpointManager
from retrain_ray.run.rollout import (
    EndpointCounters,
    Group,
    PlanningDetector,
    Rollout,
    engine_labels,
    planning_masks,
    reward_counters,
    rollout,
    rollout_metrics,
)
from retrain_ray.run.rows import RowIdentity, StepRecord, build_row, eval_row, timed
from retrain_ray.run.state import TrainerState, capture_rng_state, correct_rate, engine_generators
from retrain_ray.run.trainers.sft import WarmStart, WarmStartStep
from retrain_ray.run.types import MetricsRow, RunObserver, RunOutcome

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.models import Tokenizer

log = logging.getLogger(__name__)


@dataclass
class RunComponents:
    """The runtime objects a run is made of; built by `retrain_ray.run.build`."""

    engine: SamplingEngine
    backend: TrainBackend
    tokenizer: Tokenizer  # a Hugging Face tokenizer, or a remote engine's stand-in with the same calls
    reward: Reward
    train_examples: list[Example]
    eval_examples: list[Example]
    format_answer: Callable[[str], str] | None
    sepa: SEPAController | None
    detect_planning: PlanningDetector | None
    needs_planning: bool
    advisor: BackPressureAdvisor
    observer: RunObserver
    environment: Environment | None = None  # `[environment]`: episodes are multi-turn, examples its own


@dataclass(frozen=True)
class RLStep:
    """What one RL step made: its row (every step has one) and the state it advances."""

    row: dict[str, object]
    example_idx: int  # the data cursor after this step's batch
    correct: int  # completions of this step with reward > CORRECT_THRESHOLD
    completions: int
    next_batch_size: int  # the advisor's recommendation
    generations: list[MetricsRow]  # the step's generation-log rows, recorded after its metrics row
    delight_eta: float | None = None  # the step's `dg_eta` (delight transforms): the adaptive eta's EMA state
    tl_grpo_ema: float | None = None  # TL-GRPO's EMA baseline after this step's episodes


class RunLoop:
    """Runs steps `state.next_step .. max_steps-1` of one run and checkpoints along the way."""

    def __init__(self, cfg: RetrainConfig, parts: RunComponents, *, run_name: str, run_dir: Path, condition: str) -> None:
        self.cfg = cfg
        self.parts = parts
        self.run_name = run_name
        root = cfg.training.checkpoint_dir
        self.checkpoints = CheckpointManager(run_dir, cfg.training.keep_last_checkpoints,
                                             root=Path(root).expanduser() if root else None)
        self.credit = CreditSettings.from_config(cfg)
        t = cfg.training
        self.sampling = SamplingParams(
            max_tokens=t.max_tokens,
            temperature=t.temperature,
            top_p=t.top_p,
            compute_entropy=cfg.algorithm.uncertainty_kind == "shannon_entropy",
        )
        self.identity = RowIdentity(run_name, condition, cfg.algorithm, t.policy_loss_mode,
                                    parts.backend.capabilities)
        self._prompt_cache: dict[str, list[int]] = {}
        self.warm_start = WarmStart(cfg, parts, encode=self.encode, sampling=self.sampling)
        self.endpoint = EndpointCounters()
        self.divergence = DivergenceWatch(t.divergence_factor)
        self.schedule = LRSchedule.from_training(t)
        self.run_dir = run_dir
        self.capture_settings = CaptureSettings.of(cfg)
        self.replay: Capture | None = load_replay(self.capture_settings)  # `[optimizer_batch] replay_path`: the batch to train on

    # ---- the run ---------------------------------------------------------------------------
    def run(self, state: TrainerState) -> RunOutcome:
        last_row: dict[str, object] = {}
        max_steps = self.cfg.training.max_steps
        first_step_at = None
        if self.capture_settings.one_step_only:  # `[optimizer_batch]`: exactly the one step after the checkpoint
            max_steps = state.next_step + 1
        if state.next_step == 0:
            self.maybe_evaluate_base()
        for step in range(state.next_step, max_steps):
            started = time.perf_counter()
            if self.warm_start.active(step, finished=state.sft_finished):
                result: RLStep | WarmStartStep = self.warm_start.step(step, self.identity,
                                                                      sync_weights=self.sync_weights)
            else:
                result = self.rl_step(step, state)
            self.apply(state, step, result, elapsed_s=time.perf_counter() - started)
            first_step_at = first_step_at or time.time()
            self.record(result)
            last_row = result.row
            self.watch_update(result.row)
            self.maybe_evaluate(step)
            self.maybe_checkpoint(step, state)
        self.save_checkpoint("final", state)
        return RunOutcome(self.run_name, "completed", max_steps - 1, dict(last_row), self.checkpoints.root / "final",
                          first_step_at=first_step_at)

    @staticmethod
    def apply(state: TrainerState, step: int, result: RLStep | WarmStartStep, *, elapsed_s: float) -> None:
        """The one place the run state changes: step `step` is done and took `elapsed_s` seconds."""
        state.step = step
        state.wall_time_s += elapsed_s
        if isinstance(result, WarmStartStep):
            if result.finished is not None:
                state.sft_finished = result.finished
            return
        state.example_idx = result.example_idx
        state.total_correct += result.correct
        state.total_completions += result.completions
        state.current_batch_size = result.next_batch_size
        if result.delight_eta is not None:
            state.delight_eta_ema = result.delight_eta
        if result.tl_grpo_ema is not None:
            state.tl_grpo_ema = result.tl_grpo_ema

    # ---- one RL step ------------------------------------------------------------------------
    def rl_step(self, step: int, state: TrainerState) -> RLStep:
        """Samples, scores, assigns credit and trains (when the step has something to train on);
        reads `state`, returns what it advances. Every step returns a row (`trained` says whether an
        update happened)."""
        if self.replay is not None:
            return self.replay_step(step, state, self.replay)
        metrics: dict[str, float] = {}
        with timed(metrics, "step_time_s"):
            with timed(metrics, "sync_time_s"):
                self.sync_weights()
            sepa_lambda = self.parts.sepa.resolve_lambda(float(step)) if self.parts.sepa else 0.0
            examples, example_idx = next_batch(self.parts.train_examples, state.example_idx, state.current_batch_size)
            out = self.sample(examples, state.current_group_size, step=step)
            metrics["sample_time_s"] = out.sample_time_s
            metrics.update(self.endpoint.read(self.parts.engine))  # the engine's retries while sampling
            metrics["score_time_s"] = out.score_time_s
            metrics.update(reward_counters(self.parts.reward))  # the judge's calls, parse failures, retries
            metrics.update(rollout_metrics(out.groups, self.cfg.training.max_tokens))
            self.observe_sepa(out.groups, metrics["correct_rate"])
            with timed(metrics, "advantage_time_s"):
                credit = assign_credit(out.groups, self.credit.for_step(state.delight_eta_ema, state.tl_grpo_ema),
                                       sepa_lambda, self.cfg.training.temperature)
            metrics.update(credit.metrics)
            metrics["lr"] = self.schedule.lr_at(step)
            if self.cfg.optimizer_batch.capture:
                metrics.update(self.capture(credit.batch, step, metrics))
            train = self.update(credit.batch, metrics)
        if train is None:
            log.info("step %d: no group carried signal (all rewards tied); no update, logged with trained = false",
                     step)
        row = build_row(self.identity, StepRecord(
            step=step, metrics=metrics, train=train, sepa_lambda=sepa_lambda,
            sepa_gate_open=bool(self.parts.sepa.gate_open) if self.parts.sepa else False,
            running_correct_rate=correct_rate(state.total_correct + out.correct_count,
                                              state.total_completions + out.num_completions),
            batch_size=state.current_batch_size, group_size=state.current_group_size,
            weights_version=self.parts.engine.weights_version, trainer_version=self.parts.backend.version,
            batch_sha256=logical_batch_sha256(credit.batch) if credit.batch is not None else None,
        ))
        row.update(engine_labels(self.parts.engine))
        tokens = credit.batch.num_tokens if credit.batch is not None else 0
        decision = self.advise(step, state, metrics, tokens, skipped=train is None)
        row.update(decision.to_metrics())
        return RLStep(row, example_idx, out.correct_count, out.num_completions, int(decision.recommended_batch_size),
                      self.generation_rows(step, out.groups), delight_eta=credit.metrics.get("dg_eta"),
                      tl_grpo_ema=credit.metrics.get("tl_grpo_ema"))

    def capture(self, batch: TrainBatch | None, step: int, metrics: dict[str, float]) -> dict[str, float]:
        """`[optimizer_batch] capture`: writes the step's batch before the update trains on it."""
        if batch is None:
            raise OptimizerBatchError(f"optimizer_batch.capture: step {step} has no batch to capture (every group's "
                                      "rewards tied). Fix: capture from another checkpoint or with a larger "
                                      "[training] group_size")
        return write_capture(self.capture_settings, self.run_dir, batch, step=step, lr=metrics["lr"], metrics=metrics)

    def replay_step(self, step: int, state: TrainerState, capture: Capture) -> RLStep:
        """`[optimizer_batch] replay_path`: the captured batch's optimizer step, instead of sampling."""
        if capture.manifest["step"] != step:
            raise OptimizerBatchError(f"optimizer_batch.replay_path: the capture is of step {capture.manifest['step']} "
                                      f"but this run resumes at step {step}. Fix: set [resume] from to the "
                                      "checkpoint the capture run resumed from")
        batch = capture.batch  # its rewards are the capture's (a replay samples nothing)
        metrics: dict[str, float] = {**cast("dict[str, float]", capture.manifest["rewards"]), "sample_time_s": 0.0, "optimizer_batch/replayed": 1.0,
                                     "num_datums": float(len(batch.tokens_D)), "tokens_per_step": float(batch.num_tokens)}
        with timed(metrics, "step_time_s"):
            metrics["lr"] = self.schedule.lr_at(step)
            train = self.update(batch, metrics)
        row = build_row(self.identity, StepRecord(
            step=step, metrics=metrics, train=train, sepa_lambda=0.0, sepa_gate_open=False,
            running_correct_rate=correct_rate(state.total_correct, state.total_completions),
            batch_size=state.current_batch_size, group_size=state.current_group_size,
            weights_version=self.parts.engine.weights_version, trainer_version=self.parts.backend.version,
            batch_sha256=logical_batch_sha256(batch),
        ))
        return RLStep(row, state.example_idx, 0, 0, state.current_batch_size, [])

    def update(self, batch: TrainBatch | None, metrics: dict[str, float]) -> TrainStepResult | None:
        """One optimizer update on `batch` at the step's `metrics["lr"]` (None: nothing to train, no update);
        adds `train_time_s`, and `train_wait_s` when the backend says part of it waited for a shared trainer's
        batched step (`TrainStepResult.wait_s`: back pressure counts only the rest as time at the trainer)."""
        if batch is None:
            metrics["train_time_s"] = 0.0
            return None
        with timed(metrics, "train_time_s"):
            result = self.parts.backend.train_step(batch, lr=metrics["lr"],
                                                   weight_decay=self.cfg.training.weight_decay)
        if result.wait_s is not None:
            metrics["train_wait_s"] = result.wait_s
        return result

    def record(self, result: RLStep | WarmStartStep) -> None:
        """Hands the step's rows to the observers: its metrics row, then its generations."""
        self.parts.observer.on_step(result.row)
        if isinstance(result, RLStep) and result.generations:
            self.parts.observer.on_generations(result.generations)

    def watch_update(self, row: dict[str, object]) -> None:
        """Warns at the onset of a divergence, or stops the run (`stop_on_divergence`) once its row is logged."""
        found = self.divergence.observe(row)
        if found is None:
            return
        t = self.cfg.training
        if t.stop_on_divergence:
            lr = cast("float", row.get("lr", t.lr))
            raise DivergenceError(stop_message(found, lr))
        if found.onset:
            log.warning("%s: %s (warned once until it recovers; [training] stop_on_divergence = true stops the "
                        "run instead; lower lr or set grad_clip_norm)", self.run_name, found.describe())

    def sync_weights(self) -> None:
        """Makes the trainer's newest weights the sampler's; the engine confirms the version."""
        backend, engine = self.parts.backend, self.parts.engine
        if engine.weights_version == backend.version:
            return
        update: WeightUpdate = backend.export_weights()
        engine.load_weights(update)
        if engine.weights_version != update.version:
            raise RuntimeError(
                f"sampler reports weights version {engine.weights_version} after loading {update.version}"
            )

    def sample(self, examples: list[Example], group_size: int, *, step: int = 0) -> Rollout:
        """`group_size` scored completions per example at the run's sampling settings (with an
        environment: `group_size` episodes per example)."""
        parts = self.parts
        if parts.environment is not None:
            return self.play(examples, group_size, self.sampling, branching=self.branching(step))
        return rollout(parts.engine, examples, [self.encode(ex.prompt) for ex in examples],
                       group_size=group_size, params=self.sampling, tokenizer=parts.tokenizer, reward=parts.reward,
                       detect_planning=parts.detect_planning if parts.needs_planning else None)

    def play(self, examples: list[Example], group_size: int, params: SamplingParams, *,
             branching: Branching | None) -> Rollout:
        """Multi-turn episodes of the run's environment (run/multiturn.py)."""
        parts = self.parts
        assert parts.environment is not None
        tokenizer = parts.tokenizer
        detect = parts.detect_planning if parts.needs_planning else None

        def mark(samples: list[SampleResult]) -> list[list[int]]:
            return planning_masks(samples, tokenizer, detect)

        return multiturn_rollout(
            parts.engine, parts.environment, examples, group_size=group_size, params=params, encode=self.encode,
            decode=lambda ids: list(tokenizer.batch_decode(ids, skip_special_tokens=True)),
            max_turns=self.cfg.environment.max_turns, branching=branching, mark_planning=mark,
            workers=self.cfg.environment.rollout_env_workers, buffer=self.cfg.environment.rollout_buffer_size)

    def branching(self, step: int) -> Branching | None:
        """TL-GRPO's branch settings for `step` (its random choices are seeded by the run's seed and the step)."""
        t = self.cfg.training
        if not t.tl_grpo:
            return None
        return Branching(t.tl_grpo_branch_mode, t.tl_grpo_branch_size, t.tl_grpo_lookahead_steps,
                         random.Random(f"tl_grpo:{self.cfg.training.seed}:{step}"))

    def encode(self, prompt: str) -> list[int]:
        if prompt not in self._prompt_cache:
            from retrain_ray.models import encode_prompt  # defers transformers until a prompt is encoded

            self._prompt_cache[prompt] = encode_prompt(self.parts.tokenizer, prompt)
        return self._prompt_cache[prompt]

    def observe_sepa(self, groups: list[Group], step_correct_rate: float) -> None:
        sepa = self.parts.sepa
        if sepa is None:
            return
        sepa.observe_correct_rate(step_correct_rate)
        if sepa.enabled() and self.cfg.sepa.schedule == "auto":
            for g in groups:
                for sample, mask in zip(g.samples_G, g.planning_masks_G, strict=True):
                    sepa.update_auto_state([-lp for lp, m in zip(sample.logprobs, mask, strict=True) if not m])

    def generation_rows(self, step: int, groups: list[Group]) -> list[MetricsRow]:
        """The step's best completions per prompt for `generations.arrows` (none without log_generations)."""
        if not self.cfg.logging.log_generations:
            return []
        return select_generation_samples(
            step=step,
            run=self.run_name,
            prompts_P=[g.example.prompt for g in groups],
            completions_P_G=[g.texts_G for g in groups],
            rewards_P_G=[g.rewards_G for g in groups],
            num_tokens_P_G=[[len(s.token_ids) for s in g.samples_G] for g in groups],
            samples_per_prompt=self.cfg.logging.generation_log_samples_per_prompt,
            top_surprisal=self._top_surprisal(groups),
        )

    def _top_surprisal(self, groups: list[Group]) -> TopSurprisal | None:
        """`[logging] generation_top_surprisal_limit` > 0: each logged sample's most surprising tokens."""
        limit = self.cfg.logging.generation_top_surprisal_limit
        if limit <= 0:
            return None
        tokenizer = self.parts.tokenizer

        def entries(p: int, g: int) -> list[dict[str, object]]:
            sample = groups[p].samples_G[g]
            ids = list(sample.token_ids)
            names = cast("list[str | None]", tokenizer.convert_ids_to_tokens(ids)) if ids else []
            tokens = [name if name is not None else f"<{i}>" for i, name in zip(ids, names, strict=True)]
            return top_surprisal_tokens(sample.logprobs, tokens, limit)

        return entries

    # ---- back pressure ----------------------------------------------------------------------
    def advise(self, step: int, state: TrainerState, metrics: dict[str, float], tokens: int, *,
               skipped: bool) -> Decision:
        """The advisor's decision after this step (the batch size of the next one, among others)."""
        obs = StepObservation(
            run_id=self.run_name,
            step=step,
            batch_size=state.current_batch_size,
            group_size=state.current_group_size,
            total_tokens=int(tokens),
            step_time_s=metrics.get("step_time_s", 0.0),
            sample_time_s=metrics.get("sample_time_s", 0.0),
            train_time_s=metrics.get("train_time_s", 0.0) - metrics.get("train_wait_s", 0.0),
            skipped=skipped,
            endpoint_errors=int(metrics.get("endpoint_errors", 0)),
        )
        return self.parts.advisor.advise(obs)

    # ---- evaluation and checkpoints ---------------------------------------------------------
    def maybe_evaluate(self, step: int) -> None:
        every = self.cfg.training.eval_every
        if every <= 0 or (step + 1) % every or not self.parts.eval_examples:
            return
        self.parts.observer.on_eval(self.evaluate(step))

    def maybe_evaluate_base(self) -> None:
        """`eval_at_start`: the untrained model's eval row, as step -1 (before step 0's update)."""
        if self.cfg.training.eval_at_start and self.parts.eval_examples:
            self.parts.observer.on_eval(self.evaluate(-1))

    def evaluate(self, step: int) -> dict[str, object]:
        """Greedy decoding on the eval split: one completion per example, scored by the run's reward."""
        self.sync_weights()
        examples = self.parts.eval_examples[: self.cfg.training.eval_examples]
        params = SamplingParams(max_tokens=self.cfg.training.max_tokens, temperature=0.0, top_p=1.0)
        if self.parts.environment is not None:
            return eval_row(self.run_name, step, self.play(examples, 1, params, branching=None).groups)
        out = rollout(self.parts.engine, examples, [self.encode(e.prompt) for e in examples], group_size=1,
                      params=params, tokenizer=self.parts.tokenizer, reward=self.parts.reward)
        return eval_row(self.run_name, step, out.groups)

    def maybe_checkpoint(self, step: int, state: TrainerState) -> None:
        t = self.cfg.training
        done = step + 1
        scheduled = (t.save_every > 0 and done % t.save_every == 0) or done in t.checkpoint_steps  # adaptive rungs
        if scheduled and done < t.max_steps:
            self.save_checkpoint(f"checkpoint_step_{done}", state)

    def save_checkpoint(self, name: str, state: TrainerState) -> Path:
        """Saves `state` with the components' own state (SEPA, back pressure, weights version, RNG)."""
        parts = self.parts
        snapshot = dataclasses.replace(
            state,
            sepa=parts.sepa.state_dict() if parts.sepa is not None else state.sepa,
            backpressure=parts.advisor.state_dict(),
            weights_version=parts.backend.version,
            rng=capture_rng_state(engine_generators(parts.engine)),
        )
        path = self.checkpoints.save(name, snapshot, self.write_payload)
        parts.observer.on_checkpoint(snapshot.step, path)
        return path

    def write_payload(self, directory: Path) -> None:
        """A checkpoint's files besides the trainer state: the backend's (a runner may add its own)."""
        self.parts.backend.save_checkpoint(directory)

    def read_payload(self, directory: Path) -> None:
        """Loads what `write_payload` wrote into checkpoint `directory`."""
        self.parts.backend.load_checkpoint(directory)


# The learning rate of each step: warmup, then a constant, linear or cosine schedule.
#
#     warmup (step < W):  lr = base * (step + 1) / W             (the first step already trains)
#     after warmup:       progress = (step - W) / (T - W)          (0 at the first step after warmup)
#         constant        lr = base
#         linear          lr = base * (1 - progress)
#         cosine          lr = base * (1 + cos(pi * progress)) / 2
#
# T is the run's step count and W its warmup steps (`warmup_steps`, or round(warmup_ratio * T)). Both
# decays reach 0 one step after the last one, so the last step still trains. Pure: the RunLoop asks for
# each step's rate and the row's `lr` column logs it.
if TYPE_CHECKING:
    from retrain_ray.config.sections_training import TrainingSection


@dataclass(frozen=True)
class LRSchedule:
    base_lr: float
    total_steps: int
    warmup_steps: int = 0
    kind: str = "constant"

    @classmethod
    def from_training(cls, training: TrainingSection) -> LRSchedule:
        """From `[training]`: lr, max_steps (the run's step count), warmup_steps / warmup_ratio, lr_schedule."""
        total = int(training.max_steps)
        warmup = int(training.warmup_steps) or round(float(training.warmup_ratio) * total)
        return cls(float(training.lr), total, min(warmup, total), str(training.lr_schedule))

    def lr_at(self, step: int) -> float:
        return lr_at(step, base_lr=self.base_lr, total_steps=self.total_steps, warmup_steps=self.warmup_steps,
                     kind=self.kind)


def lr_at(step: int, *, base_lr: float, total_steps: int, warmup_steps: int = 0, kind: str = "constant") -> float:
    """The learning rate of 0-based `step` (see the module docstring)."""
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    if kind == "constant":
        return base_lr
    progress = (step - warmup_steps) / max(total_steps - warmup_steps, 1)
    if kind == "linear":
        return base_lr * (1.0 - progress)
    if kind == "cosine":
        return base_lr * (1.0 + math.cos(math.pi * progress)) / 2.0
    raise ValueError(f"unknown lr_schedule {kind!r}; use constant, linear or cosine")
