"""`retrain-ray explain FILE [--json] [--strict] [--median-step-time S] [--flags...]`: a dry run of a config.

Validates the file (all problems on stderr, exit 2, no traceback), then describes what would run:
for a single run the model, backend and its capabilities, condition, datums per step and in total,
and the resources one run takes; for a campaign also the run matrix (conditions x seeds) and the
capacity estimate (campaign/capacity/explain.py, campaign/capacity/estimate.py): the runs scheduled into the slots the
plan's own concurrency gives (`max_workers`, bounded by the GPUs available: `--gpus N`, or the
cluster at RAY_ADDRESS), each run's warm-start and RL steps at their own seconds per step, the
per-run and campaign start-up, `stagger_seconds`, and the checkpoint disk. The figures come from
a pilot's logs (`--calibrate DIR`: campaign/capacity/calibration.py), else from earlier runs of the same
campaign under its log_dir (said so), else a fixed `--median-step-time` (10 s) per step, said to
be uncalibrated. Seed 000's checklist (truncation, concurrency, the wall time) follows. A campaign's
runs, their resources (the packed GPU share), its packing and its adaptive plan are the campaign plan's
(`build_plan`, campaign/plan.py, without the model and storage probes), so explain shows what would run.

A campaign also says which plugin code it ships to its trials ("plugins shipped"): the folders and
files `Campaign.run()` would pack (campaign/plugin_bundle.py, the same code), their raw and zipped
size, "none" with why, or the driver's size-limit error (then explain exits 2 after the description).

A dry run never hides the plan: what this machine lacks (a model not in the local cache, a missing data
file, an inference server that does not answer: checks/machine.py) is listed as a warning with its fix
after the plan, and the exit code stays 0. Only an invalid config (schema, refused keys, a condition the
preflight probe refuses) exits 2. `--strict` (for CI) makes every warning, the environment's and the
config's, an error: exit 2 after the plan.

Capabilities come from the one backend registry (`retrain_ray/backends/registry.py`), the same flags
preflight and the backend classes use.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import threading
from typing import TYPE_CHECKING, Any, Protocol

from retrain_ray.backends.registry import describe_sampler
from retrain_ray.campaign.capacity.explain import (
    PlannedResources,
    capacity_dict,
    capacity_text,
    dry_plan,
    load_calibration,
    plan_capacity,
    planned_resources,
)
from retrain_ray.campaign.capacity.pilot_seeds import seeds_for_difference
from retrain_ray.campaign.capacity.placement import mode_for_gpus
from retrain_ray.campaign.plugin_bundle import shipment
from retrain_ray.checks.machine import environment_problems
from retrain_ray.checks.preflight import condition_problems
from retrain_ray.config import (
    ConfigError,
    RetrainConfig,
    expand_runs,
    load_config_with_warnings,
    parse_overrides,
)
from retrain_ray.config.names import effective_uncertainty_kind, gpu_count

if TYPE_CHECKING:
    from retrain_ray.config.sections_runtime import DataSection
    from retrain_ray.config.sections_training import BackendSection, TrainingSection
    from retrain_ray.run.epochs import StepPlan
from retrain_ray.models.lora import effective_alpha


class _BackendConfig(Protocol):
    """What `capabilities` reads of a config: its [backend] section."""

    @property
    def backend(self) -> BackendSection: ...


def capabilities(cfg: _BackendConfig) -> dict[str, Any]:
    """The backend's flags from the one registry (a plugin's hooks, else the conservative default)."""
    # deferred: loads torch, which importing this module does not need
    from retrain_ray.backends.registry import PLUGIN_DEFAULT_CAPABILITIES, capabilities_for

    try:
        flags, source = capabilities_for(cfg.backend.backend, cfg.backend.options)
    except (ValueError, TypeError):  # preflight reports why; describe the default meanwhile
        flags, source = PLUGIN_DEFAULT_CAPABILITIES, "plugin/default (plugin did not load)"
    return {**dataclasses.asdict(flags), "source": source}


def resources_per_run(cfg: RetrainConfig) -> PlannedResources:
    """CPUs, GPUs and placement of one run, from `backend.devices` as the registry places it (a remote
    backend such as tinker needs no local GPU). A campaign's come from its plan (`build_plan`), where a
    one-GPU run packed `[campaign] runs_per_gpu = N` to a card takes 1/N of a GPU."""
    if cfg.campaign is not None:
        return planned_resources(dry_plan(cfg, "the config"))
    # deferred: the registry loads the plugin machinery, which importing this module does not need
    from retrain_ray.backends.registry import RunDevices, placed_devices

    try:
        placed = placed_devices(cfg)
    except ValueError:  # a plugin whose hooks do not load: preflight reports why
        placed = RunDevices(cfg.backend.devices, in_process=True)
    gpus = gpu_count(placed.devices)
    return {"cpus": 1.0, "gpus": gpus, "placement": mode_for_gpus(gpus, placed.in_process)}


def describe_run(cfg: RetrainConfig, resources: PlannedResources | None = None) -> dict[str, Any]:
    """One run of `cfg`; `resources`: the campaign plan's (else `resources_per_run` works them out)."""
    t, a = cfg.training, cfg.algorithm
    condition = a.algorithm_mode or f"{a.advantage_mode}+{a.transform_mode}"
    max_steps = cfg.campaign.max_steps if cfg.campaign is not None else t.max_steps
    return {
        "model": cfg.model.model,
        "finetune": cfg.model.finetune,
        "lora": {"rank": cfg.model.lora_rank, "alpha": effective_alpha(cfg.lora.alpha, cfg.model.lora_rank)}
        if cfg.model.finetune == "lora" else None,
        "backend": cfg.backend.backend,
        "devices": cfg.backend.devices,
        "inference_engine": describe_sampler(cfg),  # in words (engine = "vllm" is a server client, as in the original)
        "capabilities": capabilities(cfg),
        "condition": condition,
        "trainer": trainer_text(t.trainer, t.trainer_command),
        "uncertainty_kind": effective_uncertainty_kind(cfg),
        "datums_per_step": t.rows_per_step,
        "max_steps": max_steps,
        "steps": step_count(t, max_steps, _epoch_plan(t, cfg.data)),
        "lr_schedule": lr_schedule_text(t),
        "total_datums": t.rows_per_step * max_steps,
        "sft_warmup_steps": t.sft_warmup_steps,
        "resources_per_run": resources if resources is not None else resources_per_run(cfg),
    }


