"""Per-SL data counters: the MAD bytes, the probe, clears, and per-SL rates.

The end-to-end tests drive the native backend over ``ScriptedFabric`` (the transport
boundary, tests/support/scripted_pma.py), answering PortXmitDataSL/PortRcvDataSL Gets and Sets with
constructed replies, with the wall clock fixed so that every rate is exact.
"""

from __future__ import annotations

import struct
import time

import numpy as np
import pandas as pd
import pytest

from ibqos.collect.per_sl import SL_RATES_DTYPES, SlRateTracker, SlReadings, clear_words
from ibqos.fabric.targets import Target
from ibqos.mad import pma
from ibqos.mad.layers import PortRcvDataSL, PortXmitDataSL, counters, dissect
from tests.support.scripted_pma import SWITCH_CAPS, ScriptedFabric, backend, ca, reply, switch

XMIT, RCV = pma.ATTR_PORT_XMIT_DATA_SL, pma.ATTR_PORT_RCV_DATA_SL
SL_ATTRS = (XMIT, RCV)


@pytest.fixture
def config(tmp_path):
    """An enforce-mode agent's config on a recorded fabric (tests.support.replay_agent)."""
    from tests.support.replay_agent import replay_config

    return replay_config(tmp_path)


# -- the bytes ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("attr", "layer", "prefix"),
    [(XMIT, PortXmitDataSL, "XmtDataSL"), (RCV, PortRcvDataSL, "RcvDataSL")],
)
def test_a_constructed_reply_decodes_sl_by_sl(attr, layer, prefix):
    words = [0, 1, 0xFF, 0x100, 0xFFFF, 0x10000, 2**31, pma.DATA_SL_MAX, *range(7, 15)]
    raw = reply(attr, 9, words)
    rec = pma.decode(raw, attr)[0]
    assert rec["data_sl"].tolist() == words
    assert (int(rec["port_select"]), int(rec["counter_select"])) == (9, 0)
    assert pma.check_replies(pma.decode(raw, attr), attr).tolist() == [""]
    pkt = dissect(raw)
    assert isinstance(pkt.payload, layer)
    assert counters(pkt) == {f"{prefix}{sl}": w for sl, w in enumerate(words)}
    # the last counter (SL 15) ends at data byte 67; nothing after it is read
    assert raw[64 + 64 : 64 + 68] == (14).to_bytes(4, "big") and not any(raw[64 + 68 :])


def test_readings_are_bytes_and_bad_replies_leave_their_direction_unknown():
    x = [reply(XMIT, 1, [sl * 10 for sl in range(16)]), reply(XMIT, 2, [5] * 16)]
    r = [reply(RCV, 1, [1] * 16), reply(RCV, 2, [0] * 16, status=pma.STATUS_UNSUP_METHOD_ATTR)]
    mads = lambda rows: np.frombuffer(b"".join(rows), np.uint8).reshape(-1, 256)  # noqa: E731
    readings, whys = SlReadings.decode(
        np.array([0x10, 0x10], np.uint64),
        np.array([1, 2], np.int64),
        mads(x),
        ["", ""],
        np.array([100.0, 100.5]),
        mads(r),
        ["", ""],
        np.array([101.0, 101.5]),
    )
    assert readings.xmit[0].tolist() == [sl * 40 for sl in range(16)]  # x 4, once
    assert readings.xmit[1].tolist() == [20] * 16
    assert readings.xmit_time_s.tolist() == [100.0, 100.5]
    assert readings.rcv_time_s[0] == 101.0 and np.isnan(readings.rcv_time_s[1])
    assert whys == ["", "", "", "status 0x000c (method/attribute not supported)"]
    assert readings.answered == 2


def test_a_set_clears_the_sls_counter_select_names():
    raw = pma.set_request(RCV, 7, pma.DATA_SL_ALL, tid=0xAB)
    assert raw[:4] == bytes([1, 0x04, 1, 0x02])  # Set
    assert raw[16:18] == b"\x00\x37" and raw[64 + 1] == 7
    assert raw[64 + 2 : 64 + 4] == b"\xff\xff" and not any(raw[64 + 4 :])
    assert struct.unpack_from(">Q", raw, 8)[0] == 0xAB
    assert pma.get_request(RCV, 7, 0xAB)[:2] == raw[:2]  # same but for method and select


