"""The lanes the planner may use: the ``lanes`` config with its ``auto`` values resolved.

``auto`` (the default) for ``data_vls``, ``vlarb_low_cap``, ``vlarb_high_cap`` and ``mtu``
reads them from the ports' PortInfo (``ibqos.collect.portinfo``: OperVLs, VLArbLowCap/HighCap,
NeighborMTU, the least any sampled port has), and for ``routing_engine`` from the
``routing_engine`` option of OpenSM's own opensm.conf.  When they cannot be read (a replayed
recording, a port that does not answer, no opensm.conf) the configured fallbacks stand and
a note says so; values given in the config are never overridden.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

from ibqos.collect.portinfo import LaneCaps, read_lane_caps
from ibqos.config.lanes import LaneConfig
from ibqos.config.models import Config
from ibqos.errors import IbqosError
from ibqos.fabric.model import Fabric
from ibqos.opensm.conf import parse_conf, routing_engine

log = logging.getLogger(__name__)

_PORTINFO_KEYS = ("data_vls", "vlarb_low_cap", "vlarb_high_cap", "mtu")


def opensm_routing_engine(conf: Path) -> str | None:
    """The ``routing_engine`` value of an opensm.conf (the last one wins, as in OpenSM's
    parser); "" when the file does not set it (OpenSM then uses minhop); None when the
    file cannot be read."""
    try:
        text = conf.read_text(errors="replace")
    except OSError:
        return None
    return routing_engine(parse_conf(text))


def resolve_lanes(
    config: Config, fabric: Fabric | None, *, read_ports: bool = True
) -> tuple[LaneConfig, list[str]]:
    """The lane configuration to plan with, and notes on where each auto value came from.

    Args:
        config: the whole configuration (``lanes`` and ``opensm.conf`` are read).
        fabric: the topology whose ports are asked; None (a replay): use the fallbacks.
        read_ports: ask the ports (False: use the fallbacks, e.g. for a replay).
    """
    lanes, auto = config.lanes.base, set(config.lanes.auto)
    notes: list[str] = []
    if auto & set(_PORTINFO_KEYS):
        caps: LaneCaps | None = None
        if fabric is not None and read_ports:
            try:
                caps = read_lane_caps(fabric)
            except IbqosError as err:
                notes.append(f"lanes: PortInfo not read ({err}); using the configured fallbacks")
        if caps is not None:
            notes.append(f"{caps.describe()}, from PortInfo")
            notes += [f"lanes: {w}" for w in caps.warnings]
            lanes = replace(
                lanes,
                data_vls=caps.data_vls if "data_vls" in auto else lanes.data_vls,
                vlarb_low_cap=caps.vlarb_low_cap
                if "vlarb_low_cap" in auto
                else lanes.vlarb_low_cap,
                vlarb_high_cap=(
                    caps.vlarb_high_cap if "vlarb_high_cap" in auto else lanes.vlarb_high_cap
                ),
                mtu=caps.mtu if "mtu" in auto else lanes.mtu,
            )
        elif not notes:
            shown = ", ".join(f"{k}={getattr(lanes, k)}" for k in _PORTINFO_KEYS if k in auto)
            notes.append(f"lanes: ports not asked; fallbacks {shown}")
    if "routing_engine" in auto:
        engine = opensm_routing_engine(config.opensm.conf)
        if engine is None:
            notes.append(
                f"lanes: routing_engine: {config.opensm.conf} not readable; assuming"
                f" {lanes.routing_engine or 'minhop'}"
            )
        else:
            lanes = replace(lanes, routing_engine=engine)
    return lanes, notes
