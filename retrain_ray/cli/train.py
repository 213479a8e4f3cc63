"""`retrain-ray train FILE`: one run in this process, with a progress bar and a summary.

`--help` lists every override flag (`--max-steps 40`, `--bp-enabled`, `--section.key=value`, ...):
they are the original's TrainConfig field names, parsed by `retrain_ray.config.overrides`.
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from retrain_ray.checks.preflight import PreflightError, check_run
from retrain_ray.cli.interrupts import Stops, sigterm_as_ctrl_c
from retrain_ray.cli.progress import ProgressObserver
from retrain_ray.logs.dir_lock import LOCK_FILES, DirectoryInUse, DirLock
from retrain_ray.logs.dir_lock import process_started_at as started_at_from_proc
from retrain_ray.results.untrained import run_untrained_note
from retrain_ray.rewards.custom import RewardTimeoutError
from retrain_ray.run.optimizer_batch import OptimizerBatchError
from retrain_ray.throttle.types import ThrottleTimeout
from retrain_ray.util.finite import NonFiniteError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from retrain_ray.config.campaign_schema import SqueezeSection
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.config.sections_training import BackendSection, TrainingSection

err = Console(stderr=True)


def process_started_at() -> float:
    """time.time() at which this process was created (Linux /proc), else when this module was imported."""
    started = started_at_from_proc()
    return _IMPORTED_AT if started is None else started


_IMPORTED_AT = time.time()


def _load(path: str, overrides: list[str]):
    # deferred: loads pydantic, which importing this module does not need
    from retrain_ray.config import ConfigError, apply_overrides, load_config_with_warnings, parse_overrides

    try:
        cfg, warnings = load_config_with_warnings(path)
        parsed = parse_overrides(overrides)
        cfg = apply_overrides(cfg, parsed)
        for warning in warnings:  # as `explain` shows them (spec 7), and the original's options that change nothing
            err.print("[yellow]warning:[/] ", end="")
            err.print(warning, highlight=False, markup=False, soft_wrap=True)
        return cfg, parsed
    except ConfigError as exc:
        err.print(f"[bold red]configuration error[/] in {path}:", highlight=False)
        err.print(str(exc), highlight=False, markup=False)
        raise SystemExit(2) from None
    except FileNotFoundError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise SystemExit(2) from None


def override_flags_help() -> str:
    """Every override flag, grouped by the TOML section it sets (the text after `train --help`)."""
    # deferred: loads pydantic, which importing this module does not need
    from retrain_ray.config.key_names import FIELD_INDEX
    from retrain_ray.config.overrides import ALIASES, TABLE_FLAGS

    by_section: dict[str, list[str]] = {}
    for field, (section, key) in FIELD_INDEX.items():
        flag = f"--{field.replace('_', '-')}"
        by_section.setdefault(section, []).append(flag if field == key else f"{flag} ({key})")
    lines = ["override flags (the original's field names; `--flag VALUE` or `--flag=VALUE`, "
             "a bare boolean flag means true):"]
    for section, flags in by_section.items():
        lines.append(f"  [{section}] " + ", ".join(flags))
    tables = ", ".join(f"--{f.replace('_', '-')} k=v ([{s}] {k})" for f, (s, k) in TABLE_FLAGS.items())
    lines.append(f"  repeatable tables: {tables}")
    lines.append("  aliases: " + ", ".join(f"--{a} ([{s}] {k})" for a, (s, k) in ALIASES.items()))
    lines.append("  any key: --section.key=value (also [campaign] and [squeeze])")
    return "\n".join(lines)


def _train_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="retrain-ray train", description="Train one run.",
                                epilog=override_flags_help(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("config", help="TOML file")
    p.add_argument("--resume", metavar="DIR", help="continue the run in DIR after its last checkpoint")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier run in the same log_dir")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def _prepare_run_dir(run_dir: Path, *, resume: str | None, overwrite: bool) -> None:
    """Refuses to mix two runs in one directory: resume it, overwrite it, or pick another."""
    holds_run = any(run_dir.glob("metrics*.arrows")) or any((run_dir / "checkpoints").glob("*"))
    if resume or not run_dir.exists() or not holds_run:  # checkpoints alone are a run too (a crash before row 1)
        return
    if not overwrite:
        # deferred: loads torch, which importing this module does not need
        from retrain_ray.run.resume.checkpoint import has_complete_checkpoint

        advice = f"Continue it with --resume {run_dir}, replace" if has_complete_checkpoint(run_dir) else \
            "It has no complete checkpoint (the first save was interrupted), so it cannot be resumed: replace"
        err.print(f"[bold red]error:[/] {run_dir} already holds a run. {advice} it with --overwrite, or choose "
                  "another directory with --log-dir DIR.", highlight=False)
        raise SystemExit(2)
    for entry in run_dir.iterdir():  # everything but this process's lock on the directory
        if entry.name not in LOCK_FILES:
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()


def train_main(argv: list[str]) -> int:
    args, rest = _train_parser().parse_known_args(argv)
    if args.resume:
        rest = [*rest, "--resume", args.resume]
    cfg, _ = _load(args.config, rest)
    try:
        check_run(cfg)
    except PreflightError as exc:
        err.print(f"[bold red]preflight failed[/] for {args.config}:", highlight=False)
        err.print(str(exc), highlight=False, markup=False)
        return 2
    run_dir = Path(cfg.logging.log_dir)
    lock = DirLock(run_dir, what="run", fix="give this run another directory with --log-dir DIR")
    try:
        lock.acquire()  # before anything is written or removed there (--overwrite)
    except DirectoryInUse as exc:
        err.print("[bold red]error:[/]", highlight=False, end=" ")
        err.print(str(exc), highlight=False, markup=False, soft_wrap=True)
        return 2
    try:
        with sigterm_as_ctrl_c() as stops:
            try:
                return _train_locked(cfg, args, run_dir)
            except KeyboardInterrupt:
                return _interrupted(cfg.training, argv, run_dir, stops)
    finally:
        lock.release()


def _train_locked(cfg: RetrainConfig, args: argparse.Namespace, run_dir: Path) -> int:
    resume = cfg.resume.from_ or None  # `--resume DIR` or the file's `[resume] from`
    if resume is None:
        try:
            resume = _checkpoint_dir_resume(cfg.training, cfg.model_dump(mode="json"), run_dir.name)
        except (RuntimeError, FileNotFoundError) as exc:  # ForeignRunDir: another run's checkpoints
            err.print("[bold red]error:[/]", highlight=False, end=" ")
            err.print(str(exc), highlight=False, markup=False, soft_wrap=True)
            return 2
    _prepare_run_dir(run_dir, resume=resume, overwrite=args.overwrite)
    # deferred: loads torch, which importing this module does not need
    from retrain_ray.run.epochs import plan_from_config
    from retrain_ray.run.resume.checkpoint import load_state, resolve_resume_dir
    from retrain_ray.run.train import condition_of, train_run
    from retrain_ray.run.trainers.external import ExternalRunnerError
    from retrain_ray.trackers import RunIdentity, build_trackers

    first = 0
    if resume:
        try:
            first = load_state(resolve_resume_dir(Path(resume))).next_step
        except FileNotFoundError as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False)
            return 2
    plan = plan_from_config(cfg.training, cfg.data)  # num_epochs may end the run before max_steps
    total = plan.steps if plan is not None else cfg.training.max_steps
    if not args.quiet:
        err.print(capability_line(cfg.backend), highlight=False, markup=False, soft_wrap=True)
    progress = None if args.quiet else ProgressObserver(total, first, log_every=cfg.training.log_every)
    trackers = build_trackers(cfg, RunIdentity(run_dir.name, condition_of(cfg.algorithm), cfg.training.seed), run_dir)
    started = time.perf_counter()
    try:
        outcome = train_run(
            cfg,
            run_name=run_dir.name,
            run_dir=run_dir,
            observers=([progress] if progress else []) + trackers,
            resume_from=Path(resume) if resume else None,
        )
    except (NonFiniteError, RewardTimeoutError, ExternalRunnerError, OptimizerBatchError,
            ThrottleTimeout) as exc:  # the run's own fault: a clear message, no traceback
        err.print(f"[bold red]run failed[/] ({args.config}, run directory {run_dir}):", highlight=False)
        err.print(str(exc), highlight=False, markup=False)
        return 1
    first_step_s = outcome.first_step_at - process_started_at() if outcome.first_step_at else None
    _print_summary(outcome, progress, run_dir, time.perf_counter() - started, first_step_s)
    return _squeeze_after(cfg.squeeze, run_dir) if cfg.squeeze is not None else 0


def _checkpoint_dir_resume(training: TrainingSection, config: Mapping[str, object], run_name: str) -> str | None:
    """`[training] checkpoint_dir` holding this run's checkpoints: the newest verified one, said aloud."""
    # deferred: loads torch, which importing this module does not need
    from retrain_ray.run.resume.point import checkpoint_dir_resume

    found = checkpoint_dir_resume(training, config, run_name)
    if found is None:
        return None
    Console().print(f"resuming from {found}: the newest verified checkpoint of run {run_name} in [training] "
                    f"checkpoint_dir {training.checkpoint_dir}", highlight=False)
    return str(found)