# -- clearing before saturation ----------------------------------------------------------
def test_clear_level_leaves_room_for_one_interval_of_line_rate():
    cap = np.array([0.0, 1.25e9, 12.5e9, 12.5e9])  # unknown, 10 Gb/s, 100 Gb/s, 100 Gb/s
    got = clear_words(cap, 1.0).tolist()
    assert got[0] == 2**31 and got[1] == 2**31  # half range: 10 Gb/s fills 2^31 in 6.9 s
    # 100 Gb/s for 1.5 s is 4.7e9 words, more than 32 bits: clear at every reading
    assert got[2] == got[3] == 0
    # 100 Gb/s at 0.5 s: 2.34e9 words of room, so below half range
    assert clear_words(np.array([12.5e9]), 0.5).tolist() == [pma.DATA_SL_MAX - 2_343_750_000]


# -- rates -------------------------------------------------------------------------------
def readings(xmit, rcv, t, *, cleared=None, port=1):
    n = len(xmit)
    return SlReadings(
        node_guid=np.full(n, 0x10, np.uint64),
        port=np.arange(port, port + n, dtype=np.int64),
        xmit=np.array(xmit, np.uint64).reshape(n, 16),
        rcv=np.array(rcv, np.uint64).reshape(n, 16),
        xmit_time_s=np.full(n, t, dtype=np.float64),
        rcv_time_s=np.full(n, t, dtype=np.float64),
        xmit_cleared_s=np.full(n, np.nan if cleared is None else cleared),
        rcv_cleared_s=np.full(n, np.nan),
    )


def test_rates_are_deltas_over_each_ports_interval_with_resets_and_stuck_counters():
    tracker = SlRateTracker()
    assert tracker.update(None) is None
    first = tracker.update(readings([[400] * 16], [[0] * 16], 10.0))
    assert first is not None and first.dtypes.astype(str).to_dict() == SL_RATES_DTYPES
    assert first["xmit_bytes_per_s"].isna().all()  # a first reading has no rate
    x = [4400, 400, 100, pma.DATA_SL_MAX * 4, *[400] * 12]  # SL 2 was reset, SL 3 stuck
    got = tracker.update(readings([x], [[80] * 16], 12.0))
    assert got is not None
    assert got["sl"].tolist() == list(range(16))
    want = [2000.0, 0.0, 50.0, np.nan, *[0.0] * 12]
    np.testing.assert_array_equal(got["xmit_bytes_per_s"].to_numpy(), want)
    assert (got["rcv_bytes_per_s"] == 40.0).all()


def test_after_a_clear_the_next_delta_counts_from_zero_at_the_clear():
    tracker = SlRateTracker()
    big = 2**31 * 4 + 400  # past half range: the backend cleared it at t = 10.5
    tracker.update(readings([[big] * 16], [[0] * 16], 10.0, cleared=10.5))
    # more than before the clear: without the clear's baseline it would look like 40 B
    got = tracker.update(readings([[big + 40] * 16], [[0] * 16], 20.5))
    assert got is not None
    assert (got["xmit_bytes_per_s"] == (big + 40) / 10.0).all()


def test_a_port_not_read_has_no_rate_and_no_baseline():
    tracker = SlRateTracker()
    tracker.update(readings([[0] * 16], [[0] * 16], 1.0))
    lost = readings([[40] * 16], [[40] * 16], np.nan)
    got = tracker.update(lost)
    assert got is not None and got[["xmit_bytes_per_s", "rcv_bytes_per_s"]].isna().all().all()
    again = tracker.update(readings([[80] * 16], [[80] * 16], 3.0))
    assert again is not None and again["xmit_bytes_per_s"].isna().all()


# -- the probe ---------------------------------------------------------------------------
@pytest.fixture
def fab() -> ScriptedFabric:
    counters = {(1, p): p * 1000 for p in (1, 2)}
    counters |= {(2, p): p * 1000 for p in (1, 2)}
    counters[(3, 1)] = 555
    caps = {1: (SWITCH_CAPS, 0), 2: (SWITCH_CAPS, 0), 3: (0x1200, 0)}
    return ScriptedFabric(caps, counters)


