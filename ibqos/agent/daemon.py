"""The daemon: ``ibqos run``.  Sweep, decide, render, check, apply, remember; again.

Cadence.  Cycle *k* starts at ``start + k * interval`` on a monotonic clock (no drift: a
slow cycle shortens the next wait, a cycle longer than the interval skips the missed ticks
instead of bunching them).  Between ticks the job source is looked at every
``agent.job_poll_s``: a job that starts or ends is planned and applied at once with the
latest rates, so the policy names a new job's SL before its processes ask for paths.

Signals.  SIGTERM (and SIGINT) let the current cycle finish, then the daemon exits 0.
SIGHUP re-reads the config file if it changed; a bad new config is logged and the old one
kept, and so is one that moves ``agent.state_dir`` (only a restart can: the lock, backups
and state live there).  Both only set flags: the work happens in the loop, never in a handler.

Failures.  A cycle that fails (fabric unreadable, OpenSM not running, a plan that does not
fit) is logged once per distinct message, counted, and the daemon goes on at the next tick.
OpenSM's files are never half-written (``ibqos.opensm.apply``), and a file that fails ibqos's own
checker is not written at all.

Jobs and their SLs.  Jobs come from a job file (:class:`~ibqos.attribute.jobmap.FileJobSource`) or
from Slurm (:class:`~ibqos.slurm.source.SlurmJobSource`).  The daemon answers "which SL
has job J?" on ``agent.socket`` (and ``agent.sl_listen``) from its own threads
(:mod:`ibqos.agent.handoff`); a question for a job it does not know yet wakes the loop, which
re-reads the job source and plans at once, so a job's tasks get its SL at launch.

Dry-run and observe mode.  The same pipeline, but OpenSM's files stay byte-identical and
OpenSM is never signalled: ``--dry-run`` prints the plan and unified diffs of the files it
would write; ``mode: observe`` keeps them in the state directory (:mod:`ibqos.opensm.observe`),
exports every metric, and switches to ``mode: enforce`` with a SIGHUP.

Under systemd (``Type=notify``, :mod:`ibqos.agent.sdnotify`) the daemon says READY after its
first successful cycle, keeps a one-line STATUS, and pings the watchdog from this loop only,
so a loop that hangs is noticed.
"""

from __future__ import annotations

import logging
import math
import signal
import time
from types import FrameType

from ibqos.agent.reload import ReloadingAgent
from ibqos.errors import IbqosError, StopRequested
from ibqos.slurm.source import SlurmJobSource
from ibqos.tools import waiter

__all__ = [
    "Agent",
    "next_tick",
]

log = logging.getLogger(__name__)


def next_tick(start_s: float, interval_s: float, k: int, now_s: float) -> int:
    """The tick to wait for after tick *k*, with tick *n* due at ``start_s + n * interval_s``.

    Normally ``k + 1``: the phase is fixed, so the time a cycle takes never adds up (no
    drift).  When the clock is already past that tick (a cycle overran), the first tick
    still ahead: missed ticks are skipped, not run back to back.
    """
    return max(k + 1, math.floor((now_s - start_s) / interval_s) + 1)


