"""Resume preflight (`retrain-ray resume-check DIR`, spec 10): can this run continue, and from where?

Reads files only (no model, no Ray): the run's checkpoints and their checksums, the trainer state in
the newest complete one, the step against `max_steps` (from `--config`, else the config the run
recorded in `run_meta.json`), the payload the backend needs (adapter or weights, optimizer state),
the resume mode, and whether a resume lands inside the supervised warm start (whose targets are
rebuilt from the task, so nothing else is needed).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Required, TypedDict, cast

from retrain_ray.run.resume.checkpoint import STATE_FILE, CheckpointManager, load_state, verify_checkpoint

OPTIMIZER_FILE = "optimizer.pt"  # the local backend's (backends/local/checkpoint.py)
PAYLOADS = {"adapter": "LoRA adapter", "model.safetensors": "full weights", "tinker_state.json": "tinker state"}


class CheckpointNote(TypedDict):
    name: str
    problem: str  # empty when the checkpoint is complete


class ResumeReport(TypedDict, total=False):
    """What `retrain-ray resume-check` prints (as JSON with --json)."""

    run_dir: Required[str]
    problems: Required[list[str]]
    notes: Required[list[str]]
    checkpoints: list[CheckpointNote]
    checkpoint: str
    step: int
    next_step: int
    resume_mode: str
    payload: str
    max_steps: int | None
    complete: bool
    resumable: bool


def _recorded_config(run_dir: Path) -> dict[str, object] | None:
    meta = run_dir / "run_meta.json"
    if not meta.is_file():
        return None
    return json.loads(meta.read_text()).get("config")


def _max_steps(run_dir: Path, config_path: str | None) -> tuple[int | None, int]:
    """(max_steps, sft_warmup_steps) from --config or run_meta.json; (None, 0) when neither exists."""
    if config_path:
        # deferred: loads pydantic, which importing this module does not need
        from retrain_ray.config import load_config

        cfg = load_config(config_path)
        return cfg.training.max_steps, cfg.training.sft_warmup_steps
    recorded = _recorded_config(run_dir)
    if not recorded:
        return None, 0
    training = cast("dict[str, int]", recorded.get("training", {}))  # run_meta.json's [training]
    return training.get("max_steps"), int(training.get("sft_warmup_steps", 0))


def _payload_problems(checkpoint: Path) -> tuple[str, list[str]]:
    kinds = [label for name, label in PAYLOADS.items() if (checkpoint / name).exists()]
    if not kinds:
        return "", [f"{checkpoint} holds no adapter/, model.safetensors or tinker_state.json: nothing to load"]
    if kinds[0] != "tinker state" and not (checkpoint / OPTIMIZER_FILE).is_file():
        return kinds[0], [f"{checkpoint / OPTIMIZER_FILE} is missing: the optimizer state cannot be restored"]
    return kinds[0], []


def check_resume(run_dir: Path, config_path: str | None = None) -> dict[str, object]:
    """Everything resume-check reports; `resumable` is False when a problem blocks resuming."""
    run_dir = Path(run_dir)
    report: ResumeReport = {"run_dir": str(run_dir), "problems": [], "notes": []}
    manager = CheckpointManager(run_dir, keep_last=0)
    candidates = manager.candidates()
    report["checkpoints"] = [{"name": c.name, "problem": verify_checkpoint(c)} for c in candidates]
    damaged = [c for c in report["checkpoints"] if c["problem"]]
    report["notes"] += [f"skipping damaged {c['name']}: {c['problem']}" for c in damaged]
    newest = next((candidates[i] for i, c in enumerate(report["checkpoints"]) if not c["problem"]), None)
    if newest is None:
        report["problems"].append(f"no complete checkpoint under {run_dir}/checkpoints (looked for "
                                  f"checkpoint_step_N and final with CHECKSUMS.json): it cannot be resumed; "
                                  f"start it afresh with `retrain-ray train FILE --overwrite` (replaces {run_dir})")
        return dict(_finish(report))  # a plain dict: the CLI prints it as JSON
    state = load_state(newest)
    payload, problems = _payload_problems(newest)
    report.update(checkpoint=str(newest), step=state.step, next_step=state.next_step,
                  resume_mode=state.resume_mode, payload=payload)
    report["problems"] += problems
    if not (run_dir / STATE_FILE).is_file():
        report["notes"].append(f"{run_dir / STATE_FILE} is missing; the checkpoint's own copy is used")
    max_steps, sft_steps = _max_steps(run_dir, config_path)
    report["max_steps"] = max_steps
    _check_bounds(report, state.next_step, max_steps, newest.name)
    if state.next_step < sft_steps and not state.sft_finished:
        report["notes"].append(f"resumes inside the supervised warm start (step {state.next_step} of "
                               f"{sft_steps}); its targets are rebuilt from the task")
    return dict(_finish(report))


def _check_bounds(report: ResumeReport, next_step: int, max_steps: int | None, name: str) -> None:
    if max_steps is None:
        report["notes"].append("no config (pass --config, or the run's run_meta.json): max_steps not checked")
    elif name == "final" or next_step >= max_steps:
        report["complete"] = True
        report["notes"].append(f"the run is complete ({next_step} of {max_steps} steps): raise max_steps "
                               "to continue it")
    elif next_step < 0:
        report["problems"].append(f"trainer state step {next_step - 1} is invalid")


def _finish(report: ResumeReport) -> ResumeReport:
    report.setdefault("complete", False)
    report["resumable"] = not report["problems"]
    return report
