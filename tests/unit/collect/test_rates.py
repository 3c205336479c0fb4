"""RateTracker: deltas, resets, gaps, per-row intervals, exact 64-bit arithmetic."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from ibqos.collect.rates import (
    RATES_DTYPES,
    VL_WAIT_RATE_COLUMNS,
    VL_WAIT_RATE_DTYPES,
    RateTracker,
    rows_for_json,
    vl_wait_rate_column,
)
from ibqos.collect.sweep import COUNTERS, SWEEP_DTYPES, VL_WAIT_COLUMNS, Sweep, sweep_dtypes
from ibqos.fabric.targets import Target

NA = pd.NA
NAN = float("nan")
U64 = 2**64 - 1
A = Target(0x0C42A10300010001, "leaf-1", 9, 3, 1, "up", True)
B = Target(0x0C42A10301000000, "cn0001 mlx5_0", 1, 2, 0, "host", False)
C = Target(0xFFFFFFFFFFFFFFFF, 'odd, "quoted" node', 255, 65535, 2, "down", True)


def row(time_s, xb=0, rb=0, xp=0, rp=0, xw=0, error=""):
    """One sweep row's readings (counters may be NA)."""
    return {
        "time_s": time_s,
        "xmit_bytes": xb,
        "rcv_bytes": rb,
        "xmit_pkts": xp,
        "rcv_pkts": rp,
        "xmit_wait": xw,
        "error": error,
    }


def failed(error="lid 2 port 1: perfquery timed out after 10 s"):
    return row(NAN, NA, NA, NA, NA, NA, error)


def sweep(readings):
    """A Sweep of (target, row) pairs, with the dtypes backends produce."""
    targets = [t for t, _ in readings]
    cols = {
        "node_guid": [t.node_guid for t in targets],
        "port": [t.port for t in targets],
        "lid": [t.lid for t in targets],
        **{k: [r[k] for _, r in readings] for k in ("time_s", *COUNTERS)},
        "counter_bits": [0 if r["error"] else 64 for _, r in readings],
        "error": [r["error"] for _, r in readings],
    }
    table = pd.DataFrame(cols).astype(SWEEP_DTYPES)
    return Sweep(targets, table, "test", started_s=0.0, duration_s=1.0)


def expected(rows):
    """A rates frame built by hand, with the documented dtypes and column order."""
    return pd.DataFrame(rows, columns=list(RATES_DTYPES)).astype(RATES_DTYPES)


def test_first_sample_has_no_rates_then_deltas_over_each_ports_interval():
    rt = RateTracker()
    first = rt.update(sweep([(A, row(100.0, 1000, 2000, 10, 20, 5)), (B, row(100.5, 0, 0))]))
    exp = expected(
        [
            [
                A.node_guid,
                A.node_desc,
                9,
                3,
                1,
                "up",
                100.0,
                NAN,
                NAN,
                NAN,
                NAN,
                NAN,
                NAN,
                False,
                "",
            ],
            [
                B.node_guid,
                B.node_desc,
                1,
                2,
                0,
                "host",
                100.5,
                NAN,
                NAN,
                NAN,
                NAN,
                NAN,
                NAN,
                False,
                "",
            ],
        ]
    )
    pd.testing.assert_frame_equal(first, exp)
    # port A read 2 s later, port B 4 s later: each gets its own interval
    second = rt.update(
        sweep([(A, row(102.0, 3000, 2400, 30, 24, 9)), (B, row(104.5, 800, 400, 8, 4))])
    )
    exp = expected(
        [
            [
                A.node_guid,
                A.node_desc,
                9,
                3,
                1,
                "up",
                102.0,
                2.0,
                1000.0,
                200.0,
                10.0,
                2.0,
                2.0,
                False,
                "",
            ],
            [
                B.node_guid,
                B.node_desc,
                1,
                2,
                0,
                "host",
                104.5,
                4.0,
                200.0,
                100.0,
                2.0,
                1.0,
                0.0,
                False,
                "",
            ],
        ]
    )
    pd.testing.assert_frame_equal(second, exp)
    assert rt.total_resets == 0 and rt.resets == {}


