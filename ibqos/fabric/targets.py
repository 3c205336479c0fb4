"""The ports whose PMA counters ibqos reads, as the fabric model lists them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Role = Literal["host", "down", "up"]


@dataclass(frozen=True)
class Target:
    """One port whose PMA counters are read.

    Attributes:
        node_guid: node GUID.
        node_desc: NodeDescription of the node.
        port: port number.
        lid: LID to send the PMA query to: the CA port's LID, or the switch's (port 0) LID.
        level: fat-tree level of the node: 0 for a CA, 1 for a leaf switch, then upward.
        role: "host" (a CA port), "down" (a switch port towards a lower level or a CA) or
            "up" (a switch port towards a higher level).
        is_switch: the node is a switch (PortSelect selects the port; AllPortSelect may work).
        capacity_bytes_per_s: data capacity of the port's link in each direction, bytes
            per second (width x lane data rate); 0 when unknown (a recording's ports),
            and then rates of the port are not checked against it.
    """

    node_guid: int
    node_desc: str
    port: int
    lid: int
    level: int
    role: Role
    is_switch: bool
    capacity_bytes_per_s: float = 0.0
