"""Verbs that check a run or a config without training: `resume-check`, `trace` (`diff`: results.py).

    retrain-ray resume-check RUN_DIR [--config FILE] [--json]   exit 0 resumable or complete, 1 not
    retrain-ray trace FILE [--json]   the preflight probe's results and every issue, exit 1 on issues
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retrain_ray.checks.preflight import PreflightError, backend_capabilities, check_run
from retrain_ray.checks.probe import PROBE_GROUPS, PROBE_LAMBDA
from retrain_ray.checks.probe import _probe_entropies as probe_entropies
from retrain_ray.run.plugin_modes import compute_group_advantages, resolve_modes

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig


def resume_check_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="retrain-ray resume-check",
                                     description="Can this run be resumed? Reads files only.")
    parser.add_argument("run_dir")
    parser.add_argument("--config", default=None, help="TOML to check max_steps against (default: run_meta.json)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if not Path(args.run_dir).is_dir():
        print(f"error: {args.run_dir} is not a directory", file=sys.stderr)
        return 2
    # deferred: loads pydantic, which importing this module does not need
    from retrain_ray.config import ConfigError
    from retrain_ray.run.resume.check import check_resume

    try:
        report = check_resume(Path(args.run_dir), args.config)
    except (ConfigError, FileNotFoundError) as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_resume(report)
    return 0 if report["resumable"] else 1


def _print_resume(report: dict[str, Any]) -> None:
    verdict = "complete" if report["complete"] else ("resumable" if report["resumable"] else "NOT resumable")
    print(f"{report['run_dir']}: {verdict}")
    if "checkpoint" in report:
        print(f"  checkpoint {report['checkpoint']} ({report['payload']}, resume mode {report['resume_mode']})")
        print(f"  next step {report['next_step']} of {report['max_steps'] or '?'}")
    for note in report["notes"]:
        print(f"  note: {note}")
    for problem in report["problems"]:
        print(f"  problem: {problem}")


def trace_report(cfg: RetrainConfig) -> dict[str, Any]:
    """The resolved modes, the probe groups' token advantages, and every preflight issue."""
    alg = cfg.algorithm
    report: dict[str, Any] = {"capabilities": backend_capabilities(cfg.backend).__dict__, "probes": [], "issues": []}
    try:
        check_run(cfg)
    except PreflightError as exc:
        report["issues"] = exc.problems
    try:
        modes = resolve_modes(alg.advantage_mode, alg.transform_mode, alg.algorithm_mode, alg.uncertainty_kind,
                              alg.transform_params)
    except ValueError:
        return report
    report["flow"] = {"label": modes.label, "uncertainty_kind": modes.uncertainty_kind,
                      "token_varying": modes.token_varying, "builtin": modes.builtin}
    for index, probe in enumerate(PROBE_GROUPS):
        try:
            out = compute_group_advantages(
                probe["rewards"], probe["logprobs"], probe["masks"], advantage_mode=modes.advantage_mode,
                transform_mode=modes.transform_mode, algorithm_mode=modes.algorithm_mode,
                uncertainty_kind=modes.uncertainty_kind, transform_params=alg.transform_params,
                sepa_lambda=PROBE_LAMBDA, entropies=probe_entropies(probe["logprobs"]),
                advantage_params=alg.advantage_params, algorithm_params=alg.params)
        except Exception as exc:  # reported as an issue by check_run already; show where it happened
            report["probes"].append({"group": index, "error": f"{type(exc).__name__}: {exc}"})
            continue
        rows = out.token_advantages
        report["probes"].append({"group": index, "rewards": probe["rewards"], "token_advantages": rows,
                                 "max_spread": max((max(r) - min(r) for r in rows if r), default=0.0)})
    return report


def trace_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="retrain-ray trace",
                                     description="Run the preflight probe of a config and show what it saw.")
    parser.add_argument("config")
    parser.add_argument("--json", action="store_true")
    args, rest = parser.parse_known_args(argv)
    # deferred: loads pydantic, which importing this module does not need
    from retrain_ray.config import ConfigError, load_config, parse_overrides

    try:
        cfg = load_config(args.config, parse_overrides(rest) if rest else None)
    except (ConfigError, FileNotFoundError) as exc:
        print(exc, file=sys.stderr)
        return 2
    report = trace_report(cfg)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        _print_trace(report)
    return 1 if report["issues"] else 0


def _print_trace(report: dict[str, Any]) -> None:
    flow = report.get("flow")
    if flow:
        print(f"flow {flow['label']}: uncertainty {flow['uncertainty_kind']}, token-varying {flow['token_varying']}")
    print("backend capabilities: " + ", ".join(f"{k}={v}" for k, v in report["capabilities"].items()))
    for probe in report["probes"]:
        if "error" in probe:
            print(f"probe group {probe['group']}: ERROR {probe['error']}")
            continue
        rows = "; ".join(" ".join(f"{v:+.3f}" for v in row) for row in probe["token_advantages"])
        print(f"probe group {probe['group']} rewards {probe['rewards']}: spread {probe['max_spread']:.3g}  [{rows}]")
    for issue in report["issues"]:
        print(f"issue: {issue}")
    print("trace: " + ("no issues" if not report["issues"] else f"{len(report['issues'])} issue(s)"))
