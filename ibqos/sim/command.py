"""``ibqos simulate``: a job mix on a fat tree under one or more QoS policies."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ibqos.config.lanes import LaneConfig
from ibqos.config.tuning import TuningConfig
from ibqos.errors import SimError
from ibqos.fabric.given import given_fabric
from ibqos.fabric.routes import parse_lft_dump
from ibqos.fabric.topology import parse_ibnetdiscover
from ibqos.fabric.xgft import XgftSpec
from ibqos.jobs.jobfile import check_hosts, load_jobs
from ibqos.sim.closedloop import (
    BASE_ITERATIONS,
    closed_loop,
    default_iterations,
    default_sweep_s,
    fluid_predictor,
    fluid_refiner,
)
from ibqos.sim.estimate import Phases
from ibqos.sim.evaluate import OBJECTIVES, Outcome, RunSettings
from ibqos.sim.network import Network, xgft_network
from ibqos.sim.policies import (
    ADAPTIVE,
    FIXED,
    POLICIES,
    one_vl,
    optimum,
    setup_of,
    too_large_to_search,
)
from ibqos.sim.predict import Steady
from ibqos.sim.qos import Arbitration
from ibqos.sim.report import BASELINE, load_plan, render
from ibqos.sim.senders import Granularity, auto_buffers
from ibqos.sim.workload import prepare

#: the policies that plan by simulating the fluid model (the closed loop runs in it, and
#: predicts with it)
PLANNED = (FIXED, ADAPTIVE, "optimal")


@dataclass(frozen=True)
class Search:
    """How ``optimal`` searches (:func:`ibqos.sim.policies.optimum`).

    Attributes:
        objective: what it judges the setups by (:data:`~ibqos.sim.evaluate.OBJECTIVES`);
            the gain printed is by it too.  None: the tuning section's objective.
        workers: processes it runs the setups in.
        limit_s: wall seconds after which it answers with the best setup known, a bound
            (None: no limit).
    """

    objective: str | None = None
    workers: int = 1
    limit_s: float | None = None


@dataclass(frozen=True)
class SimReport:
    """What ``ibqos simulate`` prints.

    Attributes:
        text: the rendered report (table or JSON).
        notes: what the user should know about the run, one line each (a policy of
            ``--policy all`` left out, and why).
    """

    text: str
    notes: tuple[str, ...] = ()


def network(
    xgft: str | None, width: int, speed: str, topology: Path | None, lfts: Path | None
) -> Network:
    """The fabric to simulate: an XGFT with D-mod-K routes, or a discovered fabric with
    OpenSM's routes (an ibnetdiscover file with LIDs plus ``opensm-lfts.dump``).

    Raises:
        FabricChoiceError: neither or both given.
        SimError: a topology without --lfts, or a file that cannot be read.
    """
    given = given_fabric(
        xgft,
        topology,
        "--xgft SPEC, or --topology FILE with --lfts FILE",
        category=SimError.category,
    )
    if isinstance(given, XgftSpec):
        return xgft_network(given, width, speed)
    if lfts is None:
        raise SimError(f"--topology {given}: needs --lfts (OpenSM's opensm-lfts.dump)")
    try:
        topo = parse_ibnetdiscover(given.read_text(), str(given))
        tables = parse_lft_dump(lfts.read_text(), str(lfts))
    except OSError as err:
        raise SimError(f"{err.filename}: {err.strerror}") from err
    return Network(topo, tables)


def simulate(
    net: Network,
    jobs_path: Path,
    policies: Sequence[str],
    plan: Path | None,
    model: str,
    iterations: int | None,
    lanes: LaneConfig,
    fmt: str,
    per: Granularity = "auto",
    buffer_packets: int | None = None,
    fluid_buffers: int | None = None,
    tuning: TuningConfig | None = None,
    sweep_s: float | None = None,
    predict: bool = True,
    search: Search = Search(),
) -> SimReport:
    """Run the mix under each policy (and the plan file), return the rendered report.

    ``all`` in *policies* runs every policy that can run on the mix: ``optimal`` is left
    out, with a note saying why, when the mix is too large for its search, and ``ibqos``
    (the closed loop, :mod:`ibqos.sim.closedloop`) under the packet model, which it does
    not run in (asked for by name, either is an error).

    *iterations*: N for every policy (None: :data:`~ibqos.sim.closedloop.BASE_ITERATIONS`,
    or, when ``ibqos`` runs, enough for several rounds of its tuning:
    :func:`~ibqos.sim.closedloop.default_iterations`).  *tuning*, *sweep_s*, *predict*:
    the closed loop's tuning section, sweep interval (simulated seconds; None: its
    default) and whether the fluid model predicts its candidates (else they are tried in
    their pool's order).  *search*: how ``optimal`` searches, and the objective, which
    judges its setups, the gains printed and the closed loop's tuning.

    *buffer_packets*: switch buffers per VL per input of *model* (None: its default, for
    the fluid model :func:`~ibqos.sim.senders.auto_buffers`).  *fluid_buffers*: the fluid
    model's, for the policies that plan by simulating it (ibqos-fixed, optimal) when
    *model* is the packet model (None: the same default); with the fluid model its own
    buffers serve all, and a second value is refused.  Under the packet model
    ``--buffers`` changes the packet runs only: the plans stay what ``--model fluid``
    would make.
    """
    if iterations is not None and iterations < 1:
        raise SimError(f"--iterations {iterations}: expected at least 1")
    if model == "fluid" and fluid_buffers is not None and fluid_buffers != buffer_packets:
        raise SimError(
            "--fluid-buffers: the fluid model's buffers are --buffers under --model fluid"
        )
    names = list(POLICIES) if "all" in policies else list(dict.fromkeys(policies))
    if not names and plan is None:
        names = [ADAPTIVE]
    notes: list[str] = []
    if ADAPTIVE in names and model != "fluid":
        if "all" not in policies:
            raise SimError(
                f"--policy {ADAPTIVE}: tunes in the fluid model only; use --model fluid,"
                f" or --policy {FIXED} (the law without tuning)"
            )
        names.remove(ADAPTIVE)
        notes.append(f"--policy all: left out {ADAPTIVE}: it tunes in the fluid model only")
    if model != "fluid" and fluid_buffers is not None and not set(names) & set(PLANNED):
        # a value that would change nothing is a mistake in the command, not a no-op
        raise SimError(
            f"--fluid-buffers: no policy asked plans with the fluid model ({', '.join(PLANNED)})"
        )
    jobs = load_jobs(jobs_path, traffic=True)
    check_hosts(jobs, set(net.hosts), str(jobs_path))
    if "all" in policies and "optimal" in names:
        why = too_large_to_search(len(jobs), lanes)
        if why is not None:  # the other policies still answer the question asked
            names.remove("optimal")
            notes.append(f"--policy all: left out optimal: {why}")
    sim_jobs = prepare(net, jobs)
    tuning = tuning if tuning is not None else TuningConfig()
    objective = search.objective if search.objective is not None else tuning.objective
    if objective not in OBJECTIVES:
        raise SimError(f"--objective {objective!r}: expected one of {', '.join(OBJECTIVES)}")
    if objective != tuning.objective:
        tuning = replace(tuning, objective=objective)  # type: ignore[arg-type]
    sweep = None
    if ADAPTIVE in names:
        sweep = default_sweep_s(sim_jobs) if sweep_s is None else sweep_s
        if not sweep > 0:
            raise SimError(f"--sweep-s {sweep}: expected more than 0 seconds")
    if iterations is None:
        iterations = BASE_ITERATIONS
        if sweep is not None:  # the same N for every policy: enough for the loop
            iterations = default_iterations(sim_jobs, sweep, tuning)
    if model == "fluid":
        buffer_packets = fluid_buffers = auto_buffers(sim_jobs, per, buffer_packets)
    else:
        fluid_buffers = auto_buffers(sim_jobs, per, fluid_buffers)
    runs = RunSettings(model, net, sim_jobs, iterations, per, buffer_packets)
    planning = RunSettings("fluid", net, sim_jobs, iterations, per, fluid_buffers)
    base_arb = one_vl(sim_jobs, lanes)
    # the fluid run on one VL is both the gain's baseline and what ibqos-fixed's plan is
    # built from
    base_run = runs.run(base_arb) if model == "fluid" else None
    plan_arb = load_plan(plan) if plan is not None else None
    t_alone = runs.alone(base_arb)

    def outcome(arb: Arbitration) -> Outcome:
        reuse = base_run if arb.name == BASELINE else None
        out = runs.evaluate(arb, t_alone, reuse)
        planned = arb.name in PLANNED and arb is not plan_arb
        return replace(out, plan_buffer_packets=fluid_buffers) if planned else out

    outcomes = []
    for name in names:
        if name == "optimal":
            found = optimum(planning, lanes, objective, search.workers, search.limit_s)
            out = outcome(found.outcome.setup)
            outcomes.append(replace(out, bound=not found.complete))
            notes.append(found.summary())
            continue
        if name != ADAPTIVE:
            outcomes.append(outcome(setup_of(name, planning, lanes, base_run)))
            continue
        predictor, refiner = None, None
        if predict:
            # the jobs' phases as a profile that recorded them gives them, and the model
            # the fabric is: the run's own senders and buffers
            phases = {j.id: Phases(j.job.duty, j.job.period_s) for j in sim_jobs}
            steady = Steady(per=per, buffer_packets=fluid_buffers)
            predictor = fluid_predictor(net, jobs, steady, phases, objective=tuning.objective)
            refiner = fluid_refiner(net, jobs, steady, phases, objective=tuning.objective)
        loop = closed_loop(planning, lanes, tuning, sweep, predictor, refiner)
        out = runs.evaluate(loop.final, t_alone, loop.run)
        outcomes.append(replace(out, plan_buffer_packets=fluid_buffers))
        notes.append(loop.summary())
    if plan_arb is not None:
        outcomes.append(outcome(plan_arb))
    baseline = next((o for o in outcomes if o.policy == BASELINE), None)
    if baseline is None:
        baseline = outcome(base_arb)
    return SimReport(render(outcomes, baseline, fmt, objective), tuple(notes))
