"""Atomic, verified checkpoints with a keep-last-N policy.

Layout under the run directory:

    checkpoints/checkpoint_step_20/   backend files (adapter or weights, optimizer.pt),
                                      trainer_state.json, CHECKSUMS.json
    checkpoints/final/
                                      (`[training] checkpoint_dir`: these two directly in that directory,
                                      with a copy of run_meta.json: run/resume/point.py)
    trainer_state.json                copy of the newest state (the original's location)
    latest_sampler_path.txt

A checkpoint is built in a hidden temporary directory and renamed into place, so a crash never leaves
a half-written `checkpoint_step_N`. `CHECKSUMS.json` (sha256 of every file) catches later damage:
`latest_valid()` skips a checkpoint that fails verification, with a warning, and uses the one before.
A save that fails to write (a full disk, a read-only directory) removes its temporary directory and
raises an OSError naming the checkpoint, whatever library wrote the file (safetensors reports I/O
errors as its own exception type).
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import logging
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from retrain_ray.run.state import TrainerState
from retrain_ray.util.finite import NonFiniteError, nonfinite_tensors

log = logging.getLogger(__name__)

CHECKSUMS = "CHECKSUMS.json"
STATE_FILE = "trainer_state.json"
_STEP_DIR = re.compile(r"^checkpoint_step_(\d+)$")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _file_checksums(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): _sha256(p)
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != CHECKSUMS
    }


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _write_error(exc: Exception, final: Path, free_bytes: int) -> Exception:
    """An OSError naming the checkpoint for a failed write (errno kept); other errors unchanged. A
    writer that hides the I/O error (torch.save on a full disk: 'unexpected pos ...') counts as ENOSPC
    when less than 1 MiB is free."""
    code = exc.errno if isinstance(exc, OSError) else None
    if code is None and (match := re.search(r"os error (\d+)", str(exc))):
        code = int(match.group(1))
    if code is None and free_bytes < 2**20:
        code = errno.ENOSPC
    if code is None:
        return exc
    return OSError(code, f"{os.strerror(code)}: writing checkpoint {final} failed ({exc}); nothing was saved, "
                         "the previous checkpoints are kept: free space (or make the directory writable) "
                         "and resume with --resume")


def verify_checkpoint(directory: Path) -> str:
    """Returns "" if the checkpoint is complete and intact, else what is wrong with it."""
    sums_file = directory / CHECKSUMS
    if not sums_file.is_file():
        return f"{sums_file} is missing (incomplete checkpoint)"
    try:
        expected = json.loads(sums_file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        return f"{sums_file} is not valid JSON ({exc})"
    actual = _file_checksums(directory)
    for name, digest in expected.items():
        if name not in actual:
            return f"{directory / name} is missing"
        if actual[name] != digest:
            return f"{directory / name} does not match its checksum"
    bad = nonfinite_tensors(directory)
    if bad:
        return f"{directory} holds non-finite weights ({', '.join(bad)})"
    return ""


class CheckpointManager:
    """Writes, verifies, finds and prunes the checkpoints of one run."""

    def __init__(self, run_dir: Path, keep_last: int = 3, root: Path | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.root = Path(root) if root is not None else self.run_dir / "checkpoints"  # `[training] checkpoint_dir`
        self.keep_last = keep_last

    def save(self, name: str, state: TrainerState, write_payload: Callable[[Path], None]) -> Path:
        """Builds checkpoint `name` atomically; `write_payload(dir)` writes the backend's files."""
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.root / name
        tmp = self.root / f".tmp-{name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        try:
            write_payload(tmp)
        except Exception as exc:
            error = _write_error(exc, final, shutil.disk_usage(self.root).free)
            shutil.rmtree(tmp, ignore_errors=True)
            if error is exc:  # `raise exc from exc` makes a cause cycle: Tune recursed on it until RecursionError
                raise
            raise error from exc
        bad = nonfinite_tensors(tmp)
        if bad:
            shutil.rmtree(tmp, ignore_errors=True)
            raise NonFiniteError(f"refusing to save checkpoint {final}: non-finite weights ({', '.join(bad)}); "
                                 f"the run diverged before step {state.step}; the last good checkpoint is kept")
        state = dataclasses.replace(state, checkpoint_name=name, checkpoint_path=str(final))
        (tmp / STATE_FILE).write_text(state.to_json())
        (tmp / CHECKSUMS).write_text(json.dumps(_file_checksums(tmp), indent=1, sort_keys=True))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        write_text_atomic(self.run_dir / STATE_FILE, state.to_json())
        write_text_atomic(self.run_dir / "latest_sampler_path.txt", str(final) + "\n")
        self._drop_later(name)
        self._prune()
        return final

    def _drop_later(self, name: str) -> None:
        """Removes the checkpoints after step checkpoint `name`: a run resumed from an earlier checkpoint
        (a campaign restores from the one Tune's synced state names) abandoned them, and keeping them
        would make keep-last-N prune the checkpoint just written."""
        saved = _STEP_DIR.match(name)
        if saved is None:
            return
        later = [p for p in self.step_checkpoints()
                 if (m := _STEP_DIR.match(p.name)) and int(m.group(1)) > int(saved.group(1))]
        for path in [*later, *([self.root / "final"] if (self.root / "final").is_dir() else [])]:
            log.info("removing %s: the run resumed from an earlier checkpoint", path)
            shutil.rmtree(path, ignore_errors=True)

    def step_checkpoints(self) -> list[Path]:
        """`checkpoint_step_N` directories, oldest first."""
        if not self.root.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.root.iterdir() if (m := _STEP_DIR.match(p.name))]
        return [p for _, p in sorted(found)]

    def candidates(self) -> list[Path]:
        """Every checkpoint, newest first (`final` counts as the newest)."""
        ordered = list(reversed(self.step_checkpoints()))
        final = self.root / "final"
        return ([final] if final.is_dir() else []) + ordered

    def latest_valid(self) -> Path | None:
        """The newest checkpoint that verifies; damaged ones are skipped with a warning."""
        for candidate in self.candidates():
            problem = verify_checkpoint(candidate)
            if not problem:
                return candidate
            log.warning("skipping damaged checkpoint %s: %s; trying the previous one", candidate, problem)
        return None

    def _prune(self) -> None:
        for stale in self.root.glob(".tmp-*"):  # left by a save that was killed
            if stale.is_dir() and not stale.name.endswith(f"-{os.getpid()}"):
                shutil.rmtree(stale, ignore_errors=True)
        if self.keep_last <= 0:
            return
        for old in self.step_checkpoints()[: -self.keep_last]:
            shutil.rmtree(old, ignore_errors=True)


