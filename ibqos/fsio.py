"""The one way ibqos writes (and removes) files: atomically.

A reader (OpenSM after a SIGHUP, the lab's supervisor, an admin's editor) sees either the
old file or the new one, never a half-written one, and a crash leaves no temp file behind.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path


def atomic_write(path: Path, text: str, mode: int | None = None) -> None:
    """Replace *path* with *text* (UTF-8); see :func:`atomic_write_bytes`."""
    atomic_write_bytes(path, text.encode("utf-8"), mode)


def atomic_write_bytes(path: Path, data: bytes, mode: int | None = None) -> None:
    """Replace *path* with *data*.

    Writes a temp file in the same directory (``rename(2)`` is only atomic within one
    file system), fsyncs it, renames it over the target and fsyncs the directory so the
    rename itself survives a crash.  The target's permissions are kept unless *mode* is
    given (0o644 for a new file).
    """
    directory = path.parent
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644
    tmp = directory / f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), mode)  # O_CREAT's mode is filtered by the umask
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def atomic_remove(path: Path) -> None:
    """Remove *path* (if it exists) and fsync its directory, so that the removal, like a
    replacement, survives a crash."""
    try:
        path.unlink()
    except FileNotFoundError:
        return
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
