"""The closed-loop benchmark's job mixes and fabric: its named mixes on the lab fabric
:data:`XGFT`, one of them of real applications' matrices (:func:`apps_mix`), or an
admin's own job file on any fabric (:func:`own_mix`, :func:`fabric`).

A mix's jobs are job file entries (``id``, ``nodes``, ``pattern``, ``rate_bytes_per_s``,
``duty``, ``period_s``, ...), as the lab's traffic model and the agent read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.sim import apps
from bench.sim.generate import interleave
from ibqos.errors import TopologyError
from ibqos.fabric.given import given_fabric
from ibqos.fabric.topology import Topology, parse_ibnetdiscover
from ibqos.fabric.xgft import XgftSpec, build_xgft
from ibqos.jobs.jobfile import check_hosts, load_jobs
from ibqos.lab.files import normalize_for_ibsim

#: the lab fabric of the named mixes: 4 leaves of 8 hosts, 2 spines (4:1)
XGFT = "2;8,4;1,2"


def _job(
    jid: str,
    name: str,
    nodes: str,
    pattern: str,
    rate: float,
    duty: float,
    period: float,
    **extra: Any,
) -> dict[str, Any]:
    job = {
        "id": jid,
        "name": name,
        "nodes": nodes,
        "pattern": pattern,
        "rate_bytes_per_s": rate,
        "duty": duty,
        "period_s": period,
    }
    return job | extra


@dataclass(frozen=True)
class Mix:
    """A job mix of the benchmark: its jobs, lanes the agent may use, and what it shows."""

    name: str
    note: str
    jobs: tuple[dict[str, Any], ...]
    lanes: Mapping[str, Any]


MIXES = (
    Mix(
        "two",
        "heavy all-to-all + moderate all-to-all, interleaved on leaves 1-2",
        (
            _job("H", "ft", "cn[0001-0004,0009-0012]", "all-to-all", 1.0e10, 0.8, 0.1),
            _job("M", "cg", "cn[0005-0006,0013-0014]", "all-to-all", 1.0e10, 0.4, 0.05),
        ),
        {},
    ),
    Mix(
        "three",
        "heavy all-to-all, moderate halo, light ring; interleaved over 4 leaves",
        (
            _job(
                "H",
                "ft",
                "cn[0001-0002,0009-0010,0017-0018,0025-0026]",
                "all-to-all",
                1.0e10,
                0.8,
                0.1,
            ),
            _job(
                "M",
                "lammps",
                "cn[0003,0011,0019,0027]",
                "halo",
                1.0e10,
                0.5,
                0.05,
                halo_dims=[2, 2],
            ),
            _job("L", "wrf", "cn[0004,0012,0020,0028]", "ring", 4.0e9, 0.3, 0.05),
        ),
        {},
    ),
    Mix(
        "four",
        "heavy all-to-all, moderate halo, two light; contiguous placement",
        (
            _job("H", "ft", "cn[0001-0012]", "all-to-all", 8.0e9, 0.8, 0.1),
            _job("M", "lammps", "cn[0013-0020]", "halo", 1.0e10, 0.5, 0.05, halo_dims=[2, 4]),
            _job("L1", "wrf", "cn[0021-0026]", "ring", 5.0e9, 0.3, 0.05),
            _job("L2", "cp2k", "cn[0027-0032]", "all-to-all", 2.0e9, 0.4, 0.1),
        ),
        {},
    ),
    Mix(
        "six-on-3",
        "2 heavy, 2 moderate, 2 light on 3 data VLs (lanes.data_vls 3); interleaved",
        (
            _job("H1", "ft", "cn[0001-0002,0009-0010]", "all-to-all", 1.0e10, 0.8, 0.1),
            _job("H2", "fft", "cn[0017-0018,0025-0026]", "all-to-all", 1.0e10, 0.8, 0.1),
            _job(
                "M1",
                "lammps",
                "cn[0003,0011,0019,0027]",
                "halo",
                8.0e9,
                0.5,
                0.05,
                halo_dims=[2, 2],
            ),
            _job("M2", "namd", "cn[0004-0005,0012-0013]", "all-to-all", 8.0e9, 0.4, 0.1),
            _job("L1", "wrf", "cn[0006,0014,0020,0028]", "ring", 3.0e9, 0.3, 0.05),
            _job("L2", "cp2k", "cn[0007,0015,0021,0029]", "ring", 2.0e9, 0.3, 0.1),
        ),
        {"data_vls": 3, "vlarb_low_cap": 3},
    ),
)


#: the real applications of :func:`apps_mix`: (job id, application, rate while
#: communicating in bytes/s, duty, period in seconds); phases chosen, as in
#: :data:`bench.sim.apps.APP_MIXES`
APPS = (
    ("LU", "lulesh", 1.0e10, 0.5, 0.1),
    ("CG", "cg", 8.0e9, 0.4, 0.05),
    ("AMG", "amg2013", 4.0e9, 0.3, 0.1),
    ("FE", "minife", 6.0e9, 0.35, 0.05),
)


def apps_mix() -> Mix:
    """Four real applications' matrices (their 64 ranks on 8 hosts each, 8 ranks a host)
    interleaved over the 4 leaves of :data:`XGFT`: hosts 1-2 of every leaf to the first,
    3-4 to the second, and so on."""
    by_leaf = [[f"cn{leaf * 8 + k + 1:04d}" for k in range(8)] for leaf in range(4)]
    placed = interleave([8] * len(APPS), by_leaf)
    jobs = tuple(
        apps.job_dict(apps.app_job(jid, app, nodes, rate, duty, period))
        for (jid, app, rate, duty, period), nodes in zip(APPS, placed, strict=True)
    )
    return Mix("apps", "LULESH, CG, AMG2013, miniFE matrices (8 hosts each), interleaved", jobs, {})


#: every named mix
ALL_MIXES = (*MIXES, apps_mix())


def fabric(xgft: str | None, topology: Path | None) -> tuple[Topology, str]:
    """The lab's fabric and its label: the XGFT *xgft*, the ibnetdiscover file
    *topology*, or :data:`XGFT` when neither is given.

    Raises:
        FabricChoiceError: both given.
        TopologyError: a bad XGFT spec, or a file that cannot be read or parsed.
    """
    if xgft is None and topology is None:
        xgft = XGFT
    given = given_fabric(xgft, topology, "--xgft SPEC or --topology FILE, not both")
    if isinstance(given, XgftSpec):
        return build_xgft(given), f"XGFT {xgft}"
    try:
        text = given.read_text()
    except OSError as err:
        raise TopologyError(f"--topology {given}: cannot read: {err.strerror}") from err
    return normalize_for_ibsim(parse_ibnetdiscover(text, str(given))), f"topology {given.name}"


def own_mix(path: Path, topo: Topology) -> Mix:
    """The job file *path* as a mix (named after the file), its jobs checked as the lab
    reads them (the traffic keys required) and against *topo*'s hosts.

    Raises:
        JobsError: the file cannot be read, a job lacks its traffic keys, or a host is
            not on the fabric.
    """
    jobs = load_jobs(path, traffic=True)
    check_hosts(jobs, hosts(topo), str(path))
    entries = tuple(apps.job_dict(j) for j in jobs)
    return Mix(path.stem, f"the jobs of {path.name}", entries, {})


def hosts(topo: Topology) -> set[str]:
    """The host names of *topo*'s channel adapters."""
    return {ca.hostname for ca in topo.cas()}
