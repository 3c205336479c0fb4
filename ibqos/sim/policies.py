"""The QoS setups the simulator compares, by the names the command line takes.

Every policy gets the same lanes: the data VLs and VLArbLowCap of :class:`LaneConfig`
(ibqos's defaults, or the configuration's ``lanes`` section), the MTU, and SL 0 for
nothing but the default lane.

- ``one-vl``: every job on SL 0, every SL on VL 0: the fabric as OpenSM leaves it.
- ``equal``: one lane per job as far as lanes go (jobs in mix order, round-robin over
  the lanes when there are more jobs), every lane one MTU packet per round.
- ``bandwidth``: the lanes of ``equal``, weighted in proportion to their jobs' average
  injected bandwidth (hosts x rate x duty): more weight to more demanding lanes.
- ``ibqos-fixed``: the favour-light law's plan of :mod:`ibqos.plan.decide`, fed with the
  counters the mix produces under ``one-vl`` (each link's bytes over the run, as a sweep
  would read them), i.e. what the agent would program after watching the fabric, without
  tuning.
- ``ibqos``: the agent's search and tuning run on the simulated counters, the setup
  changing during the run (:mod:`ibqos.sim.closedloop`); not one setup, so
  :func:`setup_of` does not give it.
- ``optimal``: exhaustive search over the groupings of the jobs onto the lanes and a grid of
  per-lane weights (:data:`WEIGHT_GRID` packets per round), each setup run with the fluid
  model and judged by the objective (S by default; :data:`~ibqos.sim.evaluate.OBJECTIVES`);
  the setups of the other policies are tried too (first), so the optimum is never worse
  than any of them.  For small mixes (:data:`MAX_SEARCH` setups at most).  The search
  (:mod:`ibqos.sim.optimum`) skips setups the fluid model cannot tell apart, ends a run
  once it cannot beat the best so far, can use several processes, and, given a limit,
  answers with the best setup known, a bound.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt
import pandas as pd

from ibqos.config.lanes import NUM_SLS, LaneConfig
from ibqos.errors import SimError
from ibqos.fabric.model import Fabric
from ibqos.fabric.topology import Port
from ibqos.plan.decide import Decider
from ibqos.plan.weights import interleave, lane_entries, quantize
from ibqos.sim.evaluate import Outcome, RunSettings
from ibqos.sim.fluid import simulate_fluid
from ibqos.sim.network import Network
from ibqos.sim.optimum import Optimum, search
from ibqos.sim.qos import Arbitration, from_tables
from ibqos.sim.senders import Granularity
from ibqos.sim.workload import RunResult, SimJob

#: the policy that tunes in a closed loop (:mod:`ibqos.sim.closedloop`), and the law alone
ADAPTIVE, FIXED = "ibqos", "ibqos-fixed"
POLICIES = ("one-vl", "equal", "bandwidth", FIXED, ADAPTIVE, "optimal")
#: MTU packets per arbitration round a lane may get in the exhaustive search
WEIGHT_GRID = (1, 2, 4, 8)
#: most setups the exhaustive search runs
MAX_SEARCH = 4000
#: lanes (default ibqos config, ibsim ports): SL 0 reserved, 8 data VLs, 8 VLArb entries
DEFAULT_LANES = LaneConfig(reserved_sls=(0,), vlarb_low_cap=8, min_hold_s=0, min_interval_s=0)


def build(
    name: str,
    net: Network,
    jobs: Sequence[SimJob],
    iterations: int,
    lanes: LaneConfig = DEFAULT_LANES,
    per: Granularity = "auto",
    seen: RunResult | None = None,
    buffer_packets: int | None = None,
    objective: str = "node-time",
) -> Arbitration:
    """The setup policy *name* gives this mix (*per*, *buffer_packets*: the fluid model's
    senders and switch buffers, for the policies that simulate; *seen*: the mix's fluid
    run on one VL, if already made; *objective*: what ``optimal`` judges by):
    :func:`setup_of`.

    Raises:
        SimError: an unknown policy, or a mix too large for ``optimal``.
    """
    fluid = RunSettings("fluid", net, jobs, iterations, per, buffer_packets)
    return setup_of(name, fluid, lanes, seen, objective)


def setup_of(
    name: str,
    fluid: RunSettings,
    lanes: LaneConfig,
    seen: RunResult | None = None,
    objective: str = "node-time",
) -> Arbitration:
    """The setup policy *name* gives the mix of *fluid*, the fluid model's runs of it
    that the policies which simulate use (*seen*: its run on one VL, if already made;
    *objective*: what ``optimal`` judges by, :data:`~ibqos.sim.evaluate.OBJECTIVES`).

    Raises:
        SimError: an unknown policy, ``ibqos`` (it changes the setup as it runs:
            :func:`ibqos.sim.closedloop.closed_loop`), or a mix too large for ``optimal``.
    """
    jobs = fluid.jobs
    if name == "one-vl":
        return one_vl(jobs, lanes)
    if name == "equal":
        return grouped([[j.id] for j in jobs], [1.0] * len(jobs), lanes, "equal")
    if name == "bandwidth":
        ids = [[j.id] for j in jobs]
        return grouped(ids, [_bandwidth(j) for j in jobs], lanes, "bandwidth")
    if name == FIXED:
        return ibqos_plan(fluid, lanes, seen)
    if name == ADAPTIVE:
        raise SimError(
            f"--policy {ADAPTIVE}: tunes the setup while the mix runs; it is a run"
            " (ibqos.sim.closedloop), not one setup"
        )
    if name == "optimal":
        return optimal(fluid, lanes, objective)
    raise SimError(f"--policy {name!r}: expected one of {', '.join(POLICIES)}")


def one_vl(jobs: Sequence[SimJob], lanes: LaneConfig) -> Arbitration:
    """Everything on SL 0 and VL 0, one packet per round."""
    return Arbitration(
        {j.id: 0 for j in jobs},
        (0,) * NUM_SLS,
        ((0, lanes.credits_per_packet),),
        mtu=lanes.mtu,
        name="one-vl",
    )


def _job_lanes(lanes: LaneConfig) -> list[int]:
    """VLs jobs may use: the data VLs not reserved, as many as VLArb entries allow."""
    vls = [vl for vl in range(lanes.data_vls) if vl not in lanes.reserved_vls]
    return vls[: lanes.vlarb_low_cap]


def _job_sls(lanes: LaneConfig) -> list[int]:
    return [sl for sl in range(NUM_SLS) if sl not in lanes.reserved_sls]


def _bandwidth(job: SimJob) -> float:
    """Average bytes per second the job's hosts inject."""
    return float(job.flows.rate.sum()) * job.job.duty


