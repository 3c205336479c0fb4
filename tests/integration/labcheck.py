"""Checks shared by the backend tests that run against a real lab."""

from __future__ import annotations

import pandas as pd

from ibqos.fabric.targets import Target
from ibqos.fabric.topology import Port, Topology
from tests.support.agentrun import QUIET

__all__ = [
    "HOLD_SLOT",
    "JOBS",
    "MAD_BYTES",
    "QUIET",
    "check_against_lab",
    "lab_values",
    "port_of",
    "targets_from_topology",
]

MAD_BYTES = 288
JOBS = """jobs:
  - {id: "1", nodes: "cn[0001-0006]", pattern: all-to-all,
     rate_bytes_per_s: 2.0e9, duty: 0.5, period_s: 0.1}
  - {id: "2", nodes: "cn[0007-0008]", pattern: ring,
     rate_bytes_per_s: 1.0e9, duty: 1.0, period_s: 0.1}
"""
#: Opens the simulated umad device (one ibsim client) and holds it until stdin closes.
HOLD_SLOT = (
    "import ctypes, sys; lib = ctypes.CDLL('libibumad.so.3'); lib.umad_init(); "
    "print(lib.umad_open_port(b'ibsim0', 1), flush=True); sys.stdin.read()"
)


def targets_from_topology(topo: Topology) -> list[Target]:
    """PMA targets of every linked port: switch ports at the switch's LID, CA ports at
    their own.  (ibqos.fabric.model.Fabric.targets() is the real thing; this stays independent
    of it.)"""
    levels = topo.switch_levels()
    out: list[Target] = []
    for node in topo.nodes.values():
        assert node.guid is not None
        for port in topo.ports(node.id):
            if node.kind == "switch":
                peer = topo.peer(port)
                assert peer is not None
                up = levels.get(peer.node, 0) > levels[node.id]
                lid = topo.lids[Port(node.id, 0)]
                role = "up" if up else "down"
                out.append(Target(node.guid, node.desc, port.num, lid, levels[node.id], role, True))
            else:
                lid = topo.lids[port]
                out.append(Target(node.guid, node.desc, port.num, lid, 0, "host", False))
    return out


def port_of(topo: Topology, target: Target) -> Port:
    node = next(n for n in topo.nodes.values() if n.guid == target.node_guid)
    return Port(node.id, target.port)


def lab_values(lab, targets) -> pd.DataFrame:
    """What the lab wrote for each target, in bytes and packets."""
    rows = [lab.written.get(port_of(lab.topo, t), (0, 0, 0, 0)) for t in targets]
    return pd.DataFrame(
        {
            "xmit_bytes": [4 * r[0] for r in rows],
            "rcv_bytes": [4 * r[1] for r in rows],
            "xmit_pkts": [r[2] for r in rows],
            "rcv_pkts": [r[3] for r in rows],
        }
    )


def check_against_lab(table, want, mads):
    assert (table["error"] == "").all(), table["error"][table["error"] != ""].tolist()
    assert (table["counter_bits"] == 64).all()
    assert (table["xmit_wait"] == 0).all()  # the lab writes no PortCounters
    for col, per_mad in (
        ("xmit_bytes", MAD_BYTES),
        ("rcv_bytes", MAD_BYTES),
        ("xmit_pkts", 1),
        ("rcv_pkts", 1),
    ):
        got = table[col].astype("int64").to_numpy()
        low = want[col].to_numpy()
        assert (got >= low).all(), col
        assert (got <= low + per_mad * mads).all(), (col, (got - low).max(), per_mad * mads)
