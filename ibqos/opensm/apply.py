"""Applying OpenSM files safely: write, signal, check the log, verify, roll back.

The one path by which ibqos changes what OpenSM reads (reference D.1-D.3):

1. take the apply lock (``flock`` on ``<state_dir>/apply.lock``) so two ibqos processes
   never write at once;
2. compare each rendered file with what is on disk and stop if nothing changed: OpenSM is
   signalled only for a real change, since every signal costs a heavy sweep;
3. keep the current version of each changed file (``<state_dir>/backup/<name>.prev``), and
   the very first version ibqos found (``<name>.orig``, or an empty ``<name>.orig.absent``
   when there was no file), for ``ibqos restore``;
4. write each changed file with :func:`ibqos.fsio.atomic_write` (temp file in the same
   directory, fsync, rename, fsync of the directory; permissions kept);
5. note the size of OpenSM's log, signal OpenSM (SIGHUP re-reads opensm.conf and the policy
   in a heavy sweep, reference A.3) and wait for the ``SUBNET UP`` line that ends that
   sweep;
6. read what OpenSM logged since: any policy or option error (``ERR AC..``, ``Unrecognized
   token``...) fails the apply; then run the verifier (SA records of the new tables, a
   PathRecord SL per job);
7. on failure restore the previous files, signal again, wait, and report what went wrong;
   a signal cut short (its command killed by a stop, or timed out) also puts the previous
   files back and signals again, since OpenSM may have read the new ones.

OpenSM is never bypassed: SL2VL and VLArb change only through opensm.conf.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import re
import signal
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ibqos.errors import ApplyError
from ibqos.fsio import atomic_remove, atomic_write
from ibqos.tools import run_tool

if TYPE_CHECKING:
    from ibqos.config.models import OpenSMConfig

log = logging.getLogger(__name__)

#: OpenSM logs this at the end of every heavy sweep (``osm_state_mgr.c``).
SWEEP_DONE = "SUBNET UP"
#: Log lines that mean OpenSM rejected or misread what ibqos wrote (reference A.1, A.2):
#: QoS policy errors AC01-AC14 and option file errors.
_LOG_ERRORS = re.compile(
    r"ERR AC[0-9A-F]{2}|Unrecognized token|Error in QoS Policy File|Error\(s\) in QoS policy"
)


class Signaller(Protocol):
    """How OpenSM is told to re-read its files."""

    def describe(self) -> str:
        """What is signalled, for messages."""
        ...

    def signal(self) -> None:
        """Make OpenSM re-read its files (a heavy sweep).

        Raises:
            ApplyError: OpenSM is not running or cannot be signalled.
        """
        ...


@dataclass(frozen=True)
class PidFileSignaller:
    """SIGHUP to the pid in OpenSM's pid file (``opensm --pidfile``)."""

    pid_file: Path

    def describe(self) -> str:
        return f"OpenSM (pid file {self.pid_file})"

    def signal(self) -> None:
        try:
            text = self.pid_file.read_text().strip()
        except OSError as err:
            raise ApplyError(
                f"OpenSM is not running? cannot read pid file {self.pid_file}: {err.strerror}"
            ) from err
        if not text.isdigit() or int(text) <= 1:
            raise ApplyError(f"pid file {self.pid_file}: expected a pid, got {text[:40]!r}")
        pid = int(text)
        try:
            os.kill(pid, signal.SIGHUP)
        except ProcessLookupError as err:
            raise ApplyError(
                f"OpenSM is not running: pid {pid} from {self.pid_file} does not exist"
            ) from err
        except PermissionError as err:
            raise ApplyError(f"not allowed to signal OpenSM pid {pid} ({self.pid_file})") from err


@dataclass(frozen=True)
class CommandSignaller:
    """A command that makes OpenSM re-read its files, e.g. ``systemctl kill -s HUP --kill-whom=main
    opensm@0x....service`` (Debian's unit has no ExecReload; reference C.6)."""

    argv: tuple[str, ...]
    timeout_s: float = 30.0

    def describe(self) -> str:
        return " ".join(self.argv)

    def signal(self) -> None:
        proc = run_tool(self.argv, timeout_s=self.timeout_s)
        if proc.timed_out:
            # killed mid-way: the signal may already have reached OpenSM
            raise ApplyError(f"{self.describe()}: {proc.cause}", maybe_signalled=True)
        if proc.cause is not None:
            raise ApplyError(f"{self.describe()}: {proc.cause}")
        assert proc.returncode is not None  # it exited
        if proc.returncode < 0:  # killed (SIGTERM to the service's control group)
            raise ApplyError(
                f"{self.describe()}: killed by signal {-proc.returncode}", maybe_signalled=True
            )
        if proc.returncode != 0:
            last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise ApplyError(f"{self.describe()}: exit {proc.returncode}: {last[0]}")


