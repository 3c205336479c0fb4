"""Port rates from successive sweeps: counter deltas over each port's own interval.

A :class:`RateTracker` keeps the last reading of every port, keyed by (node GUID, port
number), and turns each new :class:`~ibqos.collect.sweep.Sweep` into a rates table:

- the delta of each counter is computed exactly in unsigned 64-bit integers, then divided
  by the interval as float64;
- a counter that went down was reset (OpenSM's PerfMgr clears counters at 75 %, and so do
  ``perfquery -r`` and ``ibqueryerrors -k``; docs/design.md §7.4): its delta is its new value,
  the row says ``reset=True``, and the port's and the total reset counts go up by one;
- the interval is the port's own: the time of this row's reading minus that of the port's
  row in the previous sweep, so ports read at different moments of a long sweep are each
  right.  Times are those of a monotonic clock (``Sweep.mono_s``), which neither steps nor
  goes back when the wall clock does (NTP, an admin's ``date``); only a sweep that has
  none (a recording) is measured on its ``time_s``;
- a port whose 32-bit counters were cleared after its last reading (``Sweep.cleared_s``)
  counts its next delta from 0 at the time of the clear: that is no reset;
- rates are NaN, never 0, where they are unknown: the port's first reading, a port that
  was not read in the previous sweep (missing from it, or an error row there), a row in
  error now, a counter the port does not have (XmitWait), an interval that is not
  positive, or a counter stuck at its maximum (PMA counters saturate instead of wrapping:
  a 32-bit PortXmitData after 16 GiB, a 16-bit PortVLXmitWait after 65,535 ticks), which
  is logged once per port and counter;
- a sample whose data rate, sent or received, is above what the port's link can carry
  (its ``Target.capacity_bytes_per_s`` times ``1 + margin``) is not a measurement but
  counters that were reset and rewritten, or a PMA that lies: every rate of that row is
  NaN, its ``error`` says why, it is counted (``invalid_samples``) and logged in one line
  per sweep.  Its counters still become the port's previous reading, so the next
  interval is measured from them.  Ports of unknown capacity (0) are not checked.

Rates table columns (``RATES_DTYPES``), one row per row of the sweep, in its order.  They
are the stable output of ``ibqos collect`` (see :func:`rows_for_json`):

================  ========  ==========================================================
column            dtype     meaning
================  ========  ==========================================================
node_guid         uint64    node GUID
node_desc         object    NodeDescription (str)
port              uint8     port number
lid               uint16    LID the counters were read from
level             uint8     fat-tree level of the node (0 = CA, 1 = leaf switch, ...)
role              object    "host", "down" or "up" (str)
time_s            float64   UNIX time of this reading, seconds; NaN if not read
interval_s        float64   seconds since the port's previous reading; NaN if none
xmit_bytes_per_s  float64   bytes per second sent (PortXmitData x 4)
rcv_bytes_per_s   float64   bytes per second received
xmit_pkts_per_s   float64   packets per second sent
rcv_pkts_per_s    float64   packets per second received
xmit_wait_per_s   float64   PortXmitWait ticks per second
reset             bool      a counter of this port went down since the previous reading
error             object    "" or why the port has no rates (str): the sweep's error, or
                            the implausible rate that was dropped
================  ========  ==========================================================

When the sweep has the per-VL columns (``collect.vl_xmit_wait``), and only then, 16 more
columns follow ``error`` (``VL_WAIT_RATE_DTYPES``), by the same rules; a per-VL counter that
went down also sets ``reset``:

=====================  ========  =====================================================
column                 dtype     meaning
=====================  ========  =====================================================
vl0_xmit_wait_per_s    float64   PortVLXmitWait0 ticks per second: time VL 0 had data
                                 to send and no credit, in the PMA's ticks; NaN where
                                 unknown (not read, not supported, saturated at 65,535)
...                    ...       ...
vl15_xmit_wait_per_s   float64   PortVLXmitWait15 ticks per second
=====================  ========  =====================================================
"""

from __future__ import annotations

import logging
import math
from collections.abc import Hashable
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from ibqos.collect.sweep import (
    CLEARED_COUNTERS,
    COUNTERS,
    VL_COUNT,
    VL_WAIT_COLUMNS,
    Sweep,
    has_vl_wait,
)
from ibqos.fabric.targets import Target

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_RATE_MARGIN",
    "RATES_DTYPES",
    "RATE_COLUMNS",
    "VL_WAIT_RATE_COLUMNS",
    "VL_WAIT_RATE_DTYPES",
    "RateTracker",
    "rows_for_json",
    "vl_wait_rate_column",
]

