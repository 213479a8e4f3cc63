"""Optimizer-batch capture and replay (`[optimizer_batch]`, spec feature 44): one optimizer step, pinned.

A capture run resumes from a checkpoint, samples, scores and assigns credit as usual, and writes the
step's logical optimizer batch (`batch.json`: tokens, sampler log-probs, advantages, prompt lengths and
the ECHO masks, every float as its shortest exact decimal, so it reads back bit for bit) with a
`manifest.json` (the step, its learning rate, the batch's logical digest, the file's sha256 and the
run's config) to `<run dir>/optimizer_batch/`. A replay run resumes from the same checkpoint, loads
that batch instead of sampling and runs exactly that optimizer step, so two systems (devices, engines,
library versions) are compared on the same batch: same batch and same start, the post-step weights
must match.

Before the replay starts (preflight), the capture is checked: its files against the manifest, the
`expected_logical_sha256` and `expected_manifest_sha256` pins, the checkpoint the replay starts from
(the same step, and the same files as the capture's by their checksums), and every config key that differs
from the capture's, refused unless `allow_config_differences` lists the key (or its section).
Departure from the original: `[training] max_steps = 1` means the one step after the checkpoint (a
resumed run here counts steps from the run's start, so the loop runs exactly one step in this mode).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from retrain_ray.backends.types import TrainBatch
from retrain_ray.util.secrets import redact

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.config.sections_runtime import OptimizerBatchSection

log = logging.getLogger(__name__)

CAPTURE_DIR = "optimizer_batch"
BATCH_FILE = "batch.json"
MANIFEST_FILE = "manifest.json"
FORMAT = "retrain-ray optimizer batch 1"
# sections that cannot change what one optimizer step computes: never compared between capture and replay
NOT_COMPARED = frozenset({"optimizer_batch", "resume", "logging", "campaign", "squeeze"})
_KEY = "optimizer_batch"


class OptimizerBatchError(ValueError):
    """A capture that cannot be replayed (or a capture that does not match its pin), naming the key and fix."""


@dataclass(frozen=True)
class CaptureSettings:
    """What capture and replay read of a run, built once (`of`): its `[optimizer_batch]`, the checkpoint it starts
    from (`[resume] from`) and its config as a manifest records it (secrets redacted)."""

    section: OptimizerBatchSection
    resume_from: str
    config: dict[str, object]

    @classmethod
    def of(cls, cfg: RetrainConfig) -> CaptureSettings:
        return cls(cfg.optimizer_batch, cfg.resume.from_, redact(cfg.model_dump(mode="json", by_alias=True)))

    @property
    def one_step_only(self) -> bool:
        """Whether the run captures or replays (it then runs exactly one step)."""
        return self.section.capture or bool(self.section.replay_path)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def start_point(resume_from: str) -> dict[str, object]:
    """The checkpoint the run starts from (`[resume] from`): the step after it and the sha256 of its checksum
    file, which names every file of the checkpoint with its own sha256 (weights, optimizer, trainer state)."""
    # deferred: the checkpoint module loads torch, which the CLI's import of this module's error does not need
    from retrain_ray.run.resume.checkpoint import CHECKSUMS, load_state, resolve_resume_dir

    checkpoint = resolve_resume_dir(Path(resume_from).expanduser())
    return {"next_step": load_state(checkpoint).next_step, "checksums_sha256": _sha256((checkpoint / CHECKSUMS).read_bytes())}


def _logical(batch: TrainBatch) -> str:
    # deferred: the credit module loads torch, which the CLI's import of this module's error does not need
    from retrain_ray.run.credit import logical_batch_sha256

    return logical_batch_sha256(batch)


def _flat(config: dict[str, object]) -> dict[str, object]:
    """`section.key -> value` of a dumped config, without the sections that never count."""
    out: dict[str, object] = {}
    for section, table in config.items():
        if section in NOT_COMPARED:
            continue
        if isinstance(table, dict):
            out.update({f"{section}.{k}": v for k, v in cast("dict[str, object]", table).items()})
        else:
            out[section] = table
    return out


def config_differences(captured: dict[str, object], current: dict[str, object]) -> dict[str, tuple[object, object]]:
    """`section.key -> (captured, current)` for every compared key whose values differ."""
    a, b = _flat(captured), _flat(current)
    return {k: (a.get(k), b.get(k)) for k in sorted(a.keys() | b.keys()) if a.get(k) != b.get(k)}


def _allowed(key: str, allow: list[str]) -> bool:
    return key in allow or key.split(".", 1)[0] in allow


@dataclass(frozen=True)
class Capture:
    """A capture read back from disk: the batch, its manifest, and the manifest file's sha256."""

    batch: TrainBatch
    manifest: dict[str, object]
    manifest_sha256: str


