"""`retrain-ray` command line.

    retrain-ray FILE [--flags]            train one run, or a campaign if FILE has [campaign]
    retrain-ray train FILE [--resume DIR] [--overwrite] [--flags]
    retrain-ray campaign FILE [--flags]   run a campaign on Ray (local Ray without RAY_ADDRESS)
    retrain-ray resume DIR                finish an interrupted campaign
    retrain-ray explain FILE [--json]     dry run: run matrix, resources, capacity estimate
    retrain-ray results DIR [--json|--csv]
    retrain-ray status [DIR] [--json]

Configuration errors are printed all at once, each naming its key and file, with exit code 2.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import tomllib
from rich.console import Console

from retrain_ray import __version__

COMMANDS = ("train", "campaign", "resume", "explain", "results", "status")
err = Console(stderr=True)


def _load(path: str, overrides: list[str]):
    from retrain_ray.config import ConfigError, apply_overrides, load_config, parse_overrides

    try:
        cfg = load_config(path)
        parsed = parse_overrides(overrides)
        return apply_overrides(cfg, parsed), parsed
    except ConfigError as exc:
        err.print(f"[bold red]configuration error[/] in {path}:", highlight=False)
        err.print(str(exc), highlight=False, markup=False)
        raise SystemExit(2) from None
    except FileNotFoundError as exc:
        err.print(f"[bold red]error:[/] {exc}", highlight=False)
        raise SystemExit(2) from None


def _train_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="retrain-ray train", description="Train one run.")
    p.add_argument("config", help="TOML file")
    p.add_argument("--resume", metavar="DIR", help="continue the run in DIR after its last checkpoint")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier run in the same log_dir")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def _prepare_run_dir(run_dir: Path, *, resume: str | None, overwrite: bool) -> None:
    """Refuses to mix two runs in one directory: resume it, overwrite it, or pick another."""
    if resume or not run_dir.exists() or not any(run_dir.glob("metrics*.arrows")):
        return
    if not overwrite:
        err.print(
            f"[bold red]error:[/] {run_dir} already holds a run. Continue it with --resume {run_dir}, "
            "replace it with --overwrite, or choose another directory with --log-dir DIR.",
            highlight=False,
        )
        raise SystemExit(2)
    import shutil

    shutil.rmtree(run_dir)


def train_main(argv: list[str]) -> int:
    args, rest = _train_parser().parse_known_args(argv)
    if args.resume:
        rest = [*rest, "--resume", args.resume]
    cfg, _ = _load(args.config, rest)
    from retrain_ray.run.preflight import PreflightError, check_run

    try:
        check_run(cfg)
    except PreflightError as exc:
        err.print(f"[bold red]preflight failed[/] for {args.config}:", highlight=False)
        err.print(str(exc), highlight=False, markup=False)
        return 2
    run_dir = Path(cfg.logging.log_dir)
    _prepare_run_dir(run_dir, resume=args.resume, overwrite=args.overwrite)
    from retrain_ray.progress import ProgressObserver
    from retrain_ray.run.checkpoint import load_state, resolve_resume_dir
    from retrain_ray.run.train import train_run

    first = 0
    if args.resume:
        try:
            first = load_state(resolve_resume_dir(Path(args.resume))).next_step
        except FileNotFoundError as exc:
            err.print(f"[bold red]error:[/] {exc}", highlight=False)
            return 2
    progress = None if args.quiet else ProgressObserver(cfg.training.max_steps, first, log_every=cfg.training.log_every)
    started = time.perf_counter()
    outcome = train_run(
        cfg,
        run_name=run_dir.name,
        run_dir=run_dir,
        observers=[progress] if progress else [],
        resume_from=Path(args.resume) if args.resume else None,
    )
    _print_summary(outcome, progress, run_dir, time.perf_counter() - started)
    return 0 if outcome.status == "completed" else 1


def _print_summary(outcome, progress, run_dir: Path, seconds: float) -> None:
    out = Console()
    out.print(f"[bold]run {outcome.run_name}[/]: {outcome.status} after step {outcome.last_step} in {seconds:.1f} s")
    trend = progress.reward_trend() if progress else None
    if trend:
        out.print(f"  mean reward: first steps {trend[0]:.3f} -> last steps {trend[1]:.3f}")
    for key in ("correct_rate", "running_correct_rate", "tokens_per_second"):
        if key in outcome.metrics:
            out.print(f"  {key}: {outcome.metrics[key]:.3f}")
    out.print(f"  logs: {run_dir}/metrics.arrows (Arrow IPC stream), {run_dir}/metrics.parquet")
    out.print(f"  checkpoint: {outcome.checkpoint_dir}")


def _has_campaign(path: str) -> bool:
    try:
        with open(path, "rb") as fh:
            return "campaign" in tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError):
        return False


def _dispatch(command: str, argv: list[str]) -> int:
    if command == "train":
        return train_main(argv)
    if command == "explain":
        from retrain_ray.cli_explain import explain_main

        return explain_main(argv)
    from retrain_ray import cli_campaign

    handlers = {
        "campaign": cli_campaign.campaign_main,
        "resume": cli_campaign.resume_main,
        "results": cli_campaign.results_main,
        "status": cli_campaign.status_main,
    }
    return handlers[command](argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(__doc__)
        return 0
    if argv[0] in ("-V", "--version"):
        print(f"retrain-ray {__version__}")
        return 0
    if argv[0] in COMMANDS:
        return _dispatch(argv[0], argv[1:])
    if argv[0].endswith(".toml") or Path(argv[0]).is_file():
        command = "campaign" if _has_campaign(argv[0]) else "train"
        return _dispatch(command, argv)
    err.print(f"[bold red]error:[/] unknown command or file {argv[0]!r}; commands: {', '.join(COMMANDS)}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