def test_a_counter_going_down_is_a_reset():
    rt = RateTracker()
    rt.update(sweep([(A, row(0.0, 10_000, 10_000, 100, 100, 50)), (B, row(0.0, 5, 5, 1, 1, 0))]))
    out = rt.update(sweep([(A, row(2.0, 400, 10_600, 4, 106, 50)), (B, row(2.0, 7, 7, 2, 2, 0))]))
    a = out.iloc[0]
    assert bool(a["reset"]) is True
    assert a["xmit_bytes_per_s"] == 200.0  # the new value is the delta
    assert a["rcv_bytes_per_s"] == 300.0  # this counter did not go down
    assert a["xmit_pkts_per_s"] == 2.0
    assert a["xmit_wait_per_s"] == 0.0
    assert not out.iloc[1]["reset"]
    assert rt.resets == {(A.node_guid, A.port): 1} and rt.total_resets == 1
    out = rt.update(sweep([(A, row(4.0, 0, 0, 0, 0, 0)), (B, row(4.0, 0, 7, 2, 2, 0))]))
    assert list(out["reset"]) == [True, True]
    assert rt.resets == {(A.node_guid, A.port): 2, (B.node_guid, B.port): 1}
    assert rt.total_resets == 3


def test_missing_ports_give_nan_not_zero():
    rt = RateTracker()
    rt.update(sweep([(A, row(0.0, 100, 100)), (B, row(0.0, 100, 100))]))
    # A fails to read, B is not in this sweep, C is new
    out = rt.update(sweep([(A, failed()), (C, row(1.0, 5, 5))]))
    assert out["error"].tolist() == ["lid 2 port 1: perfquery timed out after 10 s", ""]
    for col in ("interval_s", "xmit_bytes_per_s", "rcv_pkts_per_s", "xmit_wait_per_s"):
        assert out[col].isna().all(), col
    assert math.isnan(out["time_s"].iat[0]) and out["time_s"].iat[1] == 1.0
    # next sweep: A was not read in the previous one, B was not in it: still no rates;
    # C has its first rate
    out = rt.update(sweep([(A, row(2.0, 300, 300)), (B, row(2.0, 300, 300)), (C, row(2.0, 15, 5))]))
    assert out["xmit_bytes_per_s"].iloc[:2].isna().all()
    assert out["xmit_bytes_per_s"].iat[2] == 10.0
    out = rt.update(sweep([(A, row(3.0, 400, 300)), (B, row(4.0, 500, 300)), (C, row(3.0, 15, 5))]))
    assert out["xmit_bytes_per_s"].tolist() == [100.0, 100.0, 0.0]
    assert not out["reset"].any()


def test_missing_counter_gives_nan_for_that_rate_only():
    rt = RateTracker()
    rt.update(sweep([(A, row(0.0, 0, 0, 0, 0, NA))]))
    out = rt.update(sweep([(A, row(1.0, 8, 8, 1, 1, NA))]))
    assert out["xmit_bytes_per_s"].iat[0] == 8.0
    assert math.isnan(out["xmit_wait_per_s"].iat[0])


def test_exact_uint64_deltas_near_two_to_the_64():
    rt = RateTracker()
    rt.update(sweep([(A, row(0.0, U64 - 1000, U64 - 3, 2**63, 0, 0))]))
    out = rt.update(sweep([(A, row(1.0, U64 - 1, U64 - 2, 2**63 + 1, U64 - 1, 1))]))
    # as floats, U64 - 1000 and U64 - 1 are the same number: the delta would be 0
    assert float(U64 - 1000) == float(U64 - 1)
    assert out["xmit_bytes_per_s"].iat[0] == 999.0
    assert out["rcv_bytes_per_s"].iat[0] == 1.0
    assert out["xmit_pkts_per_s"].iat[0] == 1.0
    assert out["rcv_pkts_per_s"].iat[0] == float(U64 - 1)
    assert not out["reset"].iat[0]
    # and a reset from near the top to a small value
    out = rt.update(sweep([(A, row(2.0, 7, U64 - 2, 2**63 + 1, U64 - 1, 1))]))
    assert out["xmit_bytes_per_s"].iat[0] == 7.0 and bool(out["reset"].iat[0])
    assert out["rcv_bytes_per_s"].iat[0] == 0.0