def grouped(
    groups: Sequence[Sequence[str]],
    weights: Sequence[float],
    lanes: LaneConfig,
    name: str,
) -> Arbitration:
    """One lane per group (more groups than lanes: round-robin), weights in proportion to
    *weights* quantized to whole packets within the VLArb entries; a group is job ids.
    """
    vls, sls = _job_lanes(lanes), _job_sls(lanes)
    ids = [list(group) for group in groups]
    if len(ids) > len(vls):  # fold the extra groups onto the lanes in turn
        folded: list[list[str]] = [[] for _ in vls]
        w = [0.0] * len(vls)
        for i, (g, wt) in enumerate(zip(ids, weights, strict=True)):
            folded[i % len(vls)] += g
            w[i % len(vls)] += wt
        ids, weights = folded, w
    job_sl: dict[str, int] = {}
    sl_to_vl = [lanes.default_vl] * NUM_SLS
    for k, g in enumerate(ids):
        for jid in g:
            job_sl[jid] = sls[k]  # one SL per lane: there are fewer lanes than SLs
            sl_to_vl[sls[k]] = vls[k]
    low = min((w for w in weights if w > 0), default=1.0)
    targets = [max(w, low) / low for w in weights]
    packets, _ = quantize(targets, lanes.packets_per_entry, lanes.vlarb_low_cap)
    entries = interleave(
        [
            lane_entries(vls[k], n, lanes.credits_per_packet, lanes.packets_per_entry)
            for k, n in enumerate(packets)
        ]
    )
    return Arbitration(job_sl, tuple(sl_to_vl), entries, mtu=lanes.mtu, name=name)


class SweepTable:
    """The rates table a counter sweep of the simulated fabric gives (``node_guid``,
    ``port``, ``xmit_bytes_per_s``, as :mod:`ibqos.collect.rates`), from the bytes per
    second each of the network's links carried: what :class:`~ibqos.plan.decide.Decider`
    reads.

    Args:
        net: the simulated network.
        fabric: the fabric model of *net*'s topology the decider plans on.
    """

    def __init__(self, net: Network, fabric: Fabric) -> None:
        keys = list(fabric.ports)
        # -1: a port the router does not know (unconnected): it carried nothing
        self._index = np.array(
            [
                net.router.port_index.get(Port(fabric.ports[k].node_id, fabric.ports[k].num), -1)
                for k in keys
            ],
            dtype=np.int64,
        )
        self._guids = np.array([k[0] for k in keys], dtype=np.uint64)
        self._ports = np.array([k[1] for k in keys], dtype=np.uint8)

    def __call__(self, link_bytes_per_s: npt.NDArray[np.float64]) -> pd.DataFrame:
        """The table for links that carried *link_bytes_per_s* (bytes/s, by link index)."""
        known = self._index >= 0
        xmit = np.where(known, link_bytes_per_s[np.where(known, self._index, 0)], 0.0)
        return pd.DataFrame(
            {"node_guid": self._guids, "port": self._ports, "xmit_bytes_per_s": xmit}
        )