RATES_DTYPES: dict[str, str] = {
    "node_guid": "uint64",
    "node_desc": "object",
    "port": "uint8",
    "lid": "uint16",
    "level": "uint8",
    "role": "object",
    "time_s": "float64",
    "interval_s": "float64",
    "xmit_bytes_per_s": "float64",
    "rcv_bytes_per_s": "float64",
    "xmit_pkts_per_s": "float64",
    "rcv_pkts_per_s": "float64",
    "xmit_wait_per_s": "float64",
    "reset": "bool",
    "error": "object",
}
#: Rate column of each sweep counter.
RATE_COLUMNS: dict[str, str] = {c: f"{c}_per_s" for c in COUNTERS}


def vl_wait_rate_column(vl: int) -> str:
    """Name of the rates column of VL *vl*'s transmit wait: ``vl3_xmit_wait_per_s``."""
    return f"vl{vl}_xmit_wait_per_s"


#: Rates columns of the per-VL transmit wait, VL 0 first; present only when the sweep
#: read the per-VL counters (test ``VL_WAIT_RATE_COLUMNS[0] in rates.columns``).
VL_WAIT_RATE_COLUMNS: tuple[str, ...] = tuple(vl_wait_rate_column(vl) for vl in range(VL_COUNT))
VL_WAIT_RATE_DTYPES: dict[str, str] = {c: "float64" for c in VL_WAIT_RATE_COLUMNS}
_VL_RATE_OF = dict(zip(VL_WAIT_COLUMNS, VL_WAIT_RATE_COLUMNS, strict=True))

Key = tuple[int, int]
_U64 = npt.NDArray[np.uint64]
_BOOL = npt.NDArray[np.bool_]


#: ``RateTracker(margin=...)`` by default: 10 % above the link's data rate
DEFAULT_RATE_MARGIN = 0.1