def test_a_counter_stuck_at_its_maximum_has_no_rate(caplog):
    rt = RateTracker()
    rt.update(sweep([(A, row(0.0, U64 - 10, 5, 5, 5, 2**32 - 2))]))
    with caplog.at_level("WARNING", "ibqos.collect"):
        out = rt.update(sweep([(A, row(1.0, U64, 6, 6, 6, 2**32 - 1))]))
        rt.update(sweep([(A, row(2.0, U64, 7, 7, 7, 2**32 - 1))]))
    # PMA counters stick at the top instead of wrapping: the delta is unknown, not 10
    assert math.isnan(out["xmit_bytes_per_s"].iat[0])
    assert math.isnan(out["xmit_wait_per_s"].iat[0])  # XmitWait is 32 bits
    assert out["rcv_bytes_per_s"].iat[0] == 1.0
    assert caplog.text.count("xmit_bytes is stuck at its maximum") == 1  # once per port


def test_a_stuck_32_bit_data_counter_has_no_rate():
    rt = RateTracker()
    top = 4 * (2**32 - 1)  # PortXmitData saturated, in bytes
    first, second = sweep([(A, row(0.0, top - 40))]), sweep([(A, row(1.0, top))])
    for s in (first, second):
        s.table["counter_bits"] = pd.Series([32], dtype="uint8")
    rt.update(first)
    assert math.isnan(rt.update(second)["xmit_bytes_per_s"].iat[0])


def test_time_that_does_not_advance_gives_no_rates():
    rt = RateTracker()
    rt.update(sweep([(A, row(5.0, 0, 0))]))
    out = rt.update(sweep([(A, row(5.0, 10, 10))]))
    assert out["interval_s"].iat[0] == 0.0
    assert out["xmit_bytes_per_s"].isna().all()
    out = rt.update(sweep([(A, row(4.0, 20, 20))]))
    assert out["interval_s"].iat[0] == -1.0 and out["xmit_bytes_per_s"].isna().all()


def test_duplicate_ports_in_a_sweep():
    rt = RateTracker()
    rt.update(sweep([(A, row(0.0, 0)), (A, row(0.0, 0))]))
    out = rt.update(sweep([(A, row(1.0, 10)), (A, row(1.0, 10))]))
    assert out["xmit_bytes_per_s"].tolist() == [10.0, 10.0]


def test_empty_sweep():
    out = RateTracker().update(sweep([]))
    pd.testing.assert_frame_equal(out, expected([]))


def test_table_and_targets_must_match():
    s = sweep([(A, row(0.0))])
    s.targets.append(B)
    with pytest.raises(ValueError, match="1 table rows"):
        RateTracker().update(s)


def test_rows_for_json():
    rt = RateTracker()
    rt.update(sweep([(A, row(0.0, 0, 0, 0, 0, NA)), (C, row(0.0))]))
    out = rt.update(sweep([(A, row(1.0, 40, 4, 2, 1, NA)), (C, failed("lid 65535 port 255: x"))]))
    rows = rows_for_json(out)
    assert rows[0] == {
        "node_guid": "0x0c42a10300010001",
        "node_desc": "leaf-1",
        "port": 9,
        "lid": 3,
        "level": 1,
        "role": "up",
        "time_s": 1.0,
        "interval_s": 1.0,
        "xmit_bytes_per_s": 40.0,
        "rcv_bytes_per_s": 4.0,
        "xmit_pkts_per_s": 2.0,
        "rcv_pkts_per_s": 1.0,
        "xmit_wait_per_s": None,
        "reset": False,
        "error": "",
    }
    assert rows[1]["node_guid"] == "0xffffffffffffffff"
    assert rows[1]["time_s"] is None and rows[1]["xmit_bytes_per_s"] is None
    assert rows[1]["error"] == "lid 65535 port 255: x"
    text = json.dumps(rows, allow_nan=False)  # strict JSON: no NaN anywhere
    assert json.loads(text) == rows
    assert all(type(v) in (str, int, float, bool, type(None)) for r in rows for v in r.values())
    assert type(rows[0]["reset"]) is bool and type(rows[0]["port"]) is int


