"""The perfquery backend against a real lab (ibsim + OpenSM + infiniband-diags).

The lab writes PortCountersExtended values with ibsim's PerformanceSet (``lab.written``,
in 4-octet words).  ibsim also counts every MAD that crosses a simulated link: 1 packet
and 72 words (288 bytes) on each port it crosses (reference C.3).  Our queries go from the
OpenSM host, so they perturb what they read.  The bound used below: a PMA Get and its
reply cross any one port at most once in each direction (fat-tree routes are minimal), so
each data counter of each port is at most 288 bytes, and each packet counter at most 1
packet, above what the lab wrote, per Get sent since the lab cleared the counters.
``stats["mads"]`` counts those Gets (ClassPortInfo plus one per port, per process).
"""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from ibqos.collect.perfquery import PerfqueryBackend
from ibqos.collect.rates import RateTracker
from ibqos.collect.replay import ReplayBackend, SweepRecorder
from ibqos.collect.sweep import SWEEP_DTYPES, Target
from ibqos.topology import Port, Topology

QUIET = {"sweep_interval": "0"}  # no periodic OpenSM sweeps moving the counters
MAD_BYTES = 288
JOBS = """jobs:
  - {id: "1", nodes: "cn[0001-0006]", pattern: all-to-all,
     rate_bytes_per_s: 2.0e9, duty: 0.5, period_s: 0.1}
  - {id: "2", nodes: "cn[0007-0008]", pattern: ring,
     rate_bytes_per_s: 1.0e9, duty: 1.0, period_s: 0.1}
"""
#: Opens the simulated umad device (one ibsim client) and holds it until stdin closes.
HOLD_SLOT = (
    "import ctypes, sys; lib = ctypes.CDLL('libibumad.so.3'); lib.umad_init(); "
    "print(lib.umad_open_port(b'ibsim0', 1), flush=True); sys.stdin.read()"
)


def targets_from_topology(topo: Topology) -> list[Target]:
    """PMA targets of every linked port: switch ports at the switch's LID, CA ports at
    their own.  (ibqos.fabric.Fabric.targets() is the real thing; this stays independent
    of it.)"""
    levels = topo.switch_levels()
    out: list[Target] = []
    for node in topo.nodes.values():
        assert node.guid is not None
        for port in topo.ports(node.id):
            if node.kind == "switch":
                peer = topo.peer(port)
                assert peer is not None
                up = levels.get(peer.node, 0) > levels[node.id]
                lid = topo.lids[Port(node.id, 0)]
                role = "up" if up else "down"
                out.append(Target(node.guid, node.desc, port.num, lid, levels[node.id], role, True))
            else:
                lid = topo.lids[port]
                out.append(Target(node.guid, node.desc, port.num, lid, 0, "host", False))
    return out


def port_of(topo: Topology, target: Target) -> Port:
    node = next(n for n in topo.nodes.values() if n.guid == target.node_guid)
    return Port(node.id, target.port)


def lab_values(lab, targets) -> pd.DataFrame:
    """What the lab wrote for each target, in bytes and packets."""
    rows = [lab.written.get(port_of(lab.topo, t), (0, 0, 0, 0)) for t in targets]
    return pd.DataFrame(
        {
            "xmit_bytes": [4 * r[0] for r in rows],
            "rcv_bytes": [4 * r[1] for r in rows],
            "xmit_pkts": [r[2] for r in rows],
            "rcv_pkts": [r[3] for r in rows],
        }
    )


def check_against_lab(table, want, mads):
    assert (table["error"] == "").all(), table["error"][table["error"] != ""].tolist()
    assert (table["counter_bits"] == 64).all()
    assert (table["xmit_wait"] == 0).all()  # the lab writes no PortCounters
    for col, per_mad in (
        ("xmit_bytes", MAD_BYTES),
        ("rcv_bytes", MAD_BYTES),
        ("xmit_pkts", 1),
        ("rcv_pkts", 1),
    ):
        got = table[col].astype("int64").to_numpy()
        low = want[col].to_numpy()
        assert (got >= low).all(), col
        assert (got <= low + per_mad * mads).all(), (col, (got - low).max(), per_mad * mads)


@pytest.fixture
def jobs(tmp_path):
    path = tmp_path / "jobs.yaml"
    path.write_text(JOBS)
    return path


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
