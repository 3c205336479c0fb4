"""Applying OpenSM files safely: write, signal, check the log, verify, roll back.

The one path by which ibqos changes what OpenSM reads (docs/design.md §9):

1. take the apply lock (``flock`` on ``<state_dir>/apply.lock``) so two ibqos processes
   never write at once;
2. compare each rendered file with what is on disk and stop if nothing changed: OpenSM is
   signalled only for a real change, since every signal costs a heavy sweep;
3. refuse, with nothing written, while a hold is in force (OpenSM rejected its own files,
   or another writer rewrites them: :mod:`ibqos.opensm.hold`), while OpenSM is not
   running (its pid file names no live OpenSM, its unit is not active), or while the
   reload budget holds too little for the apply and its rollback
   (:mod:`ibqos.opensm.budget`); files that differ from what ibqos last wrote or found in
   force, while the rendered ones are exactly that, were rewritten by another writer:
   the applier holds at once rather than fight it (nothing written, nothing signalled);
4. keep the current version of each changed file (``<state_dir>/backup/<name>.prev``), and
   the very first version ibqos found (``<name>.orig``, or an empty ``<name>.orig.absent``
   when there was no file), for ``ibqos restore``;
5. write every changed file in two phases (:class:`ibqos.fsio.FileSwap`): all temp files
   first, any failure (disk full, a directory not writable) changing nothing; then one
   rename each, the current files kept under a second name beside them so that a
   rollback is a rename too and needs no free space;
6. note where OpenSM's log ends, file by file (it is followed across rotations,
   :class:`~ibqos.opensm.osmlog.LogFollower`), signal OpenSM (SIGHUP re-reads opensm.conf
   and the policy in a heavy sweep, docs/design.md §6.3) and wait for the ``SUBNET UP``
   line that ends that sweep, looking every second whether OpenSM still runs;
7. read what OpenSM logged since (:mod:`ibqos.opensm.osmlog`): a fatal policy error fails
   the apply, a non-fatal one is reported once; then run the verifier (SA records of the
   new tables, a PathRecord SL per job);
8. on failure put the previous files back, signal again and wait; if OpenSM still reports
   errors, the rejected part is the admin's: hold (step 3) until the files change.

Every wait is bounded, calls the heartbeat (the systemd watchdog ping) every
:data:`POLL_S` seconds, and is cut to :data:`STOP_GRACE_S` once ``should_stop`` turns true.
A signal or a wait cut short before OpenSM's sweep was seen puts the previous files back
and signals again, since OpenSM may have read the new ones; OpenSM gone after the signal
gets its previous files back on disk, unsignalled.  Without a readable log ibqos waits
:data:`SETTLE_S` after a signal and relies on the verifier; so it does once the log was
truncated in place during the wait (``copytruncate``: the sweep's end may be lost).

No OSError leaves :meth:`Applier.apply`: every failure is an :class:`ApplyError`, and every
apply that returns says how it ended (:class:`~ibqos.opensm.outcome.ApplyResult`).
OpenSM is never bypassed: SL2VL and VLArb change only through opensm.conf.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ibqos.errors import (
    ApplyError,
    ApplyStopped,
    ApplyWriteError,
    OpenSMHeld,
    OpenSMNotRunning,
    ReloadDeferred,
)
from ibqos.fsio import FileSwap, atomic_write
from ibqos.opensm.budget import ReloadBudget
from ibqos.opensm.hold import OUTSIDE, Hold, load_hold, save_hold
from ibqos.opensm.osmlog import SWEEP_DONE, LogMark, LogReport, follower, readable
from ibqos.opensm.outcome import SETTLE_S, ApplyOutcome, ApplyResult
from ibqos.opensm.pidcheck import opensm_pid
from ibqos.opensm.signallers import (
    PROBE_TIMEOUT_S,
    CommandSignaller,
    Liveness,
    PidFileSignaller,
    Probed,
    Signaller,
    UnitSignaller,
)
from ibqos.opensm.writers import Record
from ibqos.tools import run_tool

if TYPE_CHECKING:
    from ibqos.config.models import OpenSMConfig

log = logging.getLogger(__name__)

#: seconds between two looks at OpenSM's log (and heartbeats) while waiting
POLL_S = 0.05
#: seconds between two looks at whether OpenSM still runs while waiting for its sweep
PROBE_EVERY_S = 1.0
#: seconds OpenSM's files must stand unchanged after another writer's last rewrite before
#: ibqos writes them once more (``opensm.outside_quiet_s``)
OUTSIDE_QUIET_S = 300.0
#: seconds a wait for OpenSM goes on once a stop is asked for (twice that bounds an apply
#: cut short: its own wait, then the wait after it signals the previous files)
STOP_GRACE_S = 4.0


def make_signaller(osm: OpenSMConfig) -> Signaller | None:
    """How OpenSM is reached, from the ``opensm`` section (None: never signalled).  A unit
    comes first: systemd knows OpenSM's pid for sure, a pid file may be stale."""
    if osm.unit is not None:
        return UnitSignaller(osm.unit)
    if osm.pid_file is not None:
        return PidFileSignaller(osm.pid_file)
    if osm.reload_command:
        return CommandSignaller(osm.reload_command)
    return None