def test_rates_dtypes_are_documented():
    import ibqos.collect.rates as mod

    for col, dtype in RATES_DTYPES.items():
        assert f"\n{col} " in mod.__doc__ and dtype in mod.__doc__
    assert np.dtype(RATES_DTYPES["node_guid"]) == np.uint64


def test_a_sweep_with_nothing_read_forgets_every_port():
    rt = RateTracker()
    rt.update(sweep([(A, row(0.0, 0))]))
    rt.update(sweep([(A, failed())]))
    assert rt.update(sweep([(A, row(2.0, 10))]))["xmit_bytes_per_s"].isna().all()
    rt.update(sweep([]))
    assert rt.update(sweep([(A, row(3.0, 20))]))["xmit_bytes_per_s"].isna().all()
    assert rt.update(sweep([(A, row(4.0, 30))]))["xmit_bytes_per_s"].tolist() == [10.0]


# -- per-VL transmit wait ---------------------------------------------------------------
def vl_sweep(readings):
    """A sweep like ``sweep()`` with the per-VL columns: each reading is (target, row,
    VL values: a list of 16 (NA allowed), or None for all missing)."""
    base = sweep([(t, r) for t, r, _ in readings])
    for vl, col in enumerate(VL_WAIT_COLUMNS):
        base.table[col] = [NA if v is None else v[vl] for _, _, v in readings]
    base.table = base.table.astype(sweep_dtypes(vl_wait=True))
    return base


def vls(**values):
    """16 VL counters, 0 except those given as vl<n>=value."""
    out = [0] * 16
    for key, value in values.items():
        out[int(key[2:])] = value
    return out


def test_vl_rate_columns_are_named_and_typed():
    assert VL_WAIT_RATE_COLUMNS[0] == "vl0_xmit_wait_per_s" == vl_wait_rate_column(0)
    assert VL_WAIT_RATE_COLUMNS[15] == "vl15_xmit_wait_per_s"
    assert len(VL_WAIT_RATE_COLUMNS) == 16
    assert set(VL_WAIT_RATE_DTYPES.values()) == {"float64"}
    assert not set(VL_WAIT_RATE_COLUMNS) & set(RATES_DTYPES)  # RATES_DTYPES is unchanged


def test_vl_rates_absent_when_the_sweep_has_no_vl_columns():
    rt = RateTracker()
    rt.update(sweep([(A, row(0.0))]))
    out = rt.update(sweep([(A, row(1.0, 10))]))
    assert list(out.columns) == list(RATES_DTYPES)
    assert "vl0_xmit_wait_per_s" not in out.columns


def test_vl_rates_follow_the_counter_rules():
    rt = RateTracker()
    first = rt.update(
        vl_sweep(
            [
                (A, row(10.0, 100), vls(vl3=1000, vl5=500)),
                (B, row(10.0, 100), None),  # a node without the counters
            ]
        )
    )
    assert list(first.columns) == [*RATES_DTYPES, *VL_WAIT_RATE_COLUMNS]
    assert first.dtypes.astype(str).to_dict() == {**RATES_DTYPES, **VL_WAIT_RATE_DTYPES}
    assert first[list(VL_WAIT_RATE_COLUMNS)].isna().all().all()  # first reading: no rates
    out = rt.update(
        vl_sweep([(A, row(12.0, 300), vls(vl3=1600, vl5=100)), (B, row(12.0, 300), None)])
    )
    a = out.iloc[0]
    assert a["vl3_xmit_wait_per_s"] == 300.0  # (1600 - 1000) ticks / 2 s
    assert a["vl5_xmit_wait_per_s"] == 50.0  # went down: a reset, the new value is the delta
    assert a["vl0_xmit_wait_per_s"] == 0.0
    assert bool(a["reset"]) and rt.resets == {(A.node_guid, A.port): 1}
    assert a["xmit_bytes_per_s"] == 100.0  # the data counters did not reset
    assert out.iloc[1][list(VL_WAIT_RATE_COLUMNS)].isna().all()  # missing, not 0
    assert out["xmit_bytes_per_s"].iat[1] == 100.0 and not out["reset"].iat[1]