def systemd_signaller(unit: str) -> CommandSignaller:
    """SIGHUP to the main process of a systemd unit."""
    return CommandSignaller(("systemctl", "kill", "--signal=SIGHUP", "--kill-whom=main", unit))


def make_signaller(osm: OpenSMConfig) -> Signaller | None:
    """How OpenSM is reached, from the ``opensm`` section (None: never signalled)."""
    if osm.pid_file is not None:
        return PidFileSignaller(osm.pid_file)
    if osm.unit is not None:
        return systemd_signaller(osm.unit)
    if osm.reload_command:
        return CommandSignaller(osm.reload_command)
    return None


#: Checks that OpenSM serves what was written; returns problems, one line each.
Verifier = Callable[[], Sequence[str]]


@dataclass(frozen=True)
class ApplyResult:
    """What one apply did.

    Attributes:
        changed: files whose content differed and were written.
        signalled: OpenSM was signalled (only when a file changed).
        ok: OpenSM took the files: no error in its log, verification passed.
        rolled_back: the previous files were put back after a failure.
        problems: what failed (log lines, verification problems), one line each.
        sweep_s: seconds from the signal to the end of OpenSM's heavy sweep (None if not
            signalled or not seen).
        verify_s: seconds the verification took.
    """

    changed: tuple[Path, ...] = ()
    signalled: bool = False
    ok: bool = True
    rolled_back: bool = False
    problems: tuple[str, ...] = ()
    sweep_s: float | None = None
    verify_s: float = 0.0
    started_s: float = field(default_factory=time.time)

    def summary(self) -> str:
        """One line for the log and ``ibqos status``."""
        if not self.changed:
            return "no change"
        names = ", ".join(p.name for p in self.changed)
        if self.ok:
            sweep = "" if self.sweep_s is None else f", sweep {self.sweep_s:.1f} s"
            return f"applied {names}{sweep}"
        what = "rolled back" if self.rolled_back else "FAILED, not rolled back"
        return f"{what} {names}: {self.problems[0] if self.problems else 'unknown'}"

    def to_doc(self) -> dict[str, Any]:
        """The result as the state file keeps it (``last_apply``)."""
        return {
            "summary": self.summary(),
            "time_s": self.started_s,
            "changed": [str(p) for p in self.changed],
            "signalled": self.signalled,
            "ok": self.ok,
            "rolled_back": self.rolled_back,
            "problems": list(self.problems),
            "sweep_s": self.sweep_s,
            "verify_s": self.verify_s,
        }