class Agent(ReloadingAgent):
    """One ibqos daemon: the cycles of :class:`~ibqos.agent.cycle.CycleAgent` on the parts
    of :class:`~ibqos.agent.parts.AgentParts`, at a steady cadence, with signals.

    Args:
        config: the configuration.
        config_path: its file, re-read on SIGHUP (None: no reload).
        dry_run: print plans and diffs instead of writing.
        simulate: with *dry_run*, also print what the contention simulator predicts for
            the running jobs under the setup in force and the proposed one.
        echo: where dry-run output goes (one text block per call).
        clock: monotonic seconds (tests inject their own).
        notifier: how systemd is told about readiness, status and liveness (None: not
            under systemd).
    """

    def request_stop(self) -> None:
        """Finish the current cycle, then return from :meth:`run` (SIGTERM)."""
        self._stop = True
        self._wake.set()

    def request_reload(self) -> None:
        """Re-read the config before the next cycle (SIGHUP)."""
        self._reload = True
        self._wake.set()

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT stop, SIGHUP reloads (main thread only)."""

        def stop(signum: int, frame: FrameType | None) -> None:
            self.request_stop()

        def reload(signum: int, frame: FrameType | None) -> None:
            self.request_reload()

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGHUP, reload)

    def run(self, *, cycles: int | None = None) -> int:
        """Run until stopped (or for *cycles* full cycles); return the exit status (0).

        While it runs, every wait on a tool (ibnetdiscover, perfquery, squeue, saquery) or
        on MAD replies pings the systemd watchdog and ends at once on SIGTERM
        (:func:`ibqos.tools.set_waiter`), so a hung discovery neither starves the watchdog
        nor holds up a stop; an apply that is under way is let finish (its own waits for
        OpenSM are bounded).
        """
        with waiter(self._waiting):
            try:
                return self._run(cycles)
            except StopRequested:
                self.notifier.stopping()
                log.warning("stopped while waiting on a tool or the fabric (SIGTERM)")
                return 0

    def _waiting(self) -> None:
        """Called while a tool runs or MAD replies are awaited (any thread)."""
        self.notifier.ping_if_due()
        if self._stop and not self._applying:
            raise StopRequested("stop requested")

    def _run(self, cycles: int | None) -> int:
        interval = self.config.collect.interval_s
        notify = self.notifier
        notify.status(f"{self._mode_name()}: first sweep and plan")
        notify.ping_if_due()
        # the baseline sweep; a daemon also plans at once, so running jobs get SLs now
        if cycles is None:
            self._soft(self._baseline)
        else:
            self._soft(self._sweep, report=False)
        start = self.clock()
        done = 0
        k = 0
        while not self._stop and (cycles is None or done < cycles):
            k = next_tick(start, interval, k, self.clock())
            self._wait_until(start + k * interval)
            if self._stop:
                break
            self._soft(lambda: self.cycle(sweep=True))
            done += 1
        notify.stopping()
        log.info("stopping after %d cycles", self.counters.cycles)
        return 0

    def _wait_until(self, due: float) -> None:
        """Sleep until *due*, looking at the job source and at signals meanwhile."""
        poll = self.config.agent.job_poll_s
        while not self._stop:
            self.notifier.ping_if_due()  # only here and in the cycle: a hung loop goes quiet
            if self._reload:
                self._reload = False
                self._handle_reload()
            left = due - self.clock()
            if left <= 0:
                return
            self._wake.wait(min(poll, left, max(0.01, self.notifier.next_ping_s())))
            self._wake.clear()
            if not self._stop and self.board.pending():
                self._answer_questions()
            elif not self._stop and self._jobs_changed():
                self.counters.job_events += 1
                self._soft(lambda: self.cycle(sweep=False))

    def _answer_questions(self) -> None:
        """Someone asked for the SL of a job not planned yet: read the jobs now, plan if
        they changed, and tell the waiting askers that this read is done."""
        asked = time.monotonic()  # the board's clock
        source = self.source
        if isinstance(source, SlurmJobSource):
            source.refresh()
        if self._jobs_changed():
            self.counters.job_events += 1
            self._soft(lambda: self.cycle(sweep=False))
        if isinstance(source, SlurmJobSource):
            # a forced poll may wait out MIN_FORCED_POLL_S; then this round read nothing
            # newer and the askers keep waiting for the next one
            self.board.round_done(source.read_at)
        else:
            self.board.round_done(asked)  # a job file is re-read whenever it changed

    def _baseline(self) -> None:
        """The first sweep (rates need two) and an immediate plan for the running jobs."""
        self.rates = self._sweep()
        self.cycle(sweep=False)

    def _jobs_changed(self) -> bool:
        if self.jobs_seen is None:
            return False  # nothing planned yet: the next cycle plans them all
        try:
            jobs = self.source.jobs()
        except IbqosError:
            return False  # reported by the next cycle
        return jobs != self.jobs_seen
