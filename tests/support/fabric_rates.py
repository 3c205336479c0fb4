"""Hand-made rates tables on the recorded 2-level lab fabric, shared by unit tests."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ibqos.attribute.jobmap import host_ports
from ibqos.fabric.model import Fabric, PortKey, fabric_from_file
from ibqos.jobs.model import Job
from tests.support.paths import TESTS

DATA = TESTS / "data" / "lab-xgft-2_8.4_1.2" / "ibnetdiscover.txt"


def rates(fabric: Fabric, xmit: dict[PortKey, float], default: float = 0.0) -> pd.DataFrame:
    """A rates table with ``xmit_bytes_per_s`` from *xmit*, *default* for other ports."""
    keys = list(fabric.ports)
    return pd.DataFrame(
        {
            "node_guid": np.array([k[0] for k in keys], dtype=np.uint64),
            "port": [k[1] for k in keys],
            "xmit_bytes_per_s": [xmit.get(k, default) for k in keys],
        }
    )


def leaf_up_ports(fabric: Fabric, leaf_desc: str) -> list[PortKey]:
    """The up ports of the leaf switch with that NodeDescription."""
    return [
        k
        for k, fp in fabric.ports.items()
        if fp.is_switch and fp.node_desc == leaf_desc and fp.role == "up"
    ]


def setup() -> tuple[Fabric, dict[str, PortKey]]:
    """The fabric (4 leaves of 8 hosts, 2 spines, 4x EDR) and each host's port."""
    fabric = fabric_from_file(DATA)
    return fabric, {host: keys[0] for host, keys in host_ports(fabric).items()}


# -- random workloads, for checking the vectorized paths against simple ones -------------


def hosts_of(fabric: Fabric) -> list[str]:
    """The compute hosts (cn....) of a fabric, in numbering order."""
    return sorted(h for h in host_ports(fabric) if h.startswith("cn"))


def random_jobs(
    fabric: Fabric, rng: np.random.Generator, n_jobs: int, prefix: str = "j"
) -> list[Job]:
    """*n_jobs* jobs of 1-6 hosts on a random half of the hosts: contiguous and scattered
    ones, sharing leaves, a third with a declared pattern, one host unknown to the fabric."""
    hosts = hosts_of(fabric)
    free = [hosts[i] for i in rng.permutation(len(hosts))]
    jobs = []
    for j in range(n_jobs):
        size = int(rng.integers(1, 7))
        if rng.random() < 0.5 and free:  # contiguous from a random free host
            start = hosts.index(free[0])
            nodes = [h for h in hosts[start : start + size] if h in free]
        else:
            nodes = free[:size]
        free = [h for h in free if h not in nodes]
        if j == 0:
            nodes.append("nosuchhost")
        pattern = ("", "", "ring", "all-to-all", "halo", "random-pairs")[j % 6]
        jobs.append(
            Job(f"{prefix}{j}", tuple(sorted(nodes)), pattern if len(nodes) > 1 else "", name="app")
        )
    return jobs


def random_rates(fabric: Fabric, rng: np.random.Generator, nan_share: float = 0.0) -> pd.DataFrame:
    """A rates table with random rates up to each port's capacity, some NaN."""
    table = rates(fabric, {})
    cap = np.array([fp.capacity_bytes_per_s for fp in fabric.ports.values()])
    xmit = cap * rng.random(len(cap))
    xmit[rng.random(len(cap)) < nan_share] = np.nan
    table["xmit_bytes_per_s"] = xmit
    return table


WAIT = 1000.0  # XmitWait ticks/s of every up port
INTERVAL = 10.0  # seconds between two sweeps


def full_rates(fabric: Fabric, xmit: dict) -> pd.DataFrame:
    """A rates table with the columns the snapshot reads, XmitWait on every up port."""
    table = rates(fabric, xmit)
    ports = list(fabric.ports.values())
    table["level"] = np.array([fp.level for fp in ports], dtype=np.uint8)
    table["role"] = pd.Series([fp.role for fp in ports], dtype=object)
    table["rcv_bytes_per_s"] = table["xmit_bytes_per_s"]
    table["xmit_wait_per_s"] = [WAIT if fp.role == "up" else 0.0 for fp in ports]
    table["interval_s"] = INTERVAL
    return table