def capture_folder(path: Path) -> Path:
    """A capture folder, or a run directory holding one."""
    return path / CAPTURE_DIR if (path / CAPTURE_DIR / MANIFEST_FILE).is_file() else path


def read_capture(path: Path) -> Capture:
    """Reads and checks a capture against its own manifest; raises OptimizerBatchError saying what is wrong."""
    folder = capture_folder(Path(path).expanduser())
    where = f"{_KEY}.replay_path = {str(path)!r}"
    try:
        raw = (folder / MANIFEST_FILE).read_bytes()
        batch_raw = (folder / BATCH_FILE).read_bytes()
    except OSError as exc:
        raise OptimizerBatchError(f"{where}: cannot read the capture ({exc.strerror or exc}: {exc.filename}). Fix: "
                                  f"point it at a capture run's directory or its {CAPTURE_DIR}/ folder") from None
    try:
        manifest = json.loads(raw)
        fields = json.loads(batch_raw)
        if manifest.get("format") != FORMAT:
            raise ValueError(f"format {manifest.get('format')!r}, expected {FORMAT!r}")
        batch = TrainBatch(**fields)
    except (ValueError, TypeError, AttributeError) as exc:
        raise OptimizerBatchError(f"{where}: {folder} holds no readable capture ({exc}). Fix: capture again with "
                                  f"[{_KEY}] capture = true") from None
    if _sha256(batch_raw) != manifest.get("batch_sha256"):
        raise OptimizerBatchError(f"{where}: {folder / BATCH_FILE} differs from what its manifest recorded (it was "
                                  "changed after the capture). Fix: capture again")
    if _logical(batch) != manifest.get("logical_sha256"):
        raise OptimizerBatchError(f"{where}: the batch's logical digest differs from its manifest's. Fix: capture again")
    return Capture(batch, manifest, _sha256(raw))


def settings_replay_problems(settings: CaptureSettings) -> list[str]:
    """Every reason the configured replay cannot run (empty when it can, or when the run replays nothing)."""
    ob = settings.section
    if not ob.replay_path:
        return []
    try:
        capture = read_capture(Path(ob.replay_path))
    except OptimizerBatchError as exc:
        return [str(exc)]
    problems = pin_problems(str(capture.manifest["logical_sha256"]), capture.manifest_sha256,
                            ob.expected_logical_sha256, ob.expected_manifest_sha256)
    problems += _start_problems(settings, capture.manifest)
    for key, (then, now) in config_differences(cast("dict[str, object]", capture.manifest["config"]),
                                               settings.config).items():
        if not _allowed(key, ob.allow_config_differences):
            problems.append(f"{_KEY}.allow_config_differences: the config differs from the capture's at {key} "
                            f"(captured {then!r}, here {now!r}). Fix: set {key} = {then!r}, or list {key!r} in "
                            f"[{_KEY}] allow_config_differences to replay with the difference")
    return problems


