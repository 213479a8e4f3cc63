"""The RunLoop: one RL run, step by step (spec 1.4). It knows nothing about Ray.

    sync_weights -> sample -> score -> assign_credit -> update -> record -> advise -> maybe_checkpoint

Everything with side effects comes in from outside (engine, backend, reward, observers, back-pressure
advisor, throttle), so the same loop runs in a single process, in a Ray Tune trial, or against remote
actors in split placement. Departures from the original, deliberately:
  * the trainer scores log-probs under the sampler's tempered distribution (ratio 1 on-policy);
  * checkpoints hold optimizer, RNG and back-pressure state, so resume is exact;
  * SFT warm-start steps build their targets from the task when no SFT file is given.
"""

from __future__ import annotations

import logging
import random
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from retrain_ray.backends.types import TrainBackend, TrainBatch
from retrain_ray.backpressure.types import StepObservation
from retrain_ray.data import next_batch
from retrain_ray.engines.types import SamplingEngine, SamplingParams, WeightUpdate
from retrain_ray.run.checkpoint import CheckpointManager
from retrain_ray.run.credit import CreditSettings, assign_credit, logical_batch_sha256
from retrain_ray.run.rollout import (
    CORRECT_THRESHOLD,
    EndpointCounters,
    decode_groups,
    rollout_metrics,
    sample_groups,
    score_groups,
)
from retrain_ray.run.state import TrainerState, capture_rng_state, engine_generators
from retrain_ray.run.timing import timed
from retrain_ray.run.types import RunObserver, RunOutcome

log = logging.getLogger(__name__)


@dataclass
class RunComponents:
    """The runtime objects a run is made of; built by `retrain_ray.run.build`."""

    engine: SamplingEngine
    backend: TrainBackend
    tokenizer: Any
    reward: Any
    train_examples: list
    eval_examples: list
    format_answer: Callable[[str], str] | None
    sepa: Any | None
    detect_planning: Callable[[list[str]], list[int]] | None
    needs_planning: bool
    advisor: Any
    observer: RunObserver