def capability_line(backend: BackendSection) -> str:
    """The start-up report of the backend's capability metadata (seed 002), in one line, as `backends`
    and preflight read it from the registry."""
    # deferred: loads torch, which importing this module does not need
    from retrain_ray.backends.registry import capabilities_for

    flags, source = capabilities_for(backend.backend, backend.options)
    shown = " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in dataclasses.asdict(flags).items())
    return f"backend {backend.backend} ({source}): {shown}"


def continue_command(argv: list[str], run_dir: Path | None) -> str:
    """The command that continues this one: its own arguments with `--resume RUN_DIR` in place of any
    `--resume`/`--overwrite` it had; `run_dir` None: as it was, with `--overwrite` unless it resumes."""
    if run_dir is None:
        resumes = any(a == "--resume" or a.startswith("--resume=") for a in argv)
        return shlex.join(["retrain-ray", "train", *argv, *([] if resumes or "--overwrite" in argv else ["--overwrite"])])
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--resume", "--overwrite") or arg.startswith("--resume="):
            skip = arg == "--resume"
        else:
            kept.append(arg)
    return shlex.join(["retrain-ray", "train", *kept, "--resume", str(run_dir)])


def _interrupted(training: TrainingSection, argv: list[str], run_dir: Path, stops: Stops) -> int:
    """Where an interrupted run stopped and the exact command that continues it; exit 130 (143 on SIGTERM)."""
    # deferred: loads torch, which importing this module does not need
    from retrain_ray.run.resume.checkpoint import CheckpointManager, load_state
    from retrain_ray.run.resume.point import checkpoint_root

    logged = _last_logged_step(run_dir)
    rows = f"its last logged step is {logged}" if logged is not None else "it logged no step"
    err.print(f"\n[bold yellow]interrupted[/] by {stops.name()}: run {run_dir} stopped ({rows}, of steps 0-"
              f"{training.max_steps - 1}).", highlight=False)
    root = checkpoint_root(training)
    for checkpoint in CheckpointManager(run_dir, root=root).candidates():  # newest first; the resume verifies it
        try:
            step = load_state(checkpoint).step
        except (OSError, ValueError):
            continue
        err.print(f"  last checkpoint: after step {step} ({checkpoint}); a resume continues from there",
                  highlight=False)
        again = shlex.join(["retrain-ray", "train", *argv]) + "  (it resumes from checkpoint_dir by itself)" \
            if root is not None else continue_command(argv, run_dir)
        err.print(f"  continue with: {again}", highlight=False, markup=False, soft_wrap=True)
        break
    else:
        err.print(f"  no checkpoint was saved yet ([training] save_every = {training.save_every}); "
                  f"start it again with: {continue_command(argv, None)}", highlight=False, markup=False, soft_wrap=True)
    return stops.exit_code()


