"""The native collector's pipeline and decoding, over a scripted PMA.

``ScriptedFabric`` stands in for libibumad at the one seam the collector has (``Transport``):
it answers each Get the way a real PMA (or ibsim, or a broken device) would, from counters
and per-port misbehaviours given by the test.  The same collector runs against the real
ibsim in tests/integration/test_native_backend.py.
"""

from __future__ import annotations

import ctypes
import logging
import time
from collections import deque

import numpy as np
import pytest

from ibqos.collect.native import REPROBE_SWEEPS, NativeBackend, NodeCaps
from ibqos.collect.pipeline import Pipeline, Request
from ibqos.collect.sweep import SWEEP_DTYPES, VL_WAIT_COLUMNS, sweep_dtypes
from ibqos.errors import MadError, StopRequested
from ibqos.mad import pma
from ibqos.tools import waiter
from tests.support.scripted_pma import CA_CAPS, SWITCH_CAPS, ScriptedFabric, backend, ca, switch


@pytest.fixture
def fab() -> ScriptedFabric:
    counters = {(1, p): p * 1000 for p in range(1, 5)}
    counters[(2, 1)] = 2**62  # x4 does not fit in 64 bits: saturates
    counters[(3, 1)] = 555
    return ScriptedFabric({1: (SWITCH_CAPS, 0), 2: (CA_CAPS, 0), 3: (CA_CAPS, 0)}, counters)


def test_a_sweep_reads_64_bit_counters_and_xmit_wait(fab: ScriptedFabric) -> None:
    targets = [switch(1, p) for p in range(1, 5)] + [ca(3)]
    s = backend(fab).sweep(targets)
    t = s.table
    assert t.dtypes.astype(str).to_dict() == SWEEP_DTYPES
    assert (t["error"] == "").all() and (t["counter_bits"] == 64).all()
    assert t["xmit_bytes"].tolist() == [4000, 8000, 12000, 16000, 4 * 555]
    assert t["rcv_bytes"].tolist() == [4004, 8004, 12004, 16004, 4 * 556]
    assert t["rcv_pkts"].tolist() == [1003, 2003, 3003, 4003, 558]
    assert t["xmit_wait"].tolist() == [7] * 5  # from PortCounters: PCE has no XmitWait here
    assert t["time_s"].notna().all()
    # ClassPortInfo per node, PortXmitDataSL per switch, then PCE + PortCounters per port
    attrs = [a for _, a, _ in fab.sent]
    assert attrs.count(pma.ATTR_CLASS_PORT_INFO) == 2
    assert attrs.count(pma.ATTR_PORT_XMIT_DATA_SL) == 1
    assert attrs.count(pma.ATTR_PORT_COUNTERS_EXT) == 5
    assert attrs.count(pma.ATTR_PORT_COUNTERS) == 5
    assert s.stats["sent"] == len(fab.sent) and s.stats["failed"] == 0


def test_capabilities_are_probed_once(fab: ScriptedFabric) -> None:
    nb = backend(fab, xmit_wait=False)
    nb.sweep([switch(1, 1), ca(3)])
    fab.sent.clear()
    s = nb.sweep([switch(1, 1), ca(3)])
    assert [a for _, a, _ in fab.sent] == [pma.ATTR_PORT_COUNTERS_EXT] * 2
    assert s.table["xmit_wait"].isna().all()  # not asked for
    caps = nb.caps[0x101]
    assert caps is not None and not caps.per_sl
    assert caps.extended and caps.all_port_select and caps.xmit_wait and not caps.pce_xmit_wait
    ca_caps = nb.caps[0x203]
    assert ca_caps is not None and not ca_caps.all_port_select


def test_per_sl_support_is_found_by_trying(fab: ScriptedFabric) -> None:
    fab.per_sl.add(1)
    nb = backend(fab)
    nb.sweep([switch(1, 1)])
    caps = nb.caps[0x101]
    assert caps is not None and caps.per_sl