class RunLoop:
    """Runs steps `state.next_step .. max_steps-1` of one run and checkpoints along the way."""

    def __init__(self, cfg, parts: RunComponents, *, run_name: str, run_dir: Path, condition: str) -> None:
        self.cfg = cfg
        self.parts = parts
        self.run_name = run_name
        self.condition = condition
        self.checkpoints = CheckpointManager(run_dir, cfg.training.keep_last_checkpoints)
        self.credit = CreditSettings.from_config(cfg)
        t = cfg.training
        self.sampling = SamplingParams(
            max_tokens=t.max_tokens,
            temperature=t.temperature,
            top_p=t.top_p,
            compute_entropy=cfg.algorithm.uncertainty_kind == "shannon_entropy",
        )
        self._prompt_cache: dict[str, list[int]] = {}
        self._sft_orders: dict[int, list[int]] = {}
        self.endpoint = EndpointCounters()

    # ---- the run ---------------------------------------------------------------------------
    def run(self, state: TrainerState) -> RunOutcome:
        last_row: dict[str, Any] = {}
        max_steps = self.cfg.training.max_steps
        first_step_at = None
        for step in range(state.next_step, max_steps):
            started = time.perf_counter()
            if self.in_warm_start(step, state):
                row = self.sft_step(step, state)
            else:
                row = self.rl_step(step, state)
            state.step = step
            state.wall_time_s += time.perf_counter() - started
            first_step_at = first_step_at or time.time()
            if row is not None:
                self.parts.observer.on_step(row)
                last_row = row
            self.maybe_evaluate(step)
            self.maybe_checkpoint(step, state)
        self.save_checkpoint("final", state)
        return RunOutcome(self.run_name, "completed", max_steps - 1, dict(last_row), self.checkpoints.root / "final",
                          first_step_at=first_step_at)

    # ---- one RL step ------------------------------------------------------------------------
    def rl_step(self, step: int, state: TrainerState) -> dict[str, Any] | None:
        metrics: dict[str, float] = {}
        with timed(metrics, "step_time_s"):
            with timed(metrics, "sync_time_s"):
                self.sync_weights()
            sepa_lambda = self.parts.sepa.resolve_lambda(float(step)) if self.parts.sepa else 0.0
            with timed(metrics, "sample_time_s"):
                groups = self.sample(state)
            metrics.update(self.endpoint.read(self.parts.engine))
            with timed(metrics, "score_time_s"):
                decode_groups(groups, self.parts.tokenizer, self.parts.needs_planning, self.parts.detect_planning)
                score_groups(groups, self.parts.reward)
            metrics.update(rollout_metrics(groups, self.cfg.training.max_tokens))
            self.observe_sepa(groups, metrics)
            with timed(metrics, "advantage_time_s"):
                credit = assign_credit(groups, self.credit, sepa_lambda, self.cfg.training.temperature)
            metrics.update(credit.metrics)
            state.total_correct += int(metrics["correct_count"])
            state.total_completions += int(metrics["num_completions"])
            if credit.batch is None:
                self.advise(step, state, metrics, 0, skipped=True)
                log.info("step %d: no group carried signal (all rewards tied); no update, no row", step)
                return None
            with timed(metrics, "train_time_s"):
                train = self.parts.backend.train_step(
                    credit.batch, lr=self.cfg.training.lr, weight_decay=self.cfg.training.weight_decay
                )
        self.record_generations(step, groups)
        row = self.build_row(step, state, metrics, train.loss, train.metrics, sepa_lambda)
        row["optimizer/logical_batch_sha256"] = logical_batch_sha256(credit.batch)
        row.update(self.advise(step, state, metrics, credit.batch.num_tokens, skipped=False))
        return row

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

    def sample(self, state: TrainerState):
        examples, state.example_idx = next_batch(self.parts.train_examples, state.example_idx, state.current_batch_size)
        prompt_ids = [self.encode(ex.prompt) for ex in examples]
        return sample_groups(
            self.parts.engine, prompt_ids, examples, state.current_group_size, self.sampling
        )

    def encode(self, prompt: str) -> list[int]:
        if prompt not in self._prompt_cache:
            from retrain_ray.models import encode_prompt

            self._prompt_cache[prompt] = encode_prompt(self.parts.tokenizer, prompt)
        return self._prompt_cache[prompt]

    def observe_sepa(self, groups, metrics: dict) -> None:
        sepa = self.parts.sepa
        if sepa is None:
            return
        sepa.observe_correct_rate(metrics["correct_rate"])
        if sepa.enabled() and self.cfg.sepa.schedule == "auto":
            for g in groups:
                for sample, mask in zip(g.samples_G, g.planning_masks_G, strict=True):
                    sepa.update_auto_state([-lp for lp, m in zip(sample.logprobs, mask, strict=True) if not m])

    # ---- SFT warm start ---------------------------------------------------------------------
    def in_warm_start(self, step: int, state: TrainerState) -> bool:
        """The first `sft_warmup_steps` steps are supervised, unless the target accuracy came first."""
        return (
            step < self.cfg.training.sft_warmup_steps
            and self.parts.format_answer is not None
            and not state.sft_finished
        )

    def sft_step(self, step: int, state: TrainerState) -> dict[str, Any]:
        t = self.cfg.training
        size = t.sft_batch_size or t.batch_size * t.group_size
        examples = self.sft_examples(step, size)
        batch = self.sft_batch(examples)
        metrics: dict[str, float] = {}
        with timed(metrics, "step_time_s"):
            result = self.parts.backend.sft_step(batch, lr=t.sft_lr or t.lr, weight_decay=t.weight_decay)
        probe = self.probe_warm_start(state)
        return {
            **self.identity(step, phase="sft"),
            **probe,
            "loss": result.loss,
            "num_datums": float(len(examples)),
            "tokens_per_step": float(batch.num_tokens),
            "step_time_s": metrics["step_time_s"],
            "tokens_per_second": batch.num_tokens / max(metrics["step_time_s"], 1e-9),
            **{k: float(v) for k, v in result.metrics.items()},
        }

    def probe_warm_start(self, state: TrainerState) -> dict[str, float]:
        """With `sft_target_correct_rate` set: samples held-out prompts as RL would (run temperature,
        group_size each) and ends the warm start once their correct rate reaches the target."""
        target = self.cfg.training.sft_target_correct_rate
        examples = self.parts.eval_examples[: self.cfg.training.batch_size]
        if target <= 0 or not examples:
            return {}
        self.sync_weights()
        groups = sample_groups(self.parts.engine, [self.encode(e.prompt) for e in examples], examples,
                               self.cfg.training.group_size, self.sampling)
        decode_groups(groups, self.parts.tokenizer, False, None)
        score_groups(groups, self.parts.reward)
        correct = rollout_metrics(groups, self.cfg.training.max_tokens)["correct_rate"]
        state.sft_finished = correct >= target
        return {"sft_probe_correct_rate": correct}

    def sft_examples(self, step: int, size: int) -> list:
        """Examples of warm-start step `step`: `sft_batch_order` "shuffle" walks a permutation seeded by
        the run's seed (a new one each pass when `sft_reshuffle_each_epoch`), "sequential" the file order."""
        t, train = self.cfg.training, self.parts.train_examples
        positions = range(step * size, (step + 1) * size)
        if t.sft_batch_order == "sequential":
            return [train[p % len(train)] for p in positions]
        picked = []
        for p in positions:
            epoch, index = divmod(p, len(train))
            picked.append(train[self._sft_order(epoch if t.sft_reshuffle_each_epoch else 0)[index]])
        return picked

    def _sft_order(self, epoch: int) -> list[int]:
        if epoch not in self._sft_orders:
            order = list(range(len(self.parts.train_examples)))
            random.Random(max(self.cfg.training.seed, 0) + epoch).shuffle(order)
            self._sft_orders[epoch] = order
        return self._sft_orders[epoch]

    def sft_batch(self, examples) -> TrainBatch:
        """Prompt + formatted answer + EOS per example, cut to `sft_max_tokens` tokens (0: not cut).
        `max_tokens` is the sampling budget of a completion, not a bound on a whole SFT sequence: used
        as one, it cut every target off and the warm start trained on nothing (loss 0)."""
        tok = self.parts.tokenizer
        limit = self.cfg.training.sft_max_tokens or sys.maxsize
        tokens_D, adv_D, lens = [], [], []
        for ex in examples:
            prompt = self.encode(ex.prompt)
            target = tok.encode(self.parts.format_answer(ex.reference), add_special_tokens=False)
            target = target + [tok.eos_token_id]
            tokens_D.append((prompt + target)[:limit])
            adv_D.append(([0.0] * len(prompt) + [1.0] * len(target))[:limit])
            lens.append(min(len(prompt), limit))
        return TrainBatch(tokens_D, [[0.0] * len(t) for t in tokens_D], adv_D, lens)

    # ---- records ----------------------------------------------------------------------------
    def identity(self, step: int, *, phase: str) -> dict[str, Any]:
        alg = self.cfg.algorithm
        caps = self.parts.backend.capabilities
        return {
            "run": self.run_name,
            "step": step,
            "phase": phase,
            "condition": self.condition,
            "algorithm_mode": alg.algorithm_mode,
            "advantage_mode": alg.advantage_mode,
            "transform_mode": alg.transform_mode,
            "uncertainty_kind": alg.uncertainty_kind,
            "policy_loss_mode": self.cfg.training.policy_loss_mode,
            "backend_reports_sync_loss": caps.reports_sync_loss,
            "backend_preserves_token_advantages": caps.preserves_token_advantages,
            "loss_is_placeholder": not caps.reports_sync_loss,
            "wall_time": time.time(),
        }

    def build_row(self, step, state, metrics, loss, train_metrics, sepa_lambda) -> dict[str, Any]:
        step_time = max(metrics["step_time_s"], 1e-9)
        tokens = metrics.get("tokens_per_step", 0.0)
        row: dict[str, Any] = {
            **self.identity(step, phase="rl"),
            **metrics,
            "loss": float(loss),
            "running_correct_rate": state.running_correct_rate,
            "sepa_lambda": sepa_lambda,
            "sepa_gate_open": bool(self.parts.sepa.gate_open) if self.parts.sepa else False,
            "batch_size": state.current_batch_size,
            "group_size": state.current_group_size,
            "tokens_per_second": tokens / step_time,
            "sample_share": metrics["sample_time_s"] / step_time,
            "train_share": metrics["train_time_s"] / step_time,
            "train_time_semantics": "synchronous_optimizer_update",
            "rl/train_time_s": metrics["train_time_s"],
            "process_max_rss_mb": _max_rss_mb(),
            "weights_version": self.parts.engine.weights_version,
            "staleness": float(self.parts.backend.version - 1 - self.parts.engine.weights_version),
        }
        row.update({k: float(v) for k, v in train_metrics.items()})
        for key in ("correct_count", "num_completions"):
            row.pop(key, None)
        return row

    def record_generations(self, step: int, groups) -> None:
        if not self.cfg.logging.log_generations:
            return
        from retrain_ray.logs import select_generation_samples

        rows = select_generation_samples(
            step=step,
            run=self.run_name,
            prompts_P=[g.example.prompt for g in groups],
            completions_P_G=[g.texts_G for g in groups],
            rewards_P_G=[g.rewards_G for g in groups],
            num_tokens_P_G=[[len(s.token_ids) for s in g.samples_G] for g in groups],
            samples_per_prompt=self.cfg.logging.generation_log_samples_per_prompt,
        )
        self.parts.observer.on_generations(rows)

    # ---- back pressure ----------------------------------------------------------------------
    def advise(self, step: int, state: TrainerState, metrics: dict, tokens: int, *, skipped: bool) -> dict[str, Any]:
        obs = StepObservation(
            run_id=self.run_name,
            step=step,
            batch_size=state.current_batch_size,
            group_size=state.current_group_size,
            total_tokens=int(tokens),
            step_time_s=metrics.get("step_time_s", 0.0),
            sample_time_s=metrics.get("sample_time_s", 0.0),
            train_time_s=metrics.get("train_time_s", 0.0),
            skipped=skipped,
            endpoint_errors=int(metrics.get("endpoint_errors", 0)),
        )
        decision = self.parts.advisor.advise(obs)
        state.current_batch_size = int(decision.recommended_batch_size)
        return decision.to_metrics()

    # ---- evaluation and checkpoints ---------------------------------------------------------
    def maybe_evaluate(self, step: int) -> None:
        every = self.cfg.training.eval_every
        if every <= 0 or (step + 1) % every or not self.parts.eval_examples:
            return
        self.parts.observer.on_eval(self.evaluate(step))

    def evaluate(self, step: int) -> dict[str, Any]:
        """Greedy decoding on the eval split: one completion per example, scored by the run's reward."""
        self.sync_weights()
        examples = self.parts.eval_examples[: self.cfg.training.eval_examples]
        params = SamplingParams(max_tokens=self.cfg.training.max_tokens, temperature=0.0, top_p=1.0)
        groups = sample_groups(self.parts.engine, [self.encode(e.prompt) for e in examples], examples, 1, params)
        decode_groups(groups, self.parts.tokenizer, False, None)
        score_groups(groups, self.parts.reward)
        rewards = [g.rewards_G[0] for g in groups]
        return {
            "run": self.run_name,
            "step": step,
            "eval_mean_reward": sum(rewards) / len(rewards),
            "eval_correct_rate": sum(r > CORRECT_THRESHOLD for r in rewards) / len(rewards),
            "num_examples": len(rewards),
        }

    def maybe_checkpoint(self, step: int, state: TrainerState) -> None:
        every = self.cfg.training.save_every
        if every > 0 and (step + 1) % every == 0 and step + 1 < self.cfg.training.max_steps:
            self.save_checkpoint(f"checkpoint_step_{step + 1}", state)

    def save_checkpoint(self, name: str, state: TrainerState) -> Path:
        if self.parts.sepa is not None:
            state.sepa = self.parts.sepa.state_dict()
        state.backpressure = self.parts.advisor.state_dict()
        state.weights_version = self.parts.backend.version
        state.rng = capture_rng_state(engine_generators(self.parts.engine))
        path = self.checkpoints.save(name, state, self.parts.backend.save_checkpoint)
        self.parts.observer.on_checkpoint(state.step, path)
        return path


def _max_rss_mb() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024
