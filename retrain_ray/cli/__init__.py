"""`retrain-ray` command line: a dispatcher. Each verb lives in a module of this package, one per verb family.

Configuration errors are printed all at once, each naming its key and file, with exit code 2.
Every verb returns 0 on success, 1 when what it ran or checked failed, 2 on bad input.
"""

from __future__ import annotations

import gc
import importlib
import logging
import os
import sys
from pathlib import Path
from typing import NoReturn

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, from PyPI
    import tomli as tomllib

from retrain_ray import __version__
from retrain_ray.util.file_kinds import path_kind

# verb -> (module, function, usage line); modules are imported only when their verb runs.
VERBS: dict[str, tuple[str, str, str]] = {
    "train": ("train", "train_main", "train FILE [--resume DIR] [--overwrite] [--flags]   train one run"),
    "campaign": ("campaign", "campaign_main", "campaign FILE [--flags]   run a campaign on Ray"),
    "resume": ("campaign", "resume_main", "resume DIR   finish an interrupted campaign"),
    "explain": ("explain", "explain_main", "explain FILE [--json]   dry run: matrix, resources, capacity"),
    "results": ("results", "results_main", "results DIR [--json|--csv]   per-run and per-condition table"),
    "status": ("results", "status_main", "status [DIR] [--json] [--all|--active] [--watch]   runs and campaigns"),
    "top": ("results", "top_main", "top [DIR]   live view of campaigns with running runs (status --watch --active)"),
    "diff": ("results", "diff_main", "diff RUN_A RUN_B | CAMPAIGN_DIR COND_A COND_B [--json]   compare"),
    "resume-check": ("inspect", "resume_check_main", "resume-check RUN_DIR [--config FILE] [--json]"),
    "trace": ("inspect", "trace_main", "trace FILE [--json]   the preflight probe and its issues"),
    "backends": ("catalog", "backends_main", "backends [--json]   backend catalog: capabilities, options"),
    "plugins": ("catalog", "plugins_main", "plugins [FILE] [--json]   built-in names, discovered plugins"),
    "doctor": ("doctor", "doctor_main", "doctor [--json] [--address A]   check this install and machine"),
    "squeeze": ("squeeze", "squeeze_main", "squeeze RUN_DIR|ADAPTER|FILE [--json]   LoRA rank analysis, compression"),
    "init": ("init", "init_main", "init [--template NAME] [--output PATH] [--list]   write a starter TOML"),
    "bottleneck": ("results", "bottleneck_main", "bottleneck DIR [--json] [--plot FILE.png]   where step time goes"),
    "plot": ("results", "plot_main", "plot DIR [--metric M] [--smooth N] [--html]   curves with seed bands"),
}


DEFAULT_FILE = "retrain.toml"


def usage() -> str:
    lines = ["usage:", "    retrain-ray [FILE] [--flags]   train one run (FILE defaults to ./retrain.toml); "
             "a campaign if FILE has [campaign]; squeeze if it has [squeeze] adapter_path"]
    lines += [f"    retrain-ray {line}" for _, _, line in VERBS.values()]
    return "\n".join(lines)


def _verb_for_file(path: str) -> str:
    """By content, as the original: [campaign] -> campaign, [squeeze] with an adapter_path -> squeeze,
    else train (a file that is not one, or does not parse, goes to train, which reports the error)."""
    if path_kind(path) != "file":  # a device or a pipe would be read forever
        return "train"
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except (OSError, ValueError):  # TOMLDecodeError, and UnicodeDecodeError of a binary file
        return "train"
    if "campaign" in data:
        return "campaign"
    squeeze = data.get("squeeze")
    return "squeeze" if isinstance(squeeze, dict) and squeeze.get("adapter_path") else "train"


def _dispatch(command: str, argv: list[str]) -> int:
    module, function, _ = VERBS[command]
    return getattr(importlib.import_module(f"retrain_ray.cli.{module}"), function)(argv)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if not argv and Path(DEFAULT_FILE).is_file():  # as the original: no argument means ./retrain.toml
        return _guarded(_verb_for_file(DEFAULT_FILE), [DEFAULT_FILE])
    if not argv or argv[0] in ("-h", "--help", "help"):
        print((__doc__ or "").splitlines()[0].split(":")[0] + "\n\n" + usage())
        if not argv:
            print(f"\nno {DEFAULT_FILE} here: `retrain-ray init` writes a starter one")
        return 0
    if argv[0] in ("-V", "--version"):
        print(f"retrain-ray {__version__}")
        return 0
    if argv[0] in VERBS:
        return _guarded(argv[0], argv[1:])
    if argv[0].endswith(".toml") or Path(argv[0]).is_file():
        return _guarded(_verb_for_file(argv[0]), argv)
    print(f"error: unknown command or file {argv[0]!r}; commands: {', '.join(VERBS)}", file=sys.stderr)
    return 2


USER_ERRORS = (ValueError, KeyError, OSError, TimeoutError, ImportError, AttributeError, TypeError)
"""What bad input raises (bad files, data, rewards, plugins, full or read-only disks); each message names
the file, key or value. At the CLI they end the command with that message and exit 1, not a traceback;
RETRAIN_RAY_TRACEBACK=1 shows the traceback as well."""


def _guarded(command: str, argv: list[str]) -> int:
    try:
        return _dispatch(command, argv)
    except KeyboardInterrupt:  # a verb that can say where it stopped catches it itself (train, campaign)
        print(f"\ninterrupted ({command}): stopped by Ctrl-C", file=sys.stderr)
        return 130
    except USER_ERRORS as exc:
        if os.environ.get("RETRAIN_RAY_TRACEBACK"):
            raise
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        print(f"error ({command}): {type(exc).__name__}: {message}", file=sys.stderr)
        print("(set RETRAIN_RAY_TRACEBACK=1 to see the traceback)", file=sys.stderr)
        return 1


def entry() -> NoReturn:
    """The `retrain-ray` console script and `python -m retrain_ray`: runs `main()` and ends the process
    with its code. By then the command's work is done and its files closed, so `gc.freeze()` first
    spares the interpreter's last garbage collection over everything the command loaded (Ray Tune,
    torch: 0.3-0.5 s of a command's exit on these machines). atexit handlers (a tracker's final sync)
    still run; memory goes back to the OS with the process."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    gc.freeze()
    sys.exit(code)

