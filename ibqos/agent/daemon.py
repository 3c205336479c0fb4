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

import gc
import logging
import math
import signal
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

import pandas as pd

from ibqos.agent.handoff import SlBoard, SlServer
from ibqos.agent.lanes import resolve_lanes
from ibqos.agent.lock import AgentLock
from ibqos.agent.sdnotify import Notifier
from ibqos.agent.state import AgentState, load_state, save_state
from ibqos.agent.wiring import (
    fabric_from_config,
)
from ibqos.attribute.jobmap import FileJobSource, JobSource
from ibqos.classify.prior import learn, make_priors
from ibqos.collect.loop import Collector
from ibqos.collect.portinfo import SmpqueryRunner
from ibqos.config.lanes import (
    LaneConfig,
)
from ibqos.config.schema import Config, load_config
from ibqos.errors import IbqosError, RenderError
from ibqos.fabric.model import (
    Fabric,
)
from ibqos.jobs.jobfile import Job
from ibqos.metrics import AgentMetrics, Counters, build_snapshot, level_capacities
from ibqos.metrics.server import Exporter, metrics_app
from ibqos.opensm.apply import Applier, ApplyResult, make_signaller, read_file
from ibqos.opensm.check import check_conf, check_policy
from ibqos.opensm.conf import managed_values, render_conf
from ibqos.opensm.observe import Observer, file_diffs
from ibqos.opensm.policy import PolicyJob, render_policy
from ibqos.opensm.verify import check_until, expected_after
from ibqos.plan.decide import Decider, Decision
from ibqos.plan.output import render as render_plan
from ibqos.plan.output import to_json
from ibqos.sim.network import Network, dmodk_lfts
from ibqos.sim.whatif import what_if
from ibqos.slurm.source import SlurmJobSource

log = logging.getLogger(__name__)

#: jobs whose PathRecord SL is checked after an apply (each is one saquery process)
VERIFY_JOBS = 4


def next_tick(start_s: float, interval_s: float, k: int, now_s: float) -> int:
    """The tick to wait for after tick *k*, with tick *n* due at ``start_s + n * interval_s``.

    Normally ``k + 1``: the phase is fixed, so the time a cycle takes never adds up (no
    drift).  When the clock is already past that tick (a cycle overran), the first tick
    still ahead: missed ticks are skipped, not run back to back.
    """
    return max(k + 1, math.floor((now_s - start_s) / interval_s) + 1)


def make_job_source(config: Config) -> JobSource:
    """The job source the ``jobs`` section names: a job file/directory, or Slurm."""
    if config.jobs.source == "slurm":
        return SlurmJobSource(config.slurm)
    return FileJobSource(config.jobs.path)