def has_complete_checkpoint(run_dir: Path) -> bool:
    """Whether a save of this run finished (a checkpoint with its checksums; damage is checked on resume).
    A save killed before its rename leaves only a `.tmp-*` directory: nothing to resume from."""
    return any((c / CHECKSUMS).is_file() for c in CheckpointManager(run_dir, keep_last=0).candidates())


def load_state(checkpoint_dir: Path) -> TrainerState:
    return TrainerState.from_json((Path(checkpoint_dir) / STATE_FILE).read_text())


def resolve_resume_dir(path: Path, keep_last: int = 3) -> Path:
    """Accepts a checkpoint directory or a run directory; returns the checkpoint to resume from.

    Raises FileNotFoundError with what was looked for when nothing usable is there.
    """
    path = Path(path)
    if (path / STATE_FILE).is_file() and (path / CHECKSUMS).is_file():
        problem = verify_checkpoint(path)
        if not problem:
            return path
        log.warning("checkpoint %s is damaged (%s); looking for an earlier one", path, problem)
        path = path.parent.parent if path.parent.name == "checkpoints" else path
    found = CheckpointManager(path, keep_last).latest_valid()
    if found is None:
        raise FileNotFoundError(
            f"no complete checkpoint under {path} (looked for {path}/checkpoints/checkpoint_step_N with "
            f"{CHECKSUMS}), so there is nothing to resume: start the run afresh without --resume and with "
            f"--overwrite (which replaces {path}), or point --resume at a run directory that has one"
        )
    return found