class RateTracker:
    """Turns successive sweeps into per-port rates (see the module docstring).

    Args:
        margin: a data rate above the port's capacity times ``1 + margin`` is dropped.

    Attributes:
        resets: number of rows flagged ``reset``, per (node GUID, port).
        total_resets: their sum.
        invalid_samples: rows whose rates were dropped as implausible, since the start.
        last_invalid: those of the last update.
    """

    def __init__(self, margin: float = DEFAULT_RATE_MARGIN) -> None:
        if margin < 0:
            raise ValueError(f"margin must not be negative, got {margin}")
        self.margin = margin
        self._stuck: set[tuple[int, int, str]] = set()  # (GUID, port, counter) warned about
        self.resets: dict[Key, int] = {}
        self.total_resets = 0
        self.invalid_samples = 0
        self.last_invalid = 0
        self._prev: pd.DataFrame | None = None  # good rows of the last sweep, by key
        self._prev_mono = False  # its ``_clock`` column is monotonic, not UNIX time

    def update(self, sweep: Sweep) -> pd.DataFrame:
        """Rates of *sweep* against the previous one; then remember *sweep*.

        Raises:
            ValueError: the sweep's table and targets differ in length.
        """
        table = sweep.table
        if len(table) != len(sweep.targets):
            raise ValueError(f"sweep has {len(sweep.targets)} targets but {len(table)} table rows")
        n = len(table)
        keys = pd.MultiIndex.from_arrays(
            [table["node_guid"].to_numpy(np.uint64), table["port"].to_numpy(np.uint64)]
        )
        good = (table["error"] == "").to_numpy(bool) & table["time_s"].notna().to_numpy(bool)
        vl_wait = has_vl_wait(table)
        counters = (*COUNTERS, *VL_WAIT_COLUMNS) if vl_wait else COUNTERS
        prev = self._aligned(keys, counters)
        now_t = table["time_s"].to_numpy(np.float64)
        mono = sweep.mono_s is not None
        clock = np.asarray(sweep.mono_s, np.float64) if mono else now_t
        if mono == self._prev_mono:
            interval = clock - prev["_clock"].to_numpy(np.float64)
        else:  # a recording after a live sweep, or back: only UNIX times compare
            interval = now_t - prev["time_s"].to_numpy(np.float64)
        usable = good & prev["_seen"].to_numpy(bool) & (interval > 0)
        interval = np.where(good & prev["_seen"].to_numpy(bool), interval, np.nan)
        reset = np.zeros(n, dtype=bool)
        rates: dict[str, npt.NDArray[np.float64]] = {}
        narrow = (table["counter_bits"] == 32).to_numpy(bool)
        for col in counters:
            cur, cur_ok = _u64(table[col])
            old, old_ok = _u64(prev[col])
            stuck = cur_ok & _saturated(col, cur, narrow)
            if stuck.any():
                self._warn_stuck(table, col, stuck)
            ok = usable & cur_ok & old_ok & ~stuck
            went_down = ok & (cur < old)
            # exact in uint64, converted to float only after the subtraction; rows where
            # cur < old wrap around in ``cur - old`` and are replaced (reset) or masked
            delta = np.where(went_down, cur, cur - old)
            with np.errstate(invalid="ignore", divide="ignore"):
                rate = delta.astype(np.float64) / interval
            rates[RATE_COLUMNS.get(col) or _VL_RATE_OF[col]] = np.where(ok, rate, np.nan)
            reset |= went_down
        guids = table["node_guid"].tolist()
        ports = table["port"].tolist()
        for i in np.flatnonzero(reset).tolist():
            key = (int(guids[i]), int(ports[i]))
            self.resets[key] = self.resets.get(key, 0) + 1
        self.total_resets += int(reset.sum())
        self._remember(table, keys, good, counters, clock, sweep.cleared_s)
        self._prev_mono = mono
        targets = sweep.targets
        errors = table["error"].to_numpy(dtype=object, copy=True)
        self._drop_implausible(targets, rates, errors)
        out = pd.DataFrame(
            {
                "node_guid": table["node_guid"].to_numpy(np.uint64),
                "node_desc": [t.node_desc for t in targets],
                "port": table["port"].to_numpy(),
                "lid": table["lid"].to_numpy(),
                "level": [t.level for t in targets],
                "role": [t.role for t in targets],
                "time_s": now_t,
                "interval_s": interval,
                **{RATE_COLUMNS[c]: rates[RATE_COLUMNS[c]] for c in COUNTERS},
                "reset": reset,
                "error": errors,
                **{c: rates[c] for c in (VL_WAIT_RATE_COLUMNS if vl_wait else ())},
            }
        )
        return out.astype({**RATES_DTYPES, **(VL_WAIT_RATE_DTYPES if vl_wait else {})})

    def _drop_implausible(
        self,
        targets: list[Target],
        rates: dict[str, npt.NDArray[np.float64]],
        errors: npt.NDArray[np.object_],
    ) -> None:
        """NaN every rate of the rows whose data rate is above their link's capacity
        (plus the margin), say why in *errors* (both changed in place), count them and
        log one line for them all."""
        cap = np.array([t.capacity_bytes_per_s for t in targets], dtype=np.float64)
        limit = cap * (1.0 + self.margin)
        rate = np.fmax(rates["xmit_bytes_per_s"], rates["rcv_bytes_per_s"])  # NaN if both are
        with np.errstate(invalid="ignore"):
            over = (cap > 0) & (rate > limit)  # NaN compares False: unknown is not invalid
        self.last_invalid = n = int(over.sum())
        if not n:
            return
        self.invalid_samples += n
        for col, values in rates.items():
            rates[col] = np.where(over, np.nan, values)
        rows = np.flatnonzero(over).tolist()
        for i in rows:
            errors[i] = f"rate {rate[i]:.3g} B/s above the link's {cap[i]:.3g} B/s: sample dropped"
        first = rows[0]
        log.warning(
            "dropped %d implausible sample(s), rates above the link's capacity + %g %% "
            "(counters reset and rewritten?), e.g. %s: %.3g B/s on a %.3g B/s link",
            n,
            self.margin * 100,
            _where(targets[first]),
            rate[first],
            cap[first],
        )

    def _warn_stuck(self, table: pd.DataFrame, col: str, stuck: _BOOL) -> None:
        """Log once per port and counter that it is stuck at its maximum."""
        guids = table["node_guid"].to_numpy(np.uint64)
        ports = table["port"].to_numpy(np.int64)
        for i in np.flatnonzero(stuck).tolist():
            key = (int(guids[i]), int(ports[i]), col)
            if key not in self._stuck:
                self._stuck.add(key)
                log.warning(
                    "0x%016x port %d: %s is stuck at its maximum (PMA counters saturate; "
                    "something must clear them): no rate until it is reset",
                    *key,
                )

    def _aligned(self, keys: pd.MultiIndex, counters: tuple[str, ...]) -> pd.DataFrame:
        """The previous reading of each key, in *keys* order (``_seen`` False if none).

        A counter the previous sweep did not have (the per-VL ones, when they were just
        turned on) is missing in every row.
        """
        if self._prev is None:
            aligned = pd.DataFrame({"time_s": np.full(len(keys), np.nan)})
            aligned["_clock"] = np.full(len(keys), np.nan)
            aligned["_seen"] = False
        else:
            have = [c for c in counters if c in self._prev.columns]
            aligned = self._prev[["time_s", "_clock", *have]].reindex(keys)
            aligned["_seen"] = self._prev["_seen"].reindex(keys, fill_value=False).to_numpy(bool)
            aligned = aligned.reset_index(drop=True)
        n = len(keys)
        for c in counters:
            if c not in aligned.columns:  # all missing, built without a list of n NAs
                aligned[c] = pd.arrays.IntegerArray(np.zeros(n, np.uint64), np.ones(n, bool))
        return aligned

    def _remember(
        self,
        table: pd.DataFrame,
        keys: pd.MultiIndex,
        good: _BOOL,
        counters: tuple[str, ...],
        clock: npt.NDArray[np.float64],
        cleared_s: npt.NDArray[np.float64] | None,
    ) -> None:
        kept = table.loc[good, ["time_s", *counters]].copy()
        kept["_clock"] = clock[good]
        if cleared_s is not None:
            # cleared after this reading: the next delta counts from 0 at the clear
            cleared = np.asarray(cleared_s, np.float64)[good]
            rows = ~np.isnan(cleared)
            if rows.any():
                for col in CLEARED_COUNTERS:
                    kept.loc[kept.index[rows], col] = 0
                kept.loc[kept.index[rows], "time_s"] += cleared[rows] - clock[good][rows]
                kept.loc[kept.index[rows], "_clock"] = cleared[rows]
        kept.index = keys[good]
        kept = kept[~kept.index.duplicated(keep="last")]
        kept["_seen"] = True
        self._prev = kept