def _start_problems(settings: CaptureSettings, manifest: dict[str, object]) -> list[str]:
    """The replay must start where the capture did: the same step, and the same checkpoint unless allowed."""
    resume_from = settings.resume_from
    try:
        here = start_point(resume_from)
    except FileNotFoundError as exc:
        return [f"resume.from = {resume_from!r}: {exc}"]
    then = cast("dict[str, object]", manifest.get("start", {}))
    if here["next_step"] != then.get("next_step"):
        return [f"resume.from = {resume_from!r}: resumes at step {here['next_step']}, but the capture is of step "
                f"{then.get('next_step')}. Fix: resume from the checkpoint the capture run resumed from"]
    if here["checksums_sha256"] != then.get("checksums_sha256") and not _allowed(
            "resume.from", settings.section.allow_config_differences):
        return [f"resume.from = {resume_from!r}: this checkpoint's files differ from those the capture started "
                "from (the post-step weights could not match). Fix: resume from a copy of the capture's checkpoint, "
                "or list 'resume.from' in [optimizer_batch] allow_config_differences"]
    return []


def pin_problems(logical: str, manifest: str | None, want_logical: str, want_manifest: str) -> list[str]:
    """The pins (`expected_*`) that the digests found do not match."""
    problems: list[str] = []
    if want_logical and want_logical.lower() != logical:
        problems.append(f"{_KEY}.expected_logical_sha256 = {want_logical!r}: the batch's logical digest is {logical!r}. "
                        "Fix: replay the capture the pin was taken from, or update the pin")
    if want_manifest and manifest is not None and want_manifest.lower() != manifest:
        problems.append(f"{_KEY}.expected_manifest_sha256 = {want_manifest!r}: the manifest's sha256 is {manifest!r}. "
                        "Fix: replay the capture the pin was taken from, or update the pin")
    return problems


def load_replay(settings: CaptureSettings) -> Capture | None:
    """The capture this run replays (None: it replays nothing); raises OptimizerBatchError as preflight would."""
    if not settings.section.replay_path:
        return None
    problems = settings_replay_problems(settings)
    if problems:
        raise OptimizerBatchError("\n".join(problems))
    return read_capture(Path(settings.section.replay_path))


REWARD_METRICS = ("mean_reward", "correct_rate")  # the captured step's, which a replay row repeats


def write_capture(settings: CaptureSettings, run_dir: Path, batch: TrainBatch, *, step: int, lr: float,
                  metrics: dict[str, float]) -> dict[str, float]:
    """Writes the step's batch and manifest to `<run_dir>/optimizer_batch/` (checking the logical pin first, so a
    capture that does not reproduce it writes nothing); returns the step's `optimizer_batch/*` metrics."""
    logical = _logical(batch)
    problems = pin_problems(logical, None, settings.section.expected_logical_sha256, "")
    if problems:
        raise OptimizerBatchError("\n".join(problems))
    batch_raw = json.dumps(dataclasses.asdict(batch), separators=(",", ":")).encode()
    manifest = {"format": FORMAT, "step": step, "lr": lr, "logical_sha256": logical, "batch_sha256": _sha256(batch_raw),
                "num_datums": len(batch.tokens_D), "num_tokens": batch.num_tokens, "config": settings.config,
                "start": start_point(settings.resume_from), "rewards": {k: metrics[k] for k in REWARD_METRICS if k in metrics}}
    raw = json.dumps(manifest, indent=1, sort_keys=True).encode()
    folder = Path(run_dir) / CAPTURE_DIR
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in ((BATCH_FILE, batch_raw), (MANIFEST_FILE, raw)):  # the manifest last: it marks a whole capture
        tmp = folder / f".{name}.tmp"
        tmp.write_bytes(data)
        tmp.replace(folder / name)
    log.info("captured the optimizer batch of step %d to %s (logical sha256 %s, manifest sha256 %s)", step, folder,
             logical, _sha256(raw))
    return {"optimizer_batch/captured": 1.0, "optimizer_batch/num_datums": float(len(batch.tokens_D)),
            "optimizer_batch/num_tokens": float(batch.num_tokens)}
