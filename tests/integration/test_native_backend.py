"""The native collector and ``ibqos collect`` against a real lab (ibsim + OpenSM).

The collector runs where a MAD client must: in a process with the lab's environment
(umad2sim preloaded), started here through ``lab.run``.  Its sweeps come back through
``--record`` and the replay backend, so the same test also checks that the recording
replays exactly and that the three backends agree on one fabric state.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from ibqos.collect.perfquery import PerfqueryBackend
from ibqos.collect.rates import VL_WAIT_RATE_COLUMNS, RateTracker
from ibqos.collect.replay import ReplayBackend
from ibqos.collect.sweep import SWEEP_DTYPES, VL_WAIT_COLUMNS, sweep_dtypes
from ibqos.lab.fabric import fabric_from_lab
from tests.integration.labcheck import (
    MAD_BYTES,
    QUIET,
    check_against_lab,
    lab_values,
    port_of,
    targets_from_topology,
)

JSON_KEYS = {
    "node_guid",
    "node_desc",
    "port",
    "lid",
    "level",
    "role",
    "xmit_bytes_per_s",
    "rcv_bytes_per_s",
    "xmit_wait_per_s",
    "reset",
}


def test_three_backends_read_the_same_fabric_state(make_lab, jobs, tmp_path):
    lab = make_lab("2;4,2;1,2", jobs=jobs, opensm_options=QUIET)
    lab.tick(1.0)
    targets = fabric_from_lab(lab).targets()
    want = lab_values(lab, targets)
    assert want["xmit_bytes"].max() > 1e8
    rec = tmp_path / "rec"
    out = lab.run(
        ["ibqos", "collect", "--record", str(rec), "--count", "1", "--interval", "0.2"],
        check=True,
    )
    assert "sw-L1-0001" in out.stdout and "XMIT MB/s" in out.stdout

    replay = ReplayBackend(rec)
    sweeps = [replay.sweep(targets) for _ in range(replay.count)]
    assert len(sweeps) == 2 and all(s.backend == "native" for s in sweeps)
    native = sweeps[0]
    assert native.table.dtypes.astype(str).to_dict() == SWEEP_DTYPES
    # ClassPortInfo per node, PortXmitDataSL and PortRcvDataSL per switch on the first
    # sweep (one try each: ibsim never answers them); then PCE and PortCounters (XmitWait:
    # ibsim's PCE has none) per port
    nodes = len({t.node_guid for t in targets})
    switches = len({t.node_guid for t in targets if t.is_switch})
    assert sweeps[1].stats["sent"] == sweeps[1].stats["answered"] == 2 * len(targets)
    assert native.stats["answered"] == nodes + 2 * len(targets)
    assert native.stats["sent"] == nodes + 2 * switches + 2 * len(targets)
    mads = sum(s.stats["sent"] for s in sweeps)
    check_against_lab(native.table, want, mads)

    with PerfqueryBackend(env=lab.env(), cwd=lab.paths.run) as backend:
        pq = backend.sweep(targets)
    mads += pq.stats["mads"]
    check_against_lab(pq.table, want, mads)
    for col in ("xmit_bytes", "rcv_bytes", "xmit_pkts", "rcv_pkts"):
        per_mad = MAD_BYTES if col.endswith("bytes") else 1
        diff = (native.table[col].astype("int64") - pq.table[col].astype("int64")).abs()
        assert (diff <= per_mad * mads).all(), col
    assert native.table["xmit_wait"].equals(pq.table["xmit_wait"])

    # replayed again from disk: the same table, bit for bit
    again = ReplayBackend(rec).sweep(targets)
    pd.testing.assert_frame_equal(again.table, native.table, check_exact=True)


CHILD = """
import json, logging, sys
from ibqos.collect.native import NativeBackend
logging.basicConfig(level=logging.DEBUG)  # each port's failure is said at debug level
from ibqos.collect.sweep import Target
targets = [Target(*t) for t in json.load(sys.stdin)]
with NativeBackend(timeout_s=0.2, retries=1) as nb:
    s = nb.sweep(targets)
print(json.dumps({"errors": s.table["error"].tolist(), "stats": s.stats,
                  "bits": s.table["counter_bits"].tolist()}))
