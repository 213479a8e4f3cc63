"""Plugin code packed to travel with a campaign's trials: the narrowest unit of each plugin module, zipped.

What is packed, per plugin module (`plugin_unit`), is the narrowest unit that keeps its imports working:
* found under a `[plugins] search_paths` prefix (`plugins.my_reward`): that search path's whole folder
  (`plugins/`), plus the `__init__.py` of its parent packages (`a/b` ships `a/__init__.py` and `a/b/`);
* found as given, or in a search path folder (`my_pkg.rewards`): its top-level package folder (`my_pkg/`),
  or the one file of a top-level module (`my_reward.py`): never the folder it lies in, so never the
  working directory.
Installed code (site-packages, the standard library) and retrain_ray itself are not packed: they are
on every node already. `__pycache__`, `.git` and compiled files are left out. A bundle over
`MAX_BUNDLE_BYTES` (Ray's limit for a runtime-env package) is refused, naming the folder. `pack` is that
choice of files, `zip_packing` zips it; a trial unpacks it into a per-node cache keyed by its digest and
puts that first on `sys.path` (`activate`). Which modules a campaign's configs name is
campaign/plugin_bundle.py's business.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import os
import shutil
import sys
import sysconfig
import tempfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import ModuleType

MAX_BUNDLE_BYTES = 100 * 2**20
SKIPPED_DIRS = frozenset({"__pycache__", ".git"})


@dataclass(frozen=True)
class PluginBundle:
    """The zipped plugin code of a campaign: `units` are (name in the bundle, folder or file it came from)."""

    digest: str
    data: bytes
    units: tuple[tuple[str, str], ...]
    files: int

    def unpack(self, base: Path | None = None) -> Path:
        """The folder holding the bundle's files on this node, unpacked on first use (concurrent trials
        of one node race to rename their copy into place; the loser discards its own)."""
        base = base or Path(tempfile.gettempdir()) / f"retrain-ray-plugins-{os.getuid()}"
        target = base / self.digest[:16]
        if target.is_dir():
            return target
        base.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=base, prefix=".unpacking-"))
        with zipfile.ZipFile(io.BytesIO(self.data)) as archive:
            archive.extractall(staging)
        try:
            staging.rename(target)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
            if not target.is_dir():
                raise
        return target

    def describe(self) -> str:
        size = len(self.data) / 1024
        return f"{', '.join(name for name, _ in self.units)} ({self.files} files, {size:.0f} KiB zipped)"


def activate(bundle: PluginBundle) -> Path:
    """Unpacks `bundle` on this node and puts it first on `sys.path`: the trial imports the driver's code.

    Kept on `sys.path` rather than given to the `PluginLoader` (plugins/loader.py), on purpose: in the
    trial, code other than the loader imports the bundle's modules by name: a `custom` reward's module
    (rewards/custom.py, and its worker processes, which inherit `sys.path`),
    the plugins' own absolute imports of their siblings, and unpickling of objects they define."""
    root = bundle.unpack()
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
        importlib.invalidate_caches()
    return root


def _installed(root: Path, top: str) -> bool:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return (top == "retrain_ray" or bool({"site-packages", "dist-packages"} & set(root.parts))
            or root.is_relative_to(stdlib))


def plugin_unit(module: ModuleType, prefix: str) -> tuple[Path, PurePosixPath] | None:
    """(sys.path folder, what under it to pack) for `module`, or None when it is installed code."""
    file = getattr(module, "__file__", None)
    if not file:
        return None
    parts = module.__name__.split(".")
    path = Path(file).absolute()
    is_package = path.name == "__init__.py"
    root = path.parents[len(parts) - (0 if is_package else 1)]
    if _installed(root, parts[0]):
        return None
    if prefix:
        return root, PurePosixPath(*prefix.split("."))
    return root, PurePosixPath(parts[0] if is_package or len(parts) > 1 else path.name)


def _files(root: Path, rel: PurePosixPath) -> list[tuple[Path, str]]:
    """(file, name in the bundle) of one unit: its parent packages' `__init__.py`, then its files."""
    found = [(root.joinpath(*rel.parts[:i], "__init__.py"), "/".join([*rel.parts[:i], "__init__.py"]))
             for i in range(1, len(rel.parts))]
    found = [(f, name) for f, name in found if f.is_file()]
    target = root / rel
    if target.is_file():
        return [*found, (target, rel.as_posix())]
    for folder, dirnames, filenames in os.walk(target):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIPPED_DIRS)
        for name in sorted(filenames):
            if not name.endswith((".pyc", ".pyo")):
                file = Path(folder) / name
                found.append((file, file.relative_to(root).as_posix()))
    return found


@dataclass(frozen=True)
class Packing:
    """What a bundle holds before zipping: `files` by their name in the bundle; `units` are (name in the
    bundle, folder or file it came from, its files, their bytes)."""

    files: dict[str, Path]
    units: tuple[tuple[str, str, int, int], ...]

    @property
    def raw_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.files.values())


def pack(sources: Iterable[tuple[Path, PurePosixPath]]) -> Packing | None:
    """What a bundle of these units (`plugin_unit`) holds; None when there is none. Raises ValueError naming
    the folder when the files exceed `MAX_BUNDLE_BYTES`."""
    files: dict[str, Path] = {}
    units: list[tuple[str, str, int, int]] = []
    for root, rel in sources:
        unit_files = _files(root, rel)
        size = sum(f.stat().st_size for f, _ in unit_files)
        if size > MAX_BUNDLE_BYTES:
            raise ValueError(
                f"[plugins] {root / rel}: {size / 2**20:.1f} MiB of files to ship to the campaign's trials, over the "
                f"{MAX_BUNDLE_BYTES // 2**20} MiB limit of a Ray package. Keep data out of the plugin folder (read it "
                "from a path every node sees), or install the plugin as a package on every node")
        units.append((rel.as_posix(), str(root / rel), len(unit_files), size))
        for file, name in unit_files:
            files.setdefault(name, file)
    if not files:
        return None
    packed = Packing(files, tuple(units))
    if packed.raw_bytes > MAX_BUNDLE_BYTES:
        raise ValueError(f"[plugins] {', '.join(u[1] for u in units)}: {packed.raw_bytes / 2**20:.1f} MiB of files "
                         f"to ship to the campaign's trials, over the {MAX_BUNDLE_BYTES // 2**20} MiB limit of a "
                         "Ray package")
    return packed


def zip_packing(packed: Packing) -> PluginBundle:
    """The bundle of `packed`: its files zipped, with the digest that names it."""
    data = _zip(packed.files)
    sources = tuple((name, source) for name, source, _, _ in packed.units)
    return PluginBundle(hashlib.sha256(data).hexdigest(), data, sources, len(packed.files))


def _zip(files: dict[str, Path]) -> bytes:
    """The files under their names, with fixed timestamps: the same code gives the same digest."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, files[name].read_bytes())
    return buffer.getvalue()