def trainer_text(trainer: str, command: str) -> str:
    """What runs the run, in words (`[training] trainer`: run/trainers/registry.py)."""
    # deferred: explain's other lines do not need the run package (the registry itself loads no torch)
    from retrain_ray.run.trainers.registry import trainer_spec

    return trainer_spec(trainer).describe(trainer, command)


def _epoch_plan(training: TrainingSection, data: DataSection) -> StepPlan | None:
    if training.num_epochs <= 0:
        return None
    # deferred: the run package is only needed for the steps line
    from retrain_ray.run.epochs import plan_from_config

    return plan_from_config(training, data)


def step_count(t: TrainingSection, max_steps: int, plan: StepPlan | None) -> str:
    """Which key sets the run's steps: max_steps, or num_epochs over the data (`plan`: the epochs counted
    when the data is a file, else None)."""
    if t.num_epochs <= 0:
        return f"max_steps = {max_steps}"
    if plan is not None:
        return plan.explanation
    return (f"max_steps = {max_steps}, or fewer: num_epochs = {t.num_epochs} x the examples / batch_size "
            f"{t.batch_size} when that is smaller (counted when the run loads its data)")


def lr_schedule_text(t: TrainingSection) -> str:
    warmup = f"{t.warmup_steps} steps" if t.warmup_steps else f"{t.warmup_ratio:g} of the steps" \
        if t.warmup_ratio else "none"
    return f"{t.lr_schedule} from lr = {t.lr:g}, warmup {warmup}"


@dataclasses.dataclass(frozen=True)
class Sizing:
    """What the estimate needs beyond the config: the figures' source and the GPUs available."""

    file: str
    calibrate: str | None = None
    median_step_time: float | None = None
    gpus_available: float | None = None
    detect: float | None = None  # --detect D: seeds needed for a difference of D, from the --calibrate pilot
    power: float = 0.8


