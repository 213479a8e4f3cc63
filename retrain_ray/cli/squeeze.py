"""`retrain-ray squeeze PATH [--flags] [--json]`: LoRA rank analysis and compression (spec 5.4).

PATH is a run directory (its final adapter, else its newest complete checkpoint), an adapter
directory, or a TOML file whose `[squeeze]` section names `adapter_path`. Flags override the
`[squeeze]` keys. Prints the retained energy per target rank and the recommended rank, writes the
compressed adapter and `squeeze.json` (default: `<run dir>/squeeze/`). Exit 2 on bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from retrain_ray.squeeze import SqueezeError, SqueezeSettings, squeeze_adapter


def _ranks(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--target-ranks {text!r}: expected integers like 1,2,4,8") from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="retrain-ray squeeze", description="LoRA rank analysis and compression.")
    p.add_argument("path", help="run directory, adapter directory, or TOML with [squeeze]")
    p.add_argument("--min-variance-retention", type=float, default=None)
    p.add_argument("--target-ranks", type=_ranks, default=None, help="comma list, e.g. 1,2,4,8")
    p.add_argument("--compress-to", type=int, default=None, help="rank of the written adapter (0: recommended)")
    p.add_argument("--output", default=None, help="directory for squeeze.json and adapter_r<k>/")
    p.add_argument("--device", default=None)
    p.add_argument("--json", action="store_true")
    return p


def _settings(args: argparse.Namespace) -> tuple[str, SqueezeSettings]:
    path, settings = args.path, SqueezeSettings()
    if path.endswith(".toml"):
        # deferred: loads pydantic, which importing this module does not need
        from retrain_ray.config import load_config

        cfg = load_config(path)
        if cfg.squeeze is None or not cfg.squeeze.adapter_path:
            raise SqueezeError(f"{path} has no [squeeze] adapter_path; pass a run or adapter directory instead")
        settings = SqueezeSettings.from_section(cfg.squeeze)
        path = settings.adapter_path
    flags = {"min_variance_retention": args.min_variance_retention, "target_ranks": args.target_ranks,
             "compress_to": args.compress_to, "output_path": args.output, "device": args.device}
    return path, dataclasses.replace(settings, **{k: v for k, v in flags.items() if v is not None})


def squeeze_main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    # deferred: loads pydantic, which importing this module does not need
    from retrain_ray.config import ConfigError

    try:
        path, settings = _settings(args)
        if not 0.0 < settings.min_variance_retention <= 1.0:
            raise SqueezeError(f"--min-variance-retention {settings.min_variance_retention}: must be in (0, 1]")
        report = squeeze_adapter(Path(path), settings)
    except (SqueezeError, ConfigError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(report.to_json())
        return 0
    print(f"adapter {report.adapter}: rank {report.source_rank}, {len(report.layers)} LoRA layers")
    for k, v in report.mean_retention.items():
        print(f"  rank {k:4d}: {100 * v:6.2f}% of the update's energy (mean over layers)")
    print(f"recommended rank {report.recommended_rank} (first to keep >= {100 * report.min_variance_retention:.1f}%)")
    print(f"wrote rank-{report.compressed_rank} adapter {report.output_path}")
    return 0