def test_pce_with_xmit_wait_needs_no_port_counters(fab: ScriptedFabric) -> None:
    fab.caps[1] = (SWITCH_CAPS, pma.CAP2_ADDL_PCE >> 0)
    s = backend(fab).sweep([switch(1, 2)])
    assert pma.ATTR_PORT_COUNTERS not in [a for _, a, _ in fab.sent]
    assert s.table["xmit_wait"].tolist() == [2000 + 4]


def test_without_pce_32_bit_counters_are_used_with_a_warning(
    fab: ScriptedFabric, caplog: pytest.LogCaptureFixture
) -> None:
    fab.caps[3] = (0x1000, 0)  # XmitWait, no PortCountersExtended
    with caplog.at_level(logging.WARNING, "ibqos.collect"):
        s = backend(fab).sweep([ca(3)])
    assert s.table["counter_bits"].tolist() == [32]
    assert s.table["xmit_bytes"].tolist() == [4 * 555]
    assert s.table["xmit_wait"].tolist() == [7]
    assert "no PortCountersExtended" in caplog.text and "cn3 mlx5_0" in caplog.text


def test_saturated_words_stay_saturated_in_bytes(fab: ScriptedFabric) -> None:
    s = backend(fab).sweep([ca(2)])
    assert s.table["xmit_bytes"].tolist() == [2**64 - 1]
    assert s.table["xmit_pkts"].tolist() == [2**62 + 2]


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        ("truncate", "truncated reply (100 of 256 bytes)"),
        ("garble", "not a PerfMgt MAD (class 0x81)"),
        ("wrong-attr", "reply for attribute 0x0012, asked 0x001d"),
        (pma.STATUS_UNSUP_METHOD_ATTR, "status 0x000c (method/attribute not supported)"),
        (pma.STATUS_INVALID_FIELD, "status 0x001c (invalid attribute or modifier)"),
    ],
)
def test_a_bad_reply_fails_its_port_only(
    fab: ScriptedFabric, caplog: pytest.LogCaptureFixture, fault: object, error: str
) -> None:
    fab.faults[(1, 2, pma.ATTR_PORT_COUNTERS_EXT)] = [fault]
    with caplog.at_level(logging.DEBUG, "ibqos.collect"):
        s = backend(fab).sweep([switch(1, p) for p in range(1, 5)])
    assert s.table["error"].tolist() == ["", error, "", ""]
    assert s.table["xmit_bytes"].isna().tolist() == [False, True, False, False]
    assert s.table["counter_bits"].tolist() == [64, 0, 64, 64]
    # per port at debug level only: the collection loop sums a sweep up in one line
    said = [r for r in caplog.records if r.getMessage() == f"sw1 port 2 (lid 1): {error}"]
    assert [r.levelno for r in said] == [logging.DEBUG]
    assert s.failed == 1


def test_no_reply_is_retried_then_reported(fab: ScriptedFabric) -> None:
    fab.faults[(1, 1, pma.ATTR_PORT_COUNTERS_EXT)] = ["drop"]
    fab.faults[(1, 2, pma.ATTR_PORT_COUNTERS_EXT)] = ["drop", "drop"]
    fab.faults[(1, 3, pma.ATTR_PORT_COUNTERS_EXT)] = ["returned", "returned"]
    fab.faults[(1, 4, pma.ATTR_PORT_COUNTERS_EXT)] = ["busy"]
    s = backend(fab).sweep([switch(1, p) for p in range(1, 5)])
    assert s.table["error"].tolist() == [
        "",
        "no reply after 2 tries (0.01 s each)",
        "no reply after 2 tries (0.01 s each)",
        "",
    ]
    assert s.table["xmit_bytes"].tolist()[0] == 4000
    # port 1 once, port 2 twice, port 4 (busy: retried at its deadline, not at once) once;
    # requests handed back as timed out are not waited for
    assert s.stats["timeouts"] == 4
    assert s.stats["retries"] == 1 + 1 + 1 + 1