"""


def test_ports_that_fail_are_reported_and_the_sweep_goes_on(make_lab):
    lab = make_lab("2;4,2;1,2", opensm_options=QUIET)
    targets = fabric_from_lab(lab).targets()
    host = next(t for t in targets if t.role == "host")
    spine = next(t for t in targets if t.level == 2)
    bad = [
        host.__class__(host.node_guid, host.node_desc, 2, host.lid, 0, "host", False),
        host.__class__(0x77, "ghost", 1, 999, 0, "host", False),
        spine.__class__(spine.node_guid, spine.node_desc, 40, spine.lid, 2, "down", True),
    ]
    rows = [[*vars(t).values()] for t in [*targets[:5], *bad, *targets[5:]]]
    proc = lab.run([sys.executable, "-c", CHILD], check=False, timeout=60, stdin=json.dumps(rows))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    errors = result["errors"]
    # ibsim answers a CA's PMA for another port, and a switch's for a port it lacks,
    # with status 0x1C; a LID nobody has gets no answer at all
    assert errors[5] == "status 0x001c (invalid attribute or modifier)"
    assert errors[6] == "no ClassPortInfo from this node"
    assert errors[7] == "status 0x001c (invalid attribute or modifier)"
    assert errors[:5] == [""] * 5 and set(errors[8:]) == {""}
    assert f"{host.node_desc} port 2 (lid {host.lid})" in proc.stderr
    assert "ghost port 1 (lid 999): ClassPortInfo: no reply after 2 tries" in proc.stderr
    assert result["stats"]["failed"] == 3


def test_collect_json_and_csv_are_rows_of_rates(make_lab, jobs):
    lab = make_lab("2;4,2;1,2", jobs=jobs, opensm_options=QUIET)
    lab.tick(0.5)
    out = lab.run(
        ["ibqos", "collect", "--once", "--interval", "0.3", "--format", "json"], check=True
    )
    rows = json.loads(out.stdout)
    targets = fabric_from_lab(lab).targets()
    assert len(rows) == len(targets)
    assert all(JSON_KEYS <= set(r) for r in rows)
    assert {r["role"] for r in rows} == {"host", "down", "up"}
    assert {r["level"] for r in rows} == {0, 1, 2}
    assert all(r["node_guid"].startswith("0x") and len(r["node_guid"]) == 18 for r in rows)
    assert not any(r["reset"] for r in rows)
    # nothing but our own MADs moves between two sweeps here: a few kB/s at most
    assert all(0 <= r["xmit_bytes_per_s"] < 1e6 for r in rows)
    assert all(r["xmit_wait_per_s"] == 0 for r in rows)

    out = lab.run(["ibqos", "collect", "--once", "--interval", "0.1", "--format", "csv"])
    header = out.stdout.splitlines()[0].split(",")
    assert JSON_KEYS <= set(header) and len(out.stdout.splitlines()) == len(targets) + 1


def test_collect_rejects_a_bad_window_in_one_line(make_lab, tmp_path):
    lab = make_lab("1;4;1", opensm_options=QUIET)
    cfg = tmp_path / "ibqos.yaml"
    cfg.write_text(lab.paths.config.read_text() + "collect:\n  window: 0\n")
    out = lab.run(["ibqos", "collect", "--once", "--config", str(cfg)])
    assert out.returncode == 1
    assert out.stderr.strip() == (
        f"ibqos: config: {cfg}: collect.window: expected an integer >= 1, got 0"
    )


# -- PortVLXmitWaitCounters ------------------------------------------------------------
VL_CHILD = """
import json, logging, sys
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
from pathlib import Path
from ibqos.collect.native import NativeBackend
from ibqos.collect.replay import SweepRecorder
from ibqos.collect.sweep import Target
targets = [Target(*t) for t in json.loads(sys.stdin.readline())]
rec = SweepRecorder(Path(sys.argv[1]))
with NativeBackend(timeout_s=0.2, retries=1, vl_xmit_wait=True) as nb:
    for _ in range(int(sys.argv[2])):
        rec.record(nb.sweep(targets))
        print("swept", flush=True)
        sys.stdin.readline()  # the test changes counters in between
