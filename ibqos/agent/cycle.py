"""One cycle of the daemon: sweep, decide, render, apply or show, remember.

:class:`CycleRunner` runs cycles on the agent's parts (:class:`~ibqos.agent.parts.
AgentParts`): the job source's jobs and a counter sweep (or the last rates) go to the
decider, profiles learn from the jobs that ended, the SL board publishes the jobs' SLs,
OpenSM's files are rendered and checked (:func:`ibqos.opensm.render.render_files`), and
the files go to the mode's sink (:mod:`ibqos.agent.sinks`); then the state file and the
metrics' snapshot are updated.  In enforce mode, what is in force is re-checked through the
SA every cycle (:mod:`ibqos.opensm.served`): a job whose SL the SA does not serve is
withdrawn at once (``job-sl`` answers "pending") and handed out again once it is served.
A cycle that fails is logged once per distinct message and counted
(:meth:`CycleRunner.soft`), and the daemon goes on.
"""

from __future__ import annotations

import gc
import logging
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

import pandas as pd

from ibqos.agent.handoff import SlBoard
from ibqos.agent.parts import AgentParts, freeze_heap
from ibqos.agent.sdnotify import Notifier
from ibqos.agent.sinks import DryRunSink, enforce, rechecker, verifier
from ibqos.agent.state import AgentState, save_state, tuning_doc
from ibqos.classify.prior import learn
from ibqos.config.models import OpenSMConfig
from ibqos.errors import ApplyStopped, IbqosError, RenderError, StateError
from ibqos.jobs.model import Job
from ibqos.metrics import AgentMetrics, Counters, build_snapshot, level_capacities
from ibqos.opensm.outcome import ApplyResult
from ibqos.opensm.render import render_checked
from ibqos.opensm.served import Recheck, Verdict
from ibqos.plan.output import to_json
from ibqos.plan.planner import Plan
from ibqos.plan.report import Decision
from ibqos.plan.saved import plan_from_doc, plan_to_doc
from ibqos.plan.setups import LAW

log = logging.getLogger(__name__)

#: reload-budget tokens a tuning trial needs: its switch and its revert, each an apply
#: that keeps a token for its own rollback
TRIAL_TOKENS = 4.0