_U16_MAX = np.uint64(2**16 - 1)
_U32_MAX = np.uint64(2**32 - 1)
_U64_MAX = np.uint64(2**64 - 1)


def _saturated(col: str, cur: _U64, narrow: _BOOL) -> _BOOL:
    """Counters at the value a PMA counter sticks at (IBA 16.1.3.5: counters do not wrap):
    the top of 64 bits, of 32 bits for PortCounters rows (data x 4, in bytes), of 32
    bits for XmitWait, which only PortCounters carries on most PMAs, and of 16 bits for
    the per-VL XmitWait (PortVLXmitWaitCounters has nothing wider)."""
    top32 = _U32_MAX * np.uint64(4) if col.endswith("bytes") else _U32_MAX
    stuck: _BOOL = cur == _U64_MAX
    if col in _VL_RATE_OF:
        return np.asarray(stuck | (cur == _U16_MAX), dtype=np.bool_)
    if col == "xmit_wait":
        return np.asarray(stuck | (cur == _U32_MAX), dtype=np.bool_)
    return np.asarray(stuck | (narrow & (cur == top32)), dtype=np.bool_)


def _where(tg: Target) -> str:
    return f"{tg.node_desc or f'0x{tg.node_guid:016x}'} port {tg.port}"


def _u64(series: pd.Series[Any]) -> tuple[_U64, _BOOL]:
    """Values of a UInt64 column as uint64 (0 where missing) and where they are present."""
    present = series.notna().to_numpy(bool)
    values = np.asarray(series.astype("UInt64").to_numpy(dtype=np.uint64, na_value=0), np.uint64)
    return values, present


def rows_for_json(df: pd.DataFrame) -> list[dict[str, Any]]:
    """Rows of a rates table as JSON-safe dicts, in column order.

    NaN becomes None (JSON null), ``node_guid`` a "0x%016x" string, numpy scalars plain
    Python numbers and booleans.
    """
    rows: list[dict[str, Any]] = []
    for record in df.to_dict(orient="records"):
        rows.append({str(k): _json_value(k, v) for k, v in record.items()})
    return rows


def _json_value(key: Hashable, value: Any) -> Any:
    if key == "node_guid":
        return f"0x{int(value):016x}"
    if value is None or value is pd.NA:
        return None
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
