"""What ``ibqos characterize`` does, below the CLI: fabric, placements, outputs, profiles.

The CLI (:mod:`ibqos.cli.characterize`) parses options and prints; these functions build
the characterization, render its files in memory and update the profile store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ibqos.characterize import report
from ibqos.classify.levels import Characterization, Characterizer
from ibqos.classify.profiles import (
    MAX_MATRIX_NODES,
    Model,
    Observation,
    Profile,
    ProfileStore,
    check_name,
)
from ibqos.classify.traffic import NodeTraffic
from ibqos.errors import TopologyError
from ibqos.fabric.given import given_fabric
from ibqos.fabric.hostnames import LAB_SM_HOSTNAME
from ibqos.fabric.model import Fabric, fabric_from_file
from ibqos.fabric.topology import Port
from ibqos.fabric.xgft import SM_HOSTNAME, XgftSpec, build_xgft
from ibqos.jobs.model import Job

#: placements characterized when none are asked for: compact, every other fragmentation
#: the tree allows (added by :func:`characterize`), and one random draw
DEFAULT_PLACEMENTS = ("contiguous", "random")


@dataclass(frozen=True)
class Run:
    """One characterization.

    Attributes:
        title: what was characterized, for plots and sources.
        fabric_name: the fabric (XGFT spec or topology file).
        placements: the placements asked for (first: the reference for a profile).
        spread: the job spread ever more thinly (for the spread plot).
    """

    title: str
    fabric_name: str
    placements: tuple[Characterization, ...]
    spread: tuple[Characterization, ...]


def fabric_of(
    xgft: str | None,
    topology: Path | None,
    width: int = 4,
    speed: str = "EDR",
    exclude_hosts: Sequence[str] = (LAB_SM_HOSTNAME,),
) -> tuple[Fabric, str, tuple[str, ...]]:
    """The fabric to characterize on, its name, and hosts that run no jobs.

    An XGFT is built as the lab builds it (:func:`ibqos.fabric.xgft.build_xgft`); its
    OpenSM host runs no jobs.  On either, neither do *exclude_hosts*
    (``jobs.exclude_hosts``): no rank is placed on the subnet manager's host.

    Raises:
        FabricChoiceError: neither or both given.
        TopologyError: a bad spec or file.
    """
    given = given_fabric(
        xgft, topology, "the fabric as --xgft SPEC or --topology FILE (one of them)"
    )
    exclude = tuple(exclude_hosts)
    if isinstance(given, XgftSpec):
        topo = build_xgft(given, width, speed)
        # LIDs only matter to PMA targets; numbering the ports keeps the fabric from
        # warning that none can be swept (no routes are needed: levels suffice)
        ports = [p for ca in topo.cas() for p in topo.ports(ca.id)]
        ports += [Port(sw.id, 0) for sw in topo.switches()]
        topo.lids.update({p: lid for lid, p in enumerate(ports, start=1)})
        return Fabric(topo, source=f"xgft {given}"), str(given), (*exclude, SM_HOSTNAME)
    return fabric_from_file(given), given.name, exclude


def characterize(
    characterizer: Characterizer,
    traffic: NodeTraffic,
    placements: Sequence[str],
    *,
    title: str,
    fabric_name: str,
    job_hosts: Sequence[str] = (),
) -> Run:
    """Characterize *traffic* on each placement and on every spread of its size.

    Raises:
        TopologyError: a placement the fabric cannot hold.
    """
    specs = list(placements) or list(DEFAULT_PLACEMENTS)
    chosen = [characterizer.placement(s, traffic.nodes, job_hosts) for s in specs]
    spread = characterizer.spreads(traffic.nodes)
    if not placements:  # the defaults: add the fragmentations between compact and random
        names = {p.name for p in chosen}
        chosen[1:1] = [p for p in spread if p.name not in names and p.hosts != chosen[0].hosts]
    return Run(
        title,
        fabric_name,
        tuple(characterizer.characterize(traffic, p) for p in chosen),
        tuple(characterizer.characterize(traffic, p) for p in spread),
    )


def outputs(run: Run, plot_format: str | None = "png") -> dict[str, bytes]:
    """The files of a run, rendered in memory: ``levels.csv``, ``levels.json``,
    ``levels.<fmt>`` and ``spread.<fmt>`` (no plots for *plot_format* None: the plots
    need matplotlib, of the ``characterize`` extra, and only files hold them)."""
    table = report.rows(run.placements)
    doc = {
        "title": run.title,
        "fabric": run.fabric_name,
        "placements": report.summary(run.placements),
        "spread": report.summary(run.spread),
    }
    files = {
        "levels.csv": report.to_csv(table).encode(),
        "levels.json": report.to_json(doc).encode(),
    }
    if plot_format is not None:
        files[f"levels.{plot_format}"] = report.plot_levels(run.placements, run.title, plot_format)
        files[f"spread.{plot_format}"] = report.plot_spread(run.spread, run.title, plot_format)
    return files


def model_of_trace(traffic: NodeTraffic) -> Model:
    """A profile model of traced traffic: its node matrix as relative weights of the whole
    matrix, and the mean bytes per second over all nodes as the rate (up to
    :data:`MAX_MATRIX_NODES` nodes; bigger ones keep only the rate, with all-to-all).

    :func:`ibqos.classify.prior.model_traffic` scales the weights back by that rate,
    so the model predicts the trace's own traffic, nodes that send nothing included.
    """
    rate = traffic.mean_injection_bytes_per_s()
    if traffic.nodes > MAX_MATRIX_NODES:
        return Model("all-to-all", rate)
    m = traffic.matrix()
    scale = float(m.max()) or 1.0
    # relative weights, rounded: the file stays readable and the shape is what matters
    weights = np.round(m / scale, 4)
    rows = tuple(tuple(float(x) for x in row) for row in weights)
    return Model("matrix", rate, matrix=rows)


def model_of_job(job: Job) -> Model:
    """A profile model of a lab job: its pattern, its mean rate (rate x duty) and its
    phases (duty, period), as an offline characterization run measures them.  A
    ``matrix`` job is kept as the traffic the lab gives it (each sending row at the full
    rate), in a profile's whole-matrix terms (:func:`model_of_trace`)."""
    duty, period = (job.duty, job.period_s) if job.has_rates else (None, None)
    if job.pattern == "matrix":
        return replace(model_of_trace(NodeTraffic.from_job(job)), duty=duty, period_s=period)
    return Model(
        job.pattern,
        job.rate_bytes_per_s * job.duty,
        halo_dims=job.halo_dims,
        matrix=job.matrix,
        duty=duty,
        period_s=period,
    )


def save_profile(
    store: ProfileStore,
    application: str,
    run: Run,
    model: Model,
    *,
    user: str | None = None,
    nodes: int | None = None,
    now_s: float | None = None,
) -> Profile:
    """Record a run in the application's profile: its model, its characterized
    placements, and the class on the first placement as an observation."""
    check_name(application, "application")
    if user is not None:
        check_name(user, "user")
    if nodes is not None and not model.fits(nodes):
        raise TopologyError(f"--nodes {nodes}: the traffic has another node count")
    if model.matrix is not None and nodes is None:
        nodes = len(model.matrix)  # a traced matrix only describes jobs of its size
    first = run.placements[0]
    obs = Observation(
        f"{run.title}: {first.placement} on {run.fabric_name}",
        first.cls,
        round(first.intensity, 6),
        None if now_s is None else round(now_s, 3),
    )
    return store.observe(
        application,
        obs,
        user=user,
        nodes=nodes,
        model=model,
        characterized=[
            {"fabric": run.fabric_name, **row} for row in report.summary(run.placements)
        ],
    )