class CycleRunner:
    """Runs the decision cycles of one agent (see the module docstring), and keeps what a
    cycle leaves for the next.

    It continues from the state the agent saved before: the plan OpenSM serves is in force
    again (its jobs keep their SLs), and the decider goes on from its jobs and classes.

    Args:
        parts: the parts the config built (the config in force among them).
        state: the state file as the agent left it (:func:`ibqos.agent.state.load_state`).
        board: where the jobs' SLs are published for the SL server.
        counters: what the agent counts.
        metrics: the agent's metrics (the snapshot and the durations are set here).
        notifier: systemd's READY, STATUS and watchdog.
        clock: monotonic seconds.
        echo: where dry-run output goes (one text block per call).
        simulate: a dry run also shows what the contention simulator predicts.

    Attributes:
        state: the state as last saved (or read at start).
        in_force_plan: the plan OpenSM serves (None: none known).
        in_force: job -> SL of the jobs whose SL OpenSM serves (what ``job-sl`` hands out).
        withdrawn: job -> SL of the jobs whose planned SL the SA did not serve when last
            asked: not handed out (``job-sl`` answers "pending") until it is served.
        rates: per-port rates of the last full sweep (None before the first).
        sl_rates: per-SL rates of that sweep (``ibqos.collect.per_sl``); None when no port
            has per-SL data counters.
        jobs_seen: the jobs the last cycle planned for (None: no cycle yet).
        last: the last cycle's decision.
        reloaded_since_sweep: OpenSM reloaded since the last sweep (its interval holds one).
        capacity: the fabric's capacity per level (for the metrics' utilization).
        applying: an apply is under way (a stop waits for it: its waits are bounded).
    """

    def __init__(
        self,
        parts: AgentParts,
        state: AgentState,
        board: SlBoard,
        counters: Counters,
        metrics: AgentMetrics,
        notifier: Notifier,
        *,
        clock: Callable[[], float],
        echo: Callable[[str], None],
        simulate: bool,
    ) -> None:
        self.parts = parts
        self.board = board
        self.counters = counters
        self.metrics = metrics
        self.notifier = notifier
        self.clock = clock
        self.echo = echo
        self._dry_run_sink = DryRunSink(simulate)
        self.state = state
        pipeline = parts.pipeline
        self.in_force_plan: Plan | None = plan_from_doc(state.in_force, pipeline.lanes)
        # an observing agent's plan was only shown: OpenSM may serve other SLs
        trusted = self.in_force_plan is not None and state.mode == "enforce"
        self.in_force: dict[str, int] = (
            dict(self.in_force_plan.job_sl) if trusted and self.in_force_plan else {}
        )
        # continue from the saved state: running jobs keep their SLs and classes
        pipeline.decider.restore(
            state.job_sl, state.job_cls, state.history, state.finished, self.in_force_plan
        )
        self.rates: pd.DataFrame | None = None
        self.sl_rates: pd.DataFrame | None = None
        self.jobs_seen: tuple[Job, ...] | None = None
        self.last: Decision | None = None
        self.reloaded_since_sweep = False
        self.capacity = level_capacities(pipeline.fabric)
        self.applying = False
        self.withdrawn: dict[str, int] = {}
        self._recheck: Recheck | None = None
        self._recheck_cfg: OpenSMConfig | None = None
        self._recheck_requests: list[str] = []
        self._last_error = ""
        self._file_warnings: frozenset[str] = frozenset()  # the checker's, logged once each

    def cycle(self, *, sweep: bool) -> Decision:
        """Sweep (or reuse the last rates), decide, and apply or show the result."""
        self.counters.cycles += 1  # on entry: a failed cycle is a cycle too
        with self.metrics.cycle_seconds.time():
            return self._cycle(sweep=sweep)

    def _cycle(self, *, sweep: bool) -> Decision:
        parts, pipeline = self.parts, self.parts.pipeline
        config = parts.config
        jobs = pipeline.source.jobs()
        # each step that returned is progress: a slow sweep or plan after a job file that
        # hung must not look like a hang to the watchdog (it pings at most every half interval)
        self.notifier.ping_if_due()
        self.jobs_seen = jobs
        fresh = sweep or self.rates is None
        # what OpenSM served over the sweep's interval, for tuning's samples
        served = LAW
        if self.in_force_plan is not None and self.in_force_plan.tables is not None:
            served = self.in_force_plan.tables.setup
        reloaded = self.reloaded_since_sweep
        if fresh or self.rates is None:
            self.reloaded_since_sweep = False
            rates = self.sweep()
            collector = pipeline.collector
            sl_rates = collector.sl_rates
            self.notifier.ping_if_due()
            if not collector.covered:
                # a sweep that reached too few ports (links down, a PMA that stopped
                # answering) does not change the plan: the last full sweep's rates stand,
                # and jobs that start meanwhile begin in their expected classes
                fresh = False
                if self.rates is not None:
                    rates, sl_rates = self.rates, self.sl_rates
            self.rates, self.sl_rates = rates, sl_rates
        pipeline.refresh_routes()  # after a fabric change too: the tables must cover it
        decider = pipeline.decider
        decider.setup = parts.tuning.wanted
        decision = decider.decide(
            self.rates, jobs, self.clock(), fresh=fresh, sl_rates=self.sl_rates
        )
        # a dry run writes nothing, profiles included
        if config.profiles.learn and decider.priors is not None and not parts.dry_run:
            learn(decider.priors.store, decision.finished, time.time())
        running = [job.id for job in jobs]
        standing_by = self._standing_by()
        # beside a standby OpenSM nothing is handed out, so nothing is re-checked
        recheck = None if standing_by else self._rechecker()
        if recheck is not None:  # does the SA still serve what is in force?
            self._recheck_with(recheck, decision.plan, sample=sweep)
        # before applying: jobs whose SL is already in force are answered; new ones wait
        self._publish(decision.plan, running, in_force=parts.observing)
        if decision.result.replace:
            self.counters.plan_changes += 1
            self.counters.plan_changed_s = time.time()
            log.info("plan: %s", "; ".join(decision.result.reasons))
        files = self.render(decision)
        result: ApplyResult | None = None
        if parts.dry_run:
            jobs_seen = self.jobs_seen or ()
            state_dir = config.agent.state_dir
            predicted = parts.tuning.predict_now(decision) if config.tuning.enabled else None
            tuning = "" if predicted is None else predicted.text
            sink = self._dry_run_sink
            self.echo(sink.text(decision, files, pipeline.fabric, jobs_seen, state_dir, tuning))
        elif parts.observing:
            try:
                parts.observer.show(files)
            except StateError:
                self.counters.state_write_errors += 1
                raise
        elif standing_by:
            # standby SM gate (ibqos.agent.standby): OpenSM is not the master, so nothing
            # is written or signalled and no SL handed out; the plan goes on being made
            self.in_force, self.in_force_plan, self.withdrawn = {}, None, {}
            self._publish(decision.plan, running, in_force=False)
        else:
            new_jobs = frozenset(decision.plan.job_sl) - frozenset(self.in_force)
            verify = verifier(
                config.opensm,
                decision.plan,
                pipeline.fabric,
                decider.job_lids,
                pipeline.lanes,
                new_jobs,
            )
            self.applying = True  # a stop lets the apply finish: its waits are bounded
            try:
                result = enforce(parts.applier, files, verify, self.counters)
            finally:
                self.applying = False
            if result.signalled:  # OpenSM reloaded: the next sweep has the reload in it
                self.reloaded_since_sweep = True
            # after standing by, the plan is in force only once the SA confirms it (standby
            # SM gate, ibqos.agent.standby)
            gate = parts.sm_gate
            confirmed = result.ok and (gate is None or gate.confirm(result, verify))
            if confirmed and (result.changed or recheck is None):
                # OpenSM took the plan's files (verified, with opensm.verify): its SLs are
                # in force, the withdrawn ones among them
                if recheck is not None:
                    recheck.files_written()
                self.withdrawn = {}
                self._publish(decision.plan, running, in_force=True)
            elif result.ok and recheck is not None:  # the files already carried the plan
                self._publish_unchanged(recheck, decision.plan, running)
            self.counters.sl_unserved_jobs = len(self.withdrawn)
        self.last = decision
        budget = parts.applier.budget
        parts.tuning.after_cycle(
            decision,
            fresh=fresh,
            in_force=served,
            reloaded=reloaded,
            now_s=decision.now_s,
            # a trial's switch and its revert are two applies of two tokens each
            room=budget is None or budget.tokens() >= TRIAL_TOKENS,
        )
        self._save(decision, result)
        now = time.time()
        self.metrics.snapshot.publish(
            build_snapshot(
                decision,
                self.rates,
                self.capacity,
                now,
                per_port=config.metrics.per_port,
                fresh=fresh,  # only a fresh sweep's bytes go into the byte counters
            )
        )
        if result is not None and not result.ok:  # measured and decided, not applied
            raise IbqosError(f"OpenSM did not take the new files: {result.summary()}")
        self.counters.last_success_s = now
        return decision

    def _publish(
        self,
        plan: Plan,
        running: Sequence[str],
        *,
        in_force: bool,
        unconfirmed: Collection[str] = (),
    ) -> None:
        """Tell the SL board which SLs OpenSM serves now.

        *in_force*: OpenSM took the files of *plan* (or nothing is enforced: observe mode,
        dry run), so every job of it has its SL but the *unconfirmed* ones (the SA did not
        serve them when asked).  Otherwise the jobs keep the SLs that were in force before,
        and the others are *planned*: ``job-sl`` makes them wait, then answers "pending",
        and their tasks start on the default SL rather than on an SL that OpenSM maps
        elsewhere.
        """
        if in_force:
            self.in_force = {j: sl for j, sl in plan.job_sl.items() if j not in unconfirmed}
            self.in_force_plan = plan
        else:
            self.in_force = {j: sl for j, sl in self.in_force.items() if plan.job_sl.get(j) == sl}
        planned = [j for j in plan.job_sl if j not in self.in_force]
        self.board.publish(self.in_force, running, planned)

    # -- the re-check of what is in force (ibqos.opensm.served) -----------------------------

    def recheck_all(self, reason: str) -> None:
        """Re-check every job in force through the SA at the next cycle (or
        :meth:`recheck_now`), and at each cycle for ``opensm.sweep_timeout_s`` after it:
        something changed under OpenSM that ibqos cannot see in its pid or its files (the
        SM changed).  *reason* is logged then.  Call it from the daemon's loop."""
        self._recheck_requests.append(reason)

    def recheck_now(self) -> None:
        """Re-check what is in force now, between cycles (the loop saw a change under
        OpenSM), and publish the SLs still served; nothing before the first cycle, nor
        outside enforce mode, nor with ``opensm.verify`` off."""
        recheck = self._rechecker()
        if recheck is None or self.last is None:
            return
        plan = self.last.plan
        self._recheck_with(recheck, plan)
        self._publish(plan, [job.id for job in self.jobs_seen or ()], in_force=False)

    def mode_changed(self) -> None:
        """The mode changed on SIGHUP (before the SL server starts).

        Into enforce mode: observe mode's plan was only shown, and OpenSM may serve other
        SLs (at start-up too, only an enforcing agent's saved plan is trusted), so nothing
        is handed out until an apply, or the SA, shows it served; every job is re-checked.
        """
        self.withdrawn = {}  # observe mode re-checks nothing; enforce mode re-checks all
        self.counters.sl_unserved_jobs = 0
        if self.parts.observing or self.parts.dry_run:
            return
        self.in_force = {}
        self.recheck_all("the agent switched to enforce mode")
        planned = list(self.last.plan.job_sl) if self.last is not None else []
        self.board.publish({}, [job.id for job in self.jobs_seen or ()], planned)

    def _standing_by(self) -> bool:
        """The standby SM gate's verdict for this cycle (enforce mode only): True beside an
        OpenSM that is not the master.  A takeover asks for every job to be re-checked:
        the new master's SA serves its own files."""
        parts = self.parts
        gate = parts.sm_gate
        if gate is None or parts.dry_run or parts.observing:
            return False
        takeovers = self.counters.sm_takeovers
        standing = gate.stand_by()
        if self.counters.sm_takeovers != takeovers:
            self.recheck_all("its OpenSM became the master")
        return standing

    def _rechecker(self) -> Recheck | None:
        """The re-check for the config in force (None: not enforcing, or
        ``opensm.verify`` off); a new one when the ``opensm`` section changed."""
        parts = self.parts
        if parts.dry_run or parts.observing:
            return None
        cfg = parts.config.opensm
        if self._recheck is None or cfg != self._recheck_cfg:
            self._recheck = rechecker(cfg, self.clock)
            self._recheck_cfg = cfg
        if self._recheck is not None:
            for reason in self._recheck_requests:
                self._recheck.request_all(reason)
        self._recheck_requests = []
        return self._recheck

    def _recheck_with(self, recheck: Recheck, plan: Plan, *, sample: bool = True) -> None:
        """One re-check of the jobs in force (and the withdrawn) under *plan*; without
        *sample* (a job event's cycle), only a full check when due and the withdrawn."""
        lids = dict(self.parts.pipeline.decider.job_lids())
        self.in_force = {j: sl for j, sl in self.in_force.items() if plan.job_sl.get(j) == sl}
        self.withdrawn = {j: plan.job_sl[j] for j in self.withdrawn if j in plan.job_sl}
        verdict = recheck.check(self.in_force, self.withdrawn, lids, sample=sample)
        if recheck.opensm_down and self.in_force:
            # no SA serves any SL now (and a standby may take over with other files):
            # every SL is withdrawn, and handed out again once the SA serves it
            log.warning(
                "OpenSM is not running: the SLs of %d job(s) withdrawn; job-sl answers"
                " PENDING until the SA serves them again",
                len(self.in_force),
            )
            self.counters.sl_withdrawals += len(self.in_force)
            self.withdrawn |= self.in_force
            self.in_force = {}
        self._take(verdict, plan)

    def _take(self, verdict: Verdict, plan: Plan) -> None:
        """Withdraw the SLs the SA does not serve, hand out again those it serves."""
        self.counters.sl_rechecks += verdict.checked
        taken = []
        for job, (want, got) in sorted(verdict.unserved.items()):
            if self.in_force.get(job) == want:
                del self.in_force[job]
                self.counters.sl_withdrawals += 1
                taken.append(f"job {job} SL {want} (the SA serves {_sl_text(got)})")
            self.withdrawn[job] = want
        if taken:
            log.warning(
                "SLs withdrawn, the SA does not serve them: %s%s; job-sl answers PENDING"
                " for them until it does",
                ", ".join(taken[:5]),
                f" and {len(taken) - 5} more" if len(taken) > 5 else "",
            )
        withdrawn = self.withdrawn
        back = sorted(j for j in verdict.served if plan.job_sl.get(j) == withdrawn.get(j, -1))
        for job in back:
            self.in_force[job] = self.withdrawn.pop(job)
        if back:
            log.info("SLs served again, handed out: %s", ", ".join(back[:10]))
        self.counters.sl_unserved_jobs = len(self.withdrawn)

    def _publish_unchanged(self, recheck: Recheck, plan: Plan, running: Sequence[str]) -> None:
        """OpenSM's files already carried *plan*: its jobs not handed out yet are handed
        out once the SA serves their SLs (the files on disk are not what OpenSM serves when
        it was restarted with others, or stopped); the withdrawn stay withdrawn."""
        lids = dict(self.parts.pipeline.decider.job_lids())
        newcomers = {
            j: sl
            for j, sl in plan.job_sl.items()
            if self.in_force.get(j) != sl and j not in self.withdrawn
        }
        unconfirmed = set(self.withdrawn)
        if newcomers:
            # a job on shared hosts only has no sure PathRecord: trusted to the files
            asked = {j: sl for j, sl in newcomers.items() if lids.get(j)}
            verdict = recheck.confirm(asked, lids)
            self.counters.sl_rechecks += verdict.checked
            unconfirmed |= asked.keys() - verdict.served
            for job, (want, _got) in verdict.unserved.items():
                self.withdrawn[job] = want
        self._publish(plan, running, in_force=True, unconfirmed=unconfirmed)

    def sweep(self) -> pd.DataFrame:
        """One counter sweep (and a new fabric model if the topology changed)."""
        pipeline = self.parts.pipeline
        collector = pipeline.collector
        rates = collector.step()
        sweep = collector.last
        if sweep is not None:
            self.metrics.sweep_seconds.observe(sweep.duration_s)
            self.counters.sweep_failed = sweep.failed
            self.counters.sweep_answered = len(sweep.targets) - sweep.failed
            self.counters.sweep_coverage = sweep.coverage
            self.counters.invalid_samples += sweep.invalid
            per_sl = sweep.per_sl
            self.counters.sweep_per_sl_ports = 0 if per_sl is None else per_sl.answered
        if pipeline.follow_fabric():  # the topology changed
            gc.unfreeze()  # the old model may go now
            self.capacity = level_capacities(pipeline.fabric)
            freeze_heap()
        return rates

    def render(self, decision: Decision) -> dict[Path, str]:
        """opensm.conf and the policy as they should be; both pass the checker or nothing
        is returned (RenderError)."""
        pipeline = self.parts.pipeline
        jobs = pipeline.decider.port_guids()
        osm = self.parts.config.opensm
        try:
            rendered = render_checked(osm, pipeline.lanes, decision.plan, jobs)
        except RenderError:
            self.counters.render_error_now = True  # nothing is written until it is fixed
            raise
        self.counters.render_error_now = False
        warnings = frozenset(str(w) for w in rendered.warnings)
        for warning in sorted(warnings - self._file_warnings):  # each once, while it lasts
            log.warning("OpenSM's files: %s", warning)
        self._file_warnings = warnings
        self.counters.file_warnings = len(warnings)
        return rendered.files

    def _save(self, decision: Decision, result: ApplyResult | None) -> None:
        parts = self.parts
        config, decider = parts.config, parts.pipeline.decider
        plan = decision.plan
        state = AgentState(
            job_sl=dict(plan.job_sl),
            job_cls=dict(plan.job_cls),
            history=dict(decider.history),
            finished=dict(decider.last_finished),
            plan=to_json(decision) | {"time_s": time.time()},  # the plan's clock is monotonic
            # the last time files changed: "no change" cycles do not hide it
            last_apply=result.to_doc() if result and result.changed else self.state.last_apply,
            updated_s=time.time(),
            mode=config.mode,
            in_force=None if self.in_force_plan is None else plan_to_doc(self.in_force_plan),
            tuning=tuning_doc(parts.tuning.status(self.clock())) if config.tuning.enabled else None,
            routes=parts.pipeline.routes.status(),
        )
        if not parts.dry_run:  # a dry run leaves the state as the real agent left it
            try:
                save_state(config.agent.state_dir, state)
            except StateError:
                self.counters.state_write_errors += 1  # the cycle fails softly, logged once
                raise
        self.state = state

    def soft(self, work: Callable[[], object], *, report: bool = True) -> bool:
        """Run *work*; a failure is logged once per distinct message and counted.

        A failure is an :class:`IbqosError` or any :class:`OSError` (out of file
        descriptors, a disk that fills, a file that vanishes between two reads): the
        process's surroundings, not a bug, so the next cycle tries again rather than the
        daemon ending and systemd's restart limit keeping it down.

        With *report*, systemd hears of the outcome: READY after the first success (so
        ``systemctl start`` returns once a plan is in force, or shown in observe mode),
        and a status line after each one.
        """
        try:
            work()
            self._last_error = ""
        except ApplyStopped as err:  # SIGTERM before the apply began: nothing failed
            log.info("cycle ended: %s", err)
            return False
        except (IbqosError, OSError) as err:
            self.counters.failures += 1
            category = err.category if isinstance(err, IbqosError) else "system"
            message = f"{category}: {err}"
            self.counters.last_error = message
            if message != self._last_error:
                log.error("cycle failed: %s", message)
            else:
                log.debug("cycle failed again: %s", message)
            self._last_error = message
            if report:
                mode = self.parts.mode_name()
                self.notifier.status(f"{mode}: cycle failed, retrying: {message}")
            return False
        finally:
            self.notifier.ping_if_due()
        if report:
            if self.notifier.is_ready:
                self.notifier.status(self.status_line())
            else:
                self.notifier.ready(self.status_line())
        return True

    def status_line(self) -> str:
        """One line for ``systemctl status``: mode, jobs, lanes, what happened to OpenSM."""
        plan = self.last.plan if self.last is not None else None
        jobs = len(plan.job_sl) if plan is not None else 0
        lanes = "-"
        if plan is not None and plan.tables is not None:
            lanes = str(len({plan.tables.sl_to_vl[sl] for sl in plan.job_sl.values()}))
        if self.parts.observing:
            pending = self.parts.observer.pending
            what = (
                f"would change {', '.join(p.name for p in pending)}"
                if pending
                else "OpenSM's files match the plan"
            )
        else:
            what = f"OpenSM: {(self.state.last_apply or {}).get('summary', 'no change yet')}"
        cycle = self.counters.cycles
        return f"{self.parts.mode_name()}: cycle {cycle}, {jobs} jobs, {lanes} lanes; {what}"


def _sl_text(sl: int | None) -> str:
    return "no path" if sl is None else f"SL {sl}"
