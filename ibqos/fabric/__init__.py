"""The fabric: its topology as ibnetdiscover writes it, and the fat-tree model built on it.

- :mod:`~ibqos.fabric.topology`: ibnetdiscover output parsed and written (nodes, ports, links);
- :mod:`~ibqos.fabric.portlist`: ``ibnetdiscover -p`` (a ports list) read, and the choice of layout;
- :mod:`~ibqos.fabric.model`: the fat tree (levels, port roles, uplink capacities, PMA targets);
- :mod:`~ibqos.fabric.diff`: what changed between two discoveries;
- :mod:`~ibqos.fabric.hostnames`: host names read from NodeDescriptions;
- :mod:`~ibqos.fabric.routes`: OpenSM's forwarding tables (``opensm-lfts.dump``) as routes;
- :mod:`~ibqos.fabric.lfts`: forwarding tables from ``ibroute`` output, whole dumps, coverage;
- :mod:`~ibqos.fabric.xgft`: extended generalized fat trees (XGFT) generated from a shape;
- :mod:`~ibqos.fabric.given`: a command's fabric, ``--xgft`` or ``--topology``.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ibqos.fabric.diff import FabricChange, PortChange, diff_fabrics
    from ibqos.fabric.given import given_fabric
    from ibqos.fabric.hostnames import HostMatcher
    from ibqos.fabric.lfts import Tables, missing_switches, parse_ibroute, read_lft_dump
    from ibqos.fabric.model import (
        Fabric,
        FabricPort,
        PortKey,
        fabric_from_file,
        fabric_from_ibnetdiscover,
        fabric_from_text,
    )
    from ibqos.fabric.routes import Router, parse_lft_dump
    from ibqos.fabric.targets import Role, Target
    from ibqos.fabric.topology import (
        Link,
        Node,
        Port,
        Topology,
        format_ibnetdiscover,
        parse_ibnetdiscover,
    )
    from ibqos.fabric.xgft import XgftSpec, build_xgft, parse_xgft
else:
    from ibqos.lazy import attach

    __getattr__, __dir__ = attach(
        __name__,
        {
            ".diff": ("FabricChange", "PortChange", "diff_fabrics"),
            ".given": ("given_fabric",),
            ".hostnames": ("HostMatcher",),
            ".lfts": ("Tables", "missing_switches", "parse_ibroute", "read_lft_dump"),
            ".model": (
                "Fabric",
                "FabricPort",
                "PortKey",
                "fabric_from_file",
                "fabric_from_ibnetdiscover",
                "fabric_from_text",
            ),
            ".routes": ("Router", "parse_lft_dump"),
            ".targets": ("Role", "Target"),
            ".topology": (
                "Link",
                "Node",
                "Port",
                "Topology",
                "format_ibnetdiscover",
                "parse_ibnetdiscover",
            ),
            ".xgft": ("XgftSpec", "build_xgft", "parse_xgft"),
        },
    )

__all__ = [
    "Fabric",
    "FabricChange",
    "FabricPort",
    "HostMatcher",
    "Link",
    "Node",
    "Port",
    "PortChange",
    "PortKey",
    "Role",
    "Router",
    "Tables",
    "Target",
    "Topology",
    "XgftSpec",
    "build_xgft",
    "diff_fabrics",
    "fabric_from_file",
    "fabric_from_ibnetdiscover",
    "fabric_from_text",
    "format_ibnetdiscover",
    "given_fabric",
    "missing_switches",
    "parse_ibnetdiscover",
    "parse_ibroute",
    "parse_lft_dump",
    "parse_xgft",
    "read_lft_dump",
]