def test_a_vl_counter_stuck_at_65535_has_no_rate(caplog):
    rt = RateTracker()
    rt.update(vl_sweep([(A, row(0.0), vls(vl2=65000, vl4=7))]))
    with caplog.at_level("WARNING", "ibqos.collect"):
        out = rt.update(vl_sweep([(A, row(1.0), vls(vl2=65535, vl4=9))]))
        again = rt.update(vl_sweep([(A, row(2.0), vls(vl2=65535, vl4=11))]))
    for o in (out, again):
        assert math.isnan(o["vl2_xmit_wait_per_s"].iat[0])  # 16 bits: saturated
        assert o["vl4_xmit_wait_per_s"].iat[0] == 2.0
    assert caplog.text.count("vl_xmit_wait2 is stuck at its maximum") == 1  # once per port
    # cleared (PerfMgr, perfquery -R): the next reading counts from the new value
    out = rt.update(vl_sweep([(A, row(3.0), vls(vl2=40, vl4=11))]))
    assert out["vl2_xmit_wait_per_s"].iat[0] == 40.0 and bool(out["reset"].iat[0])


def test_a_missing_vl_reading_gives_nan_for_that_vl_only():
    rt = RateTracker()
    rt.update(vl_sweep([(A, row(0.0, 0), vls(vl1=5))]))
    missing = vls(vl1=9)
    missing[7] = NA
    out = rt.update(vl_sweep([(A, row(1.0, 8), missing)]))
    assert out["error"].iat[0] == "" and out["xmit_bytes_per_s"].iat[0] == 8.0
    assert out["vl1_xmit_wait_per_s"].iat[0] == 4.0
    assert math.isnan(out["vl7_xmit_wait_per_s"].iat[0])
    # VL 7 was not read last time: still no rate for it, the others go on
    out = rt.update(vl_sweep([(A, row(2.0, 16), vls(vl1=9, vl7=3))]))
    assert math.isnan(out["vl7_xmit_wait_per_s"].iat[0])
    assert out["vl1_xmit_wait_per_s"].iat[0] == 0.0


def test_vl_columns_turned_on_or_off_between_sweeps():
    rt = RateTracker()
    rt.update(sweep([(A, row(0.0, 0))]))
    on = rt.update(vl_sweep([(A, row(1.0, 10), vls(vl3=4))]))
    assert on["xmit_bytes_per_s"].iat[0] == 10.0
    assert on[list(VL_WAIT_RATE_COLUMNS)].isna().all().all()  # nothing to compare with
    on = rt.update(vl_sweep([(A, row(2.0, 20), vls(vl3=10))]))
    assert on["vl3_xmit_wait_per_s"].iat[0] == 6.0
    off = rt.update(sweep([(A, row(3.0, 30))]))
    assert list(off.columns) == list(RATES_DTYPES) and off["xmit_bytes_per_s"].iat[0] == 10.0
    back = rt.update(vl_sweep([(A, row(4.0, 40), vls(vl3=12))]))
    assert math.isnan(back["vl3_xmit_wait_per_s"].iat[0])  # the VL gap is a gap


def test_an_error_row_has_no_vl_rates():
    rt = RateTracker()
    rt.update(vl_sweep([(A, row(0.0), vls(vl0=1))]))
    out = rt.update(vl_sweep([(A, failed(), None)]))
    assert out[list(VL_WAIT_RATE_COLUMNS)].isna().all().all()


def test_rows_for_json_have_vl_keys_only_when_read():
    rt = RateTracker()
    rt.update(vl_sweep([(A, row(0.0), vls(vl3=0)), (B, row(0.0), None)]))
    rows = rows_for_json(rt.update(vl_sweep([(A, row(2.0), vls(vl3=8)), (B, row(2.0), None)])))
    assert list(rows[0])[-16:] == list(VL_WAIT_RATE_COLUMNS)
    assert rows[0]["vl3_xmit_wait_per_s"] == 4.0 and rows[0]["vl0_xmit_wait_per_s"] == 0.0
    assert rows[1]["vl3_xmit_wait_per_s"] is None
    json.dumps(rows, allow_nan=False)
    plain = RateTracker()
    plain.update(sweep([(A, row(0.0))]))
    rows = rows_for_json(plain.update(sweep([(A, row(1.0))])))
    assert not any(k.startswith("vl") for k in rows[0])


