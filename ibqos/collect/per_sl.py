"""Per-SL data counters: PortXmitDataSL / PortRcvDataSL readings, clears and rates.

Where a switch's PMA answers PortXmitDataSL (0x0036) and PortRcvDataSL (0x0037), IBA annex
A13.6.4, the native backend reads both for every port of that switch in every sweep
(:class:`SlReadings`), and :class:`SlRateTracker` turns successive readings into the
long-format ``sl_rates`` table the decision cycle takes.

Only these 32-bit attributes are read.  libibmad and OpenSM define no wider per-SL
counter; NVIDIA's ibdiagnet names vendor attributes 0x0038/0x0039 (PortXmitDataSLExt,
PortRcvDataSLExt) whose layout is not published with them, so ibqos does not ask for them.

Saturation.  The counters are 32-bit words of 4 octets and stick at 0xFFFFFFFF instead of
wrapping: 16 GiB, about 1.4 s of one SL at 100 Gb/s.  So:

- a value that went down since the last reading was reset (by ibqos or another tool): the
  delta is the new value, as for the port counters;
- a counter at 0xFFFFFFFF gives no rate (NaN) for that interval;
- after each reading, every port and direction with a counter past :func:`clear_words`
  (half the range, or less where the link could fill the rest within one interval) is
  cleared with a Set whose CounterSelect names all 16 SLs.  The next delta then counts
  from 0 at the time the Set's reply arrived, not at the time of the reading, so no bytes
  are credited to the wrong interval; what the clear costs is the time between the
  reading and the clear (one round trip plus the rest of the Set batch, milliseconds),
  which the next rate does not cover, and the timing of that reply (half a round trip,
  microseconds against an interval of seconds).
- A link that can carry more than 16 GiB within one interval (100 Gb/s with
  ``collect.interval_s`` above 1.4 s) is cleared at every reading and can still saturate
  between two: its SLs that did have no rate for that interval.  Shorter intervals avoid it.

``sl_rates`` columns (``SL_RATES_DTYPES``), 16 rows per port (SL 0 to 15), ports in sweep
order:

================  ========  ==========================================================
column            dtype     meaning
================  ========  ==========================================================
node_guid         uint64    node GUID of the switch
port              int64     port number
sl                int64     service level, 0..15
xmit_bytes_per_s  float64   bytes per second sent on the SL (PortXmitDataSL x 4); NaN
                            where unknown (first reading, a failed reply, saturated)
rcv_bytes_per_s   float64   bytes per second received on the SL (PortRcvDataSL x 4)
================  ========  ==========================================================
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from ibqos.mad import pma

log = logging.getLogger(__name__)

__all__ = [
    "SL_RATES_DTYPES",
    "SlRateTracker",
    "SlReadings",
    "clear_words",
    "sl_rates_empty",
]

SL_RATES_DTYPES: dict[str, str] = {
    "node_guid": "uint64",
    "port": "int64",
    "sl": "int64",
    "xmit_bytes_per_s": "float64",
    "rcv_bytes_per_s": "float64",
}

#: the top of a per-SL counter, in bytes (where it sticks)
_MAX_BYTES = np.uint64(pma.DATA_SL_MAX * 4)
#: a sweep may start late: the room kept below the top is this many intervals of line rate
_SLACK = 1.5

_F64 = npt.NDArray[np.float64]
_U64 = npt.NDArray[np.uint64]
_BOOL = npt.NDArray[np.bool_]


def clear_words(capacity_bytes_per_s: _F64, interval_s: float) -> _U64:
    """Per port, the counter value (4-octet words) past which its per-SL counters are
    cleared: half the 32-bit range, lowered so that what the link can carry in
    ``1.5 x interval_s`` still fits above it (0: clear at every reading with traffic).
    A capacity of 0 (unknown) keeps half the range."""
    half = float(2**31)
    room = np.asarray(capacity_bytes_per_s, np.float64) / 4 * interval_s * _SLACK
    limit = np.clip(np.minimum(half, float(pma.DATA_SL_MAX) - room), 0.0, half)
    return np.where(room > 0, limit, half).astype(np.uint64)


@dataclass
class SlReadings:
    """One sweep's per-SL data counters of the ports whose PMA has them.

    Arrays are one row per port (the ``(n, 16)`` ones one column per SL).  Counters are
    in bytes (words x 4, converted once here at the edge of decoding).

    Attributes:
        node_guid: node GUID of each port's switch.
        port: port number.
        xmit: PortXmitDataSL x 4, bytes.
        rcv: PortRcvDataSL x 4, bytes.
        xmit_time_s: time the PortXmitDataSL reply came, seconds of :func:`time.monotonic`
            (intervals are measured on it: a step of the wall clock changes none); NaN:
            none did.
        rcv_time_s: the same for PortRcvDataSL.
        xmit_cleared_s: time a Set cleared the port's PortXmitDataSL after this reading,
            seconds of the same clock; NaN: not cleared.
        rcv_cleared_s: the same for PortRcvDataSL.
    """

    node_guid: _U64
    port: npt.NDArray[np.int64]
    xmit: _U64
    rcv: _U64
    xmit_time_s: _F64
    rcv_time_s: _F64
    xmit_cleared_s: _F64
    rcv_cleared_s: _F64

    def __len__(self) -> int:
        return len(self.port)

    @property
    def answered(self) -> int:
        """Ports with a good reading of either attribute."""
        return int((~np.isnan(self.xmit_time_s) | ~np.isnan(self.rcv_time_s)).sum())

    @classmethod
    def decode(
        cls,
        node_guid: _U64,
        port: npt.NDArray[np.int64],
        xmit_mads: npt.NDArray[np.uint8],
        xmit_error: list[str],
        xmit_time_s: _F64,
        rcv_mads: npt.NDArray[np.uint8],
        rcv_error: list[str],
        rcv_time_s: _F64,
    ) -> tuple[SlReadings, list[str]]:
        """Readings from the reply MADs (``(n, 256)`` uint8 each) of both attributes, row
        *i* for port *i*; a bad reply (transport error, error status, wrong attribute or
        port) leaves its direction's time NaN.  Also returns why each bad reply was bad
        (first the PortXmitDataSL ones, then PortRcvDataSL; "" where good)."""
        out: list[_U64] = []
        times: list[_F64] = []
        whys: list[str] = []
        for attr, mads, errors, t in (
            (pma.ATTR_PORT_XMIT_DATA_SL, xmit_mads, xmit_error, xmit_time_s),
            (pma.ATTR_PORT_RCV_DATA_SL, rcv_mads, rcv_error, rcv_time_s),
        ):
            recs = pma.decode(np.ascontiguousarray(mads).tobytes(), attr)
            why = pma.check_replies(recs, attr)
            err = np.array(errors, dtype=object)
            why = np.where(err != "", err, why)
            why = np.where(
                (why == "") & (recs["port_select"] != port), "reply for another port", why
            )
            good = why == ""
            out.append(recs["data_sl"].astype(np.uint64) * np.uint64(4))
            times.append(np.where(good, np.asarray(t, np.float64), np.nan))
            whys.extend(str(w) for w in why)
        n = len(port)
        return (
            cls(
                node_guid=np.asarray(node_guid, np.uint64),
                port=np.asarray(port, np.int64),
                xmit=out[0].reshape(n, pma.SL_COUNT),
                rcv=out[1].reshape(n, pma.SL_COUNT),
                xmit_time_s=times[0],
                rcv_time_s=times[1],
                xmit_cleared_s=np.full(n, np.nan),
                rcv_cleared_s=np.full(n, np.nan),
            ),
            whys,
        )

    def to_clear(self, limit_words: _U64) -> tuple[_BOOL, _BOOL]:
        """Ports whose PortXmitDataSL, and whose PortRcvDataSL, have a counter past
        *limit_words* (per port, from :func:`clear_words`) in a good reading."""
        limit = (np.asarray(limit_words, np.uint64) * np.uint64(4))[:, None]
        x = ~np.isnan(self.xmit_time_s) & (self.xmit > limit).any(axis=1)
        r = ~np.isnan(self.rcv_time_s) & (self.rcv > limit).any(axis=1)
        return np.asarray(x, np.bool_), np.asarray(r, np.bool_)


class SlRateTracker:
    """Turns successive :class:`SlReadings` into ``sl_rates`` (see the module docstring).

    Keeps, per (node GUID, port) and direction, the baseline of the next delta: the last
    good reading and its time, or 0 at the time of the clear that followed it.
    """

    def __init__(self) -> None:
        self._keys: pd.MultiIndex | None = None
        self._xmit: _U64 = np.zeros((0, pma.SL_COUNT), np.uint64)
        self._rcv: _U64 = np.zeros((0, pma.SL_COUNT), np.uint64)
        self._xt: _F64 = np.zeros(0)
        self._rt: _F64 = np.zeros(0)
        self._stuck: set[tuple[int, int, str]] = set()  # (GUID, port, direction) warned about

    def update(self, readings: SlReadings | None) -> pd.DataFrame | None:
        """The ``sl_rates`` of *readings* against the baselines; then remember them.
        None when no port has per-SL counters (*readings* None or empty)."""
        if readings is None or not len(readings):
            return None
        n = len(readings)
        keys = pd.MultiIndex.from_arrays([readings.node_guid, readings.port.astype(np.uint64)])
        if self._keys is None:
            idx = np.full(n, -1, dtype=np.int64)
        else:
            idx = np.asarray(self._keys.get_indexer(keys), np.int64)
        seen = idx >= 0
        take = np.where(seen, idx, 0)
        cols: dict[str, _F64] = {}
        new_base: list[tuple[_U64, _F64]] = []
        for name, cur, t, cleared, old_all, old_t_all in (
            (
                "xmit",
                readings.xmit,
                readings.xmit_time_s,
                readings.xmit_cleared_s,
                self._xmit,
                self._xt,
            ),
            ("rcv", readings.rcv, readings.rcv_time_s, readings.rcv_cleared_s, self._rcv, self._rt),
        ):
            if len(old_t_all):
                old, old_t = old_all[take], np.where(seen, old_t_all[take], np.nan)
            else:
                old, old_t = np.zeros_like(cur), np.full(n, np.nan)
            cols[f"{name}_bytes_per_s"] = self._rates(readings, name, cur, t, old, old_t)
            # the next delta starts from this reading, or from 0 at its clear; a port not
            # read this time keeps no baseline (its next reading is a first one)
            base = np.where(~np.isnan(cleared)[:, None], np.uint64(0), cur)
            new_base.append((base, np.where(np.isnan(cleared), t, cleared)))
        self._keys = keys
        (self._xmit, self._xt), (self._rcv, self._rt) = new_base
        return pd.DataFrame(
            {
                "node_guid": np.repeat(readings.node_guid, pma.SL_COUNT),
                "port": np.repeat(readings.port, pma.SL_COUNT),
                "sl": np.tile(np.arange(pma.SL_COUNT, dtype=np.int64), n),
                **{c: v.reshape(-1) for c, v in cols.items()},
            }
        ).astype(SL_RATES_DTYPES)

    def _rates(
        self, readings: SlReadings, name: str, cur: _U64, t: _F64, old: _U64, old_t: _F64
    ) -> _F64:
        """Bytes/s per port and SL ``(n, 16)``: NaN without a good reading now and a
        baseline, over a non-positive interval, or where the counter is stuck."""
        interval = t - old_t
        with np.errstate(invalid="ignore"):
            ok = (interval > 0)[:, None] & np.ones_like(cur, dtype=bool)
        stuck = ~np.isnan(t)[:, None] & (cur == _MAX_BYTES)
        if stuck.any():
            self._warn_stuck(readings, name, stuck.any(axis=1))
        # exact in uint64; a counter that went down was reset: its delta is its new value
        delta = np.where(cur < old, cur, cur - old)
        with np.errstate(invalid="ignore", divide="ignore"):
            rate = delta.astype(np.float64) / interval[:, None]
        return np.asarray(np.where(ok & ~stuck, rate, np.nan), np.float64)

    def _warn_stuck(self, readings: SlReadings, name: str, stuck: _BOOL) -> None:
        """Log once per port and direction that a per-SL counter stuck at its maximum."""
        for i in np.flatnonzero(stuck).tolist():
            key = (int(readings.node_guid[i]), int(readings.port[i]), name)
            if key not in self._stuck:
                self._stuck.add(key)
                log.warning(
                    "0x%016x port %d: a per-SL %s counter is stuck at its maximum (32 bits "
                    "filled within one interval; shorten collect.interval_s): no rate for it",
                    *key,
                )


def sl_rates_empty() -> pd.DataFrame:
    """An ``sl_rates`` table with no rows (columns and dtypes as documented)."""
    return pd.DataFrame({c: pd.Series(dtype=d) for c, d in SL_RATES_DTYPES.items()})
