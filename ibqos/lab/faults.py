"""Faults around OpenSM's files, for tests: its log gone or rotated, a stale pid in its pid
file; and a user flooding the agent's job-SL socket (:class:`SocketFlood`).

Both work on any lab, in-process or supervised, from the test's own process (the paths
are in ``ibqos lab status NAME --format json``).  OpenSM itself is stopped, started and
cut off from links through :class:`~ibqos.lab.lab.Lab` or ``ibqos lab opensm|link``.

A second agent needs nothing from the lab: start another ``ibqos`` with the lab's
environment (``Lab.env()``, or ``ibqos lab run NAME -- ibqos ...``).  ibsim serves at
most 10 clients at once (OpenSM, each agent, each diag running).
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ibqos.errors import LabError
from ibqos.fsio import atomic_write
from ibqos.lab import procs

#: suffix of a log moved away by :func:`hidden_log`
HIDDEN_SUFFIX = ".hidden"

# A harmless process to name in a pid file: it notes each SIGHUP in its file (one line
# each) instead of dying of it, and ends on SIGTERM or when its owner dies.
_DECOY = """\
import signal, sys
path = sys.argv[1]
def hup(*_):
    with open(path, "a") as fh:
        fh.write("HUP\\n")
signal.signal(signal.SIGHUP, hup)
open(path, "w").close()
while True:
    signal.pause()
