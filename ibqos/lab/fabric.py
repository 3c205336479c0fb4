"""The fabric model of a lab, read from the lab itself."""

from __future__ import annotations

from collections.abc import Collection

from ibqos.errors import TopologyError
from ibqos.fabric.model import Fabric, fabric_from_file
from ibqos.fabric.topology import Port, Topology
from ibqos.lab.lab import Lab


def fabric_from_lab(lab: Lab, *, root_guids: Collection[int] | None = None) -> Fabric:
    """(c) Build the fabric of a lab from the lab itself, without any MAD.

    The lab's own topology (``lab.topo``: what ibsim simulates) is used when it holds the
    LIDs, i.e. in the process that started the lab (it learns them at start).  A ``Lab``
    opened from another process does not know them, so then the lab's
    ``ibnetdiscover.txt``, recorded at start, is read instead.

    Raises:
        TopologyError: the lab has no LIDs and no recorded ``ibnetdiscover.txt`` (it was
            never started), or its topology is not a usable fat tree.
    """
    topo = lab.topo
    source = f"lab {lab.paths.name}"
    if _has_lids(topo):
        return Fabric(topo, source=source, root_guids=root_guids)
    path = lab.paths.discovered
    if not path.exists():
        raise TopologyError(f"{source}: no LIDs known and no {path}: is the lab started?")
    return fabric_from_file(path, root_guids=root_guids)


def _has_lids(topo: Topology) -> bool:
    """Every switch has a port-0 LID and every linked CA port a LID (0 is "none": the lab
    writes it into its net file before OpenSM has assigned any)."""
    return all(topo.lids.get(Port(s.id, 0)) for s in topo.switches()) and all(
        topo.lids.get(p) for ca in topo.cas() for p in topo.ports(ca.id)
    )