def describe(cfg: RetrainConfig, sizing: Sizing) -> dict[str, Any]:
    """Everything explain shows, as one JSON-able dict; ValueError for a --calibrate DIR without runs or
    a campaign its plan refuses (`build_plan`: the packing and the per-GPU share come from it)."""
    campaign = cfg.campaign
    plan = dry_plan(cfg, sizing.file) if campaign is not None else None
    resources = planned_resources(plan) if plan is not None else None
    out: dict[str, Any] = {"kind": "campaign" if campaign is not None else "run", "run": describe_run(cfg, resources)}
    if cfg.squeeze is not None:
        out["squeeze"] = cfg.squeeze.model_dump(mode="json")
    if campaign is None or plan is None or resources is None:
        return out
    runs = plan.all_runs
    labels = [c.label for c in campaign.conditions]
    calibration, how = load_calibration(cfg.logging, campaign, sizing.file, sizing.calibrate)
    cap = plan_capacity(cfg, campaign, runs, calibration=calibration, how=how,
                        median_step_time=sizing.median_step_time, gpus_per_run=resources["gpus"],
                        gpus_available=sizing.gpus_available, concurrency=plan.schedule.max_concurrent)
    out["campaign"] = {
        "conditions": labels,
        "seeds": list(campaign.seeds),
        "max_steps": plan.max_steps,
        "total_runs": len(runs),
        "parallel": campaign.parallel,
        "max_workers": campaign.max_workers,
        "gpus_available": sizing.gpus_available,
        "matrix": {label: {str(r.seed): r.run_name for r in runs if r.condition == label} for label in labels},
        "capacity": capacity_dict(cap, cfg.training, campaign, len(labels)),
    }
    if plan.packing is not None:  # several runs per GPU (the plan refuses one the model cannot fit)
        out["campaign"]["packing"] = {**plan.packing.to_json(), "plan": plan.packing.describe()}
    if plan.sharing is not None:  # [campaign] shared_trainer: the trainers and one's memory (the plan refuses a misfit)
        out["campaign"]["shared_trainer"] = {**plan.sharing.to_json(), "plan": plan.sharing.describe()}
    if plan.adaptive is not None:  # [campaign.adaptive]: the rungs and the step budgets (campaign/adaptive/plan.py)
        out["campaign"]["adaptive"] = {**plan.adaptive.to_json(), "plan": plan.adaptive.describe()}
    if sizing.detect is not None and sizing.calibrate:
        out["campaign"]["seeds_needed"] = seeds_for_difference(sizing.calibrate, campaign, sizing.detect, sizing.power)
    return out


def cluster_gpus(address: str, timeout_s: float = 15.0) -> tuple[float | None, str]:
    """GPUs of the running cluster at `address` (never starts one); (None, why) when it does not answer."""
    # deferred: Ray, only when RAY_ADDRESS is set
    import ray

    found: dict[str, float] = {}
    failed: list[str] = []

    def ask() -> None:
        try:
            ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False)
            found["gpus"] = float(ray.cluster_resources().get("GPU", 0.0))
        except Exception as exc:  # noqa: BLE001  (any connection failure is reported as a warning)
            failed.append(f"{type(exc).__name__}: {exc}")

    worker = threading.Thread(target=ask, daemon=True)
    worker.start()
    worker.join(timeout_s)
    if "gpus" in found:
        ray.shutdown()
        return found["gpus"], ""
    why = failed[0] if failed else f"no answer in {timeout_s:.0f} s"
    return None, (f"RAY_ADDRESS={address}: the cluster's GPUs are unknown ({why}); the estimate ignores GPUs: "
                  "pass --gpus N")


def _files(n: int) -> str:
    return f"{n} file" if n == 1 else f"{n} files"


def plugins_text(shipped: dict[str, Any]) -> str:
    """The "plugins shipped" part of the text output."""
    if shipped["status"] == "none":
        return f"plugins shipped to the trials: none: {shipped['reason']}"
    if shipped["status"] == "refused":
        return f"plugins shipped to the trials: refused: {shipped['error']}"
    lines = [f"plugins shipped to the trials: {_files(shipped['files'])}, {shipped['raw_bytes'] / 1024:.1f} KiB raw, "
             f"{shipped['zipped_bytes'] / 1024:.1f} KiB zipped (digest {shipped['digest']})"]
    lines += [f"  {u['name']}  from {u['source']}  ({_files(u['files'])}, {u['bytes'] / 1024:.1f} KiB raw)"
              for u in shipped["units"]]
    return "\n".join(lines)


