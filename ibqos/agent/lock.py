"""One daemon per state directory, and which one: ``<state_dir>/agent.lock``.

The daemon holds an exclusive flock(2) on the file for as long as it runs and keeps
``<pid> <mode>`` in it.  A second daemon on the same state directory fails at start (two
agents would fight over OpenSM's files and the jobs' SLs).  ``ibqos restore`` and
``ibqos run --once`` (not a dry run) take the same lock while they work: restore refuses
while an agent runs, since the agent would overwrite what it writes.  The kernel drops
the lock with the process, so a crash leaves no stale lock behind.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

from ibqos.errors import AgentLockError

LOCK_FILE = "agent.lock"


class AgentLock:
    """The running daemon's hold on its state directory.

    Args:
        state_dir: the agent's state directory (created if missing).
        mode: the mode it runs in, for whoever asks (:func:`holder`).

    Raises:
        AgentLockError: another agent holds the lock, or the file cannot be opened.
    """

    def __init__(self, state_dir: Path, mode: str) -> None:
        self.path = state_dir / LOCK_FILE
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
        self.set_mode(mode)

    def set_mode(self, mode: str) -> None:
        """Record the mode the agent now runs in."""
        if self._fd is not None:
            data = f"{os.getpid()} {mode}\n".encode()
            os.ftruncate(self._fd, 0)
            os.pwrite(self._fd, data, 0)

    def close(self) -> None:
        """Let go of the lock (the file stays: removing it would race a new agent)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


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
