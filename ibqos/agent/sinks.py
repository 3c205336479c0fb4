"""Where a cycle's rendered files go: the same pipeline, another sink (STYLE P5).

- enforce: :func:`enforce` writes them for OpenSM, signals it, checks its log, verifies
  the tables it programmed (:func:`verifier`) and rolls back when any of it fails
  (:class:`ibqos.opensm.apply.Applier`), and counts what happened; between applies,
  :func:`rechecker` re-checks through the SA that it still serves the SLs in force;
- observe: :class:`ibqos.opensm.observe.Observer` keeps them in the state directory;
- dry run: :class:`DryRunSink` prints the plan and unified diffs of the files (and, with
  ``--simulate``, what the contention simulator predicts); nothing is written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

from ibqos.agent.state import load_state
from ibqos.collect.portinfo import SmpqueryRunner
from ibqos.config.lanes import LaneConfig
from ibqos.config.models import OpenSMConfig
from ibqos.errors import IbqosError
from ibqos.fabric.model import Fabric
from ibqos.jobs.model import Job
from ibqos.metrics import Counters
from ibqos.opensm.apply import Applier
from ibqos.opensm.observe import file_diffs
from ibqos.opensm.outcome import ApplyOutcome, ApplyResult
from ibqos.opensm.served import Recheck, opensm_identity
from ibqos.opensm.verify import check_until, expected_after
from ibqos.plan.output import render as render_plan
from ibqos.plan.planner import Plan
from ibqos.plan.report import Decision
from ibqos.sim.network import Network, dmodk_lfts
from ibqos.sim.whatif import what_if

log = logging.getLogger(__name__)

#: jobs already in force whose PathRecord SL is checked after an apply (one saquery each)
VERIFY_JOBS = 4
#: seconds one ``saquery PR`` of the re-check may take
RECHECK_TIMEOUT_S = 5.0
#: new jobs checked after an apply: each one's SL is handed out only once OpenSM serves
#: it, so all are checked up to this bound (a burst beyond it is sampled, ~30 ms a job)
VERIFY_NEW_JOBS = 64


def verifier(
    cfg: OpenSMConfig,
    plan: Plan,
    fabric: Fabric,
    job_lids: Callable[[], Sequence[tuple[str, list[int]]]],
    lanes: LaneConfig,
    new_jobs: Collection[str] = frozenset(),
) -> Callable[[], Sequence[str]] | None:
    """What checks that OpenSM programmed *plan* (None: ``opensm.verify`` is off).

    Args:
        cfg: the ``opensm`` config section.
        plan: the plan being applied.
        fabric: the topology.
        job_lids: gives (job id, LIDs of its CA ports) of the planned jobs
            (:meth:`ibqos.plan.decide.Decider.job_lids`).
        lanes: the lanes in use.
        new_jobs: jobs whose SL is not in force yet: each gets a PathRecord check (up to
            :data:`VERIFY_NEW_JOBS`), and :data:`VERIFY_JOBS` of the others.
    """
    if not cfg.verify:
        return None
    lids = job_lids()
    fresh = [item for item in lids if item[0] in new_jobs][:VERIFY_NEW_JOBS]
    others = [item for item in lids if item[0] not in new_jobs][:VERIFY_JOBS]
    expected = expected_after(
        plan,
        fabric,
        [*fresh, *others],
        switch_tables="swe" in cfg.port_types,
        vlarb_low_cap=lanes.vlarb_low_cap,
    )
    runner = SmpqueryRunner(10.0, binary="saquery")
    return lambda: check_until(expected, runner)


def rechecker(cfg: OpenSMConfig, clock: Callable[[], float]) -> Recheck | None:
    """What re-checks through the SA the SLs in force between applies
    (:class:`ibqos.opensm.served.Recheck`; None: ``opensm.verify`` is off).

    Args:
        cfg: the ``opensm`` config section: the files, the pid file or unit (a restart), the
            sweep timeout (every job is checked at each cycle for that long after a change
            under OpenSM).
        clock: monotonic seconds.
    """
    if not cfg.verify:
        return None
    # a PathRecord takes tens of milliseconds: a query that hangs is cut short well before
    # the verifier's bound, and the re-check pauses (ibqos.opensm.served.RETRY_S)
    runner = SmpqueryRunner(RECHECK_TIMEOUT_S, binary="saquery")
    files = (cfg.conf, cfg.policy_file)
    return Recheck(
        files,
        runner,
        window_s=cfg.sweep_timeout_s,
        identity=lambda: opensm_identity(cfg.pid_file, cfg.unit),
        clock=clock,
    )


def enforce(
    applier: Applier,
    files: dict[Path, str],
    verify: Callable[[], Sequence[str]] | None,
    counters: Counters,
) -> ApplyResult:
    """Apply *files* (write, signal, check, verify, roll back) and count what happened,
    whether the apply returns or raises (ApplyError: nothing applied)."""
    before = (applier.signals_sent, applier.write_errors, applier.deferred, applier.outside_writes)
    rotations = applier.log_rotations
    try:
        result = applier.apply(files, verify)
    finally:
        signals, write_errors, deferred, outside = (
            applier.signals_sent - before[0],
            applier.write_errors - before[1],
            applier.deferred - before[2],
            applier.outside_writes - before[3],
        )
        counters.reloads += signals
        counters.write_errors += write_errors
        counters.reloads_deferred += deferred
        counters.opensm_up = applier.opensm_up
        counters.outside_writes += outside
        counters.opensm_rejected = applier.rejected
        counters.outside_writer = applier.outside_writer
        counters.opensm_log_missing = applier.log_missing
        counters.log_rotations += applier.log_rotations - rotations
        budget = applier.budget
        counters.reload_tokens = None if budget is None else budget.tokens()
    if result.changed:
        counters.applies += 1
        log.info("OpenSM: %s", result.summary())
    if result.rolled_back:
        counters.rollbacks += 1
    if result.outcome is ApplyOutcome.REJECTED:  # not an OpenSM gone, nor a stop
        counters.verify_failures += 1
    return result


class DryRunSink:
    """The text a dry run prints for one cycle.

    Args:
        simulate: also show the simulator's view of the running jobs under the setup in
            force and the proposed one.
    """

    def __init__(self, simulate: bool) -> None:
        self.simulate = simulate
        self._net: tuple[Fabric, Network] | None = None  # the simulator's, per fabric

    def text(
        self,
        decision: Decision,
        files: dict[Path, str],
        fabric: Fabric,
        jobs: Sequence[Job],
        state_dir: Path,
        tuning: str = "",
    ) -> str:
        """The plan, a unified diff (or "no change") per file, tuning's candidates as
        predicted, and the simulator's view.

        Args:
            decision: the cycle's decision.
            files: the rendered files, by path.
            fabric: the topology.
            jobs: the running jobs (for the simulator).
            state_dir: the agent's state directory (the plan in force, for the simulator).
            tuning: the candidate setups' prediction as a table ("" when none).
        """
        out = [render_plan(decision, "table").rstrip("\n")]
        if tuning:
            out.append("tuning's candidates (the plan above is favour-light):")
            out.append(tuning.rstrip("\n"))
        for path, diff in file_diffs(files):
            out.append(diff.rstrip("\n") if diff else f"{path}: no change")
        if self.simulate:
            out.append(self._what_if(decision, fabric, jobs, state_dir).rstrip("\n"))
        out.append("dry run: nothing written, OpenSM not signalled")
        return "\n".join(out) + "\n"

    def _what_if(
        self, decision: Decision, fabric: Fabric, jobs: Sequence[Job], state_dir: Path
    ) -> str:
        """The simulator's view of the running jobs: in force vs proposed (never fatal)."""
        try:
            if self._net is None or self._net[0] is not fabric:
                topo = fabric.topo
                self._net = (fabric, Network(topo, dmodk_lfts(topo)))
            in_force = load_state(state_dir).plan
            return what_if(self._net[1], jobs, decision, in_force)
        except IbqosError as err:
            return f"simulate: not possible here: {err}"