def ibqos_plan(fluid: RunSettings, lanes: LaneConfig, seen: RunResult | None = None) -> Arbitration:
    """What ibqos's favour-light law programs after watching the mix of *fluid* run on
    one VL (*seen*, or run now): the ``ibqos-fixed`` policy."""
    net, jobs = fluid.net, fluid.jobs
    if seen is None:
        base = one_vl(jobs, lanes)
        seen = simulate_fluid(net, jobs, base, fluid.iterations, fluid.per, fluid.buffer_packets)
    rates = seen.link_bytes / max(seen.sim_time_s, 1e-12)
    fabric = Fabric(net.topo, source="simulated")
    table = SweepTable(net, fabric)(rates)
    decider = Decider(fabric, replace(lanes, min_hold_s=0.0, min_interval_s=0.0))
    decision = decider.decide(table, [j.job for j in jobs], 0.0)
    plan = decision.plan
    if plan.tables is None:
        raise SimError("lanes: the routing engine owns SLs; ibqos writes no tables to simulate")
    return from_tables(plan.tables, plan.job_sl, lanes.mtu, FIXED)


def optimal(fluid: RunSettings, lanes: LaneConfig, objective: str = "node-time") -> Arbitration:
    """The best setup of the exhaustive search (see the module docstring) by *objective*,
    each setup run as *fluid* says: :func:`optimum`'s, in one process, without a limit.

    Raises:
        SimError: the search would run more than :data:`MAX_SEARCH` setups.
    """
    return optimum(fluid, lanes, objective).outcome.setup


def optimum(
    fluid: RunSettings,
    lanes: LaneConfig,
    objective: str = "node-time",
    workers: int = 1,
    limit_s: float | None = None,
    max_runs: int | None = None,
) -> Optimum:
    """The exhaustive search (module docstring) of the mix of *fluid* by *objective*: the
    other policies' setups first (a good best-so-far early cuts more runs short), then
    the grid.  *workers*, *limit_s*, *max_runs*: :func:`ibqos.sim.optimum.search`; with a
    limit the answer may be a bound (:attr:`~ibqos.sim.optimum.Optimum.complete`).

    Raises:
        SimError: the search would run more than :data:`MAX_SEARCH` setups.
    """
    jobs = fluid.jobs
    tried = grid(jobs, lanes)
    base = one_vl(jobs, lanes)
    t_alone = fluid.alone(base)
    first = [
        replace(setup_of(p, fluid, lanes), name="optimal")
        for p in ("one-vl", "equal", "bandwidth", FIXED)
    ]
    return search(fluid, first + tried, t_alone, objective, workers, limit_s, max_runs)


def grid(jobs: Sequence[SimJob], lanes: LaneConfig) -> list[Arbitration]:
    """The setups of the exhaustive search's grid, named ``optimal``: every grouping of the
    jobs onto the lanes with every weight vector of :data:`WEIGHT_GRID`.

    Raises:
        SimError: more than :data:`MAX_SEARCH` setups.
    """
    why = too_large_to_search(len(jobs), lanes)
    if why is not None:
        raise SimError(f"--policy optimal: {why}; use fewer jobs or lanes")
    vls = _job_lanes(lanes)
    candidates = _setups([j.id for j in jobs], len(vls))
    return [grouped(g, w, lanes, "optimal") for g, w in candidates]


def too_large_to_search(n_jobs: int, lanes: LaneConfig) -> str | None:
    """Why ``optimal`` cannot search a mix of *n_jobs* jobs on *lanes* (more than
    :data:`MAX_SEARCH` setups), or None when it can."""
    n_lanes = len(_job_lanes(lanes))
    setups = _setups([str(i) for i in range(n_jobs)], n_lanes)
    if sum(1 for _ in itertools.islice(setups, MAX_SEARCH + 1)) <= MAX_SEARCH:
        return None
    return f"{n_jobs} jobs on {n_lanes} lanes make more than {MAX_SEARCH} setups to try"


def best_of(
    model: str,
    net: Network,
    jobs: Sequence[SimJob],
    setups: Sequence[Arbitration],
    iterations: int,
    t_alone: dict[str, float],
    per: Granularity = "auto",
    buffer_packets: int | None = None,
) -> tuple[Outcome, list[float]]:
    """Each of *setups* run in *model*: the outcome of the one of least S (the first of
    equals), and every setup's S, in order (:meth:`RunSettings.best_of`)."""
    runs = RunSettings(model, net, jobs, iterations, per, buffer_packets)
    return runs.best_of(setups, t_alone)


def _setups(ids: Sequence[str], n_lanes: int) -> Iterator[tuple[list[list[str]], list[float]]]:
    """Every grouping of *ids* into at most *n_lanes* lanes, with every weight vector of the
    grid (up to a common factor)."""
    for groups in _partitions(list(ids), n_lanes):
        for weights in itertools.product(WEIGHT_GRID, repeat=len(groups)):
            if math.gcd(*weights) != 1 and len(groups) > 1:
                continue  # the same ratios as a smaller vector
            if len(groups) == 1 and weights[0] != 1:
                continue
            yield groups, [float(w) for w in weights]


def _partitions(items: list[str], most: int) -> Iterator[list[list[str]]]:
    """Set partitions of *items* into at most *most* blocks."""
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _partitions(rest, most):
        for i in range(len(part)):
            yield [*part[:i], [first, *part[i]], *part[i + 1 :]]
        if len(part) < most:
            yield [[first], *part]