"""

VL_FIELD = "PortVLXmitWaitCounters.PortVLXmitWaitCounters"


def sweep_between(lab, targets, rec, between):
    """Sweep *targets* natively with vl_xmit_wait on (in a lab client), calling each of
    *between* after the sweep of its index; return the recorded sweeps."""
    proc = subprocess.Popen(
        [sys.executable, "-c", VL_CHILD, str(rec), str(len(between) + 1)],
        env=lab.env(),
        cwd=lab.paths.run,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        proc.stdin.write(json.dumps([[*vars(t).values()] for t in targets]) + "\n")
        proc.stdin.flush()
        for step in [*between, None]:
            assert proc.stdout.readline() == "swept\n", proc.stderr.read() if proc.stderr else ""
            if step is not None:
                step()
            proc.stdin.write("\n")
            proc.stdin.flush()
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    replay = ReplayBackend(rec)
    return [replay.sweep([]) for _ in range(replay.count)], stderr


def perf_set(lab, port, value):
    errors = lab.ibsim.command([f'PerformanceSet "{port.node}"[{port.num}] {VL_FIELD}3={value}'])
    assert errors == []


def test_vl_xmit_wait_appears_on_its_vl_and_port_only(make_lab, tmp_path):
    lab = make_lab("2;4,2;1,2", opensm_options=QUIET)
    targets = targets_from_topology(lab.topo)
    chosen = next(t for t in targets if t.level == 1 and t.role == "up")
    port = port_of(lab.topo, chosen)
    perf_set(lab, port, 1000)
    sweeps, _ = sweep_between(lab, targets, tmp_path / "rec", [lambda: perf_set(lab, port, 6000)])
    first, second = sweeps
    for s in sweeps:
        assert s.table.dtypes.astype(str).to_dict() == sweep_dtypes(vl_wait=True)
        assert (s.table["error"] == "").all()
        assert s.table[list(VL_WAIT_COLUMNS)].notna().all().all()  # ibsim answers everywhere
    # the first sweep probes each node once (ClassPortInfo, PortXmitDataSL on switches,
    # then PortVLXmitWaitCounters); the second is three Gets per port
    nodes = len({t.node_guid for t in targets})
    assert second.stats["sent"] == second.stats["answered"] == 3 * len(targets)
    assert first.stats["answered"] == 2 * nodes + 3 * len(targets)
    row = targets.index(chosen)
    assert first.table["vl_xmit_wait3"].iat[row] == 1000
    assert second.table["vl_xmit_wait3"].iat[row] == 6000
    tracker = RateTracker()
    tracker.update(first)
    rates = tracker.update(second)
    assert list(rates.columns[-16:]) == list(VL_WAIT_RATE_COLUMNS)
    interval = rates["interval_s"].iat[row]
    assert interval > 0
    assert rates["vl3_xmit_wait_per_s"].iat[row] == pytest.approx(5000 / interval)
    others = rates[list(VL_WAIT_RATE_COLUMNS)].to_numpy()
    others[row, 3] = 0.0
    assert (others == 0).all()  # every other VL of every port, and VL 3 of every other port
    assert not rates["reset"].any() and (rates["error"] == "").all()


def test_vl_counters_that_get_no_reply_are_missing_not_errors(make_lab, tmp_path):
    lab = make_lab("2;4,2;1,2", opensm_options=QUIET)
    targets = targets_from_topology(lab.topo)
    leaf = next(t for t in targets if t.level == 1)
    node = port_of(lab.topo, leaf).node
    # ibsim drops every PortVLXmitWaitCounters MAD to this switch: no reply, as a PMA
    # that ignores the attribute
    assert lab.ibsim.command([f'Error "{node}"[0] 100 0x1c']) == []
    sweeps, stderr = sweep_between(lab, targets, tmp_path / "rec", [lambda: None])
    mine = [i for i, t in enumerate(targets) if t.node_guid == leaf.node_guid]
    assert len(mine) == 7
    for s in sweeps:
        t = s.table
        assert (t["error"] == "").all() and t["xmit_bytes"].notna().all()
        assert t.loc[mine, list(VL_WAIT_COLUMNS)].isna().all().all()
        rest = [i for i in range(len(targets)) if i not in mine]
        assert t.loc[rest, list(VL_WAIT_COLUMNS)].notna().all().all()
    assert f"{leaf.node_desc} port {leaf.port} (lid {leaf.lid}): no PortVLXmitWaitCounters" in (
        stderr
    )
    # probed once, then left alone: the second sweep sends no VL Get to that switch
    assert sweeps[1].stats["sent"] == 3 * len(targets) - len(mine)


def test_collect_json_has_vl_keys_only_when_configured(make_lab, tmp_path):
    lab = make_lab("2;4,2;1,2", opensm_options=QUIET)
    targets = fabric_from_lab(lab).targets()
    cfg = tmp_path / "ibqos.yaml"
    cfg.write_text(lab.paths.config.read_text() + "collect:\n  vl_xmit_wait: true\n")
    for config, want in ((cfg, True), (lab.paths.config, False)):
        argv = ["ibqos", "collect", "--once", "--interval", "0.2", "--format", "json"]
        out = lab.run([*argv, "--config", str(config)], check=True)
        rows = json.loads(out.stdout)
        assert len(rows) == len(targets)
        for r in rows:
            assert JSON_KEYS <= set(r)
            assert (set(VL_WAIT_RATE_COLUMNS) <= set(r)) is want
            assert not want or all(r[c] == 0 for c in VL_WAIT_RATE_COLUMNS)
    out = lab.run(
        ["ibqos", "collect", "--once", "--interval", "0.1", "--format", "csv", "--config", str(cfg)]
    )
    assert out.stdout.splitlines()[0].endswith(",error," + ",".join(VL_WAIT_RATE_COLUMNS))


# -- per-SL data counters --------------------------------------------------------------
SL_CHILD = """
import json, logging, sys
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
from ibqos.collect.native import NativeBackend
from ibqos.collect.per_sl import SlRateTracker
from ibqos.collect.sweep import Target
targets = [Target(*t) for t in json.load(sys.stdin)]
tracker, out = SlRateTracker(), []
with NativeBackend(timeout_s=0.2, retries=1) as nb:
    for _ in range(4):
        s = nb.sweep(targets)
        rates = tracker.update(s.per_sl)
        out.append({"per_sl": s.per_sl is not None, "sl_rates": rates is not None,
                    "sent": s.stats["sent"], "s": s.duration_s, "failed": s.failed})