#: Checks that OpenSM serves what was written; returns problems, one line each.
Verifier = Callable[[], Sequence[str]]


@dataclass(frozen=True)
class _Waited:
    """How a wait for OpenSM after a signal ended: what its log said (*report*, empty
    without a log), the sweep's end (*sweep_s*, None: not seen), no sweep within
    ``sweep_timeout_s`` (*timed_out*), OpenSM gone (*exited*: how), or a stop
    (*cut_short*) before the sweep was seen."""

    report: LogReport
    sweep_s: float | None = None
    timed_out: bool = False
    exited: str | None = None
    cut_short: bool = False


class Applier:
    """Writes OpenSM's files, signals it, checks, verifies and rolls back.

    Args:
        state_dir: where the lock and the backups live.
        signaller: how OpenSM is told to re-read (None: never signal; the files are only
            written, e.g. when OpenSM is restarted by other means).
        log_path: OpenSM's log.
        sweep_timeout_s: seconds to wait for the heavy sweep after a signal.
        heartbeat: called while waiting for OpenSM (the daemon's systemd watchdog ping).
        should_stop: True once the caller is asked to stop (SIGTERM): waits for OpenSM end
            within :data:`STOP_GRACE_S`, and no new apply starts.
        budget: the reload budget every signal draws on (None: unlimited).
        hold_file: where a hold is kept across restarts (None: in this object only).
        settle_s: seconds waited after a signal when OpenSM's log cannot be read.
        written_file: where the record of what ibqos last wrote is kept across restarts
            (None: in this object only).
        outside_quiet_s: seconds the files must stand unchanged after another writer's
            last rewrite before ibqos writes them once more.

    Attributes:
        opensm_up: whether OpenSM ran when last looked at (None: cannot tell, or not yet).
        log_missing: OpenSM's log could not be read at the last apply.
        log_rotations: rotations of OpenSM's log seen so far (:attr:`LogFollower.rotations
            <ibqos.opensm.osmlog.LogFollower.rotations>`).
        signals_sent: signals sent so far (applies, rollbacks, repeats).
        write_errors: applies that failed because a file could not be written.
        deferred: applies not started because the reload budget was spent.
    """

    def __init__(
        self,
        state_dir: Path,
        signaller: Signaller | None,
        log_path: Path,
        *,
        sweep_timeout_s: float = 30.0,
        heartbeat: Callable[[], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        budget: ReloadBudget | None = None,
        hold_file: Path | None = None,
        settle_s: float = SETTLE_S,
        written_file: Path | None = None,
        outside_quiet_s: float = OUTSIDE_QUIET_S,
    ) -> None:
        self.state_dir = state_dir
        self.backups = state_dir / "backup"
        self.signaller = signaller
        self.log_path = log_path
        self.sweep_timeout_s = sweep_timeout_s
        self.heartbeat = heartbeat
        self.should_stop = should_stop
        self.budget = budget
        self.hold_file = hold_file
        self.settle_s = settle_s
        self.opensm_up: bool | None = None
        self.log_missing = False
        self.signals_sent = 0
        self.write_errors = 0
        self.deferred = 0
        self._record = Record(written_file, outside_quiet_s)
        self._hold: Hold | None = load_hold(hold_file)
        self._warned: set[str] = set()
        self._log_warned = False
        self._log = follower(log_path)  # followed across rotations, shared per path

    @property
    def log_rotations(self) -> int:
        """Rotations of OpenSM's log seen so far (renamed, or truncated in place)."""
        return self._log.rotations

    @property
    def held(self) -> str | None:
        """Why ibqos holds (OpenSM rejects its own files, another writer rewrites them);
        None: no hold."""
        return None if self._hold is None else self._hold.reason

    @property
    def outside_writes(self) -> int:
        """Rewrites of OpenSM's files by another writer seen so far (one per apply that
        found one: :mod:`ibqos.opensm.writers`)."""
        return self._record.writes

    @property
    def rejected(self) -> bool:
        """Whether ibqos holds because OpenSM rejects its own files."""
        return self._hold is not None and self._hold.kind != OUTSIDE

    @property
    def outside_writer(self) -> bool:
        """Whether ibqos holds because another writer rewrites OpenSM's files."""
        return self._hold is not None and self._hold.kind == OUTSIDE

    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold the apply lock; fail at once if another process holds it."""
        try:
            self.state_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.state_dir / "apply.lock", os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            self.write_errors += 1
            raise ApplyWriteError(
                f"cannot open the apply lock in {self.state_dir}: {err.strerror}; nothing written"
            ) from err
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
            ApplyError: the lock is held elsewhere, or OpenSM cannot be signalled (the
                previous files are back in place then); its subclasses when nothing was
                written: ApplyWriteError (a file or backup cannot be written),
                OpenSMNotRunning, ReloadDeferred (the reload budget is spent), OpenSMHeld
                (OpenSM rejects its own files: held until they change).
        """
        try:
            with self.lock():
                return self._apply(files, verify)
        except OSError as err:  # reading the files, or the lock: the rest is handled where
            raise ApplyError(f"{err.filename or self.state_dir}: {err.strerror or err}") from err

    # -- the steps ---------------------------------------------------------------------------

    def _apply(self, files: Mapping[Path, str | None], verify: Verifier | None) -> ApplyResult:
        changed = self.pending(files)
        live = self._probe()
        if not changed:
            if self._record.in_force(files, self._hold):
                self._set_hold(None)
            return ApplyResult()
        if self._hold is not None and self._hold.kind == OUTSIDE:
            held = self._record.still_held(self._hold)
            if held != self._hold:
                self._set_hold(held)  # None: the quiet period passed, write once more
        elif self._hold is not None:
            self._hold.check()
            self._set_hold(None)
        else:
            self._set_hold(self._record.fought(files))
        if self._hold is not None:
            raise OpenSMHeld(f"held, nothing written: {self._hold.reason}")
        if self._stopping():
            raise ApplyStopped("not applied: ibqos is stopping")
        if live.up is False:
            raise OpenSMNotRunning(f"{live.detail}; nothing written")
        if self.signaller is not None and self.budget is not None:
            try:
                self.budget.check()
            except ReloadDeferred:
                self.deferred += 1
                raise
        previous = {path: read_file(path) for path in changed}
        try:
            self._keep(previous)
        except OSError as err:
            self.write_errors += 1
            raise ApplyWriteError(
                f"cannot keep a backup in {self.backups}: {err.strerror}; nothing written"
            ) from err
        swap = FileSwap(changed)
        try:
            swap.prepare()
            swap.commit()
        except OSError as err:
            self.write_errors += 1
            raise ApplyWriteError(
                f"cannot write {err.filename}: {err.strerror}; nothing changed"
            ) from err
        try:
            return self._reload(swap, tuple(changed), tuple(files), verify)
        finally:
            swap.close()
            self._record.remember(tuple(files))

    def _reload(
        self,
        swap: FileSwap,
        changed: tuple[Path, ...],
        watched: tuple[Path, ...],
        verify: Verifier | None,
    ) -> ApplyResult:
        """Signal OpenSM about the files *swap* put in place, check, verify, roll back."""
        if self.signaller is None:
            return ApplyResult(ApplyOutcome.WRITTEN, changed)
        try:
            waited = self._signal_and_wait()
        except ApplyError as err:
            self._undo(swap)
            if err.maybe_signalled:
                self._signal_again(err)
            raise
        if waited.exited is not None:
            # nothing to signal: OpenSM reads the files on disk when it starts again
            self.opensm_up = False
            undone = self._undo(swap)
            log.error(
                "OpenSM went away after the signal (%s): the previous files are back on"
                " disk, OpenSM not signalled",
                waited.exited,
            )
            problem = f"OpenSM exited after the signal ({waited.exited})"
            return ApplyResult(ApplyOutcome.OPENSM_EXITED, changed, (problem,), rolled_back=undone)
        if waited.cut_short:
            undone = self._undo(swap)
            self._signal_again(ApplyError("stopping before OpenSM's sweep was seen"))
            problem = "stopping before OpenSM's sweep was seen"
            return ApplyResult(ApplyOutcome.CUT_SHORT, changed, (problem,), rolled_back=undone)
        self._warn(waited.report.warnings)
        problems = list(waited.report.errors)
        if waited.timed_out:
            problems.append(
                f"no heavy sweep ({SWEEP_DONE!r}) in {self.log_path} within"
                f" {self.sweep_timeout_s:g} s of the signal"
            )
        verify_s = 0.0
        unverified = verify is None or self._stopping()
        if not problems and not unverified and verify is not None:
            self._beat()
            t1 = time.monotonic()
            problems = list(verify())
            verify_s = time.monotonic() - t1
            self._beat()
        common: dict[str, Any] = {
            "warnings": waited.report.warnings,
            "log_missing": self.log_missing,  # as looked at for this signal
            "verify_s": verify_s,
        }
        if not problems:
            taken = ApplyOutcome.UNVERIFIED if unverified else ApplyOutcome.VERIFIED
            return ApplyResult(taken, changed, sweep_s=waited.sweep_s, **common)
        log.error("OpenSM did not take the new files: %s", "; ".join(problems[:5]))
        rolled, after = self._roll_back(swap)
        held = None
        if after is not None and after.report.errors:  # the admin's part: hold
            self._set_hold(Hold.after_rollback(after.report.errors, watched))
            held = self.held
        return ApplyResult(
            ApplyOutcome.REJECTED,
            changed,
            tuple(problems),
            rolled_back=rolled,
            sweep_s=waited.sweep_s,
            held=held,
            **common,
        )

    def _set_hold(self, hold: Hold | None) -> None:
        self._hold = hold
        save_hold(self.hold_file, hold)

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

    def _undo(self, swap: FileSwap) -> bool:
        """Put the previous files back (renames: no space needed); False if that failed."""
        try:
            swap.undo()
        except OSError as err:
            self.write_errors += 1
            log.error("cannot put back %s: %s", err.filename, err.strerror or err)
            return False
        return True

    def _signal(self) -> None:
        """Signal OpenSM, drawing one token from the budget."""
        assert self.signaller is not None
        if self.budget is not None:
            self.budget.take()
        self.signals_sent += 1
        self.signaller.signal()

    def _signal_again(self, err: ApplyError) -> None:
        """The signal (or the wait after it) was cut short after the new files were
        written, and they are gone again: OpenSM may have read them and would run them
        while the disk has the previous ones.  Signal once more so it reads what is on
        disk (best effort, bounded by the signaller's own timeout and one wait)."""
        log.warning(
            "%s; the previous files are back, signalling OpenSM again so that it reads them",
            err,
        )
        try:
            waited = self._signal_and_wait()
        except ApplyError as again:
            log.error(
                "signalling OpenSM again failed (%s): it may run the new files until it"
                " next re-reads its files",
                again,
            )
            return
        if waited.report.errors:
            log.error("signalled OpenSM again; it reports: %s", waited.report.errors[0])
        elif waited.sweep_s is not None:
            log.warning(
                "signalled OpenSM again: it reads the previous files (sweep %.1f s)", waited.sweep_s
            )

    def _roll_back(self, swap: FileSwap) -> tuple[bool, _Waited | None]:
        """Put the previous files back and make OpenSM read them again; return whether
        they are back, and how the wait after the signal ended (None: not signalled)."""
        if not self._undo(swap):
            return False, None
        try:
            waited = self._signal_and_wait()
        except ApplyError as err:
            log.error("rolled back on disk, but signalling OpenSM failed: %s", err)
            return True, None
        if waited.exited is not None:
            self.opensm_up = False
            log.error("rolled back on disk; OpenSM went away after the signal (%s)", waited.exited)
        elif waited.report.errors:
            pass  # the hold reports them (Hold.after_rollback)
        elif waited.timed_out:
            log.error(
                "rolled back on disk; OpenSM did not end a heavy sweep within %g s",
                self.sweep_timeout_s,
            )
        else:
            log.warning("rolled back: OpenSM reads the previous files again")
        return True, waited

    def _signal_and_wait(self) -> _Waited:
        """Signal OpenSM and wait for the heavy sweep it starts (:meth:`_wait`, on what its
        log gains from the signal on).

        Raises:
            ApplyError: the signal failed (nothing waited for).
        """
        log_ok = self._log_readable()
        mark = self._log.mark(self._opensm_pid() if log_ok else None)
        t0 = time.monotonic()
        self._signal()
        return self._wait(mark, t0, log_ok)

    def _wait(self, mark: LogMark, t0: float, log_ok: bool) -> _Waited:
        """Wait for the heavy sweep's end in what the log gained since *mark* (or
        :attr:`settle_s` without a log), looking every :data:`PROBE_EVERY_S` whether OpenSM
        still runs, calling the heartbeat every :data:`POLL_S`; cut to :data:`STOP_GRACE_S`
        by a stop.  A log truncated in place meanwhile may have lost the sweep's end: the
        wait ends :attr:`settle_s` after that is seen, unless the line turns up, and the
        verifier decides, as without a log."""
        deadline = t0 + (self.sweep_timeout_s if log_ok else self.settle_s)
        cut = lossy = False
        next_probe = t0 + PROBE_EVERY_S
        report = LogReport()
        while True:
            self._beat()
            now = time.monotonic()
            if not cut and self._stopping() and now + STOP_GRACE_S < deadline:
                deadline, cut = now + STOP_GRACE_S, True
            if log_ok:
                report = self._log.read_since(mark)
                if report.swept:
                    return _Waited(report, now - t0)
                if report.truncated and not lossy:
                    lossy, deadline = True, min(deadline, now + self.settle_s)
                    log.warning(
                        "OpenSM's log %s was truncated in place (copytruncate) while waiting"
                        " for its sweep: the sweep's end may be lost; relying on the SA check",
                        self.log_path,
                    )
            if now >= deadline:
                return _Waited(report, timed_out=log_ok and not cut and not lossy, cut_short=cut)
            if now >= next_probe:
                next_probe = now + PROBE_EVERY_S
                live = self._probe()
                if live.up is False:
                    return _Waited(report, exited=live.detail)
            time.sleep(POLL_S)

    # -- small helpers -------------------------------------------------------------------------

    def _probe(self) -> Liveness:
        """Whether OpenSM runs (noted in :attr:`opensm_up`)."""
        signaller = self.signaller
        if isinstance(signaller, Probed):
            live = signaller.alive()
        else:
            live = Liveness(None, "cannot tell")
        self.opensm_up = live.up
        return live

    def _opensm_pid(self) -> int | None:
        """OpenSM's pid, from its checked pid file or its unit's main process (None: not
        known), for the log's follower to find a log renamed away before it looked."""
        signaller = self.signaller
        if isinstance(signaller, PidFileSignaller):
            try:
                return opensm_pid(signaller.pid_file)
            except OpenSMNotRunning:
                return None
        if isinstance(signaller, UnitSignaller):
            argv = ("systemctl", "show", "--property=MainPID", "--value", signaller.unit)
            run = run_tool(argv, timeout_s=PROBE_TIMEOUT_S)
            text = run.stdout.strip() if run.returncode == 0 else ""
            return int(text) if text.isdigit() and int(text) > 1 else None
        return None

    def _log_readable(self) -> bool:
        """Whether OpenSM's log can be read; warned about once while it cannot."""
        ok = readable(self.log_path)
        self.log_missing = not ok
        if not ok and not self._log_warned:
            log.warning(
                "OpenSM's log %s cannot be read: its sweeps and errors are not seen; after"
                " each signal ibqos waits %g s and relies on the SA check (opensm.verify)",
                self.log_path,
                self.settle_s,
            )
        self._log_warned = not ok
        return ok

    def _warn(self, warnings: Sequence[str]) -> None:
        """Report OpenSM's non-fatal errors once each (they are in the admin's lines)."""
        for text in warnings:
            if text not in self._warned:
                self._warned.add(text)
                log.warning("OpenSM reports an error it goes on after (not fatal): %s", text)

    def _stopping(self) -> bool:
        return self.should_stop is not None and self.should_stop()

    def _beat(self) -> None:
        if self.heartbeat is not None:
            self.heartbeat()


def read_file(path: Path) -> str | None:
    """A file's text, None when it does not exist (yet)."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return None