class Agent:
    """One ibqos daemon.

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
        self.config = config
        self.config_path = config_path
        self.dry_run = dry_run
        self.simulate = simulate
        self._sim_net: tuple[Fabric, Network] | None = None
        self.echo = echo
        self.clock = clock
        self.notifier = notifier or Notifier(None)
        self.lock: AgentLock | None = None
        self._sl_wanted = False
        self.counters = Counters()
        self._wake = threading.Event()
        self._stop = False
        self._reload = False
        self._config_text = read_file(config_path) if config_path else None
        self._last_error = ""
        self.state = load_state(config.agent.state_dir)
        self.fabric: Fabric = fabric_from_config(config)
        self.lanes = self._lanes(config, self.fabric)
        self.decider = self._decider(config, self.fabric, self.lanes)
        self.source = make_job_source(config)
        self.board = SlBoard(wake=self._wake.set)
        self.sl_server: SlServer | None = None
        self.applier = self._applier(config)
        self.observer = Observer(config.agent.state_dir)
        refresh = config.fabric.refresh_s
        self.collector = Collector(
            config.collect,
            self.fabric,
            discover=(lambda: fabric_from_config(self.config)) if refresh > 0 else None,
            refresh_s=refresh,
        )
        self.metrics = AgentMetrics(
            self.counters,
            fabric=config.metrics.fabric,
            routing_engine=self.lanes.routing_engine,
            dry_run=self.observing,
        )
        self.metrics.health.sl_answers = self.board.counts
        self.metrics.health.job_source_up = self._source_up
        self.capacity = level_capacities(self.fabric)
        self.exporter: Exporter | None = None
        self.rates: pd.DataFrame | None = None
        self.jobs_seen: tuple[Job, ...] | None = None
        self.last: Decision | None = None
        _freeze()

    @property
    def observing(self) -> bool:
        """Whether OpenSM is left alone: ``--dry-run``, or ``mode: observe``."""
        return self.dry_run or self.config.mode == "observe"

    # -- setup --------------------------------------------------------------------------

    @staticmethod
    def _lanes(config: Config, fabric: Fabric) -> LaneConfig:
        lanes, notes = resolve_lanes(config, fabric, read_ports=config.collect.backend != "replay")
        for note in notes:
            log.info("%s", note)
        return lanes

    def _applier(self, config: Config) -> Applier:
        """The apply path for *config*'s ``opensm`` section (built anew on SIGHUP)."""
        return Applier(
            config.agent.state_dir,
            make_signaller(config.opensm),
            config.opensm.log,
            sweep_timeout_s=config.opensm.sweep_timeout_s,
            heartbeat=self.notifier.ping_if_due,
        )

    def _decider(self, config: Config, fabric: Fabric, lanes: LaneConfig) -> Decider:
        decider = Decider.from_config(config, fabric, lanes)
        # continue from the saved state: running jobs keep their SLs and classes
        state = self.state
        decider.restore(state.job_sl, state.job_cls, state.history, state.finished)
        return decider

    def serve_metrics(self) -> None:
        """Start the Prometheus endpoint (``metrics.listen``; nothing when it is off).

        Raises:
            ExporterError: the address is taken or the TLS files do not load.
        """
        cfg = self.config.metrics
        if cfg.listen is not None and self.exporter is None:
            if cfg.basic_auth is not None and cfg.tls is None:
                log.warning("metrics: basic auth without TLS sends the password in clear text")
            self.exporter = Exporter(metrics_app(self.metrics), cfg)

    def serve_sl(self) -> None:
        """Answer job SL questions on ``agent.socket`` / ``agent.sl_listen`` (if set).

        Not while observing: it would hand out SLs that are not in force (a SIGHUP into
        enforce mode starts it, one back into observe mode stops it).  A socket that
        cannot be served (another agent answers there, /run/ibqos not writable for this
        user) is one logged error, not the end of the daemon: the QoS work goes on, and
        ``ibqos job-sl`` then fails as for an agent that is not running.
        """
        self._sl_wanted = True
        cfg = self.config.agent
        if self.observing:
            return
        if self.sl_server is None and (cfg.socket is not None or cfg.sl_listen is not None):
            try:
                self.sl_server = SlServer(self.board, cfg.socket, cfg.sl_listen)
            except IbqosError as err:
                log.error("job SLs are not served: %s", err)

    def _source_up(self) -> bool | None:
        """Whether the job source answers (Slurm: squeue); None when it cannot fail so."""
        source = self.source
        return source.up if isinstance(source, SlurmJobSource) else None

    def hold_lock(self) -> None:
        """Claim the state directory for this daemon (``ibqos.agent.lock``).

        Raises:
            AgentLockError: another agent runs on it.
        """
        self.lock = AgentLock(self.config.agent.state_dir, self.config.mode)

    def close(self) -> None:
        """Stop serving metrics and SLs, release the collector's MAD device and the lock."""
        if self.lock is not None:
            self.lock.close()
            self.lock = None
        if self.sl_server is not None:
            self.sl_server.close()
            self.sl_server = None
        if self.exporter is not None:
            self.exporter.close()
            self.exporter = None
        self.collector.close()

    # -- the loop -----------------------------------------------------------------------

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
        """Run until stopped (or for *cycles* full cycles); return the exit status (0)."""
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

    def _soft(self, work: Callable[[], object], *, report: bool = True) -> bool:
        """Run *work*; a failure is logged once per distinct message and counted.

        With *report*, systemd hears of the outcome: READY after the first success (so
        ``systemctl start`` returns once a plan is in force, or shown in observe mode),
        and a status line after each one.
        """
        try:
            work()
            self._last_error = ""
        except IbqosError as err:
            self.counters.failures += 1
            message = f"{err.category}: {err}"
            self.counters.last_error = message
            if message != self._last_error:
                log.error("cycle failed: %s", message)
            else:
                log.debug("cycle failed again: %s", message)
            self._last_error = message
            if report:
                self.notifier.status(f"{self._mode_name()}: cycle failed, retrying: {message}")
            return False
        finally:
            self.notifier.ping_if_due()
        if report:
            if self.notifier.is_ready:
                self.notifier.status(self._status_line())
            else:
                self.notifier.ready(self._status_line())
        return True

    def _mode_name(self) -> str:
        return "dry run" if self.dry_run else self.config.mode

    def _status_line(self) -> str:
        """One line for ``systemctl status``: mode, jobs, lanes, what happened to OpenSM."""
        plan = self.last.plan if self.last is not None else None
        jobs = len(plan.job_sl) if plan is not None else 0
        lanes = "-"
        if plan is not None and plan.tables is not None:
            lanes = str(len({plan.tables.sl_to_vl[sl] for sl in plan.job_sl.values()}))
        if self.observing:
            pending = self.observer.pending
            what = (
                f"would change {', '.join(p.name for p in pending)}"
                if pending
                else "OpenSM's files match the plan"
            )
        else:
            what = f"OpenSM: {(self.state.last_apply or {}).get('summary', 'no change yet')}"
        cycle = self.counters.cycles
        return f"{self._mode_name()}: cycle {cycle}, {jobs} jobs, {lanes} lanes; {what}"

    # -- one cycle ----------------------------------------------------------------------

    def cycle(self, *, sweep: bool) -> Decision:
        """Sweep (or reuse the last rates), decide, and apply or show the result."""
        self.counters.cycles += 1  # on entry: a failed cycle is a cycle too
        with self.metrics.cycle_seconds.time():
            return self._cycle(sweep=sweep)

    def _cycle(self, *, sweep: bool) -> Decision:
        jobs = self.source.jobs()
        # each step that returned is progress: a slow sweep or plan after a job file that
        # hung must not look like a hang to the watchdog (it pings at most every half interval)
        self.notifier.ping_if_due()
        self.jobs_seen = jobs
        fresh = sweep or self.rates is None
        if fresh or self.rates is None:
            self.rates = self._sweep()
            self.notifier.ping_if_due()
        decision = self.decider.decide(self.rates, jobs, self.clock(), fresh=fresh)
        # a dry run writes nothing, profiles included
        if self.config.profiles.learn and self.decider.priors is not None and not self.dry_run:
            learn(self.decider.priors.store, decision.finished, time.time())
        # before applying: the SL is the job's from now on, whether or not this apply works
        self.board.publish(decision.plan.job_sl, [job.id for job in jobs])
        if decision.result.replace:
            self.counters.plan_changes += 1
            self.counters.plan_changed_s = time.time()
            log.info("plan: %s", "; ".join(decision.result.reasons))
        files = self.render(decision)
        result: ApplyResult | None = None
        if self.dry_run:
            self.echo(self._dry_run_text(decision, files))
        elif self.observing:
            self.observer.show(files)
        else:
            result = self.applier.apply(files, self._verifier(decision))
            if result.changed:
                self.counters.applies += 1
                log.info("OpenSM: %s", result.summary())
            self.counters.reloads += int(result.signalled) * (1 + int(result.rolled_back))
            if result.rolled_back:
                self.counters.rollbacks += 1
            if not result.ok:
                self.counters.verify_failures += 1
        self.last = decision
        self._save(decision, result)
        now = time.time()
        self.metrics.snapshot.publish(
            build_snapshot(
                decision, self.rates, self.capacity, now, per_port=self.config.metrics.per_port
            )
        )
        if result is not None and not result.ok:  # measured and decided, not applied
            raise IbqosError(f"OpenSM did not take the new files: {result.summary()}")
        self.counters.last_success_s = now
        return decision

    def _sweep(self) -> pd.DataFrame:
        """One counter sweep (and a new fabric model if the topology changed)."""
        rates = self.collector.step()
        sweep = self.collector.last
        if sweep is not None:
            self.metrics.sweep_seconds.observe(sweep.duration_s)
            self.counters.sweep_failed = sweep.failed
            self.counters.sweep_answered = len(sweep.targets) - sweep.failed
        if self.collector.fabric is not None and self.collector.fabric is not self.fabric:
            gc.unfreeze()  # the old model may go now
            self.fabric = self.collector.fabric  # the topology changed
            self.decider.set_fabric(self.fabric)
            self.capacity = level_capacities(self.fabric)
            _freeze()
        return rates

    def render(self, decision: Decision) -> dict[Path, str]:
        """opensm.conf and the policy as they should be; both pass the checker or nothing
        is returned (RenderError)."""
        osm = self.config.opensm
        plan = decision.plan
        values = managed_values(plan.tables, osm.port_types)
        conf = render_conf(read_file(osm.conf) or "", values)
        jobs = [
            PolicyJob(job_id, plan.job_sl[job_id], guids, name)
            for job_id, guids, name in self.decider.port_guids()
        ]
        policy = render_policy(read_file(osm.policy_file), jobs)
        lanes = self.lanes
        findings = [
            *check_conf(
                conf,
                str(osm.conf),
                data_vls=lanes.data_vls,
                vlarb_low_cap=lanes.vlarb_low_cap,
                vlarb_high_cap=lanes.vlarb_high_cap,
            ),
            *check_policy(policy, str(osm.policy_file)),
        ]
        errors = [f for f in findings if f.severity == "error"]
        if errors:
            raise RenderError(
                f"{errors[0]} (and {len(errors) - 1} more); nothing written"
                if len(errors) > 1
                else f"{errors[0]}; nothing written"
            )
        return {osm.conf: conf, osm.policy_file: policy}

    def _verifier(self, decision: Decision) -> Callable[[], Sequence[str]] | None:
        if not self.config.opensm.verify:
            return None
        expected = expected_after(
            decision.plan,
            self.fabric,
            self.decider.job_lids()[:VERIFY_JOBS],
            switch_tables="swe" in self.config.opensm.port_types,
            vlarb_low_cap=self.lanes.vlarb_low_cap,
        )
        runner = SmpqueryRunner(10.0, binary="saquery")
        return lambda: check_until(expected, runner)

    def _dry_run_text(self, decision: Decision, files: dict[Path, str]) -> str:
        out = [render_plan(decision, "table").rstrip("\n")]
        for path, diff in file_diffs(files):
            out.append(diff.rstrip("\n") if diff else f"{path}: no change")
        if self.simulate:
            out.append(self._what_if(decision).rstrip("\n"))
        out.append("dry run: nothing written, OpenSM not signalled")
        return "\n".join(out) + "\n"

    def _what_if(self, decision: Decision) -> str:
        """The simulator's view of the running jobs: in force vs proposed (never fatal)."""
        try:
            if self._sim_net is None or self._sim_net[0] is not self.fabric:
                topo = self.fabric.topo
                self._sim_net = (self.fabric, Network(topo, dmodk_lfts(topo)))
            in_force = load_state(self.config.agent.state_dir).plan
            return what_if(self._sim_net[1], self.jobs_seen or (), decision, in_force)
        except IbqosError as err:
            return f"simulate: not possible here: {err}"

    def _save(self, decision: Decision, result: ApplyResult | None) -> None:
        plan = decision.plan
        state = AgentState(
            job_sl=dict(plan.job_sl),
            job_cls=dict(plan.job_cls),
            history=dict(self.decider.history),
            finished=dict(self.decider.last_finished),
            plan=to_json(decision) | {"time_s": time.time()},  # the plan's clock is monotonic
            # the last time files changed: "no change" cycles do not hide it
            last_apply=result.to_doc() if result and result.changed else self.state.last_apply,
            updated_s=time.time(),
            mode=self.config.mode,
        )
        if not self.dry_run:  # a dry run leaves the state as the real agent left it
            save_state(self.config.agent.state_dir, state)
        self.state = state

    # -- reload -------------------------------------------------------------------------

    def _handle_reload(self) -> None:
        """SIGHUP: re-read the config, tell systemd, and act on a change of mode at once."""
        ready = self.notifier.is_ready  # before the first good cycle there is no READY yet
        if ready:
            self.notifier.reloading()
        old_mode = self.config.mode
        self.reload()
        if self.config.mode != old_mode:
            log.warning("SIGHUP: mode %s -> %s", old_mode, self.config.mode)
            self.metrics.health.dry_run = self.observing
            if self.lock is not None:
                self.lock.set_mode(self.config.mode)
            if self.observing and self.sl_server is not None:
                self.sl_server.close()
                self.sl_server = None
            elif self._sl_wanted:
                self.serve_sl()
            if self.jobs_seen is not None:  # plan now, in the new mode
                self._soft(lambda: self.cycle(sweep=False), report=False)
        if ready:
            self.notifier.ready(self._status_line())

    def reload(self) -> None:
        """Re-read the config file if it changed; keep the old one if the new one is bad."""
        if self.config_path is None:
            return
        text = read_file(self.config_path)
        if text == self._config_text:
            log.info("SIGHUP: %s unchanged", self.config_path)
            return
        try:
            config = load_config(self.config_path)
            if config.agent.state_dir != self.config.agent.state_dir:
                # Refused, not followed: the agent lock, state.json, the backups (.orig is
                # kept once, ever) and observe/ all live there; moving them under a running
                # agent would split its history and let a second agent in on the old one.
                raise RestartNeeded(
                    f"agent.state_dir changed ({self.config.agent.state_dir} ->"
                    f" {config.agent.state_dir}): a restart is needed"
                    " (systemctl restart ibqos)"
                )
            lanes = self._lanes(config, self.fabric)
            priors = make_priors(config.profiles)  # profiles are re-read on SIGHUP too
        except RestartNeeded as err:
            self.counters.config_errors += 1
            self.counters.config_error_now = True
            log.warning("SIGHUP: new config not taken, keeping the old one whole: %s", err)
            return
        except IbqosError as err:
            self.counters.config_errors += 1
            self.counters.config_error_now = True
            log.error("SIGHUP: new config rejected, keeping the old one: %s", err)
            return
        self.counters.config_error_now = False
        if config.metrics != self.config.metrics:
            log.warning("SIGHUP: changes to the metrics section take effect when ibqos restarts")
        self.metrics.health.fabric = config.metrics.fabric
        self.metrics.health.routing_engine = lanes.routing_engine
        old = self.config
        if (config.agent.socket, config.agent.sl_listen) != (
            old.agent.socket,
            old.agent.sl_listen,
        ):
            log.warning("SIGHUP: changes to agent.socket/sl_listen take effect at restart")
        self._config_text = text
        self.config = config
        self.lanes = lanes
        self.decider.lanes = lanes
        self.decider.classifier.thresholds = config.classify
        self.decider.priors = priors
        if (config.jobs, config.slurm) != (old.jobs, old.slurm):
            self.source = make_job_source(config)  # else keep its state (grace, last jobs)
        # every opensm key (log, sweep_timeout_s, how to signal) takes effect at the next
        # apply: the Applier holds nothing but them, so it is rebuilt; conf and policy_file
        # follow because render() reads self.config each cycle
        self.applier = self._applier(config)
        log.info("SIGHUP: config %s re-read", self.config_path)


class RestartNeeded(IbqosError):
    """A reloaded config changes a key that only a restart can change."""

    category = "config"


def _freeze() -> None:
    """Move what exists now (the fabric model and its tables: ~330k objects at 50k ports)
    out of the garbage collector's sight: full passes over it took 150-220 ms a cycle
    (docs/plan-benchmark.md)."""
    gc.collect()
    gc.freeze()
