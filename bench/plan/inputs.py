"""The inputs of :mod:`bench.plan.bench` (and :mod:`bench.metrics.bench`): synthetic
fabrics, workloads, rates tables and job churn, all drawn from a seeded generator (see
:mod:`bench.plan.bench`'s docstring)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ibqos.fabric.model import Fabric
from ibqos.fabric.routes import Router
from ibqos.fabric.topology import Port, Topology
from ibqos.jobs.model import PATTERNS, Job

#: fabric sizes: three-level XGFTs with 1058, 10754 and 50178 ports
SHAPES: dict[str, str] = {
    "1k": "3;8,6,6;1,4,4",  # 288 hosts, 76 switches
    "10k": "3;16,16,12;1,8,8",  # 3072 hosts, 352 switches
    "50k": "3;16,16,56;1,8,8",  # 14336 hosts, 1408 switches
}
OCCUPANCY = 0.9  # share of the hosts running jobs
CONTIGUOUS = 0.7  # share of jobs placed on consecutive hosts
WITH_PATTERN = 0.1  # share of jobs that declare a pattern
CHURN = 0.01  # share of the jobs replaced every churn cycle
SEED = 11
PEERS = 4  # peers each host sends to, in routed_tables
APPS = ("lammps", "gromacs", "wrf", "namd", "openfoam", "cp2k", "vasp", "hpl")


def build_fabric(topo: Topology) -> Fabric:
    """The fabric model of an XGFT topology, with LIDs (as after OpenSM's sweep) so that
    every port is a PMA target."""
    lid = 1
    for node in topo.nodes.values():
        for port in [Port(node.id, 0)] if node.kind == "switch" else topo.ports(node.id):
            topo.lids[port] = lid
            lid += 1
    return Fabric(topo, source="xgft")


def hosts_of(fabric: Fabric) -> list[str]:
    """The compute hosts in numbering order (cn0001 ...; not the OpenSM host)."""
    names = {fp.node_desc.split()[0] for fp in fabric.ports.values() if fp.role == "host"}
    return sorted(n for n in names if n.startswith("cn"))


def workload(hosts: list[str], n_jobs: int, rng: np.random.Generator) -> tuple[Job, ...]:
    """*n_jobs* jobs on about ``OCCUPANCY`` of *hosts* (see the module docstring)."""
    budget = int(len(hosts) * OCCUPANCY)
    if budget < n_jobs:
        raise ValueError(f"{n_jobs} jobs do not fit on {len(hosts)} hosts")
    raw = rng.lognormal(0.0, 1.2, n_jobs)
    sizes = np.maximum(1, np.floor(raw / raw.sum() * budget)).astype(int)
    while sizes.sum() > budget:  # rounding up to 1 host may overshoot a little
        sizes[np.argmax(sizes)] -= 1
    contiguous = rng.random(n_jobs) < CONTIGUOUS
    # lay every job out along the host numbering in random order, with idle hosts between
    idle = len(hosts) - int(sizes.sum())
    gaps = np.bincount(rng.integers(0, n_jobs + 1, idle), minlength=n_jobs + 1)
    blocks: dict[int, list[int]] = {}
    at = int(gaps[0])
    for k, j in enumerate(rng.permutation(n_jobs)):
        blocks[int(j)] = list(range(at, at + int(sizes[j])))
        at += int(sizes[j]) + int(gaps[k + 1])
    # fragmented jobs: their hosts and the idle ones, shuffled among them
    loose = [h for j in range(n_jobs) if not contiguous[j] for h in blocks[j]]
    loose += sorted(set(range(len(hosts))) - {h for b in blocks.values() for h in b})
    loose = [loose[i] for i in rng.permutation(len(loose))]
    for j in range(n_jobs):
        if not contiguous[j]:
            blocks[j], loose = sorted(loose[: sizes[j]]), loose[sizes[j] :]
    patterns = [p for p in PATTERNS if p != "matrix"]
    jobs = []
    for j in range(n_jobs):
        declared = rng.random() < WITH_PATTERN and sizes[j] > 1
        jobs.append(
            Job(
                id=str(100000 + j),
                nodes=tuple(hosts[h] for h in blocks[j]),
                pattern=patterns[int(rng.integers(len(patterns)))] if declared else "",
                name=APPS[int(rng.integers(len(APPS)))],
                user=f"user{int(rng.integers(50)):02d}",
                start_time=1.7e9 + j,
            )
        )
    return tuple(jobs)


def rates_tables(
    fabric: Fabric, jobs: tuple[Job, ...], rng: np.random.Generator, count: int
) -> list[pd.DataFrame]:
    """*count* rates tables (rows in topology order, as a sweep gives them)."""
    keys = list(fabric.ports)
    ports = [fabric.ports[k] for k in keys]
    cap = np.array([fp.capacity_bytes_per_s for fp in ports])
    role = np.array([fp.role for fp in ports])
    level = np.array([fp.level for fp in ports])
    host = [fp.node_desc.split()[0] if fp.role == "host" else "" for fp in ports]
    job_of = {h: j for j, job in enumerate(jobs) for h in job.nodes}
    row_job = np.array([job_of.get(h, -1) for h in host])
    # job intensity: most jobs light, some heavy (a share of the link, before noise)
    base = np.clip(rng.lognormal(np.log(0.08), 1.0, len(jobs)), 0.0, 1.0)
    tables = []
    for _ in range(count):
        util = np.clip(base * rng.lognormal(0.0, 0.3, len(jobs)), 0.0, 1.0)
        xmit = np.zeros(len(keys))
        hosts_row = row_job >= 0
        xmit[hosts_row] = cap[hosts_row] * util[row_job[hosts_row]] * rng.uniform(0.8, 1.2)
        xmit[(role == "host") & ~hosts_row] = 1e6  # idle hosts and the SM: a trickle
        for lvl in range(1, fabric.height):
            comp = fabric.components(lvl)
            sub_host = np.array([comp[fp.node_id] if fp.role == "host" else -1 for fp in ports])
            up = (role == "up") & (level == lvl)
            sub_up = np.array([comp.get(fp.node_id, -1) if fp.role == "up" else -1 for fp in ports])
            n_sub = int(max(sub_host.max(), sub_up.max())) + 1
            out_share = 0.6 / lvl  # less traffic leaves larger subtrees
            sent = np.bincount(
                sub_host[sub_host >= 0],
                weights=xmit[sub_host >= 0] * out_share,
                minlength=n_sub,
            )
            n_up = np.bincount(sub_up[up], minlength=n_sub)
            each = sent[sub_up[up]] / n_up[sub_up[up]]
            xmit[up] = np.minimum(cap[up], each * rng.uniform(0.7, 1.3, int(up.sum())))
        down = role == "down"
        xmit[down] = cap[down] * rng.uniform(0.0, 0.3, int(down.sum()))
        tables.append(
            pd.DataFrame(
                {
                    "node_guid": np.array([k[0] for k in keys], dtype=np.uint64),
                    "port": np.array([k[1] for k in keys], dtype=np.uint8),
                    "level": level.astype(np.uint8),
                    "role": role.astype(object),
                    "xmit_bytes_per_s": xmit,
                }
            )
        )
    return tables


def routed_tables(
    fabric: Fabric,
    lfts: dict[int, dict[int, int]],
    jobs: tuple[Job, ...],
    rng: np.random.Generator,
    count: int,
) -> list[pd.DataFrame]:
    """*count* rates tables whose counters are the jobs' flows routed over *lfts*: every
    port's transmit and receive rates agree with the flows (what the routes fit needs).

    Each host of a job sends to up to ``PEERS`` of the job's hosts (drawn once), an even
    share of its injection each; a job's injection is its intensity (log-normal, as
    :func:`rates_tables`) times its hosts' link capacity, with noise per table.
    """
    topo = fabric.topo
    router = Router(topo, lfts)
    ca_port = {n.hostname: next(iter(topo.ports(n.id))) for n in topo.cas()}
    src: list[int] = []
    dst: list[int] = []
    owner: list[int] = []
    for j, job in enumerate(jobs):
        ports = [router.port_index[ca_port[h]] for h in job.nodes]
        n = len(ports)
        for i, p in enumerate(ports):
            peers = [k for k in rng.choice(n, size=min(n, PEERS + 1), replace=False) if k != i]
            for k in peers[:PEERS]:
                src.append(p)
                dst.append(ports[int(k)])
                owner.append(j)
    src_a, dst_a = np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64)
    dlid = np.array([topo.lids[router.ports[d]] for d in dst], dtype=np.int64)
    owner_a = np.array(owner, dtype=np.int64)
    fan = np.bincount(src_a, minlength=len(router.ports))[src_a]  # flows per source
    cap = np.array([fabric.ports[k].capacity_bytes_per_s for k in fabric.ports])
    base = np.clip(rng.lognormal(np.log(0.08), 1.0, len(jobs)), 0.0, 1.0)
    guid = [topo.nodes[p.node].guid for p in router.ports]
    dense = {(g, p.num): i for i, (g, p) in enumerate(zip(guid, router.ports, strict=True))}
    rows = np.array([dense[k] for k in fabric.ports], dtype=np.int64)
    keys = list(fabric.ports)
    tables = []
    for _ in range(count):
        util = np.clip(base * rng.lognormal(0.0, 0.3, len(jobs)), 0.0, 1.0)
        weight = cap.max() * util[owner_a] / fan
        xmit, rcv = router.route(src_a, dlid, dst_a, weight)
        tables.append(
            pd.DataFrame(
                {
                    "node_guid": np.array([k[0] for k in keys], dtype=np.uint64),
                    "port": np.array([k[1] for k in keys], dtype=np.uint8),
                    "xmit_bytes_per_s": xmit[rows],
                    "rcv_bytes_per_s": rcv[rows],
                }
            )
        )
    return tables


def churned(jobs: tuple[Job, ...], rng: np.random.Generator, cycles: int) -> list[tuple[Job, ...]]:
    """The running jobs of *cycles* cycles of churn: in each, ``CHURN`` of the jobs (at
    least one) end and as many start on their hosts (new ids, appended, as a job source
    lists them)."""
    out = []
    next_id = 900000
    for _ in range(cycles):
        n = max(1, round(len(jobs) * CHURN))
        ended = set(rng.choice(len(jobs), n, replace=False).tolist())
        started = []
        for j in sorted(ended):
            started.append(
                Job(
                    id=str(next_id),
                    nodes=jobs[j].nodes,
                    pattern=jobs[j].pattern,
                    name=APPS[int(rng.integers(len(APPS)))],
                    user=jobs[j].user,
                    start_time=2.0e9 + next_id,
                )
            )
            next_id += 1
        jobs = (*(job for j, job in enumerate(jobs) if j not in ended), *started)
        out.append(jobs)
    return out
