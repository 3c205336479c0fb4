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

A standby OpenSM.  Each enforcing cycle reads the SM state of its OpenSM; beside one that
is not the master it stands by (nothing written or signalled, no SL handed out) and takes
over once it is (:mod:`ibqos.agent.standby`), as on a fabric with two SM hosts, an agent
beside each.

Dry-run and observe mode.  The same pipeline, but OpenSM's files stay byte-identical and
OpenSM is never signalled: ``--dry-run`` prints the plan and unified diffs of the files it
would write; ``mode: observe`` keeps them in the state directory (:mod:`ibqos.opensm.observe`),
exports every metric, and switches to ``mode: enforce`` with a SIGHUP.

Under systemd (``Type=notify``, :mod:`ibqos.agent.sdnotify`) the daemon says READY after its
first successful cycle, keeps a one-line STATUS, and pings the watchdog from this loop only,
so a loop that hangs is noticed.

Parts.  :class:`Agent` keeps the loop (cadence, signals, the job source between ticks, a
change of mode) and is put together from named parts: the config in force and what it
builds (:class:`~ibqos.agent.parts.AgentParts`: the decision cycle's
:class:`~ibqos.agent.pipeline.Pipeline`, the apply path, the observer, tuning), the cycles
(:class:`~ibqos.agent.cycle.CycleRunner`, which keep what one cycle leaves for the next),
the SIGHUP re-read (:class:`~ibqos.agent.reload.Reloader`), the SL board and its server
(:class:`~ibqos.agent.parts.SlService`), and the counters and metrics
(:class:`~ibqos.agent.parts.MetricsService`).
"""

from __future__ import annotations

import logging
import math
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

from ibqos.agent.cycle import CycleRunner
from ibqos.agent.lock import AgentLock
from ibqos.agent.parts import AgentParts, MetricsService, SlService, freeze_heap
from ibqos.agent.reload import Reloader
from ibqos.agent.sdnotify import Notifier
from ibqos.agent.state import load_state
from ibqos.config.models import Config
from ibqos.errors import IbqosError, StopRequested
from ibqos.opensm.apply import read_file
from ibqos.opensm.served import OpenSMRuns
from ibqos.plan.report import Decision
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


class Agent:
    """One ibqos daemon: the cycles of a :class:`~ibqos.agent.cycle.CycleRunner` on the
    :class:`~ibqos.agent.parts.AgentParts` its config builds, at a steady cadence, with
    signals.

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

    Attributes:
        parts: the config in force and what it built (the pipeline, the apply path...).
        cycles: runs the decision cycles, and keeps what one leaves for the next.
        reloader: re-reads the config file on SIGHUP.
        sl: the SL board and its server.
        telemetry: what the agent counts, its metrics and their endpoint.
        notifier: systemd's READY, STATUS and watchdog.
        lock: the agent lock, held for the agent's life (set by ``ibqos run``).
    """

    def __init__(
        self,
        config: Config,
        config_path: Path | None = None,
        *,
        dry_run: bool = False,
        simulate: bool = False,
        echo: Callable[[str], None] = print,
        clock: Callable[[], float] = time.monotonic,
        notifier: Notifier | None = None,
    ) -> None:
        self.clock = clock
        self.notifier = notifier or Notifier(None)
        self.lock: AgentLock | None = None
        self._wake = threading.Event()
        self._stop = False
        self._reload = False
        text = read_file(config_path) if config_path else None
        state = load_state(config.agent.state_dir)
        self.parts = AgentParts(
            config,
            dry_run=dry_run,
            running=lambda: self.cycles.jobs_seen or (),
            heartbeat=self.notifier.ping_if_due,
            should_stop=lambda: self._stop,
        )
        parts = self.parts
        self.sl = SlService(wake=self._wake.set)
        self.telemetry = MetricsService(
            config,
            routing_engine=parts.pipeline.lanes.routing_engine,
            observing=parts.observing,
        )
        counters = self.telemetry.counters
        metrics = self.telemetry.metrics
        parts.watch_sm(counters)  # a standby OpenSM's agent stands by (ibqos.agent.standby)
        self.cycles = CycleRunner(
            parts,
            state,
            self.sl.board,
            counters,
            metrics,
            self.notifier,
            clock=clock,
            echo=echo,
            simulate=simulate,
        )
        gate = parts.sm_gate
        if gate is not None and self.cycles.in_force and not parts.observing and gate.stand_by():
            # restarted beside a standby OpenSM: the SLs its state keeps in force are not
            # the master's, so none is handed out, not even before the first cycle
            self.cycles.in_force, self.cycles.in_force_plan = {}, None
        self._watch_opensm()
        self.reloader = Reloader(config_path, text, parts, counters, metrics.health)
        metrics.tuning.status = lambda: parts.tuning.status(clock())
        metrics.tuning.prediction_error = lambda: parts.tuning.prediction_error()
        metrics.health.sl_answers = self.sl.board.counts
        metrics.health.sl_server = self.sl.health
        metrics.health.job_source_up = parts.source_up
        metrics.health.job_source_rejected = parts.source_rejected
        metrics.health.routes = lambda: parts.pipeline.routes.status()
        freeze_heap()

    @property
    def config(self) -> Config:
        """The config in force."""
        return self.parts.config

    def cycle(self, *, sweep: bool) -> Decision:
        """One decision cycle now (:meth:`ibqos.agent.cycle.CycleRunner.cycle`)."""
        return self.cycles.cycle(sweep=sweep)

    def reload(self) -> None:
        """Re-read the config file if it changed (:meth:`ibqos.agent.reload.Reloader.reload`)."""
        self.reloader.reload()

    def serve_metrics(self) -> None:
        """Start the Prometheus endpoint (``metrics.listen``; nothing when it is off).

        Raises:
            ExporterError: the address is taken or the TLS files do not load.
        """
        self.telemetry.serve(self.config.metrics)

    def serve_sl(self) -> None:
        """Answer job SL questions on ``agent.socket`` / ``agent.sl_listen`` (if set), but
        not while observing (:meth:`ibqos.agent.parts.SlService.serve`)."""
        self.sl.serve(self.config.agent, observing=self.parts.observing)

    def close(self) -> None:
        """Stop serving metrics and SLs, release the collector's MAD device and the lock."""
        if self.lock is not None:
            self.lock.close()
            self.lock = None
        self.sl.close()
        self.telemetry.close()
        self.parts.close()

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
        if self._stop and not self.cycles.applying:
            raise StopRequested("stop requested")

    def _run(self, cycles: int | None) -> int:
        interval = self.config.collect.interval_s
        notify = self.notifier
        soft = self.cycles.soft
        notify.status(f"{self.parts.mode_name()}: first sweep and plan")
        notify.ping_if_due()
        # the baseline sweep; a daemon also plans at once, so running jobs get SLs now
        if cycles is None:
            soft(self._baseline)
        else:
            soft(self.cycles.sweep, report=False)
        start = self.clock()
        done = 0
        k = 0
        while not self._stop and (cycles is None or done < cycles):
            k = next_tick(start, interval, k, self.clock())
            self._wait_until(start + k * interval)
            if self._stop:
                break
            soft(lambda: self.cycles.cycle(sweep=True))
            done += 1
        notify.stopping()
        log.info("stopping after %d cycles", self.telemetry.counters.cycles)
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
            if not self._stop and self.sl.board.pending():
                self._answer_questions()
            elif not self._stop and self._jobs_changed():
                self.telemetry.counters.job_events += 1
                self.cycles.soft(lambda: self.cycles.cycle(sweep=False))

    def _answer_questions(self) -> None:
        """Someone asked for the SL of a job not planned yet: read the jobs now, plan if
        they changed, and tell the waiting askers that this read is done."""
        asked = time.monotonic()  # the board's clock
        source = self.parts.pipeline.source
        if isinstance(source, SlurmJobSource):
            source.refresh()
        if self._jobs_changed():
            self.telemetry.counters.job_events += 1
            self.cycles.soft(lambda: self.cycles.cycle(sweep=False))
        board = self.sl.board
        if isinstance(source, SlurmJobSource):
            # a forced poll may wait out MIN_FORCED_POLL_S; then this round read nothing
            # newer and the askers keep waiting for the next one
            board.round_done(source.read_at)
        else:
            board.round_done(asked)  # a job file is re-read whenever it changed

    def _baseline(self) -> None:
        """The first sweep (rates need two) and an immediate plan for the running jobs."""
        self.cycles.rates = self.cycles.sweep()
        self.cycles.cycle(sweep=False)

    def _jobs_changed(self) -> bool:
        seen = self.cycles.jobs_seen
        if seen is None:
            return False  # nothing planned yet: the next cycle plans them all
        try:
            jobs = self.parts.pipeline.source.jobs()
        except IbqosError:
            return False  # reported by the next cycle
        return jobs != seen

    def _watch_opensm(self) -> None:
        """Have every job-SL answer ask whether OpenSM runs (enforce mode, with
        ``opensm.verify``): between OpenSM's stop and the cycle whose re-check withdraws
        the SLs, none is handed out (no SA serves it then)."""
        parts = self.parts
        osm = parts.config.opensm
        enforcing = not (parts.observing or parts.dry_run) and osm.verify
        self.sl.board.serving = OpenSMRuns(osm.pid_file) if enforcing else None

    def _handle_reload(self) -> None:
        """SIGHUP: re-read the config, tell systemd, and act on a change of mode at once:
        the SL server starts or stops, and the running jobs are planned in the new mode.

        Into enforce mode, observe mode's proposal is not in force (OpenSM may serve other
        SLs, or be stopped): it is dropped before the SL server starts, so ``job-sl``
        answers an SL only once an apply (or the SA) shows it served, as at start-up.
        """
        ready = self.notifier.is_ready  # before the first good cycle there is no READY yet
        if ready:
            self.notifier.reloading()
        parts = self.parts
        changed = self.reloader.reload()
        self._watch_opensm()  # the opensm section may have changed too
        if changed:  # a new mode
            self.telemetry.metrics.health.dry_run = parts.observing
            if self.lock is not None:
                self.lock.set_mode(parts.config.mode)
            self.cycles.mode_changed()  # before the server: nothing observed is in force
            if parts.observing:
                self.sl.close()
            elif self.sl.wanted:
                self.serve_sl()
            if self.cycles.jobs_seen is not None:  # plan now, in the new mode
                self.cycles.soft(lambda: self.cycles.cycle(sweep=False), report=False)
        if ready:
            self.notifier.ready(self.cycles.status_line())
