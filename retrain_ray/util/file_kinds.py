"""What a path really is, for messages: a file the user named may be a directory, a device, a named pipe,
a socket or a symlink that loops or dangles, and "does not exist" would send them looking in vain.
Reading a device or a pipe would also never end (/dev/zero) or wait for a writer forever (a FIFO)."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


def path_kind(path: str | Path) -> str:
    """"file", "directory", "missing", or what else the path is, in words ("a named pipe (FIFO)", ...)."""
    path = Path(path)
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return "a symlink loop (it resolves to itself)"
        if path.is_symlink():
            return f"a broken symlink (to {os.readlink(path)}, which does not exist)"
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            return "missing"
        return f"unreadable ({exc.strerror})"
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    kinds = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
             (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISSOCK, "a socket"))
    return next((word for test, word in kinds if test(mode)), "not a regular file")


def special_file_problem(path: str | Path) -> str | None:
    """Why `path` cannot be read as a file although something is there ("is a named pipe (FIFO), not a
    regular file"), or None for a regular file, a directory or a missing path (the caller's own messages)."""
    kind = path_kind(path)
    return None if kind in ("file", "directory", "missing") else f"is {kind}, not a regular file"


def env_directory(key: str) -> Path | None:
    """The directory an environment variable names, or None when it is unset or empty; a value that names
    a file (or a device, ...) is a NotADirectoryError naming the variable and the fix."""
    value = os.environ.get(key, "")
    if not value:
        return None
    path = Path(value).expanduser()
    kind = path_kind(path)
    if kind not in ("directory", "missing"):
        what = "a file" if kind == "file" else kind
        raise NotADirectoryError(f"${key} = {value} is {what}, not a directory: point {key} at a directory "
                                 f"(or unset it)")
    return path


def directory_problem(directory: str | Path) -> str | None:
    """Why `directory` cannot be (or become) a directory: it, or one of its parents, is a file, a device,
    ... ("run/x (inside run): run is a file, not a directory"); None when it is one or can be made."""
    directory = Path(directory)
    for path in (directory, *directory.parents):
        kind = path_kind(path)
        if kind == "missing":
            continue
        if kind == "directory":
            return None
        where = "" if path == directory else f" (inside {path})"
        return f"{directory}{where}: {path} is {'a file' if kind == 'file' else kind}, not a directory"
    return None