"""


@contextmanager
def hidden_log(log: Path) -> Iterator[Path]:
    """Rename OpenSM's log away while OpenSM runs; put it back at the end.

    OpenSM keeps writing to the renamed file (it holds it open and does not reopen its
    log on SIGHUP), so the path stays missing until it is put back or OpenSM restarts
    (which creates a new log there: the hidden one is then left beside it).

    Yields:
        where the log is meanwhile (``<log>.hidden``).

    Raises:
        LabError: there is no log to hide.
    """
    hidden = log.with_name(log.name + HIDDEN_SUFFIX)
    try:
        log.rename(hidden)
    except OSError as err:
        raise LabError(f"cannot hide OpenSM's log {log}: {err.strerror}") from err
    try:
        yield hidden
    finally:
        if not log.exists():
            hidden.rename(log)


class Decoy:
    """A live process that is not OpenSM, owned by the caller: it counts the SIGHUPs
    sent to it (an agent that trusts a stale pid file reloads nothing and hits this)."""

    def __init__(self, workdir: Path) -> None:
        self.hup_file = workdir / f"decoy-{os.getpid()}-{id(self)}.hups"
        self.proc = procs.spawn(
            [sys.executable, "-c", _DECOY, str(self.hup_file)],
            env=os.environ,
            cwd=workdir,
        )
        # ready once it has its handler: it creates its file right after
        for _ in range(200):
            if self.hup_file.exists() or self.proc.poll() is not None:
                break
            time.sleep(0.02)
        if not self.hup_file.exists():
            self.stop()
            raise LabError("the decoy process did not start")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def hups(self) -> int:
        """How many SIGHUPs it has received."""
        try:
            return len(self.hup_file.read_text().splitlines())
        except FileNotFoundError:
            return 0

    def stop(self) -> None:
        procs.stop_child(self.proc)
        self.hup_file.unlink(missing_ok=True)


@contextmanager
def stale_pid(pid_file: Path) -> Iterator[Decoy]:
    """Put the pid of a :class:`Decoy` into OpenSM's pid file; restore it at the end.

    The original content comes back only if the file still holds the decoy's pid (a
    restarted OpenSM writes its own); the decoy is ended either way.

    Yields:
        the decoy (its ``pid``, and ``hups()`` to see whether anyone signalled it).
    """
    try:
        before: str | None = pid_file.read_text()
    except FileNotFoundError:
        before = None
    decoy = Decoy(pid_file.parent)
    try:
        atomic_write(pid_file, f"{decoy.pid}\n")
        yield decoy
    finally:
        try:
            ours = pid_file.read_text().strip() == str(decoy.pid)
        except FileNotFoundError:
            ours = False
        if ours:
            if before is None:
                pid_file.unlink()
            else:
                atomic_write(pid_file, before)
        decoy.stop()


#: the ways :func:`rotate_log` rotates OpenSM's log, as logrotate can
ROTATIONS = ("rename", "signal", "copytruncate")


def rotate_log(log: Path, how: str, pid: int | None = None, timeout: float = 10.0) -> Path:
    """Rotate OpenSM's log as logrotate does; the rotated files move up first (``<log>.1``
    to ``<log>.2``, ...), as logrotate's ``rotate N`` does.

    - ``rename``: renamed to ``<log>.1`` and an empty ``<log>`` created (logrotate's
      ``create``); OpenSM is not told, so it writes on into ``<log>.1``;
    - ``signal``: the same, then SIGUSR1 to OpenSM's *pid*, as Debian's logrotate
      ``postrotate`` does: OpenSM 3.3.23 closes its log and opens ``<log>`` again
      (``osm_log_reopen_file``); this returns once it has (its open files in /proc);
    - ``copytruncate``: copied to ``<log>.1``, then truncated in place (what OpenSM writes
      between the two is lost, as with logrotate).

    Returns:
        ``<log>.1``.

    Raises:
        LabError: no log to rotate, an unknown *how*, no *pid* for ``signal``, or OpenSM did
            not reopen its log within *timeout* seconds.
    """
    if how not in ROTATIONS:
        raise LabError(f"no such log rotation: {how!r} (one of {', '.join(ROTATIONS)})")
    if how == "signal" and pid is None:
        raise LabError("rotating OpenSM's log with SIGUSR1 needs OpenSM's pid")
    rotated = log.with_name(f"{log.name}.1")
    try:
        _shift(log)
        if how == "copytruncate":
            shutil.copy2(log, rotated)
            os.truncate(log, 0)
            return rotated
        mode = log.stat().st_mode & 0o7777
        log.rename(rotated)
        log.touch(mode)
    except OSError as err:
        raise LabError(f"cannot rotate OpenSM's log {log}: {err.strerror}") from err
    if how == "signal":
        assert pid is not None
        os.kill(pid, signal.SIGUSR1)
        _wait_reopened(log, pid, timeout)
    return rotated


def _shift(log: Path) -> None:
    """Move ``<log>.N`` to ``<log>.N+1``, the highest first."""
    numbered = []
    for path in log.parent.glob(f"{log.name}.*"):
        suffix = path.name[len(log.name) + 1 :]
        if suffix.isdigit():
            numbered.append((int(suffix), path))
    for n, path in sorted(numbered, reverse=True):
        path.rename(log.with_name(f"{log.name}.{n + 1}"))


def _wait_reopened(log: Path, pid: int, timeout: float) -> None:
    """Wait until process *pid* holds the file now at *log* open."""
    inode = log.stat().st_ino
    deadline = time.monotonic() + timeout
    fds = Path(f"/proc/{pid}/fd")
    while time.monotonic() < deadline:
        try:
            held = list(fds.iterdir())
        except OSError as err:
            raise LabError(f"OpenSM (pid {pid}) is gone: {err.strerror}") from err
        for fd in held:
            try:
                if fd.stat().st_ino == inode:
                    return
            except OSError:
                continue
        time.sleep(0.02)
    raise LabError(f"OpenSM (pid {pid}) did not reopen its log {log} within {timeout:g} s")


class SocketFlood:
    """*count* connections to the agent's job-SL socket *path*, each sending an unfinished
    question (``SL 4``, no newline) and nothing more: a user holding the socket's
    connections.  One the agent closes (refused as over its bounds, or idle too long) is
    replaced at once.  A context manager: the flood runs in a thread of its own until the
    block ends, and every connection is closed then.

    Attributes:
        busy: refusals read (``ERROR busy`` lines).
        opened: connections opened so far.
    """

    def __init__(self, path: Path, count: int) -> None:
        self.path = path
        self.count = count
        self.busy = 0
        self.opened = 0
        self._sel = selectors.DefaultSelector()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="flood", daemon=True)

    def __enter__(self) -> SocketFlood:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        for key in list(self._sel.get_map().values()):
            conn: socket.socket = key.fileobj  # type: ignore[assignment]
            conn.close()
        self._sel.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            while len(self._sel.get_map()) < self.count and not self._stop.is_set():
                if not self._open():
                    break  # the listen queue is full: try again in a moment
            for key, _ in self._sel.select(0.05):
                conn: socket.socket = key.fileobj  # type: ignore[assignment]
                with contextlib.suppress(OSError):
                    if conn.recv(256).startswith(b"ERROR busy"):
                        self.busy += 1
                self._sel.unregister(conn)
                conn.close()

    def _open(self) -> bool:
        conn = socket.socket(socket.AF_UNIX)
        conn.settimeout(0.5)
        try:
            conn.connect(str(self.path))
            conn.sendall(b"SL 4")
        except OSError:
            conn.close()
            return False
        conn.setblocking(False)
        self._sel.register(conn, selectors.EVENT_READ)
        self.opened += 1
        return True