print(json.dumps(out))
"""


def test_ibsim_has_no_per_sl_counters_and_later_sweeps_do_not_ask(make_lab):
    lab = make_lab("2;4,2;1,2", opensm_options=QUIET)
    targets = fabric_from_lab(lab).targets()
    rows = [[*vars(t).values()] for t in targets]
    proc = lab.run(
        [sys.executable, "-c", SL_CHILD], check=False, timeout=60, stdin=json.dumps(rows)
    )
    assert proc.returncode == 0, proc.stderr
    sweeps = json.loads(proc.stdout)
    assert all(not s["per_sl"] and not s["sl_rates"] and s["failed"] == 0 for s in sweeps)
    nodes = len({t.node_guid for t in targets})
    switches = len({t.node_guid for t in targets if t.is_switch})
    # the probe: one port per switch, both attributes, one try each; never again
    assert sweeps[0]["sent"] == nodes + 2 * switches + 2 * len(targets)
    assert [s["sent"] for s in sweeps[1:]] == [2 * len(targets)] * 3
    # umad2sim hands an unanswered Get back at once as timed out, so here the probe costs
    # no waiting; later sweeps stay as short as a sweep of the data counters alone
    assert all(s["s"] < 0.2 for s in sweeps[1:]), sweeps
    # quietly: one line at info level, no warning
    said = [line for line in proc.stderr.splitlines() if "per-SL" in line]
    assert said == [
        f"INFO ibqos.collect.native: per-SL data counters: 0 of {switches} switches "
        "probed have them (PortXmitDataSL/PortRcvDataSL unsupported or unanswered)"
    ]
    assert "WARNING" not in proc.stderr
