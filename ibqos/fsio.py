"""The one way ibqos writes (and removes) files: atomically.

A reader (OpenSM after a SIGHUP, the lab's supervisor, an admin's editor) sees either the
old file or the new one, never a half-written one, and a crash leaves no temp file behind.

:class:`FileSwap` changes several files in two phases, so that neither the change nor its
undoing can fail half-way for want of space: every new file is written to a temp file
first (a failure there changes nothing), and every current file is kept under a second
name in its own directory; then each change, and each undo, is one ``rename(2)``.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import threading
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger(__name__)

#: what a kept file's name ends with before the pid of the process that keeps it
_KEEP = ".ibqos-keep-"


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
    tmp = _stage(path, data, mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def atomic_remove(path: Path) -> None:
    """Remove *path* (if it exists) and fsync its directory, so that the removal, like a
    replacement, survives a crash."""
    try:
        path.unlink()
    except FileNotFoundError:
        return
    _fsync_dir(path.parent)


def _write_all(fd: int, data: bytes) -> None:
    """Write all of *data* to *fd* (``os.write`` may write less than asked)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_dir(directory: Path) -> None:
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process
    return True


class FileSwap:
    """Replace (or remove) several files so that the change and its undoing are renames.

    :meth:`prepare` writes each new content to a temp file beside its target (fsynced,
    with the target's permissions) and keeps each current file under a second name in the
    same directory: a hard link, which takes no space, else a copy.  Any failure there
    removes what it made and re-raises: nothing changed.  :meth:`commit` renames the temp
    files over the targets (removes those whose content is None); :meth:`undo` renames the
    kept files back (removes targets that did not exist).  Neither needs free space.
    :meth:`close` removes the kept files and any temp file left.  Directories are fsynced
    after each phase, so a crash keeps what was renamed.

    Args:
        changes: each target and its new text (UTF-8), or None to remove it.
    """

    def __init__(self, changes: Mapping[Path, str | None]) -> None:
        self.changes = dict(changes)
        self._tmp: dict[Path, Path] = {}
        self._kept: dict[Path, Path | None] = {}  # None: the target did not exist
        self._done: list[Path] = []  # targets committed, in order

    def prepare(self) -> None:
        """Write the temp files and keep the current files.

        Raises:
            OSError: a file cannot be written or kept (``filename`` names it); nothing
                changed and nothing is left behind.
        """
        try:
            for path, text in self.changes.items():
                _remove_leftovers(path)
                self._kept[path] = _keep(path)
                if text is not None:
                    self._tmp[path] = _stage(path, text.encode("utf-8"))
        except BaseException:
            self.close()
            raise

    def commit(self) -> None:
        """Put every new file in place (one rename each); on a failure, undo the ones
        already done and re-raise."""
        try:
            for path in self.changes:
                tmp = self._tmp.get(path)
                if tmp is not None:
                    os.replace(tmp, path)
                    del self._tmp[path]
                else:
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
                self._done.append(path)
            for directory in {p.parent for p in self.changes}:
                _fsync_dir(directory)
        except OSError:
            with contextlib.suppress(OSError):
                self.undo()
            raise

    def undo(self) -> None:
        """Put back every file as it was before :meth:`commit` (one rename each).

        Raises:
            OSError: a kept file cannot be renamed back (the others still are).
        """
        failed: OSError | None = None
        for path in reversed(self._done):
            kept = self._kept.get(path)
            try:
                if kept is None:  # it did not exist
                    with contextlib.suppress(FileNotFoundError):
                        path.unlink()
                else:
                    os.replace(kept, path)
                    del self._kept[path]  # its second name is its own again
            except OSError as err:
                failed = failed or err
        self._done.clear()
        for directory in {p.parent for p in self.changes}:
            with contextlib.suppress(OSError):
                _fsync_dir(directory)
        if failed is not None:
            raise failed

    def close(self) -> None:
        """Remove the kept files and any temp file left (best effort)."""
        for tmp in self._tmp.values():
            with contextlib.suppress(OSError):
                tmp.unlink()
        self._tmp.clear()
        for kept in self._kept.values():
            if kept is not None:
                with contextlib.suppress(OSError):
                    kept.unlink()
        self._kept.clear()


def _stage(path: Path, data: bytes, mode: int | None = None) -> Path:
    """*data* in a new fsynced temp file beside *path*, with permissions *mode* (None:
    *path*'s, 0o644 for a new file).  An OSError names *path*."""
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o644
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except OSError as err:
        err.filename = str(path)  # the target, not the temp name, means something to a reader
        raise
    try:
        try:
            _write_all(fd, data)
            os.fchmod(fd, mode)  # O_CREAT's mode is filtered by the umask
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        if isinstance(err, OSError):
            err.filename = str(path)  # os.write's errors name no file
        raise
    return tmp


def _keep(path: Path) -> Path | None:
    """A second name for *path*'s current file in its directory (None: no such file).

    A hard link costs no space; where links are refused (a file system without them,
    ``fs.protected_hardlinks``), a copy is written instead, while failing is still harmless.
    """
    if not os.path.lexists(path):
        return None
    kept = path.parent / f".{path.name}{_KEEP}{os.getpid()}"
    with contextlib.suppress(FileNotFoundError):
        kept.unlink()
    try:
        os.link(path, kept, follow_symlinks=False)
    except OSError as err:
        if err.errno not in (errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
        tmp = _stage(path, path.read_bytes())
        os.replace(tmp, kept)
    return kept


def _remove_leftovers(path: Path) -> None:
    """Remove kept files and temp files of *path* left by ibqos processes that died
    before they could (a crash mid-apply)."""
    for prefix in (f".{path.name}{_KEEP}", f".{path.name}.tmp-"):
        for old in path.parent.glob(f"{prefix}*"):
            pid = old.name[len(prefix) :].split("-")[0]
            if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
                with contextlib.suppress(OSError):
                    old.unlink()
                    log.info("removed %s, left by ibqos process %s that ended", old, pid)
