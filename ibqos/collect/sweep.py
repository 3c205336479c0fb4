"""What every counter backend returns: one sweep of PMA counters over a list of ports.

A *target* is one port whose PMA ibqos reads.  A *sweep* is one reading of every target,
as a pandas DataFrame with one row per target, in target order.  Counters are raw
cumulative values already converted to base units at the edge (data counters x 4, so
bytes); rates are computed later from two sweeps (``ibqos.collect.rates``).

Sweep table columns (``SWEEP_DTYPES``):

=============  =========  ===============================================================
column         dtype      meaning
=============  =========  ===============================================================
node_guid      uint64     node GUID of the port's node
port           uint8      port number (switch ports 1..n, CA ports 1..n)
lid            uint16     LID the PMA query was sent to (a switch's port-0 LID)
time_s         float64    UNIX time the reply arrived, seconds; NaN if none did
xmit_bytes     UInt64     PortXmitData x 4, bytes; <NA> if not read
rcv_bytes      UInt64     PortRcvData x 4, bytes
xmit_pkts      UInt64     PortXmitPkts, packets
rcv_pkts       UInt64     PortRcvPkts, packets
xmit_wait      UInt64     PortXmitWait, ticks; <NA> where the port does not support it
counter_bits   uint8      64 (PortCountersExtended) or 32 (PortCounters fallback); 0 if failed
error          object     "" when read, else one line saying what went wrong
=============  =========  ===============================================================

With ``collect.vl_xmit_wait`` on, the table has 16 more columns after ``error``
(``VL_WAIT_DTYPES``), and only then, so a default table is exactly the one above:

=================  =========  ============================================================
column             dtype      meaning
=================  =========  ============================================================
vl_xmit_wait0      UInt64     PortVLXmitWaitCounters.PortVLXmitWait0, ticks (16-bit
                              counter); <NA> where not read: the node does not support
                              it, its reply did not come, or the port's row is in error
...                ...        ...
vl_xmit_wait15     UInt64     PortVLXmitWait15, ticks
=================  =========  ============================================================

A missing VL reading never makes the row an error: ``error`` is about the data counters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import pandas as pd

from ibqos.collect.per_sl import SlReadings
from ibqos.fabric.targets import Target

SWEEP_DTYPES: dict[str, str] = {
    "node_guid": "uint64",
    "port": "uint8",
    "lid": "uint16",
    "time_s": "float64",
    "xmit_bytes": "UInt64",
    "rcv_bytes": "UInt64",
    "xmit_pkts": "UInt64",
    "rcv_pkts": "UInt64",
    "xmit_wait": "UInt64",
    "counter_bits": "uint8",
    "error": "object",
}
COUNTERS = ("xmit_bytes", "rcv_bytes", "xmit_pkts", "rcv_pkts", "xmit_wait")
#: the counters a clear of 32-bit PortCounters sets to 0 (``Sweep.cleared_s``)
CLEARED_COUNTERS = COUNTERS[:4]

#: Virtual lanes a PortVLXmitWaitCounters reply has a counter for (IBA 16.1.4).
VL_COUNT = 16
#: Sweep columns of the per-VL transmit-wait counters, VL 0 first.
VL_WAIT_COLUMNS: tuple[str, ...] = tuple(f"vl_xmit_wait{vl}" for vl in range(VL_COUNT))
VL_WAIT_DTYPES: dict[str, str] = {c: "UInt64" for c in VL_WAIT_COLUMNS}


def sweep_dtypes(vl_wait: bool = False) -> dict[str, str]:
    """Columns and dtypes of a sweep table, with the per-VL columns if *vl_wait*."""
    return {**SWEEP_DTYPES, **VL_WAIT_DTYPES} if vl_wait else dict(SWEEP_DTYPES)


def has_vl_wait(table: pd.DataFrame) -> bool:
    """The sweep table carries the per-VL transmit-wait columns."""
    return VL_WAIT_COLUMNS[0] in table.columns


@dataclass
class Sweep:
    """One reading of every target.

    Attributes:
        targets: the ports read, in row order of ``table``.
        table: the sweep table (columns above).
        backend: name of the backend that read it.
        started_s: UNIX time the sweep started, seconds.
        duration_s: wall-clock length of the sweep, seconds.
        cpu_s: CPU time the collecting process (and its children) spent on it, seconds.
        stats: counts such as ``sent``, ``answered``, ``retries``, ``timeouts``, ``failed``.
        invalid: rows that were read but whose rates were dropped as implausible; set by
            :class:`~ibqos.collect.loop.Collector` once the rates are computed (0 before).
        per_sl: the per-SL data counters of the ports whose switch has them (native
            backend, ``collect.per_sl``); None when no port has them.
        mono_s: per row, the :func:`time.monotonic` time of its reading (as ``time_s``
            is its UNIX time), seconds; NaN where none.  Rates divide by intervals of this
            clock, so a step of the wall clock (NTP, an admin) changes none.  None: the
            backend has only ``time_s`` (a recording), and intervals are taken from it.
        cleared_s: per row, the :func:`time.monotonic` time a Set cleared the row's
            32-bit PortCounters after this reading (its next delta counts from 0 from
            there), seconds; NaN where not cleared.  None: nothing was cleared.
    """

    targets: list[Target]
    table: pd.DataFrame
    backend: str
    started_s: float
    duration_s: float
    cpu_s: float = 0.0
    stats: dict[str, int] = field(default_factory=dict)
    invalid: int = 0
    per_sl: SlReadings | None = None
    mono_s: np.ndarray | None = None
    cleared_s: np.ndarray | None = None

    @property
    def failed(self) -> int:
        """Number of targets that were not read."""
        return int((self.table["error"] != "").sum())

    @property
    def answered(self) -> int:
        """Number of targets that were read."""
        return len(self.targets) - self.failed

    @property
    def coverage(self) -> float:
        """Share of the targets (0..1) that answered with a usable sample: neither failed
        nor dropped as implausible.  0 for a sweep of no targets: nothing was measured."""
        if not self.targets:
            return 0.0
        return max(0, self.answered - self.invalid) / len(self.targets)


class Backend(Protocol):
    """A way of reading a sweep: native MADs, perfquery processes, or a recording."""

    name: str

    def sweep(self, targets: Sequence[Target]) -> Sweep:
        """Read every target once.  A port that does not answer is reported in its row's
        ``error`` (and logged), never raised; only a backend that cannot work at all
        (no device, no perfquery, recording exhausted) raises ``CollectError``."""
        ...

    def close(self) -> None:
        """Release the device, worker pool or files."""
        ...


def empty_table(targets: Sequence[Target], vl_wait: bool = False) -> pd.DataFrame:
    """A sweep table for *targets* with every counter missing and error "not read" (and
    the per-VL columns, all missing, if *vl_wait*)."""
    n = len(targets)
    cols: dict[str, object] = {
        "node_guid": [t.node_guid for t in targets],
        "port": [t.port for t in targets],
        "lid": [t.lid for t in targets],
        "time_s": [float("nan")] * n,
        **{c: [pd.NA] * n for c in COUNTERS},
        "counter_bits": [0] * n,
        "error": ["not read"] * n,
        **{c: [pd.NA] * n for c in (VL_WAIT_COLUMNS if vl_wait else ())},
    }
    return pd.DataFrame(cols).astype(sweep_dtypes(vl_wait))