class Applier:
    """Writes OpenSM's files, signals it, checks, verifies and rolls back.

    Args:
        state_dir: where the lock and the backups live.
        signaller: how OpenSM is told to re-read (None: never signal; the files are only
            written, e.g. when OpenSM is restarted by other means).
        log_path: OpenSM's log.
        sweep_timeout_s: seconds to wait for the heavy sweep after a signal.
        heartbeat: called while waiting for OpenSM (the daemon's systemd watchdog ping).
    """

    def __init__(
        self,
        state_dir: Path,
        signaller: Signaller | None,
        log_path: Path,
        *,
        sweep_timeout_s: float = 30.0,
        heartbeat: Callable[[], None] | None = None,
    ) -> None:
        self.state_dir = state_dir
        self.backups = state_dir / "backup"
        self.signaller = signaller
        self.log_path = log_path
        self.sweep_timeout_s = sweep_timeout_s
        self.heartbeat = heartbeat

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the apply lock; fail at once if another process holds it."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.state_dir / "apply.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                if err.errno in (errno.EWOULDBLOCK, errno.EACCES):
                    raise ApplyError(
                        f"another ibqos process is writing OpenSM's files"
                        f" (lock {self.state_dir / 'apply.lock'})"
                    ) from err
                raise
            yield
        finally:
            os.close(fd)

    def pending(self, files: Mapping[Path, str | None]) -> dict[Path, str | None]:
        """The files whose content differs from what is on disk (None: should not exist)."""
        return {path: text for path, text in files.items() if read_file(path) != text}

    def apply(
        self, files: Mapping[Path, str | None], verify: Verifier | None = None
    ) -> ApplyResult:
        """Write the changed *files*, signal OpenSM, check and verify; roll back on failure.

        A None content removes the file (``ibqos restore`` of a file ibqos created).

        Raises:
            ApplyError: the lock is held elsewhere, a file cannot be written, or OpenSM
                cannot be signalled (the previous files are back in place then).
        """
        with self.lock():
            changed = self.pending(files)
            if not changed:
                return ApplyResult()
            previous = {path: read_file(path) for path in changed}
            try:
                self._keep(previous)
            except OSError as err:
                raise ApplyError(
                    f"cannot keep a backup in {self.backups}: {err.strerror}; nothing written"
                ) from err
            try:
                self._put(changed)
                if self.signaller is None:
                    return ApplyResult(tuple(changed), False, True)
                offset = _log_size(self.log_path)
                t0 = time.monotonic()
                self.signaller.signal()
            except (OSError, ApplyError) as err:
                self._put(previous)
                if isinstance(err, ApplyError):
                    if err.maybe_signalled:
                        self._signal_again(err)
                    raise
                raise ApplyError(f"cannot write {err.filename}: {err.strerror}") from err
            sweep_s, problems = self._await_sweep(offset, t0)
            verify_s = 0.0
            if not problems and verify is not None:
                t1 = time.monotonic()
                problems = list(verify())
                verify_s = time.monotonic() - t1
            if not problems:
                return ApplyResult(tuple(changed), True, True, False, (), sweep_s, verify_s)
            for problem in problems[:5]:
                log.error("OpenSM did not take the new files: %s", problem)
            rolled = self._roll_back(previous)
            return ApplyResult(
                tuple(changed), True, False, rolled, tuple(problems), sweep_s, verify_s
            )

    # -- helpers ---------------------------------------------------------------------------

    def _keep(self, previous: Mapping[Path, str | None]) -> None:
        """Keep the current version of each file, and the first one ibqos ever found."""
        self.backups.mkdir(parents=True, exist_ok=True)
        for path, text in previous.items():
            orig = self.backups / f"{path.name}.orig"
            absent = self.backups / f"{path.name}.orig.absent"
            if not orig.exists() and not absent.exists():  # the first write ever: pristine
                atomic_write(absent if text is None else orig, text or "")
            if text is not None:
                atomic_write(self.backups / f"{path.name}.prev", text)

    def _put(self, files: Mapping[Path, str | None]) -> None:
        """Put each file in place atomically; None removes it (it did not exist)."""
        for path, text in files.items():
            if text is None:
                atomic_remove(path)
            else:
                atomic_write(path, text)

    def _signal_again(self, err: ApplyError) -> None:
        """The signal was cut short after the new files were written, and they are gone
        again: OpenSM may have read them and would run them while the disk has the
        previous ones.  Signal once more so it reads what is on disk (best effort,
        bounded by the signaller's own timeout and one ``sweep_timeout_s``)."""
        assert self.signaller is not None
        log.warning(
            "signalling OpenSM was cut short (%s); the previous files are back, signalling"
            " it again so that it reads them",
            err,
        )
        offset = _log_size(self.log_path)
        t0 = time.monotonic()
        try:
            self.signaller.signal()
        except ApplyError as again:
            log.error(
                "signalling OpenSM again failed (%s): it may run the new files until it"
                " next re-reads its files",
                again,
            )
            return
        sweep_s, problems = self._await_sweep(offset, t0)
        if problems:
            log.error("signalled OpenSM again; it reports: %s", problems[0])
        else:
            log.warning(
                "signalled OpenSM again: it reads the previous files (sweep %.1f s)", sweep_s
            )

    def _roll_back(self, previous: Mapping[Path, str | None]) -> bool:
        """Put the previous files back and make OpenSM read them again."""
        try:
            self._put(previous)
            assert self.signaller is not None
            offset = _log_size(self.log_path)
            t0 = time.monotonic()
            self.signaller.signal()
        except (OSError, ApplyError) as err:
            log.error("rollback failed: %s", err)
            return False
        _, problems = self._await_sweep(offset, t0)
        if problems:
            log.error("after the rollback OpenSM still reports: %s", problems[0])
        else:
            log.warning("rolled back: OpenSM reads the previous files again")
        return True

    def _await_sweep(self, offset: int, t0: float) -> tuple[float | None, list[str]]:
        """Wait for the heavy sweep's end; return its duration and the errors logged."""
        deadline = t0 + self.sweep_timeout_s
        while True:
            if self.heartbeat is not None:
                self.heartbeat()
            text = _log_since(self.log_path, offset)
            errors = [line.strip() for line in text.splitlines() if _LOG_ERRORS.search(line)]
            if SWEEP_DONE in text:
                return time.monotonic() - t0, errors
            if time.monotonic() > deadline:
                return None, [
                    *errors,
                    f"no heavy sweep ({SWEEP_DONE!r}) in {self.log_path} within"
                    f" {self.sweep_timeout_s:g} s of the signal",
                ]
            time.sleep(0.05)


def read_file(path: Path) -> str | None:
    """A file's text, None when it does not exist (yet)."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def _log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _log_since(path: Path, offset: int) -> str:
    """What the log gained after *offset* (all of it if it was rotated or truncated)."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(offset if size >= offset else 0)
            return fh.read().decode(errors="replace")
    except OSError:
        return ""