def test_vl_rate_columns_are_documented():
    import ibqos.collect.rates as mod

    assert "\nvl0_xmit_wait_per_s " in mod.__doc__ and "\nvl15_xmit_wait_per_s " in mod.__doc__


# -- implausible rates ------------------------------------------------------------------

EDR = 12.5e9  # 4xEDR, bytes per second
L = Target(0x0C42A10300010002, "leaf-2", 3, 4, 1, "up", True, capacity_bytes_per_s=EDR)
H = Target(0x0C42A10301000002, "cn0002 mlx5_0", 1, 5, 0, "host", False, EDR)


def test_rate_above_link_capacity_is_dropped_counted_and_logged_once(caplog):
    rt = RateTracker()  # 10 % margin
    rt.update(sweep([(L, row(10.0, 0, 0, 0, 0)), (H, row(10.0, 0, 0, 0, 0))]))
    # counters reset and rewritten: 23.7 TB in one second on the leaf, fine on the host
    with caplog.at_level("WARNING", "ibqos.collect.rates"):
        rates = rt.update(
            sweep([(L, row(11.0, 23_700_000_000_000, 10, 5, 5)), (H, row(11.0, 10**9, 10**9))])
        )
    leaf, host = rates.iloc[0], rates.iloc[1]
    for col in ("xmit_bytes_per_s", "rcv_bytes_per_s", "xmit_pkts_per_s", "xmit_wait_per_s"):
        assert math.isnan(leaf[col]), col
    assert leaf["error"] == "rate 2.37e+13 B/s above the link's 1.25e+10 B/s: sample dropped"
    assert host["xmit_bytes_per_s"] == 1e9 and host["error"] == ""
    assert (rt.invalid_samples, rt.last_invalid) == (1, 1)
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert lines[0].startswith("dropped 1 implausible sample(s), rates above the link's capacity")
    assert "leaf-2 port 3: 2.37e+13 B/s on a 1.25e+10 B/s link" in lines[0]


def test_the_next_interval_is_measured_from_the_dropped_reading():
    rt = RateTracker()
    rt.update(sweep([(L, row(10.0, 0, 0))]))
    rt.update(sweep([(L, row(11.0, 10**15, 0))]))  # rewritten: dropped
    rates = rt.update(sweep([(L, row(12.0, 10**15 + 5 * 10**9, 0))]))
    assert rates["xmit_bytes_per_s"].iloc[0] == 5e9 and rates["error"].iloc[0] == ""
    assert (rt.invalid_samples, rt.last_invalid) == (1, 0)


def test_margin_bounds_what_is_kept():
    # 13 GB/s on a 12.5 GB/s link: 4 % over, inside a 10 % margin, outside a 1 % one
    readings = [[(L, row(10.0, 0, 0))], [(L, row(11.0, 0, 13 * 10**9))]]
    loose, strict = RateTracker(), RateTracker(margin=0.01)
    for r in readings[:1]:
        loose.update(sweep(r))
        strict.update(sweep(r))
    assert loose.update(sweep(readings[1]))["rcv_bytes_per_s"].iloc[0] == 13e9
    assert math.isnan(strict.update(sweep(readings[1]))["rcv_bytes_per_s"].iloc[0])
    assert (loose.invalid_samples, strict.invalid_samples) == (0, 1)
    with pytest.raises(ValueError, match="margin"):
        RateTracker(margin=-0.1)


def test_ports_of_unknown_capacity_are_not_checked():
    rt = RateTracker()  # A has capacity 0 (a recording's port)
    rt.update(sweep([(A, row(10.0, 0, 0))]))
    rates = rt.update(sweep([(A, row(11.0, 10**15, 0))]))
    assert rates["xmit_bytes_per_s"].iloc[0] == 1e15 and rt.invalid_samples == 0