def _print_rich(info: dict[str, Any], warnings: list[str], environment: list[str]) -> None:
    # deferred: loads rich, which importing this module does not need
    from rich.console import Console
    from rich.table import Table

    console = Console()
    run = info["run"]
    table = Table(title="run", show_header=False)
    for key, value in run.items():
        table.add_row(key, json.dumps(value) if isinstance(value, (dict, list)) else str(value))
    console.print(table)
    if "campaign" in info:
        camp = info["campaign"]
        matrix = Table(title=f"run matrix: {len(camp['conditions'])} conditions x {len(camp['seeds'])} seeds "
                             f"= {camp['total_runs']} runs, max_steps {camp['max_steps']}")
        matrix.add_column("condition", overflow="fold")
        for seed in camp["seeds"]:
            matrix.add_column(f"seed {seed}", overflow="fold")
        for label, cells in camp["matrix"].items():
            matrix.add_row(label, *cells.values())
        console.print(matrix)
        for line in [*camp.get("packing", {}).get("plan", []), *camp.get("shared_trainer", {}).get("plan", [])]:
            console.print(line, highlight=False, markup=False, soft_wrap=True)
        console.print(capacity_text(camp["capacity"]), highlight=False, markup=False, soft_wrap=True)
        for line in camp.get("adaptive", {}).get("plan", []):
            console.print(line, highlight=False, markup=False, soft_wrap=True)
        needed = camp.get("seeds_needed")
        if needed:
            console.print(needed.get("text") or needed["error"], highlight=False, markup=False, soft_wrap=True)
    if "plugins_shipped" in info:
        console.print(plugins_text(info["plugins_shipped"]), highlight=False, markup=False, soft_wrap=True)
    if "squeeze" in info:
        console.print("squeeze after training: " + ", ".join(f"{k}={v!r}" for k, v in info["squeeze"].items()),
                      highlight=False, markup=False)
    for w in warnings:
        console.print(f"[yellow]warning:[/yellow] {w}")
    for w in environment:
        console.print("[yellow]warning (this machine):[/yellow] ", end="")
        console.print(w, highlight=False, markup=False, soft_wrap=True)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="retrain-ray explain", description="Dry run: validate and describe a config.")
    p.add_argument("file", help="TOML config (run or campaign)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--calibrate", metavar="DIR", default=None,
                   help="a pilot run or campaign (or a directory of them): the estimate uses its logs")
    p.add_argument("--detect", type=float, default=None, metavar="D",
                   help="with --calibrate: the seeds per condition a difference of D (the metric's units) needs, "
                        "from the pilot's seed-to-seed spread (2+ seeds per condition)")
    p.add_argument("--power", type=float, default=0.8, help="with --detect: the chance to see the difference (0.8)")
    p.add_argument("--median-step-time", type=float, default=None,
                   help="seconds per step for the estimate (overrides the pilot's median; default 10 uncalibrated)")
    p.add_argument("--gpus", type=float, default=None,
                   help="GPUs available to the campaign (default: the cluster at RAY_ADDRESS, else not bounded)")
    p.add_argument("--strict", action="store_true",
                   help="warnings are errors (exit 2): a model not in the cache, a missing data file, a server "
                        "that does not answer, a config warning; for CI")
    return p


def explain_main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code (0 ok, 2 bad config or arguments)."""
    args, rest = _parser().parse_known_args(argv)
    try:
        cfg, warnings = load_config_with_warnings(args.file, parse_overrides(rest) if rest else None)
        gpus, why = _gpus_available(args.gpus, is_campaign=cfg.campaign is not None)
        if args.detect is not None and not args.calibrate:
            raise ValueError("--detect needs --calibrate DIR: the seed-to-seed spread comes from a pilot")
        info = describe(cfg, Sizing(args.file, args.calibrate, args.median_step_time, gpus, args.detect, args.power))
    except (ConfigError, ValueError) as exc:
        print(str(exc), file=sys.stderr)
        return 2
    warnings = [*warnings, why] if why else warnings
    problems = condition_problems(cfg)
    if problems:
        print(f"{args.file}: the runs could not start:\n" + "\n".join(f"  - {p}" for p in problems), file=sys.stderr)
        return 2
    environment = environment_problems(cfg)
    if cfg.campaign is not None:  # after preflight: the plugins it imported are the ones packed
        info["plugins_shipped"] = shipment(r.config for r in expand_runs(cfg))
    if args.json:
        print(json.dumps({**info, "warnings": warnings, "environment": environment}, indent=2))
    else:
        _print_rich(info, warnings, environment)
    if info.get("plugins_shipped", {}).get("status") == "refused":
        print(f"{args.file}: the campaign would be refused: {info['plugins_shipped']['error']}", file=sys.stderr)
        return 2
    return _strict_verdict(args.file, warnings + environment) if args.strict else 0


def _gpus_available(typed: float | None, *, is_campaign: bool) -> tuple[float | None, str]:
    """--gpus, else the connected cluster's (RAY_ADDRESS, campaigns only), else None (not bounded)."""
    if typed is not None:
        if typed < 0:
            raise ValueError(f"--gpus {typed:g}: must be >= 0")
        return typed, ""
    address = os.environ.get("RAY_ADDRESS", "")
    if not address or not is_campaign:
        return None, ""
    if address == "local":  # ray.init would start a Ray here: a dry run never does
        return None, "RAY_ADDRESS=local names no running cluster; the estimate ignores GPUs: pass --gpus N"
    return cluster_gpus(address)


def _strict_verdict(file: str, warnings: list[str]) -> int:
    """--strict: 2 when any warning was given, naming each on stderr; else 0."""
    if not warnings:
        return 0
    print(f"{file}: --strict: {len(warnings)} warning(s) are errors:\n" + "\n".join(f"  - {w}" for w in warnings),
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(explain_main(sys.argv[1:]))
