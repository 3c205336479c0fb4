"""Hand-made rates tables on the recorded 2-level lab fabric, shared by unit tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ibqos.fabric import Fabric, PortKey, fabric_from_file
from ibqos.jobmap import host_ports

DATA = Path(__file__).parent.parent / "data" / "lab-xgft-2_8.4_1.2" / "ibnetdiscover.txt"


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
