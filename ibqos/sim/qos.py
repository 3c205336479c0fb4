"""What the simulators take of a QoS setup: jobs' SLs, SL->VL, and the VL arbitration tables.

The same fields OpenSM programs (:class:`ibqos.plan.planner.Tables`), with the IBA semantics the
models implement:

- SL2VL: a packet of SL *s* leaving a port travels on VL ``sl_to_vl[s]``.  ibqos (and
  OpenSM's ``qos_sl2vl``) program one map on every port, so the VL is the same at every
  hop; the packet model still looks it up per hop.
- VLArb: entries ``(vl, weight)``, weight in 64-byte units.  An entry lets its VL send
  packets while the weight left is positive, so it sends ``ceil(weight * 64 / MTU)``
  MTU-sized packets per turn (a weight below one MTU still sends one); weight 0 skips the
  entry.  A VL's share of a busy link is its packets per round over all busy VLs'.
- High priority: VLs of the high table go first.  VLHighLimit bounds how much high-priority
  data (in 4 KiB units) may go while a low-priority packet waits: after it, one low packet
  goes.  255 means no bound (strict priority); 0 means one high packet at a time.
- A VL with no entry in either table never transmits, as on a real port.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ibqos.config.lanes import CREDIT_BYTES, NUM_SLS
from ibqos.errors import SimError
from ibqos.plan.planner import Tables

Entry = tuple[int, int]  # (VL, weight in 64-byte units)
VL_COUNT = 16
#: seconds from a packet's arrival in a switch (its last byte) to when it may leave: the
#: packet model's default, and what the buffered fluid model charges a phase's last packet
SWITCH_LATENCY_S = 100e-9
HIGH_LIMIT_UNIT_BYTES = 4096
UNLIMITED_HIGH = 255


@dataclass(frozen=True)
class Arbitration:
    """One QoS setup: each job's SL plus the port tables (the same on every port).

    Attributes:
        job_sl: SL of every job, by job id (a job not listed is on SL 0).
        sl_to_vl: VL of SL 0..15.
        vlarb_low, vlarb_high: ``(vl, weight)`` entries, weight in 64-byte units.
        high_limit: VLHighLimit, 0-255.
        mtu: packet size in bytes.
        name: the policy it came from, for reports.
    """

    job_sl: Mapping[str, int]
    sl_to_vl: tuple[int, ...]
    vlarb_low: tuple[Entry, ...]
    vlarb_high: tuple[Entry, ...] = ()
    high_limit: int = 0
    mtu: int = 2048
    name: str = ""

    def __post_init__(self) -> None:
        if len(self.sl_to_vl) != NUM_SLS or any(not 0 <= vl < VL_COUNT for vl in self.sl_to_vl):
            raise SimError(f"sl_to_vl: expected {NUM_SLS} VLs of 0-15, got {self.sl_to_vl}")
        for jid, sl in self.job_sl.items():
            if not 0 <= sl < NUM_SLS:
                raise SimError(f"job {jid}: SL {sl} is not 0-15")
        for table in (self.vlarb_low, self.vlarb_high):
            for vl, weight in table:
                if not 0 <= vl < VL_COUNT or not 0 <= weight <= 255:
                    raise SimError(f"VLArb entry ({vl}, {weight}): VL 0-15, weight 0-255")
        if not 0 <= self.high_limit <= UNLIMITED_HIGH:
            raise SimError(f"high_limit {self.high_limit}: expected 0-255")

    def vl_of(self, job_id: str) -> int:
        """The VL a job's packets travel on."""
        return self.sl_to_vl[self.job_sl.get(job_id, 0)]

    def packets(self, entry_weight: int) -> int:
        """MTU packets one entry of this weight sends per turn."""
        return math.ceil(entry_weight * CREDIT_BYTES / self.mtu) if entry_weight > 0 else 0

    def low_packets(self) -> dict[int, int]:
        """MTU packets per round of each VL in the low-priority table."""
        return _per_vl(self.vlarb_low, self.packets)

    def high_packets(self) -> dict[int, int]:
        """MTU packets per round of each VL in the high-priority table."""
        return _per_vl(self.vlarb_high, self.packets)

    def high_bytes(self) -> float:
        """High-priority bytes that may go while a low packet waits (inf: no bound)."""
        if self.high_limit >= UNLIMITED_HIGH:
            return math.inf
        return float(max(self.high_limit * HIGH_LIMIT_UNIT_BYTES, self.mtu))

    def check_jobs(self, job_ids: Sequence[str]) -> None:
        """Every job's lane has an arbitration entry.

        Raises:
            SimError: a job's VL would never transmit.
        """
        served = set(self.low_packets()) | set(self.high_packets())
        for jid in job_ids:
            vl = self.vl_of(jid)
            if vl not in served:
                raise SimError(
                    f"policy {self.name or '?'}: job {jid} is on VL {vl}, which has no VLArb"
                    " entry (it would never transmit)"
                )

    def describe(self) -> str:
        """One line: SLs, lanes and weights."""
        lanes = ", ".join(f"VL{vl}:{n}" for vl, n in sorted(self.low_packets().items()))
        sls = ", ".join(f"{j}:SL{sl}" for j, sl in sorted(self.job_sl.items()))
        return f"{sls}; packets per round {lanes}"


def from_tables(
    tables: Tables, job_sl: Mapping[str, int], mtu: int = 2048, name: str = "plan"
) -> Arbitration:
    """The arbitration a plan's tables program."""
    return Arbitration(
        dict(job_sl),
        tables.sl_to_vl,
        tables.vlarb_low,
        tables.vlarb_high,
        tables.high_limit,
        mtu,
        name,
    )


def _per_vl(table: Sequence[Entry], packets: Callable[[int], int]) -> dict[int, int]:
    out: dict[int, int] = {}
    for vl, weight in table:
        n = packets(weight)
        if n:
            out[vl] = out.get(vl, 0) + n
    return out