def targets() -> list[Target]:
    return [switch(1, 1), switch(1, 2), switch(2, 1), switch(2, 2), ca(3)]


def sl_sent(fab: ScriptedFabric) -> list[tuple[int, int, int]]:
    return [s for s in fab.sent if s[1] in SL_ATTRS]


@pytest.mark.parametrize("how", ["silent", "status 0x000c"])
def test_a_switch_without_per_sl_counters_is_asked_once(fab, how):
    (fab.sl_silent if how == "silent" else set()).update({1, 2})
    nb = backend(fab, retries=2)
    s = nb.sweep(targets())
    # one port per switch, both attributes, one try each even with retries, no CA asked
    assert sorted(sl_sent(fab)) == [(1, XMIT, 1), (1, RCV, 1), (2, XMIT, 1), (2, RCV, 1)]
    assert s.per_sl is None and (s.table["error"] == "").all()
    fab.sent.clear()
    for _ in range(3):
        assert nb.sweep(targets()).per_sl is None
    assert sl_sent(fab) == []
    assert not any(c.per_sl for c in nb.caps.values() if c is not None)


def test_a_fabric_change_asks_the_switches_that_said_no_again(fab):
    nb = backend(fab)
    ports = targets()
    nb.sweep(ports)
    fab.per_sl.add(2)  # e.g. a firmware that has them now
    fab.sent.clear()
    nb.sweep(list(ports))  # the same ports in a new list: no change
    assert sl_sent(fab) == []
    nb.sweep(ports[:-1])  # a port gone: the fabric changed
    assert sorted(sl_sent(fab))[:2] == [(1, XMIT, 1), (1, RCV, 1)]  # switch 1: asked again
    caps = nb.caps[0x102]
    assert caps is not None and caps.per_sl
    s = nb.sweep(ports[:-1])
    assert s.per_sl is not None and s.per_sl.port.tolist() == [1, 2]  # switch 2's ports


def test_per_sl_off_asks_nothing(fab):
    fab.per_sl.update({1, 2})
    nb = backend(fab, per_sl=False)
    nb.sweep(targets())
    assert nb.sweep(targets()).per_sl is None and sl_sent(fab) == []