def test_busy_to_the_end_says_busy(fab: ScriptedFabric) -> None:
    fab.faults[(1, 1, pma.ATTR_PORT_COUNTERS_EXT)] = ["busy", "busy"]
    s = backend(fab).sweep([switch(1, 1), switch(1, 2)])
    assert s.table["error"].tolist() == ["busy after 2 tries (0.01 s each)", ""]


def test_each_try_has_its_own_transaction_id(fab: ScriptedFabric) -> None:
    # a kernel refuses a Get whose id it still waits on; a dropped request stays waited on
    fab.kernel = True
    fab.faults[(1, 2, pma.ATTR_PORT_COUNTERS_EXT)] = ["drop", "drop"]
    s = backend(fab, retries=2).sweep([switch(1, p) for p in range(1, 5)])
    assert s.table["error"].tolist() == ["", "", "", ""]
    tids = [tid for lid, attr, port, tid in fab.sent_tids if (attr, port) == (0x1D, 2)]
    assert len(tids) == 3 and len(set(tids)) == 3


def test_a_refused_send_fails_its_port_only(fab: ScriptedFabric) -> None:
    fab.refuse.add((1, 3))
    s = backend(fab).sweep([switch(1, p) for p in range(1, 5)])
    assert s.table["error"].tolist()[2] == "not sent: umad_send: Invalid argument"
    assert s.table["error"].tolist()[:2] == ["", ""] and s.failed == 1


def test_unknown_lid_fails_the_node_without_stopping_the_sweep(fab: ScriptedFabric) -> None:
    s = backend(fab).sweep([ca(9), ca(3)])
    assert s.table["error"].tolist() == ["no ClassPortInfo from this node", ""]


def test_duplicates_and_strays_are_ignored(fab: ScriptedFabric) -> None:
    fab.faults[(1, 1, pma.ATTR_PORT_COUNTERS_EXT)] = ["dup"]
    pipe = Pipeline(fab, window=2, timeout_s=0.01, retries=0)
    stray = bytearray(pma.get_request(pma.ATTR_PORT_COUNTERS_EXT, 1, 0xDEAD))
    stray[3] = pma.METHOD_GET_RESP
    fab.queue.append((bytes(stray), 0))
    fab.in_flight += 1
    reqs = [Request(1, pma.ATTR_PORT_COUNTERS_EXT, p) for p in (1, 2, 3)]
    res = pipe.run(reqs)
    assert res.error == ["", "", ""]
    recs = pma.decode(res.mads.tobytes(), pma.ATTR_PORT_COUNTERS_EXT)
    assert recs["xmit_data"].tolist() == [1000, 2000, 3000]
    assert pipe.stats["answered"] == 3


@pytest.mark.parametrize("window", [1, 3, 8])
def test_the_window_bounds_requests_in_flight(fab: ScriptedFabric, window: int) -> None:
    pipe = Pipeline(fab, window=window, timeout_s=0.5, retries=0)
    reqs = [Request(1, pma.ATTR_PORT_COUNTERS_EXT, 1 + i % 4) for i in range(50)]
    # the scripted PMA answers at once, so hold replies back to fill the window
    real_recv = fab.recv
    held: deque[int] = deque()

    def slow_recv(timeout_ms: int) -> int:
        held.append(1)
        return real_recv(timeout_ms) if len(held) % 2 == 0 else -1

    fab.recv = slow_recv  # type: ignore[method-assign]
    res = pipe.run(reqs)
    assert res.error == [""] * 50
    assert fab.max_in_flight == window
    tids = pma.decode(res.mads.tobytes(), pma.ATTR_PORT_COUNTERS_EXT)["tid_low"]
    assert len(set(tids.tolist())) == 50  # one transaction id per request


