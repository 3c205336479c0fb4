"""Faults around OpenSM's files, for tests: its log gone, a stale pid in its pid file.

Both work on any lab, in-process or supervised, from the test's own process (the paths
are in ``ibqos lab status NAME --format json``).  OpenSM itself is stopped, started and
cut off from links through :class:`~ibqos.lab.lab.Lab` or ``ibqos lab opensm|link``.

A second agent needs nothing from the lab: start another ``ibqos`` with the lab's
environment (``Lab.env()``, or ``ibqos lab run NAME -- ibqos ...``).  ibsim serves at
most 10 clients at once (OpenSM, each agent, each diag running).
"""

from __future__ import annotations

import os
import sys
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
