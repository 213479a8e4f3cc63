"""`manifest.json`: the campaign's own record, kept current while it runs (atomic rewrites).

It holds the config snapshot (secrets redacted), the run matrix, each run's status, attempts and
result, the package versions and where the driver ran. The original (spec 5.2) wrote a manifest
per phase with `returncode` only; here every state change of a run rewrites it, and `status` reads
failures from it (the original never counted them, hazard 13.6).
"""

from __future__ import annotations

import json
import os
import socket
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from retrain_ray.process_clock import process_started_at
from retrain_ray.secrets import REDACTED, redact  # noqa: F401  (re-exported)

MANIFEST = "manifest.json"
# "stopped": an adaptive campaign stopped the run's condition at a rung (campaign/adaptive.py); its
# entry says why (`stop_reason`) and it is never run again
RUN_STATES = ("pending", "running", "completed", "failed", "stopped")
_PACKAGES = ("retrain-ray", "ray", "torch", "transformers", "peft", "pyarrow", "pydantic")


def package_versions() -> dict[str, str]:
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path)


def read_manifest(campaign_dir: Path) -> dict[str, Any]:
    path = Path(campaign_dir) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: {campaign_dir} is not a retrain-ray campaign directory")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path} is not valid JSON ({exc}): damaged or half-written; "
                         "restore it from a backup or start the campaign again under another name") from None
    if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
        raise ValueError(f"{path} is not a retrain-ray manifest (no \"runs\" list)")
    return data


def run_entry(run: Any, **extra: Any) -> dict[str, Any]:
    """A run's manifest entry (a campaign/plan.py RunPlan), before its status fields."""
    return {"run_name": run.run_name, "condition": run.condition, "seed": run.seed, "overrides": redact(run.overrides),
            "run_dir": str(run.run_dir), "placement": run.placement.mode if run.placement else "",
            "max_steps": int(run.config.training.max_steps), **extra}


class Manifest:
    """The manifest in memory; every mutation is written to disk at once. Used by the driver only."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data

    @classmethod
    def create(cls, campaign_dir: Path, header: dict[str, Any], runs: list[dict[str, Any]]) -> Manifest:
        data = {
            **header,
            "status": "pending",
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "packages": package_versions(),
            "runs": [{**r, "status": "pending", "attempts": 0, "result": {}, "error": ""} for r in runs],
        }
        manifest = cls(campaign_dir / MANIFEST, data)
        manifest.save()
        return manifest

    @classmethod
    def load(cls, campaign_dir: Path) -> Manifest:
        return cls(Path(campaign_dir) / MANIFEST, read_manifest(campaign_dir))

    def save(self) -> None:
        self.data["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        write_json_atomic(self.path, self.data)

    def run(self, run_name: str) -> dict[str, Any]:
        for entry in self.data["runs"]:
            if entry["run_name"] == run_name:
                return entry
        raise KeyError(f"run {run_name!r} is not in {self.path}")

    def update_run(self, run_name: str, **changes: Any) -> None:
        if "status" in changes and changes["status"] not in RUN_STATES:
            raise ValueError(f"run status {changes['status']!r} not in {RUN_STATES}")
        self.run(run_name).update(changes)
        self.save()

    def start_session(self) -> None:
        """Records a driver session (first start or resume): host, pid, time."""
        session = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time(),
                   "process_started_at": process_started_at() or 0.0}  # the driver's own start-up (explain --calibrate)
        self.data.setdefault("sessions", []).append(session)
        self.data["status"] = "running"
        self.save()

    def finish(self) -> None:
        states = [r["status"] for r in self.data["runs"]]
        self.data["status"] = "done" if all(s in ("completed", "stopped") for s in states) else "partial"
        self.data["counts"] = {s: states.count(s) for s in RUN_STATES}
        self.save()