def _last_logged_step(run_dir: Path) -> int | None:
    # deferred: loads pyarrow, which importing this module does not need
    from retrain_ray.logs import read_stream

    try:
        steps = read_stream(run_dir)["step"].to_pylist()
    except (OSError, ValueError, KeyError):
        return None
    return max(steps) if steps else None


def _squeeze_after(section: SqueezeSection, run_dir: Path) -> int:
    """`[squeeze]` in a run's file: squeeze its adapter (or `adapter_path`) into `<run_dir>/squeeze`."""
    # deferred: loads torch, which importing this module does not need
    from retrain_ray.squeeze import SqueezeError, SqueezeSettings, squeeze_adapter

    settings = SqueezeSettings.from_section(section)
    settings = dataclasses.replace(settings, output_path=settings.output_path or str(run_dir / "squeeze"))
    try:
        report = squeeze_adapter(Path(settings.adapter_path or run_dir), settings)
    except SqueezeError as exc:
        err.print(f"[bold red]squeeze failed:[/] {exc}", highlight=False)
        return 1
    Console().print(f"  squeeze: recommended rank {report.recommended_rank}, rank-{report.compressed_rank} "
                    f"adapter {report.output_path}", highlight=False)
    return 0


def _print_summary(outcome, progress, run_dir: Path, seconds: float, first_step_s: float | None) -> None:
    out = Console()
    out.print(f"[bold]run {outcome.run_name}[/]: {outcome.status} after step {outcome.last_step} in {seconds:.1f} s")
    if first_step_s is not None:
        out.print(f"  time to first step: {first_step_s:.2f} s from the command (imports, model, first step)")
    trend = progress.reward_trend() if progress else None
    if trend:
        out.print(f"  mean reward: first steps {trend[0]:.3f} -> last steps {trend[1]:.3f}")
    for key in ("correct_rate", "running_correct_rate", "tokens_per_second"):
        if key in outcome.metrics:
            out.print(f"  {key}: {outcome.metrics[key]:.3f}")
    written = [p for p in (run_dir / "metrics.arrows", run_dir / "metrics.parquet") if p.exists()]
    if written:
        out.print(f"  logs: {', '.join(str(p) for p in written)}")
        untrained = run_untrained_note(run_dir)
        if untrained:
            out.print(f"  [yellow]warning:[/] {untrained}", highlight=False)
    else:
        out.print("  logs: no metrics rows (no step carried a nonzero advantage, so none was trained or logged)")
    if outcome.checkpoint_dir is not None and Path(outcome.checkpoint_dir).exists():
        out.print(f"  checkpoint: {outcome.checkpoint_dir}")


