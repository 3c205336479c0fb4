"""Rates on a monotonic clock, and 32-bit PortCounters cleared after reading.

Both over the scripted PMA (``tests/support/scripted_pma.py``): ibsim's PMA says every
port has PortCountersExtended, so no lab port reads 32-bit counters; and the wall clock
of a lab cannot be stepped without root.  The clocks are injected here: ``time.time``
(what a reply's ``time_s`` says) jumps, ``time.monotonic`` runs on.
"""

from __future__ import annotations

import math
import time

import numpy as np
import pandas as pd
import pytest

from ibqos.collect.rates import RateTracker
from ibqos.collect.sweep import COUNTERS, SWEEP_DTYPES, Sweep
from ibqos.fabric.targets import Target
from ibqos.mad import pma
from tests.support.scripted_pma import CA_CAPS, SWITCH_CAPS, ScriptedFabric, backend, ca, switch

A = Target(0x0C42A10300010001, "leaf-1", 9, 3, 1, "up", True)


class Clocks:
    """The wall clock and the monotonic clock, each set by the test."""

    def __init__(self) -> None:
        self.wall = 1_000_000.0
        self.mono = 50.0

    def step(self, seconds: float, wall_jump: float = 0.0) -> None:
        """*seconds* pass; the wall clock also jumps by *wall_jump* (NTP, ``date -s``)."""
        self.mono += seconds
        self.wall += seconds + wall_jump


@pytest.fixture
def clocks(monkeypatch: pytest.MonkeyPatch) -> Clocks:
    c = Clocks()
    monkeypatch.setattr(time, "time", lambda: c.wall)
    monkeypatch.setattr(time, "monotonic", lambda: c.mono)
    return c


def one_row(time_s: float, mono_s: float | None, value: int, bits: int = 64) -> Sweep:
    table = pd.DataFrame(
        {
            "node_guid": [A.node_guid],
            "port": [A.port],
            "lid": [A.lid],
            "time_s": [time_s],
            **{c: [value] for c in COUNTERS},
            "counter_bits": [bits],
            "error": [""],
        }
    ).astype(SWEEP_DTYPES)
    mono = None if mono_s is None else np.array([mono_s])
    return Sweep([A], table, "test", started_s=time_s, duration_s=0.1, mono_s=mono)


@pytest.mark.parametrize("jump", [-3600.0, -5.0, 5.0, 86400.0])
def test_a_wall_clock_step_changes_no_rate(jump: float) -> None:
    rt = RateTracker()
    rt.update(one_row(1000.0, 50.0, 0))
    # 10 s pass on the monotonic clock; the wall clock says 10 s + jump
    got = rt.update(one_row(1010.0 + jump, 60.0, 5000))
    assert got["interval_s"].tolist() == [10.0]
    assert got["xmit_bytes_per_s"].tolist() == [500.0]
    assert not got["reset"].any() and got["error"].tolist() == [""]


def test_a_recording_without_monotonic_times_is_measured_on_its_own() -> None:
    rt = RateTracker()
    rt.update(one_row(1000.0, None, 0))
    got = rt.update(one_row(1004.0, None, 400))
    assert got["interval_s"].tolist() == [4.0] and got["xmit_bytes_per_s"].tolist() == [100.0]


@pytest.fixture
def fab() -> ScriptedFabric:
    counters = {(1, 1): 1000, (2, 1): 1000, (3, 1): 1000}
    # lid 3 has no PortCountersExtended: its counters are 32 bits
    return ScriptedFabric({1: (SWITCH_CAPS, 0), 2: (CA_CAPS, 0), 3: (0x1000, 0)}, counters)


def test_native_rates_hold_across_wall_clock_steps(fab: ScriptedFabric, clocks: Clocks) -> None:
    nb, rt = backend(fab), RateTracker()
    targets = [switch(1, 1), ca(2)]
    rt.update(nb.sweep(targets))
    for jump in (-7200.0, 3600.0):
        clocks.step(10.0, wall_jump=jump)
        fab.counters[(1, 1)] += 250  # 1000 bytes (words x 4) in 10 s on each counter
        fab.counters[(2, 1)] += 250
        got = rt.update(nb.sweep(targets))
        assert got["interval_s"].tolist() == [10.0, 10.0]
        assert got["xmit_bytes_per_s"].tolist() == [100.0, 100.0]
        assert got["xmit_pkts_per_s"].tolist() == [25.0, 25.0]
        assert not got["reset"].any()


def test_32_bit_counters_past_their_level_are_cleared_and_measured_from_the_clear(
    fab: ScriptedFabric, clocks: Clocks
) -> None:
    nb, rt = backend(fab), RateTracker()
    fab.counters[(3, 1)] = 2**31 + 10  # words: past half the 32-bit range
    fab.counters[(2, 1)] = 2**33  # a 64-bit port: never cleared
    s = nb.sweep([ca(3), ca(2)])
    assert s.table["counter_bits"].tolist() == [32, 64]
    # one Set of PortCounters, naming the data and packet counters only
    assert fab.pc_sets == [(3, 1, 0xF000)] and s.stats["pc_clears"] == 1
    assert s.cleared_s is not None and s.cleared_s[0] == clocks.mono
    assert math.isnan(s.cleared_s[1])
    rt.update(s)
    clocks.step(10.0)
    fab.counters[(3, 1)] = 1000  # counted from 0 at the clear
    fab.counters[(2, 1)] += 100
    s = nb.sweep([ca(3), ca(2)])
    assert fab.pc_sets == [(3, 1, 0xF000)]  # far below the level: not cleared again
    got = rt.update(s)
    assert got["xmit_bytes_per_s"].tolist() == [400.0, 40.0]
    assert got["rcv_bytes_per_s"].tolist() == [400.4, 40.0]
    assert got["xmit_pkts_per_s"].tolist() == [100.2, 10.0]
    assert not got["reset"].any() and rt.total_resets == 0


def test_a_32_bit_counter_is_cleared_at_every_reading_where_the_link_fills_it(
    fab: ScriptedFabric, clocks: Clocks
) -> None:
    # 100 Gb/s fills 2^32 words (16 GiB) in 1.4 s: with 10 s between sweeps the level is 0
    fast = Target(0x203, "cn3 mlx5_0", 1, 3, 0, "host", False, 12.5e9)
    nb = backend(fab, interval_s=10.0)
    nb.sweep([fast])
    assert fab.pc_sets == [(3, 1, 0xF000)]


def test_a_failed_clear_leaves_the_next_delta_to_the_reading(
    fab: ScriptedFabric, clocks: Clocks
) -> None:
    nb, rt = backend(fab), RateTracker()
    fab.counters[(3, 1)] = 2**31 + 10
    # the Get answers, the Set is refused
    fab.faults[(3, 1, pma.ATTR_PORT_COUNTERS)] = [None, pma.STATUS_UNSUP_METHOD_ATTR]
    s = nb.sweep([ca(3)])
    assert s.cleared_s is not None and math.isnan(s.cleared_s[0])
    rt.update(s)
    clocks.step(10.0)
    fab.counters[(3, 1)] = 2**31 + 110
    got = rt.update(nb.sweep([ca(3)]))
    assert got["xmit_bytes_per_s"].tolist() == [40.0]
