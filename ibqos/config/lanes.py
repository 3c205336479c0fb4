"""What the fabric and the admin allow the planner (``lanes``), and the IBA limits behind it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from ibqos.config.classes import Class

#: OpenSM parses at most this many entries per VLArb table (2 blocks of 32).
MAX_VLARB_ENTRIES = 64


#: VLArb weights count 64-byte credits.
CREDIT_BYTES = 64


WEIGHT_LAWS = ("geometric", "linear", "equal")


#: Least ``weight_ratio``: below 1 the heavier lanes weigh more (favour heavy); below
#: 1/10 the lightest of a few lanes would already be at one packet against the cap.
MIN_WEIGHT_RATIO = 0.1


WeightLaw = Literal["geometric", "linear", "equal"]


Entry = tuple[int, int]  # (vl, weight in 64-byte credits)


#: SLs in an SL2VL table (IBA: 4-bit SL).
NUM_SLS = 16


#: VL 15 is the management lane: never in VLArb (OpenSM turns it into VL 0) nor for data.
VL15 = 15


MTUS = (256, 512, 1024, 2048, 4096)


#: Routing engines whose ``path_sl`` or ``update_sl2vl`` hooks own the SLs (docs/design.md §6.4).
SL_OWNING_ENGINES = ("lash", "dfsssp", "torus-2qos", "nue")


@dataclass(frozen=True)
class LaneConfig:
    """What the fabric and the admin allow the planner.

    Attributes:
        data_vls: data VLs of the fabric's ports (PortInfo OperVLs as a count: 1, 2, 4, 8
            or 15); the data VLs are ``0 .. data_vls - 1``.
        reserved_sls: SLs the admin keeps (storage, management, unmanaged traffic); never
            given to a job.  (The ``lanes`` config section defaults it to SL 0.)
        reserved_vls: VLs the admin keeps; no job's SL maps there.
        reserved_sl2vl: ``(sl, vl)`` lanes of reserved SLs; a reserved SL not listed maps
            to *default_vl*.
        default_vl: lane of every SL no job uses.
        weight_law: "geometric", "linear" or "equal" (see :mod:`ibqos.plan.weights`).
        weight_ratio: weight of a lane over the next more intense lane's (>= 0.1; below 1
            the more intense lanes weigh more, and the law must be geometric).
        other_vl_packets: MTU packets per arbitration round for lanes that carry no
            planned job: reserved VLs not in *vlarb_high*, and the default lane when idle.
        vlarb_high: the high-priority table, ``(vl, weight)`` entries, passed through;
            empty: no lane has high priority.
        high_limit: VLHighLimit (0-255, 4 KiB units), passed through.
        vlarb_low_cap: VLArbLowCap of the ports (entries used; ibsim: 8).
        vlarb_high_cap: VLArbHighCap of the ports.
        mtu: path MTU in bytes (256-4096).
        min_hold_s: seconds a job's class change must last before the plan follows it.
        min_interval_s: seconds at least between two plan changes driven by class changes.
        routing_engine: OpenSM's ``routing_engine`` option (a comma-separated list).
        default_class: the expected class of a new job with none given.
        class_intensity: prior intensity of each class (low, moderate, high) for jobs not
            measured yet.
    """

    data_vls: int = 8
    reserved_sls: tuple[int, ...] = ()
    reserved_vls: tuple[int, ...] = ()
    reserved_sl2vl: tuple[tuple[int, int], ...] = ()
    default_vl: int = 0
    weight_law: WeightLaw = "geometric"
    weight_ratio: float = 2.0
    other_vl_packets: int = 1
    vlarb_high: tuple[Entry, ...] = ()
    high_limit: int = 0
    vlarb_low_cap: int = MAX_VLARB_ENTRIES
    vlarb_high_cap: int = MAX_VLARB_ENTRIES
    mtu: int = 2048
    min_hold_s: float = 60.0
    min_interval_s: float = 300.0
    routing_engine: str = ""
    default_class: Class = "moderate"
    class_intensity: tuple[float, float, float] = (0.05, 0.25, 0.6)

    @property
    def credits_per_packet(self) -> int:
        """VLArb weight of one MTU-sized packet, in 64-byte credits."""
        return self.mtu // CREDIT_BYTES

    @property
    def packets_per_entry(self) -> int:
        """Most whole MTU packets one VLArb entry (weight <= 255) can carry."""
        return 255 // self.credits_per_packet

    @property
    def sl_owning_engines(self) -> tuple[str, ...]:
        """The engines in *routing_engine* that own SLs (docs/design.md §6.4)."""
        names = re.split(r"[,\s]+", self.routing_engine.strip().lower())
        return tuple(name for name in names if name in SL_OWNING_ENGINES)