# -- end to end: the native backend's sweeps into sl_rates -------------------------------
@pytest.fixture
def clock(monkeypatch):
    """The clocks, fixed by the test: every reply of a sweep arrives at ``now[0]``, on
    the wall clock and on the monotonic one (which per-SL intervals are measured on)."""
    now = [1000.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    return now


def test_sweeps_give_exact_per_sl_rates(fab, clock):
    fab.per_sl.update({1, 2})
    words = fab.sl_words
    words[(1, 1, XMIT)] = [100, 0, 0, 1000, *[0] * 12]
    words[(1, 1, RCV)] = [0] * 5 + [50] + [0] * 10
    words[(2, 2, XMIT)] = [0] * 15 + [7]
    nb, tracker = backend(fab), SlRateTracker()
    s1 = nb.sweep(targets())
    assert s1.per_sl is not None and len(s1.per_sl) == 4  # the CA has none
    first = tracker.update(s1.per_sl)
    assert first is not None and first[["xmit_bytes_per_s", "rcv_bytes_per_s"]].isna().all().all()
    assert fab.sl_sets == []  # far from half range: nothing cleared
    clock[0] = 1010.0
    words[(1, 1, XMIT)][0] += 2500  # 10,000 bytes in 10 s
    words[(1, 1, XMIT)][3] += 250_000
    words[(1, 1, RCV)][5] += 25
    words[(2, 2, XMIT)][15] += 5
    got = tracker.update(nb.sweep(targets()).per_sl)
    want = pd.DataFrame(
        {
            "node_guid": np.repeat(np.array([0x101, 0x101, 0x102, 0x102], np.uint64), 16),
            "port": np.repeat([1, 2, 1, 2], 16),
            "sl": np.tile(np.arange(16), 4),
            "xmit_bytes_per_s": 0.0,
            "rcv_bytes_per_s": 0.0,
        }
    ).astype(SL_RATES_DTYPES)
    want.loc[0, "xmit_bytes_per_s"] = 1000.0
    want.loc[3, "xmit_bytes_per_s"] = 100_000.0
    want.loc[5, "rcv_bytes_per_s"] = 10.0
    want.loc[63, "xmit_bytes_per_s"] = 2.0
    pd.testing.assert_frame_equal(got, want, check_exact=True)


def test_counters_past_half_range_are_cleared_and_measured_from_the_clear(fab, clock):
    fab.per_sl.add(1)
    words = fab.sl_words
    words[(1, 1, XMIT)] = [2**31 + 1, 10, *[0] * 14]
    words[(1, 2, RCV)] = [pma.DATA_SL_MAX] * 16  # stuck: no rate, and cleared
    nb, tracker = backend(fab), SlRateTracker()
    tracker.update(nb.sweep(targets()[:2]).per_sl)
    # one Set per port and direction past the level, all 16 SLs; nothing else cleared
    assert sorted(fab.sl_sets) == [(1, XMIT, 1, 0xFFFF), (1, RCV, 2, 0xFFFF)]
    assert words[(1, 1, XMIT)] == [0] * 16 and words[(1, 2, RCV)] == [0] * 16
    clock[0] = 1004.0
    words[(1, 1, XMIT)][0] = 2**31 + 2  # more than before the clear
    words[(1, 2, RCV)][9] = 100
    s = nb.sweep(targets()[:2])
    assert s.stats["sl_clears"] == 1  # SL 0 of port 1 is past half range again
    got = tracker.update(s.per_sl)
    assert got is not None
    x = got["xmit_bytes_per_s"].to_numpy()
    assert x[0] == (2**31 + 2) * 4 / 4.0 and x[1] == 0.0  # from 0 at the clear
    r = got["rcv_bytes_per_s"].to_numpy()
    assert r[16 + 9] == 100.0 and (np.delete(r, 16 + 9) == 0).all()


def test_a_stuck_counter_has_no_rate_for_that_interval(fab, clock, caplog):
    fab.per_sl.add(1)
    nb, tracker = backend(fab), SlRateTracker()
    tracker.update(nb.sweep(targets()[:1]).per_sl)
    fab.sl_words[(1, 1, XMIT)][4] = pma.DATA_SL_MAX
    clock[0] = 1001.0
    got = tracker.update(nb.sweep(targets()[:1]).per_sl)
    assert got is not None
    assert np.isnan(got["xmit_bytes_per_s"].iat[4])
    assert got["xmit_bytes_per_s"].drop(index=4).eq(0).all()
    assert "stuck at its maximum" in caplog.text


# -- the hand-off to the decision cycle ----------------------------------------------------
class WithPerSl:
    """A backend that adds the same per-SL reading of one switch port, one second later
    every sweep, to another backend's sweeps (the agent's collector boundary)."""

    def __init__(self, inner, guid: int) -> None:
        self.inner, self.name, self.guid, self.n = inner, inner.name, guid, 0

    def sweep(self, targets):
        s = self.inner.sweep(targets)
        self.n += 1
        s.per_sl = readings([[self.n * 400] * 16], [[0] * 16], float(self.n))
        s.per_sl.node_guid[:] = self.guid
        return s

    def close(self) -> None:
        self.inner.close()


def test_the_agent_hands_per_sl_rates_to_the_decider_and_counts_their_ports(
    config,
    monkeypatch,
):
    from ibqos.agent.daemon import Agent
    from ibqos.config.load import load_config
    from tests.support.replay_agent import plan_now

    path, _ = config
    agent = Agent(load_config(path), path)
    try:
        pipeline = agent.parts.pipeline
        guid = pipeline.fabric.targets()[-1].node_guid
        pipeline.collector.backend = WithPerSl(pipeline.collector.backend, guid)
        seen = []
        decide = pipeline.decider.decide

        def spy(*args, **kw):
            seen.append(kw.get("sl_rates"))
            return decide(*args, **kw)

        monkeypatch.setattr(pipeline.decider, "decide", spy)
        plan_now(agent)
        plan_now(agent)
        assert len(seen) == 2 and seen[0] is not None and seen[1] is not None
        assert seen[1]["node_guid"].eq(guid).all() and (seen[1]["xmit_bytes_per_s"] == 400.0).all()
        value = agent.telemetry.metrics.registry.get_sample_value("ibqos_sweep_per_sl_ports")
        assert value == 1.0
    finally:
        agent.close()