def test_replies_are_matched_on_the_low_32_bits(fab: ScriptedFabric) -> None:
    pipe = Pipeline(fab, window=4, timeout_s=0.5, retries=0)
    real_send = fab.send_at

    def kernel_send(addr: int, timeout_ms: int) -> None:
        # the kernel owns the upper 32 bits of the transaction id
        ctypes.memmove(addr + fab.hdr + 8, b"\xab\xcd\x00\x07", 4)
        real_send(addr, timeout_ms)

    fab.send_at = kernel_send  # type: ignore[method-assign]
    res = pipe.run([Request(1, pma.ATTR_PORT_COUNTERS_EXT, p) for p in (4, 3)])
    recs = pma.decode(res.mads.tobytes(), pma.ATTR_PORT_COUNTERS_EXT)
    assert recs["xmit_data"].tolist() == [4000, 3000]
    assert np.isfinite(res.time_s).all()


def test_bulk_decoding_rejects_partial_mads_and_unknown_attributes() -> None:
    with pytest.raises(MadError, match="300 bytes is not a whole number of 256-byte MADs"):
        pma.decode(bytes(300), pma.ATTR_PORT_COUNTERS_EXT)
    with pytest.raises(MadError, match="no bulk layout for attribute 0x0099"):
        pma.decode(bytes(256), 0x99)


# -- PortVLXmitWaitCounters -----------------------------------------------------------
VL_ATTR = pma.ATTR_PORT_VL_XMIT_WAIT


def vl_of(table, row: int) -> list[object]:
    return [table[c].iat[row] for c in VL_WAIT_COLUMNS]


def vl_sent(fab: ScriptedFabric) -> list[tuple[int, int]]:
    return [(lid, port) for lid, attr, port in fab.sent if attr == VL_ATTR]


def test_vl_counters_are_off_by_default(fab: ScriptedFabric) -> None:
    fab.vl.add(1)
    s = backend(fab).sweep([switch(1, 1), ca(3)])
    assert list(s.table.columns) == list(SWEEP_DTYPES)
    assert vl_sent(fab) == []


def test_vl_counters_are_read_where_the_node_answers(fab: ScriptedFabric) -> None:
    fab.vl.add(1)  # the switch has them; the CA answers 0x000C
    fab.vl_values[(1, 3)] = [0] * 15 + [65535]
    targets = [switch(1, p) for p in range(1, 5)] + [ca(3)]
    nb = backend(fab, vl_xmit_wait=True)
    s = nb.sweep(targets)
    t = s.table
    assert t.dtypes.astype(str).to_dict() == sweep_dtypes(vl_wait=True)
    assert list(t.columns[-16:]) == list(VL_WAIT_COLUMNS)
    assert (t["error"] == "").all() and t["xmit_bytes"].notna().all()
    assert vl_of(t, 0) == [100 + vl for vl in range(16)]
    assert vl_of(t, 3) == [400 + vl for vl in range(16)]
    assert vl_of(t, 2) == [0] * 15 + [65535]
    assert t.loc[4, list(VL_WAIT_COLUMNS)].isna().all()  # the CA: missing, not 0
    # one probe per node (first port of each), then one Get per port of the switch only
    assert vl_sent(fab) == [(1, 1), (3, 1), (1, 1), (1, 2), (1, 3), (1, 4)]
    caps, ca_caps = nb.caps[0x101], nb.caps[0x203]
    assert caps is not None and caps.vl_xmit_wait
    assert ca_caps is not None and not ca_caps.vl_xmit_wait
    fab.sent.clear()
    s = nb.sweep(targets)
    assert vl_sent(fab) == [(1, 1), (1, 2), (1, 3), (1, 4)]  # the CA is not asked again
    assert s.table.loc[4, list(VL_WAIT_COLUMNS)].isna().all()


