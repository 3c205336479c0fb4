"""The running jobs as a live agent can simulate them: from what it measured, not declared;
and the routes they take (:func:`network_for`).

A job file may carry the lab's traffic keys (``rate_bytes_per_s``, ``duty``, ``period_s``),
but those describe what the lab (or the simulator) makes a job do: on a real fabric nobody
declares them, and a prediction that read them would be checking the simulator against
itself.  :func:`estimate_jobs` never reads them.  Per job it takes:

- **hosts**: those of its decision report (found on the fabric);
- **how much**: its level-0 rate in the decision, the bytes per second its hosts injected
  over the last cycle (exact: nodes are exclusive, so their own ports count only them);
- **where to**: the pattern it declares (``Job.pattern`` with its ``halo_dims``,
  ``matrix``, ``seed``), else its confident profile's model pattern, as the decider uses
  it for attribution (:meth:`ibqos.classify.prior.Priors.profile`), else gravity, which
  for the hosts of one job is all-to-all;
- **when**: its phases (share of time communicating, iteration length) from *phases*
  where known (e.g. from a profile that records them), else :data:`ASSUMED_PHASES`.

The rate while communicating is then ``mean / duty`` per sending host, capped at the
slowest of its hosts' links; a capped job keeps its mean by communicating longer (its duty
raised to ``mean / link``).  The measured mean is what the job did under the setup in
force: a job slowed there iterates less often and measures less than it would alone, so
its burst rate comes out low by as much as it was slowed
(:func:`ibqos.sim.predict.calibrate` corrects that).

Jobs injecting less than :data:`QUIET_BYTES_PER_S` per host (management MADs, a job
still starting) or with one host on the fabric are left out, with a note.

Units: bytes per second, seconds; duty a share of the iteration.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ibqos.attribute.patterns import traffic_matrix
from ibqos.classify.prior import Priors
from ibqos.errors import LabError, SimError
from ibqos.fabric.routes import parse_lft_dump
from ibqos.fabric.topology import Topology
from ibqos.jobs.model import Job
from ibqos.plan.report import Decision, JobReport
from ibqos.sim.network import Network, dmodk_lfts

__all__ = [
    "ASSUMED_PHASES",
    "QUIET_BYTES_PER_S",
    "Estimate",
    "Phases",
    "estimate_jobs",
    "injected",
    "network_for",
]

#: below this per host (bytes/s, e.g. management MADs), a job counts as not communicating
QUIET_BYTES_PER_S = 1e6


@dataclass(frozen=True)
class Phases:
    """A job's iteration: the share of it spent communicating, and its length.

    Attributes:
        duty: share of each iteration spent communicating, (0, 1].
        period_s: iteration length alone on the fabric, seconds.
    """

    duty: float
    period_s: float

    def __post_init__(self) -> None:
        if not 0 < self.duty <= 1 or not self.period_s > 0:
            raise SimError(f"phases: duty in (0, 1] and period_s > 0, got {self}")


#: The phases assumed for a job whose phases nobody recorded.  Half of each iteration
#: communicating: bursts at twice the measured mean, so that bursts of different jobs can
#: collide and lanes and weights matter as they do on the fabric; a duty of 1 would turn
#: every job into a smooth flow at its mean, under which only links overloaded on average
#: contend and every weighting predicts the same.  0.5 is the middle of what the duty can
#: be, the least wrong guess in the worst case either way.  10 ms iterations: the order of
#: the ms-scale iterations of the lab and the evaluation.  In the model without switch
#: buffers the iteration length only matters relative to other jobs' (scaling every
#: period scales every time), so among jobs that are all assumed it changes nothing.
ASSUMED_PHASES = Phases(0.5, 0.01)


@dataclass(frozen=True)
class Estimate:
    """The jobs to simulate and how each was estimated.

    Attributes:
        jobs: the jobs, in the order given, each with a pattern, a rate while
            communicating, a duty and a period (the simulator's traffic keys, estimated).
        notes: one line per job: how it was estimated, or why it was left out.
    """

    jobs: tuple[Job, ...]
    notes: tuple[str, ...]


def estimate_jobs(
    net: Network,
    jobs: Sequence[Job],
    decision: Decision,
    priors: Priors | None = None,
    phases: Mapping[str, Phases] | None = None,
    assumed: Phases = ASSUMED_PHASES,
) -> Estimate:
    """The running jobs as measured, ready for :func:`ibqos.sim.workload.prepare`.

    Args:
        net: the fabric (for its hosts' link capacities).
        jobs: the running jobs as their source gave them (never their traffic keys).
        decision: the last cycle's decision (each job's hosts and measured rates).
        priors: the profiles the decider matches jobs with; None: none.
        phases: known phases by job id (e.g. recorded in its profile).
        assumed: the phases of the others (see :data:`ASSUMED_PHASES`).
    """
    reports = {r.id: r for r in decision.jobs}
    out: list[Job] = []
    notes: list[str] = []
    for job in jobs:
        report = reports.get(job.id)
        if report is None:
            continue  # not planned this cycle: nothing measured
        if len(report.nodes) < 2:
            notes.append(f"job {job.id}: {len(report.nodes)} host on the fabric, left out")
            continue
        injected = report.levels[0].bytes_per_s if 0 in report.levels else math.nan
        mean = injected / len(report.nodes)
        if not math.isfinite(mean) or mean < QUIET_BYTES_PER_S:
            notes.append(f"job {job.id}: nothing measured to simulate, left out")
            continue
        shape, source = _pattern(job, report, priors)
        known = (phases or {}).get(job.id)
        est, capped = _rated(net, shape, injected, known or assumed)
        out.append(est)
        how = "phases known" if known is not None else "phases assumed"
        cap = ", capped at its link" if capped else ""
        notes.append(
            f"job {job.id}: {est.pattern} ({source}) at {mean / 1e9:.2f} GB/s per host on"
            f" average; {how}: duty {est.duty:.2f}, period {est.period_s * 1e3:g} ms,"
            f" bursts at {est.rate_bytes_per_s / 1e9:.2f} GB/s{cap}"
        )
    return Estimate(tuple(out), tuple(notes))


def injected(decision: Decision) -> dict[str, float]:
    """Bytes per second each job's hosts injected in the decision's cycle (its level 0),
    by job id; jobs with nothing measured there are left out."""
    out = {}
    for r in decision.jobs:
        rate = r.levels[0].bytes_per_s if 0 in r.levels else math.nan
        if math.isfinite(rate):
            out[r.id] = rate
    return out


def _pattern(job: Job, report: JobReport, priors: Priors | None) -> tuple[Job, str]:
    """A job of the report's hosts with a pattern (no rates yet), and where it came from."""
    nodes = report.nodes
    bare = Job(job.id, nodes, name=job.name, user=job.user, start_time=job.start_time)
    if job.pattern and _fits(job.halo_dims, job.matrix, len(nodes)):
        shaped = replace(
            bare, pattern=job.pattern, halo_dims=job.halo_dims, matrix=job.matrix, seed=job.seed
        )
        return shaped, "declared"
    profile = priors.profile(job) if priors is not None else None
    model = profile.model if profile is not None else None
    if model is not None and model.fits(len(nodes)):
        shaped = replace(bare, pattern=model.pattern, halo_dims=model.halo_dims, seed=job.seed)
        if model.matrix is not None:
            shaped = replace(shaped, matrix=model.matrix)
        return shaped, f"profile {profile.application if profile else ''}".strip()
    return replace(bare, pattern="all-to-all"), "gravity"


def _fits(
    halo_dims: tuple[int, ...] | None, matrix: tuple[tuple[float, ...], ...] | None, n: int
) -> bool:
    """A declared pattern's shape fits the hosts found (some may be missing)."""
    if matrix is not None and len(matrix) != n:
        return False
    return halo_dims is None or math.prod(halo_dims) == n


def _rated(net: Network, shape: Job, injected: float, phases: Phases) -> tuple[Job, bool]:
    """*shape* with the rate while communicating that gives *injected* bytes/s on average
    at *phases*, capped at its slowest host link; and whether it was capped."""
    unit = replace(shape, rate_bytes_per_s=1.0, duty=1.0, period_s=1.0)
    per_unit = float(traffic_matrix(unit).sum())  # bytes/s the job sends at rate 1
    if per_unit <= 0:
        raise SimError(f"job {shape.id}: its pattern {shape.pattern} sends nothing")
    missing = [h for h in shape.nodes if h not in net.hosts]
    if missing:
        raise SimError(f"job {shape.id}: host {missing[0]} is not on the simulated fabric")
    link = min(float(net.capacity[net.router.port_index[net.hosts[h]]]) for h in shape.nodes)
    mean_rate = injected / per_unit  # per sending host, always communicating
    rate = mean_rate / phases.duty
    duty = phases.duty
    capped = rate > link
    if capped:
        rate, duty = link, min(mean_rate / link, 1.0)
    return replace(shape, rate_bytes_per_s=rate, duty=duty, period_s=phases.period_s), capped


def network_for(topo: Topology, lft_dump: Path | None = None) -> Network:
    """The fabric with the routes the jobs' traffic takes.

    With *lft_dump*, OpenSM's own forwarding tables, from its ``opensm-lfts.dump``:
    OpenSM writes that file (with ``opensm-lid-matrix.dump``, ``opensm.fdbs`` and others,
    in ``osm_dump_all``) at the end of every heavy sweep (the first, one after a fabric
    change, one forced by SIGHUP) that ends without initialization errors, but only while
    the ROUTING log flag (0x40) is on, globally (``log_flags``) or for ``osm_dump.c`` in
    ``per_module_logging_file``; it goes in ``dump_files_dir`` of opensm.conf, by default
    ``$OSM_TMP_DIR``, else ``/var/log/``.  Without it, D-mod-K over *topo*
    (:func:`ibqos.sim.network.dmodk_lfts`), which is how ftree and updn spread
    destinations on a fat tree, not necessarily the tables in force.

    Raises:
        SimError: the dump cannot be read or parsed.
        TopologyError: D-mod-K does not apply to *topo*.
    """
    if lft_dump is None:
        return Network(topo, dmodk_lfts(topo))
    try:
        tables = parse_lft_dump(lft_dump.read_text(), str(lft_dump))
    except OSError as err:
        raise SimError(f"{lft_dump}: {err.strerror}") from err
    except LabError as err:  # the parser is the lab's; here it is a simulator input
        raise SimError(str(err)) from err
    return Network(topo, tables)
