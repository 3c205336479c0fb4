"""The perfquery backend against a real lab (ibsim + OpenSM + infiniband-diags).

The lab writes PortCountersExtended values with ibsim's PerformanceSet (``lab.written``,
in 4-octet words).  ibsim also counts every MAD that crosses a simulated link: 1 packet
and 72 words (288 bytes) on each port it crosses (docs/design.md §8.3).  Our queries go from the
OpenSM host, so they perturb what they read.  The bound used below: a PMA Get and its
reply cross any one port at most once in each direction (fat-tree routes are minimal), so
each data counter of each port is at most 288 bytes, and each packet counter at most 1
packet, above what the lab wrote, per Get sent since the lab cleared the counters.
``stats["mads"]`` counts those Gets (ClassPortInfo plus one per port, per process).
"""

from __future__ import annotations

import logging
import subprocess
import sys

import pandas as pd
import pytest

from ibqos.collect.perfquery import PerfqueryBackend
from ibqos.collect.rates import VL_WAIT_RATE_COLUMNS, RateTracker
from ibqos.collect.replay import ReplayBackend, SweepRecorder
from ibqos.collect.sweep import SWEEP_DTYPES, VL_WAIT_COLUMNS, sweep_dtypes
from ibqos.fabric.targets import Target
from tests.integration.labcheck import (
    HOLD_SLOT,
    MAD_BYTES,
    QUIET,
    check_against_lab,
    lab_values,
    port_of,
    targets_from_topology,
)


def test_both_modes_read_what_the_lab_wrote(make_lab, jobs, tmp_path):
    lab = make_lab("2;4,2;1,2", jobs=jobs, opensm_options=QUIET)
    targets = targets_from_topology(lab.topo)
    assert len(targets) == 2 * 2 + 7 + 6 + 9  # spine, leaf and CA ports
    lab.tick(1.0)
    want = lab_values(lab, targets)
    assert want["xmit_bytes"].max() > 1e8
    options = {"env": lab.env(), "cwd": lab.paths.run, "workers": 4}
    mads = 0
    sweeps = {}
    for per_switch in (True, False):
        with PerfqueryBackend(per_switch=per_switch, **options) as backend:
            s = backend.sweep(targets)
        mads += s.stats["mads"]
        assert s.stats["failed"] == 0 and s.stats["sent"] == s.stats["answered"]
        assert s.table.dtypes.astype(str).to_dict() == SWEEP_DTYPES
        check_against_lab(s.table, want, mads)
        sweeps[per_switch] = s
    # 4 switches: one -x and one PortCounters process each; per port: two per target
    assert sweeps[True].stats["sent"] == 2 * (4 + 9)
    assert sweeps[False].stats["sent"] == 2 * len(targets)
    for col in ("xmit_bytes", "rcv_bytes", "xmit_pkts", "rcv_pkts"):
        a = sweeps[True].table[col].astype("int64")
        b = sweeps[False].table[col].astype("int64")
        per_mad = MAD_BYTES if col.endswith("bytes") else 1
        assert ((a - b).abs() <= per_mad * mads).all(), col

    # a recorded real sweep replays exactly
    SweepRecorder(tmp_path / "rec").record(sweeps[True])
    again = ReplayBackend(tmp_path / "rec").sweep([])
    pd.testing.assert_frame_equal(again.table, sweeps[True].table, check_exact=True)
    assert again.targets == targets

    # rates between two sweeps follow what the lab added in between
    before = want
    lab.tick(1.0)
    after = lab_values(lab, targets)
    with PerfqueryBackend(**options) as backend:
        s = backend.sweep(targets)
    mads += s.stats["mads"]
    tracker = RateTracker()
    tracker.update(sweeps[True])
    rates = tracker.update(s)
    assert not rates["reset"].any() and (rates["error"] == "").all()
    assert (rates["interval_s"] > 0).all()
    moved = rates["xmit_bytes_per_s"] * rates["interval_s"]
    expected = after["xmit_bytes"] - before["xmit_bytes"]
    assert ((moved - expected).abs() <= MAD_BYTES * mads).all()
    assert rates["xmit_wait_per_s"].eq(0).all()


