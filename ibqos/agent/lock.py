"""One daemon per state directory and per OpenSM, and which one.

The daemon holds an exclusive flock(2) on ``<state_dir>/agent.lock`` for as long as it runs
and keeps ``<pid> <mode>`` in it.  It also holds one on each directory where OpenSM's files
live (``opensm.conf``'s and the policy's), whatever its state directory: two agents with
different state directories on one OpenSM would otherwise fight over its files and the
jobs' SLs, each reload undoing the other's.  A directory is locked through a read-only
descriptor of the directory itself, so ibqos needs no file of its own there and the lock
holds across the renames that replace the files.  A second daemon fails at start, naming
the holder's pid (from ``/proc/locks``).  ``ibqos restore`` and ``ibqos run --once`` (not a
dry run) take the same locks while they work: restore refuses while an agent runs, since
the agent would overwrite what it writes.  The kernel drops the locks with the process, so
a crash leaves no stale lock behind.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ibqos.errors import AgentLockError

if TYPE_CHECKING:
    from ibqos.config.models import Config

LOCK_FILE = "agent.lock"


class AgentLock:
    """The running daemon's hold on its state directory.

    Args:
        state_dir: the agent's state directory (created if missing).
        mode: the mode it runs in, for whoever asks (:func:`holder`).
        opensm_dirs: the directories of OpenSM's files ibqos manages (one lock each;
            a directory that does not exist is not locked).

    Raises:
        AgentLockError: another agent holds a lock, or a file cannot be opened.
    """

    def __init__(self, state_dir: Path, mode: str, opensm_dirs: Sequence[Path] = ()) -> None:
        self.path = state_dir / LOCK_FILE
        self._dir_fds: list[int] = []
        try:
            state_dir.mkdir(parents=True, exist_ok=True)
            self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise AgentLockError(f"{self.path}: cannot open: {err.strerror}") from err
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(self._fd)
            self._fd = None
            if err.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                raise AgentLockError(f"{self.path}: cannot lock: {err.strerror}") from err
            who = holder(state_dir)
            pid = f" (pid {who[0]})" if who else ""
            raise AgentLockError(  # no cause: "Resource temporarily unavailable" adds nothing
                f"another ibqos agent runs on state directory {state_dir}{pid}"
            ) from None
        try:
            for directory in dict.fromkeys(d.resolve() for d in opensm_dirs):
                if directory.is_dir():  # none yet: nothing there to fight over
                    self._dir_fds.append(_lock_dir(directory))
        except AgentLockError:
            self.close()
            raise
        self.set_mode(mode)

    def set_mode(self, mode: str) -> None:
        """Record the mode the agent now runs in."""
        if self._fd is not None:
            data = f"{os.getpid()} {mode}\n".encode()
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, data, 0)

    def close(self) -> None:
        """Let go of the locks (the file stays: removing it would race a new agent)."""
        for fd in self._dir_fds:
            os.close(fd)
        self._dir_fds = []
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _lock_dir(directory: Path) -> int:
    """Hold an exclusive flock on *directory*; return its descriptor.

    Raises:
        AgentLockError: another process holds it, or the directory cannot be opened.
    """
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as err:
        raise AgentLockError(f"{directory}: cannot open to lock: {err.strerror}") from err
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as err:
        inode = os.fstat(fd).st_ino
        os.close(fd)
        if err.errno not in (errno.EWOULDBLOCK, errno.EACCES):
            raise AgentLockError(f"{directory}: cannot lock: {err.strerror}") from err
        pid = _flock_holder(inode)
        who = f" (pid {pid})" if pid else ""
        raise AgentLockError(
            f"another ibqos agent manages OpenSM's files in {directory}{who}: one agent per"
            " OpenSM, whatever its state directory"
        ) from None
    return fd


def _flock_holder(inode: int) -> int | None:
    """The pid holding a FLOCK on the file with *inode*, from ``/proc/locks`` (None:
    not found; the device is not compared, so on a clash of inode numbers across file
    systems the pid shown may be another lock's: it is only for the message)."""
    try:
        text = Path("/proc/locks").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].endswith(f":{inode}"):
            if fields[4].isdigit():
                return int(fields[4])
    return None


def holder(state_dir: Path) -> tuple[int, str] | None:
    """(pid, mode) of the agent running on *state_dir*, None when none runs."""
    path = state_dir / LOCK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            text = os.pread(fd, 100, 0).decode(errors="replace").split()
            pid = int(text[0]) if text and text[0].isdigit() else 0
            return pid, text[1] if len(text) > 1 else "unknown"
        return None  # nobody holds it
    finally:
        os.close(fd)


def opensm_dirs(conf: Path, policy_file: Path) -> tuple[Path, ...]:
    """The directories an agent locks for the OpenSM whose files are *conf* and
    *policy_file*."""
    return (conf.parent, policy_file.parent)


def claim(config: Config) -> AgentLock:
    """The locks of an agent (or ``run --once``) on *config*'s state directory and OpenSM.

    Raises:
        AgentLockError: another agent runs on either.
    """
    osm = config.opensm
    return AgentLock(config.agent.state_dir, config.mode, opensm_dirs(osm.conf, osm.policy_file))
