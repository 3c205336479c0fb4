"""Decoding a native sweep: the request plan of a sweep and its replies as a sweep table.

:class:`Plan` says which request carries each target's data counters, its PortCounters
(for XmitWait) and its PortVLXmitWaitCounters; :func:`sweep_table` decodes all replies
of one attribute at once with numpy (``ibqos.mad.pma``) into the columns of
:data:`ibqos.collect.sweep.SWEEP_DTYPES`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ibqos.collect.pipeline import Result
from ibqos.collect.sweep import VL_COUNT, VL_WAIT_COLUMNS
from ibqos.fabric.targets import Target
from ibqos.mad import pma

log = logging.getLogger(__name__)

__all__ = ["Plan", "sweep_table"]

_U64_MAX = np.uint64(2**64 - 1)


@dataclass(frozen=True)
class Plan:
    """A sweep's requests (``lids``/``attrs``/``ports``), where each target's replies are
    (``main``, ``wait``, ``vl``: request index or -1), and per-target columns.  The
    targets with per-SL counters are ``sl_rows``, and their PortXmitDataSL and
    PortRcvDataSL requests ``sl_xmit`` and ``sl_rcv`` (in the same order)."""

    key: tuple[int, int, int]
    targets: Sequence[Target]
    lids: np.ndarray
    attrs: np.ndarray
    ports: np.ndarray
    main: np.ndarray
    wait: np.ndarray
    vl: np.ndarray
    sl_rows: np.ndarray
    sl_xmit: np.ndarray
    sl_rcv: np.ndarray
    node_guid: np.ndarray
    port: np.ndarray
    lid: np.ndarray
    has_wait: np.ndarray
    pce_wait: np.ndarray


def row_times(plan: Plan, times: np.ndarray) -> np.ndarray:
    """Per target, the time (of *times*, one per request) its data counters' reply came;
    NaN where none did or none was asked for."""
    out = np.full(len(plan.main), np.nan)
    asked = plan.main >= 0
    out[asked] = times[plan.main[asked]]
    return out


def sweep_table(plan: Plan, res: Result, vl_xmit_wait: bool) -> pd.DataFrame:
    """Decode the replies in bulk into a sweep table, one row per target (with the
    per-VL columns if *vl_xmit_wait*)."""
    n = len(plan.main)
    main, wait, attrs = plan.main, plan.wait, plan.attrs
    errors = np.array(res.error, dtype=object)
    cols: dict[str, np.ndarray] = {
        c: np.zeros(n, dtype=np.uint64)
        for c in ("xmit_bytes", "rcv_bytes", "xmit_pkts", "rcv_pkts", "xmit_wait")
    }
    missing = {c: np.ones(n, dtype=bool) for c in cols}
    bits = np.zeros(n, dtype=np.uint8)
    error = np.full(n, "no ClassPortInfo from this node", dtype=object)
    time_s = np.full(n, np.nan)
    # rows with a data-counter request, and its attribute (none at all when no node
    # answered ClassPortInfo: then ``attrs`` is empty)
    asked = np.flatnonzero(main >= 0)
    asked_attr = attrs[main[asked]]
    for attr, width in ((pma.ATTR_PORT_COUNTERS_EXT, 64), (pma.ATTR_PORT_COUNTERS, 32)):
        rows = asked[asked_attr == attr]
        if not len(rows):
            continue
        idx = main[rows]
        recs = pma.decode(res.mads[idx].tobytes(), attr)
        why = pma.check_replies(recs, attr)
        why = np.where(errors[idx] != "", errors[idx], why)
        port_bad = recs["port_select"] != plan.port[rows]
        why = np.where((why == "") & port_bad, "reply for another port", why)
        good = why == ""
        error[rows] = why
        time_s[rows] = res.time_s[idx]
        bits[rows[good]] = width
        for col, field, scale in (
            ("xmit_bytes", "xmit_data", 4),
            ("rcv_bytes", "rcv_data", 4),
            ("xmit_pkts", "xmit_pkts", 1),
            ("rcv_pkts", "rcv_pkts", 1),
        ):
            v = recs[field].astype(np.uint64)
            if scale != 1:  # data counters count 4-octet words; keep saturation visible
                v = np.where(v > _U64_MAX // np.uint64(scale), _U64_MAX, v * np.uint64(scale))
            cols[col][rows[good]] = v[good]
            missing[col][rows[good]] = False
        # a 32-bit fallback reply has XmitWait where CapMask bit 12 says so; PCE where
        # CapMask2 bit 1 does
        has = plan.has_wait if attr == pma.ATTR_PORT_COUNTERS else plan.pce_wait
        ok = good & has[rows]
        cols["xmit_wait"][rows[ok]] = recs["xmit_wait"][ok]
        missing["xmit_wait"][rows[ok]] = False
    rows = np.flatnonzero(wait >= 0)
    if len(rows):
        idx = wait[rows]
        recs = pma.decode(res.mads[idx].tobytes(), pma.ATTR_PORT_COUNTERS)
        why = np.where(
            errors[idx] != "", errors[idx], pma.check_replies(recs, pma.ATTR_PORT_COUNTERS)
        )
        good = (why == "") & (error[rows] == "")
        cols["xmit_wait"][rows[good]] = recs["xmit_wait"][good]
        missing["xmit_wait"][rows[good]] = False
        # the data counters of these rows stand; only XmitWait stays unknown
        lost = np.flatnonzero((why != "") & (error[rows] == ""))
        if len(lost):
            r = rows[lost[0]]
            log.warning(
                "XmitWait (PortCounters) of %d ports not read, their data counters stand "
                "(first: lid %d port %d: %s)",
                len(lost),
                plan.lid[r],
                plan.port[r],
                why[lost[0]],
            )
    vl_cols = _vl_columns(plan, res, errors, error) if vl_xmit_wait else {}
    # every column already has its sweep_dtypes() dtype: no astype copy of the frame
    return pd.DataFrame(
        {
            "node_guid": plan.node_guid,
            "port": plan.port,
            "lid": plan.lid,
            "time_s": time_s,
            **{c: pd.arrays.IntegerArray(v, missing[c]) for c, v in cols.items()},
            "counter_bits": bits,
            "error": pd.Series(error, dtype=object, copy=False),
            **vl_cols,
        },
        copy=False,
    )


def _vl_columns(
    plan: Plan, res: Result, errors: np.ndarray, error: np.ndarray
) -> dict[str, pd.arrays.IntegerArray]:
    """The ``vl_xmit_wait0..15`` columns, decoded in bulk: <NA> where the node has no
    such counters, the reply failed, or the row's data counters are in error.

    *errors* are the transport's per-request errors, *error* the rows' final errors.
    A failed VL reply leaves the row's ``error`` alone (one summary line is logged).
    """
    n = len(plan.vl)
    # one row per VL, so each column below is a contiguous slice
    values = np.zeros((VL_COUNT, n), dtype=np.uint64)
    missing = np.ones((VL_COUNT, n), dtype=bool)
    rows = np.flatnonzero(plan.vl >= 0)
    if len(rows):
        attr = pma.ATTR_PORT_VL_XMIT_WAIT
        idx = plan.vl[rows]
        recs = pma.decode(res.mads[idx].tobytes(), attr)
        why = np.where(errors[idx] != "", errors[idx], pma.check_replies(recs, attr))
        port_bad = recs["port_select"] != plan.port[rows]
        why = np.where((why == "") & port_bad, "reply for another port", why)
        data_ok = error[rows] == ""
        good = (why == "") & data_ok
        values[:, rows[good]] = recs["vl_xmit_wait"][good].T
        missing[:, rows[good]] = False
        lost = np.flatnonzero((why != "") & data_ok)
        if len(lost):
            r = rows[lost[0]]
            log.warning(
                "PortVLXmitWaitCounters of %d ports not read, their per-VL columns are "
                "empty (first: lid %d port %d: %s)",
                len(lost),
                plan.lid[r],
                plan.port[r],
                why[lost[0]],
            )
    return {c: pd.arrays.IntegerArray(values[v], missing[v]) for v, c in enumerate(VL_WAIT_COLUMNS)}