def test_failures_stay_in_their_rows(make_lab, jobs):
    lab = make_lab("2;4,2;1,2", jobs=jobs, opensm_options=QUIET)
    targets = targets_from_topology(lab.topo)
    spine = next(t for t in targets if t.level == 2)
    ghost = Target(0x1, "ghost", 1, 999, 0, "host", False)
    no_port = Target(spine.node_guid, spine.node_desc, 40, spine.lid, 2, "down", True)
    options = {"env": lab.env(), "cwd": lab.paths.run, "workers": 4}
    for per_switch in (True, False):
        with PerfqueryBackend(per_switch=per_switch, **options) as backend:
            s = backend.sweep([ghost, *targets, no_port])
        errors = s.table["error"].tolist()
        assert errors[0].startswith("lid 999 port 1: perfquery exited 255: ibwarn: ")
        assert "_do_madrpc failed; dport (Lid 999)" in errors[0]
        assert errors[-1] == (
            f"lid {spine.lid} port 40: perfquery exited 255: perfquery: iberror: failed: "
            "perfextquery"
        )
        assert errors[1:-1] == [""] * len(targets)
        assert s.failed == 2


def test_a_full_simulator_is_reported_not_waited_for(make_lab):
    lab = make_lab("1;4;1", opensm_options=QUIET)
    targets = targets_from_topology(lab.topo)
    holders: list[subprocess.Popen[str]] = []
    try:
        # ibsim takes 10 clients and OpenSM is one: take the other nine
        for _ in range(9):
            proc = subprocess.Popen(
                [sys.executable, "-c", HOLD_SLOT],
                env=lab.env(),
                cwd=lab.paths.run,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            holders.append(proc)
            assert proc.stdout is not None and proc.stdout.readline().strip() != ""
        with PerfqueryBackend(env=lab.env(), cwd=lab.paths.run, timeout_s=20) as backend:
            s = backend.sweep(targets)
        assert s.duration_s < 10
        assert s.failed == len(targets)
        assert all("sim_init: connect failed" in e for e in s.table["error"])
    finally:
        for proc in holders:
            if proc.stdin is not None:
                proc.stdin.close()  # the holder exits and ibsim frees its slot
        for proc in holders:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()
    with PerfqueryBackend(env=lab.env(), cwd=lab.paths.run) as backend:
        assert backend.sweep(targets).failed == 0  # the slots came back


VL_FIELD = "PortVLXmitWaitCounters.PortVLXmitWaitCounters"


def test_vl_xmit_wait_appears_on_its_vl_and_port_only(make_lab):
    lab = make_lab("2;4,2;1,2", opensm_options=QUIET)
    targets = targets_from_topology(lab.topo)
    chosen = next(t for t in targets if t.level == 2)  # a spine port this time
    port = port_of(lab.topo, chosen)
    row = targets.index(chosen)
    options = {"env": lab.env(), "cwd": lab.paths.run, "workers": 4, "vl_xmit_wait": True}

    def set_vl3(value):
        command = f'PerformanceSet "{port.node}"[{port.num}] {VL_FIELD}3={value}'
        assert lab.ibsim.command([command]) == []

    for per_switch, value, delta in ((True, 100, 4000), (False, 9000, 300)):
        set_vl3(value)
        with PerfqueryBackend(per_switch=per_switch, **options) as backend:
            first = backend.sweep(targets)
            set_vl3(value + delta)
            second = backend.sweep(targets)
        assert first.table["vl_xmit_wait3"].iat[row] == value
        for s in (first, second):
            assert s.table.dtypes.astype(str).to_dict() == sweep_dtypes(vl_wait=True)
            assert (s.table["error"] == "").all() and s.stats["failed"] == 0
            assert s.table[list(VL_WAIT_COLUMNS)].notna().all().all()
        assert second.table["vl_xmit_wait3"].iat[row] == value + delta
        # one VL process per port (perfquery reads one port per --vlxmitcounters run),
        # beside the -x and PortCounters processes of each group
        groups = 4 + 9 if per_switch else len(targets)
        assert second.stats["sent"] == 2 * groups + len(targets)
        tracker = RateTracker()
        tracker.update(first)
        rates = tracker.update(second)
        interval = rates["interval_s"].iat[row]
        assert rates["vl3_xmit_wait_per_s"].iat[row] == pytest.approx(delta / interval)
        others = rates[list(VL_WAIT_RATE_COLUMNS)].to_numpy()
        others[row, 3] = 0.0
        assert (others == 0).all(), per_switch
        assert not rates["reset"].any()


def test_vl_counters_that_get_no_reply_are_missing_not_errors(make_lab, caplog):
    lab = make_lab("1;4;1", opensm_options=QUIET)
    targets = targets_from_topology(lab.topo)
    switch = next(t for t in targets if t.is_switch)
    node = port_of(lab.topo, switch).node
    assert lab.ibsim.command([f'Error "{node}"[0] 100 0x1c']) == []
    options = {"env": lab.env(), "cwd": lab.paths.run, "vl_xmit_wait": True}
    with PerfqueryBackend(**options) as backend:
        with caplog.at_level(logging.INFO, "ibqos.collect"):
            sweeps = [backend.sweep(targets) for _ in range(2)]
    mine = [i for i, t in enumerate(targets) if t.is_switch]
    rest = [i for i, t in enumerate(targets) if not t.is_switch]
    for s in sweeps:
        assert (s.table["error"] == "").all() and s.table["xmit_bytes"].notna().all()
        assert s.table.loc[mine, list(VL_WAIT_COLUMNS)].isna().all().all()
        assert s.table.loc[rest, list(VL_WAIT_COLUMNS)].notna().all().all()
    assert "_do_madrpc failed" in caplog.text and "asked again in 10 sweeps" in caplog.text
    # the switch was probed on one port in the first sweep, and not asked after that
    assert sweeps[0].stats["failed"] == 1
    assert sweeps[1].stats["sent"] == 2 * (1 + len(rest)) + len(rest)


OVERLOAD = """jobs:
  - {id: "a", nodes: "cn[0001-0002]", pattern: ring,
     rate_bytes_per_s: 3.0e10, duty: 1.0, period_s: 0.1}
  - {id: "b", nodes: "cn[0001-0002]", pattern: ring,
     rate_bytes_per_s: 1.0e10, duty: 1.0, period_s: 0.1}
"""


def test_modelled_xmit_wait_is_what_the_collector_reads(make_lab, tmp_path):
    """The traffic model's wait counters, written with PerformanceSet under the names
    ``TrafficModel.wait_counters`` gives, read back by perfquery (PortCounters and
    PortVLXmitWaitCounters).  The lab's own tick writes only the data counters so far,
    so this test writes them as the lab would."""
    jobs = tmp_path / "overload.yaml"
    jobs.write_text(OVERLOAD)
    lab = make_lab("1;4;1", jobs=jobs, opensm_options=QUIET)
    assert lab.model is not None and lab.ibsim is not None
    lab.model.tick(1e-4, vls={"a": 2, "b": 5})  # 4e10 B/s offered on 4xEDR: overloaded
    lines = []
    want = {}
    for port in lab.model.router.ports:
        counters = lab.model.wait_counters(port)
        want[port] = counters
        lines += [f'PerformanceSet "{port.node}"[{port.num}] {f}={v}' for f, v in counters.items()]
    assert lab.ibsim.command(lines) == []
    targets = targets_from_topology(lab.topo)
    with PerfqueryBackend(env=lab.env(), cwd=lab.paths.run, vl_xmit_wait=True) as backend:
        s = backend.sweep(targets)
    assert (s.table["error"] == "").all()
    waited = 0
    for i, t in enumerate(targets):
        counters = want[port_of(lab.topo, t)]
        assert s.table["xmit_wait"].iat[i] == counters["PortCounters.PortXmitWait"]
        for vl in range(16):
            field = f"PortVLXmitWaitCounters.PortVLXmitWaitCounters{vl}"
            assert s.table[f"vl_xmit_wait{vl}"].iat[i] == counters[field]
        waited += counters["PortCounters.PortXmitWait"] > 0
    assert waited >= 2  # both hosts' ports, at least, are over capacity