def test_a_lost_vl_reply_leaves_the_port_row_alone(
    fab: ScriptedFabric, caplog: pytest.LogCaptureFixture
) -> None:
    fab.vl.add(1)
    targets = [switch(1, p) for p in range(1, 5)]
    nb = backend(fab, vl_xmit_wait=True)
    nb.sweep(targets)  # probes
    fab.faults[(1, 2, VL_ATTR)] = ["drop", "drop"]
    fab.faults[(1, 4, VL_ATTR)] = [pma.STATUS_INVALID_FIELD]
    with caplog.at_level(logging.WARNING, "ibqos.collect"):
        s = nb.sweep(targets)
    t = s.table
    assert t["error"].tolist() == ["", "", "", ""]
    assert t["xmit_bytes"].tolist() == [4000, 8000, 12000, 16000]
    assert t["xmit_wait"].tolist() == [7] * 4
    assert t.loc[[1, 3], list(VL_WAIT_COLUMNS)].isna().all().all()
    assert t.loc[[0, 2], list(VL_WAIT_COLUMNS)].notna().all().all()
    assert s.failed == 0 and s.stats["failed"] == 0
    lines = [r.getMessage() for r in caplog.records if "PortVLXmitWaitCounters" in r.getMessage()]
    assert lines == [
        "PortVLXmitWaitCounters of 2 ports not read, their per-VL columns are empty "
        "(first: lid 1 port 2: no reply after 2 tries (0.01 s each))"
    ]
    # and the node stays one that has them: the next sweep reads every port again
    assert backend_caps(nb, 0x101).vl_xmit_wait
    s = nb.sweep(targets)
    assert s.table[list(VL_WAIT_COLUMNS)].notna().all().all()


def backend_caps(nb: NativeBackend, guid: int) -> NodeCaps:
    caps = nb.caps[guid]
    assert caps is not None
    return caps


def test_a_port_in_error_has_no_vl_values(fab: ScriptedFabric) -> None:
    fab.vl.add(1)
    fab.faults[(1, 2, pma.ATTR_PORT_COUNTERS_EXT)] = ["garble"]
    s = backend(fab, vl_xmit_wait=True).sweep([switch(1, 1), switch(1, 2)])
    assert s.table["error"].tolist() == ["", "not a PerfMgt MAD (class 0x81)"]
    assert s.table.loc[1, list(VL_WAIT_COLUMNS)].isna().all()
    assert vl_of(s.table, 0)[:2] == [100, 101]


def test_an_unanswered_vl_probe_is_tried_again_later(
    fab: ScriptedFabric, caplog: pytest.LogCaptureFixture
) -> None:
    fab.vl.add(1)
    fab.faults[(1, 1, VL_ATTR)] = ["drop", "drop"]  # the probe and its retry
    targets = [switch(1, 1), switch(1, 2)]
    nb = backend(fab, vl_xmit_wait=True)
    with caplog.at_level(logging.INFO, "ibqos.collect"):
        s = nb.sweep(targets)
    assert s.table[list(VL_WAIT_COLUMNS)].isna().all().all()
    assert (s.table["error"] == "").all()
    assert "sw1 port 1 (lid 1): no PortVLXmitWaitCounters (no reply after 2 tries" in caplog.text
    assert "asked again in 10 sweeps" in caplog.text
    fab.sent.clear()
    for _ in range(REPROBE_SWEEPS - 1):
        s = nb.sweep(targets)
    assert vl_sent(fab) == []  # not asked in between
    s = nb.sweep(targets)
    assert vl_sent(fab) == [(1, 1), (1, 1), (1, 2)]  # probe, then both ports
    assert vl_of(s.table, 1)[0] == 200


def test_an_error_status_to_the_vl_probe_is_final(fab: ScriptedFabric) -> None:
    targets = [switch(1, 1), ca(3)]  # neither implements it: status 0x000C
    nb = backend(fab, vl_xmit_wait=True)
    for _ in range(REPROBE_SWEEPS + 2):
        s = nb.sweep(targets)
    assert vl_sent(fab) == [(1, 1), (3, 1)]
    assert s.table[list(VL_WAIT_COLUMNS)].isna().all().all()
    assert s.table.dtypes.astype(str).to_dict() == sweep_dtypes(vl_wait=True)


