"""Sweep recordings: round trip, target selection, end of recording, bad recordings."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from ibqos.collect.rates import VL_WAIT_RATE_COLUMNS, RateTracker
from ibqos.collect.replay import CSV_COLUMNS, INDEX, VL_CSV_COLUMNS, ReplayBackend, SweepRecorder
from ibqos.collect.sweep import SWEEP_DTYPES, VL_WAIT_COLUMNS, Sweep, sweep_dtypes
from ibqos.errors import CollectError
from ibqos.fabric.targets import Target

U64 = 2**64 - 1
TARGETS = [
    Target(0x0C42A10300010001, "sw-L1-0001", 1, 3, 1, "down", True),
    Target(0x0C42A10300010001, "sw-L1-0001", 9, 3, 1, "up", True),
    Target(0xFFFFFFFFFFFFFFFF, 'odd, "quoted"\nnode é', 255, 65535, 2, "down", True),
    Target(0x0C42A10301000000, "cn0001 mlx5_0", 1, 2, 0, "host", False),
]


def make_sweep(k: int) -> Sweep:
    table = pd.DataFrame(
        {
            "node_guid": [t.node_guid for t in TARGETS],
            "port": [t.port for t in TARGETS],
            "lid": [t.lid for t in TARGETS],
            "time_s": [1795306843.5207365 + k, 0.1 + 0.2, float("nan"), 1e-300],
            "xmit_bytes": [U64 - k, 2**63, pd.NA, 0],
            "rcv_bytes": [U64, 12, pd.NA, 1],
            "xmit_pkts": [k, 2**53 + 1, pd.NA, 2],
            "rcv_pkts": [0, 1, pd.NA, 3],
            "xmit_wait": [pd.NA, 7, pd.NA, 0],
            "counter_bits": [64, 64, 0, 32],
            "error": ["", "", 'lid 65535 port 255: perfquery exited 255: a, "b"', ""],
        }
    ).astype(SWEEP_DTYPES)
    return Sweep(
        targets=list(TARGETS),
        table=table,
        backend="perfquery",
        started_s=1795306843.25 + k,
        duration_s=0.47,
        cpu_s=0.53,
        stats={"sent": 4, "answered": 3, "failed": 1},
    )


def assert_same(a: Sweep, b: Sweep) -> None:
    assert a.targets == b.targets
    pd.testing.assert_frame_equal(a.table, b.table, check_exact=True)
    assert a.table.dtypes.to_dict() == b.table.dtypes.to_dict()
    assert (a.backend, a.started_s, a.duration_s, a.cpu_s, a.stats) == (
        b.backend,
        b.started_s,
        b.duration_s,
        b.cpu_s,
        b.stats,
    )


@pytest.fixture
def recording(tmp_path):
    d = tmp_path / "rec"
    rec = SweepRecorder(d)
    for k in range(2):
        rec.record(make_sweep(k))
    return d


def test_round_trip_is_exact(recording):
    replay = ReplayBackend(recording)
    assert replay.name == "replay" and replay.count == 2
    for k in range(2):
        assert_same(replay.sweep([]), make_sweep(k))
    with pytest.raises(
        CollectError, match=rf"recording {re.escape(str(recording))} exhausted after 2 sweeps"
    ):
        replay.sweep([])
    replay.close()


def test_files_are_plain_text(recording):
    index = json.loads((recording / INDEX).read_text())
    assert index["format"] == "ibqos-sweep-recording" and index["version"] == 1
    assert [s["file"] for s in index["sweeps"]] == ["sweep-000001.csv", "sweep-000002.csv"]
    lines = (recording / "sweep-000001.csv").read_text().split("\n")
    assert lines[0] == ",".join(CSV_COLUMNS)
    assert lines[1] == (
        "0x0c42a10300010001,sw-L1-0001,1,3,1,down,true,1795306843.5207365,"
        "18446744073709551615,18446744073709551615,0,0,,64,"
    )
    assert not any(p.name.startswith(".") for p in recording.iterdir())  # no temp files


def test_recorder_continues_a_recording(recording):
    SweepRecorder(recording).record(make_sweep(2))
    replay = ReplayBackend(recording)
    assert replay.count == 3
    for k in range(3):
        assert_same(replay.sweep([]), make_sweep(k))


def test_loop_starts_over(recording):
    replay = ReplayBackend(recording, loop=True)
    got = [replay.sweep([]).started_s for _ in range(5)]
    assert got == [make_sweep(k).started_s for k in (0, 1, 0, 1, 0)]


def test_targets_select_rows(recording):
    unknown = Target(0x1234, "ghost", 1, 99, 0, "host", False)
    wanted = [TARGETS[3], unknown, TARGETS[0]]
    s = ReplayBackend(recording).sweep(wanted)
    assert s.targets == wanted
    t = s.table
    assert t.dtypes.astype(str).to_dict() == SWEEP_DTYPES
    assert t["node_guid"].tolist() == [TARGETS[3].node_guid, 0x1234, TARGETS[0].node_guid]
    assert t["lid"].tolist() == [2, 99, 3]
    assert t["error"].tolist() == ["", "not in recording", ""]
    assert t["xmit_bytes"].iat[2] == U64 and t["xmit_bytes"].iat[0] == 0
    assert t["xmit_bytes"].isna().iat[1] and t["counter_bits"].tolist() == [32, 0, 64]
    assert s.failed == 1


def test_recorder_rejects_inconsistent_sweeps(tmp_path):
    s = make_sweep(0)
    s.targets = s.targets[:2]
    with pytest.raises(ValueError, match="one row per target"):
        SweepRecorder(tmp_path / "r").record(s)
    s = make_sweep(0)
    s.targets[0] = Target(1, "x", 1, 3, 1, "down", True)
    with pytest.raises(ValueError, match="row 0"):
        SweepRecorder(tmp_path / "r").record(s)


# -- bad recordings -------------------------------------------------------------------
def edit(path, old, new):
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def test_not_a_recording(tmp_path):
    with pytest.raises(
        CollectError, match=r"recording\.json: not found: .* is not a sweep recording"
    ):
        ReplayBackend(tmp_path)


@pytest.mark.parametrize(
    ("old", "new", "match"),
    [
        ('"version": 1,', '"version": 1', r"recording\.json: line 4 column 2: Expecting ','"),
        ('"ibqos-sweep-recording"', '"other"', "not an ibqos sweep recording"),
        ('"version": 1', '"version": 2', "recording version 2; this ibqos reads 1"),
        ('"node_guid",', '"guid",', "columns: expected"),
        ('"rows": 4', '"rows": "4"', r"sweeps\[0\]\.rows: expected int, got '4'"),
        (
            '"file": "sweep-000001.csv"',
            '"file": "../x.csv"',
            r"sweeps\[0\]\.file: expected sweep-NNNNNN\.csv",
        ),
        ('"started_s": ', '"begun": ', r"sweeps\[0\]\.started_s: expected int, got None"),
        ('"sent": 4', '"sent": true', r"sweeps\[0\]\.stats\.sent: expected int"),
    ],
)
def test_bad_index(recording, old, new, match):
    edit(recording / INDEX, old, new)
    with pytest.raises(CollectError, match=match) as err:
        ReplayBackend(recording)
    assert "recording.json" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("old", "new", "match"),
    [
        ("node_guid,node_desc", "guid,node_desc", "line 1: expected the header"),
        (",64,\n", ",64\n", "line 2: expected 15 fields, got 14"),
        (
            "18446744073709551615,18446744073709551615,0",
            "18446744073709551615,x,0",
            "line 2, column rcv_bytes: expected an unsigned integer, got 'x'",
        ),
        (
            "18446744073709551615,18446744073709551615,0",
            "18446744073709551616,1,0",
            "line 2, column xmit_bytes: 18446744073709551616 is larger than 18446744073709551615",
        ),
        ("0x0c42a10301000000", "0xzz", "line 6, column node_guid: expected 0x and up to 16 hex"),
        (",host,false,", ",leaf,false,", "line 6, column role: expected one of host, down, up"),
        (",host,false,", ",host,no,", "line 6, column is_switch: expected true or false"),
        (",1,3,1,down", ",256,3,1,down", "line 2, column port: 256 is larger than 255"),
        ("1795306843.5207365", "soon", "line 2, column time_s: expected a number, got 'soon'"),
        (
            "0x0c42a10301000000,cn0001 mlx5_0,1,2,0,host,false,1e-300,0,1,2,3,0,32,\n",
            "",
            r"3 rows, but recording\.json lists 4",
        ),
        ('"odd, ""quoted""', '"odd, "quoted""', "line 4"),
    ],
)
def test_bad_csv(recording, old, new, match):
    csv_path = recording / "sweep-000001.csv"
    edit(csv_path, old, new)
    replay = ReplayBackend(recording)  # the index is fine; the CSV is read when replayed
    with pytest.raises(CollectError, match=match) as err:
        replay.sweep([])
    assert str(err.value).startswith(str(csv_path)) and "\n" not in str(err.value)


def test_missing_csv(recording):
    (recording / "sweep-000002.csv").unlink()
    replay = ReplayBackend(recording)
    replay.sweep([])
    with pytest.raises(
        CollectError, match=r"sweep-000002\.csv: not found \(listed in recording\.json\)"
    ):
        replay.sweep([])


def test_empty_recording(tmp_path):
    SweepRecorder(tmp_path)  # makes the directory, writes nothing yet
    with pytest.raises(CollectError, match="not found"):
        ReplayBackend(tmp_path)
    rec = SweepRecorder(tmp_path)
    empty = Sweep(
        [], pd.DataFrame({c: [] for c in SWEEP_DTYPES}).astype(SWEEP_DTYPES), "x", 0.0, 0.0
    )
    rec.record(empty)
    assert_same(ReplayBackend(tmp_path).sweep([]), empty)


# -- per-VL transmit-wait columns -------------------------------------------------------
def make_vl_sweep(k: int) -> Sweep:
    """make_sweep(k) with the per-VL columns: row 0 counts up on VL 3, row 1 is at the
    16-bit top on VL 15, rows 2 (error) and 3 (a node without them) are missing."""
    s = make_sweep(k)
    for vl, col in enumerate(VL_WAIT_COLUMNS):
        s.table[col] = [100 * k if vl == 3 else 0, 65535 if vl == 15 else vl, pd.NA, pd.NA]
    s.table = s.table.astype(sweep_dtypes(vl_wait=True))
    return s


def test_vl_columns_round_trip(tmp_path):
    rec = SweepRecorder(tmp_path / "vl")
    for k in range(2):
        rec.record(make_vl_sweep(k))
    index = json.loads((tmp_path / "vl" / INDEX).read_text())
    assert index["columns"] == list(VL_CSV_COLUMNS) and index["version"] == 1
    lines = (tmp_path / "vl" / "sweep-000002.csv").read_text().split("\n")
    assert lines[0] == ",".join(VL_CSV_COLUMNS)
    assert lines[1].endswith(",64,,0,0,0,100,0,0,0,0,0,0,0,0,0,0,0,0")
    assert lines[-2].endswith(",32," + "," * 16)  # the CA row: error "", no VL values
    replay = ReplayBackend(tmp_path / "vl")
    for k in range(2):
        assert_same(replay.sweep([]), make_vl_sweep(k))


def test_vl_columns_replay_into_rates(tmp_path):
    rec = SweepRecorder(tmp_path / "vl")
    for k in range(2):
        rec.record(make_vl_sweep(k))
    replay, tracker = ReplayBackend(tmp_path / "vl"), RateTracker()
    tracker.update(replay.sweep([]))
    rates = tracker.update(replay.sweep([]))
    assert list(rates.columns[-16:]) == list(VL_WAIT_RATE_COLUMNS)
    assert rates["vl3_xmit_wait_per_s"].iat[0] == 100.0  # 100 ticks over 1 s
    assert rates["vl15_xmit_wait_per_s"].isna().iat[1]  # stuck at 65535


def test_a_recording_may_turn_vl_columns_on(recording):
    """Sweeps recorded before the option was on keep their columns; the index lists the
    longer column list from the first sweep that has them on."""
    SweepRecorder(recording).record(make_vl_sweep(2))
    index = json.loads((recording / INDEX).read_text())
    assert index["columns"] == list(VL_CSV_COLUMNS)
    replay = ReplayBackend(recording)
    assert_same(replay.sweep([]), make_sweep(0))
    assert_same(replay.sweep([]), make_sweep(1))
    assert_same(replay.sweep([]), make_vl_sweep(2))


def test_old_recordings_still_replay(recording):
    index = json.loads((recording / INDEX).read_text())
    assert index["columns"] == list(CSV_COLUMNS)  # what ibqos wrote before the VL columns
    s = ReplayBackend(recording).sweep([])
    assert list(s.table.columns) == list(SWEEP_DTYPES)


def test_vl_targets_select_rows(tmp_path):
    SweepRecorder(tmp_path / "vl").record(make_vl_sweep(1))
    unknown = Target(0x1234, "ghost", 1, 99, 0, "host", False)
    s = ReplayBackend(tmp_path / "vl").sweep([TARGETS[0], unknown])
    assert s.table.dtypes.astype(str).to_dict() == sweep_dtypes(vl_wait=True)
    assert s.table["vl_xmit_wait3"].tolist() == [100, pd.NA]
    assert s.table["error"].tolist() == ["", "not in recording"]


@pytest.mark.parametrize(
    ("old", "new", "match"),
    [
        (
            ",64,,0,0,0,100,",
            ",64,,0,0,0,65536,",
            "column vl_xmit_wait3: 65536 is larger than 65535",
        ),
        (",64,,0,0,0,100,", ",64,,0,0,0,-1,", "column vl_xmit_wait3: expected an unsigned integer"),
        (",0,0,0,0,0,0,0,0,0,0,0,0\n", ",0,0,0,0,0,0,0,0,0,0,0\n", "expected 31 fields, got 30"),
        ("error,vl_xmit_wait0,", "error,vl_wait0,", "line 1: expected the header"),
    ],
)
def test_bad_vl_csv(tmp_path, old, new, match):
    SweepRecorder(tmp_path / "vl").record(make_vl_sweep(1))
    edit(tmp_path / "vl" / "sweep-000001.csv", old, new)
    with pytest.raises(CollectError, match=match):
        ReplayBackend(tmp_path / "vl").sweep([])


def test_index_with_unknown_extra_columns_is_rejected(recording):
    edit(recording / INDEX, '"error"', '"error",\n  "vl_wait0"')
    with pytest.raises(
        CollectError, match=r"optionally followed by vl_xmit_wait0 \.\. vl_xmit_wait15"
    ):
        ReplayBackend(recording)