def test_vl_counters_of_a_node_probed_later(fab: ScriptedFabric) -> None:
    """A node whose ClassPortInfo failed gets its VL probe when it finally answers."""
    fab.vl.add(1)
    fab.faults[(1, 0, pma.ATTR_CLASS_PORT_INFO)] = ["drop", "drop"]
    nb = backend(fab, vl_xmit_wait=True)
    s = nb.sweep([switch(1, 1)])
    assert s.table["error"].tolist() == ["no ClassPortInfo from this node"]
    assert s.table[list(VL_WAIT_COLUMNS)].isna().all().all()
    for _ in range(REPROBE_SWEEPS):
        s = nb.sweep([switch(1, 1)])
    assert s.table["error"].tolist() == [""]
    assert vl_of(s.table, 0) == [100 + vl for vl in range(16)]


def test_vl_replies_decode_like_the_scapy_layer(fab: ScriptedFabric) -> None:
    from ibqos.mad.layers import MAD, PortVLXmitWaitCounters

    fab.vl.add(1)
    fab.vl_values[(1, 2)] = [65535, 1, 0, 77, *range(1000, 1012)]
    pipe = Pipeline(fab, window=2, timeout_s=0.1, retries=0)
    res = pipe.run([Request(1, VL_ATTR, 2)])
    recs = pma.decode(res.mads.tobytes(), VL_ATTR)
    layer = MAD(res.mads[0].tobytes())[PortVLXmitWaitCounters]
    want = [getattr(layer, f"PortVLXmitWait{vl}") for vl in range(16)]
    assert recs["vl_xmit_wait"][0].tolist() == want == fab.vl_values[(1, 2)]


def test_a_sweep_where_no_node_answers_is_all_error_rows(fab: ScriptedFabric) -> None:
    s = backend(fab).sweep([ca(9), ca(8)])  # no such LIDs: no request at all gets sent
    assert s.table["error"].tolist() == ["no ClassPortInfo from this node"] * 2
    assert s.table.dtypes.astype(str).to_dict() == SWEEP_DTYPES


# -- bounds: the sweep's time limit and the tool runner's waiter -------------------------


def test_a_sweep_where_nothing_answers_ends_at_its_time_limit(fab: ScriptedFabric) -> None:
    targets = [switch(1, p) for p in range(1, 5)] + [ca(3)]
    # 5 s per try and two retries: 15 s a request, and more for a window of 4
    nb = backend(fab, timeout_s=5.0, retries=2, sweep_timeout_s=0.3)
    assert nb.sweep(targets).failed == 0  # probed and read while the fabric answers
    fab.caps.clear()  # now nothing answers
    s = nb.sweep(targets)
    assert s.duration_s < 2
    assert s.table["error"].tolist() == ["no reply before the sweep's time limit"] * 5
    # PCE and PortCounters of 5 ports: the first window of 4 sent, none of them answered
    assert (s.stats["cut"], s.stats["sent"]) == (10, 4)
    assert s.stats["timeouts"] == 0


def test_the_waiter_is_called_and_can_stop_a_sweep_mid_way(fab: ScriptedFabric) -> None:
    targets = [switch(1, p) for p in range(1, 5)]
    nb = backend(fab, timeout_s=5.0, retries=2)  # no time limit: 15 s and more
    nb.sweep(targets)
    fab.caps.clear()
    calls: list[float] = []

    def stop() -> None:
        calls.append(time.monotonic())
        if len(calls) == 2:
            raise StopRequested

    started = time.monotonic()
    with waiter(stop), pytest.raises(StopRequested):
        nb.sweep(targets)
    assert len(calls) == 2 and time.monotonic() - started < 3
    fab.caps[1] = (SWITCH_CAPS, 0)  # the pipeline is still usable after a stop
    assert nb.sweep(targets).failed == 0
