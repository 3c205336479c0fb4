"""The lab against the real OpenSM, ibsim and infiniband-diags."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ibqos.fabric.topology import Port, parse_ibnetdiscover
from ibqos.fabric.xgft import build_xgft, parse_xgft
from ibqos.lab import manage
from ibqos.lab.counters import FIELDS, MIRRORS
from ibqos.lab.files import normalize_for_ibsim
from ibqos.lab.lab import Lab
from ibqos.lab.procs import ProcRef, alive

EXAMPLE_JOBS = Path(__file__).resolve().parents[2] / "examples" / "lab-jobs.yaml"
# OpenSM's light sweeps send SMPs across links, and ibsim counts every MAD hop in the
# data counters; tests that compare counters exactly switch periodic sweeps off.
QUIET = {"sweep_interval": "0"}


def write_jobs(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def leaf_uplinks(lab):
    levels = lab.topo.switch_levels()
    return [
        p
        for sw, lvl in levels.items()
        if lvl == 1
        for p in lab.topo.ports(sw)
        if lab.topo.nodes[lab.topo.peer(p).node].kind == "switch"
    ]


def host_ports(lab, compute_only=False):
    """CA ports; compute_only leaves out the OpenSM host, whose port carries only MADs
    (which ibsim counts, and the model does not overwrite because no job runs there)."""
    cas = [ca for ca in lab.topo.cas() if not (compute_only and ca.hostname == "opensm01")]
    return [p for ca in cas for p in lab.topo.ports(ca.id)]


@pytest.mark.parametrize(
    ("xgft", "switches", "levels"), [("2;8,4;1,2", 6, 2), ("3;8,4,4;1,2,2", 28, 3)]
)
def test_opensm_reaches_master(make_lab, xgft, switches, levels):
    lab = make_lab(xgft)
    out = lab.run(["sminfo"], check=True).stdout
    assert "SMINFO_MASTER" in out
    log = lab.paths.opensm.log.read_text()
    assert "SUBNET UP" in log and "ftree tables configured on all switches" in log
    assert len(lab.topo.switches()) == switches
    assert max(lab.topo.switch_levels().values()) == levels
    # every node was found by ibnetdiscover and got a LID from OpenSM
    assert all(Port(s.id, 0) in lab.topo.lids for s in lab.topo.switches())
    assert len({lab.topo.lids[p] for p in host_ports(lab)}) == len(host_ports(lab))


def test_counters_read_back_exactly(make_lab):
    lab = make_lab("2;8,4;1,2", jobs=EXAMPLE_JOBS, opensm_options=QUIET)
    host = Port(lab.resolve_node("cn0001"), 1)
    uplink = next(p for p in leaf_uplinks(lab) if p.node == host_port_leaf(lab, host))
    seen = []
    for _ in range(2):
        assert lab.tick(1.0) > 0
        for port in (host, uplink):
            got = lab.perfquery(port)
            want = dict(zip(FIELDS, lab.written[port], strict=True))
            assert {f: got[f] for f in FIELDS} == want
            for field, mirror in MIRRORS.items():
                assert got[mirror] == want[field]
            seen.append(got["PortXmitData"])
    assert all(v > 0 for v in seen)
    assert seen[2] > seen[0] and seen[3] > seen[1]  # the counters move tick by tick


def host_port_leaf(lab, port):
    return lab.topo.peer(port).node


def test_bytes_conserved_and_truth_matches_uplinks(make_lab):
    lab = make_lab("2;8,4;1,2", jobs=EXAMPLE_JOBS, opensm_options=QUIET)
    for _ in range(3):
        lab.tick(0.7)
    hosts = host_ports(lab, compute_only=True)
    read = {p: lab.perfquery(p) for p in hosts + leaf_uplinks(lab)}
    xmit = sum(read[p]["PortXmitData"] for p in hosts) * 4
    rcv = sum(read[p]["PortRcvData"] for p in hosts) * 4
    slack = 4 * len(hosts)  # each counter drops < 4 bytes when converted to words
    assert xmit > 1e10
    assert abs(xmit - rcv) <= slack
    truth = lab.truth()["jobs"]
    level0 = sum(j["level_bytes"][0] for j in truth.values())
    level1 = sum(j["level_bytes"][1] for j in truth.values())
    uplink_bytes = sum(read[p]["PortXmitData"] for p in leaf_uplinks(lab)) * 4
    assert abs(level0 - xmit) <= slack
    assert level1 > 1e9
    assert abs(level1 - uplink_bytes) <= 4 * len(leaf_uplinks(lab))


def test_three_level_truth_matches_each_level(make_lab, tmp_path):
    jobs = write_jobs(
        tmp_path / "jobs.yaml",
        """\
jobs:
  - {id: "1", nodes: "cn[0001-0040]", pattern: all-to-all,
     rate_bytes_per_s: 4.0e9, duty: 0.5, period_s: 0.1}
  - {id: "2", nodes: "cn[0030-0031,0090-0095]", pattern: ring,
     rate_bytes_per_s: 2.0e9, duty: 1.0, period_s: 0.1}
""",
    )
    lab = make_lab("3;8,4,4;1,2,2", jobs=jobs, opensm_options=QUIET)
    lab.tick(1.0)
    levels = lab.topo.switch_levels()
    truth = lab.truth()["jobs"]
    for level in (1, 2):
        ups = [
            p
            for sw, lvl in levels.items()
            if lvl == level
            for p in lab.topo.ports(sw)
            if levels.get(lab.topo.peer(p).node, 0) > level
        ]
        measured = sum(lab.perfquery(p)["PortXmitData"] for p in ups) * 4
        expected = sum(j["level_bytes"][level] for j in truth.values())
        assert expected > 1e9
        assert abs(measured - expected) <= 4 * len(ups)


def test_two_labs_side_by_side(make_lab):
    a = make_lab("2;8,4;1,2", name="a", jobs=EXAMPLE_JOBS, opensm_options=QUIET)
    b = make_lab("1;4;1", name="b", opensm_options=QUIET)
    assert a.sockname != b.sockname
    disc_a = a.run(["ibnetdiscover"], check=True).stdout
    disc_b = b.run(["ibnetdiscover"], check=True).stdout
    assert disc_a.count("\nCa\t") == 33 and disc_b.count("\nCa\t") == 5
    b_host = Port(b.resolve_node("cn0001"), 1)
    before = b.perfquery(b_host)["PortXmitData"]
    a.tick(1.0)  # lab a writes counters of its cn0001 (same name, other fabric)
    assert a.perfquery(Port(a.resolve_node("cn0001"), 1))["PortXmitData"] > 0
    assert b.perfquery(b_host)["PortXmitData"] == before


def test_supervised_lab_cli_and_down(tmp_path):
    root = tmp_path / "labs"
    env = dict(os.environ, IBQOS_LAB_ROOT=str(root))

    def ibqos(*args, check=True):
        return subprocess.run(
            [sys.executable, "-m", "ibqos", *args],
            env=env,
            capture_output=True,
            text=True,
            check=check,
            timeout=180,
        )

    ibqos(
        "lab",
        "up",
        "--name",
        "sup",
        "--xgft",
        "2;4,2;1,2",
        "--jobs",
        str(EXAMPLE_JOBS).replace("lab-jobs", "lab-jobs"),
        "--tick",
        "0.2",
        check=False,
    )
    # The example names hosts up to cn0032; this 8-host lab must refuse it.
    assert not (root / "sup").exists()
    ibqos("lab", "up", "--name", "sup", "--xgft", "2;4,2;1,2", "--tick", "0.2")
    info = json.loads(ibqos("lab", "status", "sup", "--format", "json").stdout)
    assert info["status"] == "up"
    assert set(info["processes"]) == {"supervisor", "ibsim", "opensm"}
    # lab run exports the lab's config, so ibqos itself works on the lab
    shown = ibqos("lab", "run", "sup", "--", "ibqos", "config").stdout
    assert "name: sup" in shown and info["paths"]["qos_policy"] in shown
    ibqos(
        "lab",
        "job",
        "add",
        "sup",
        "--id",
        "7",
        "--nodes",
        "cn[0001-0008]",
        "--pattern",
        "all-to-all",
        "--rate",
        "1e9",
        "--duty",
        "0.5",
    )
    refs = [
        ProcRef.from_dict(v)
        for v in json.loads((root / "sup" / "state.json").read_text())["procs"].values()
    ]
    deadline = 50
    while (
        deadline
        and "7" not in json.loads(ibqos("lab", "status", "sup", "--format", "json").stdout)["jobs"]
    ):
        deadline -= 1
    assert deadline, "the supervisor never picked up the new job"
    code = ibqos("lab", "run", "sup", "--", "sh", "-c", "exit 3", check=False).returncode
    assert code == 3
    ibqos("lab", "down", "sup")
    assert not any(alive(r) for r in refs)
    assert not (root / "sup").exists()
    assert manage.list_labs(root) == []


def test_opensm_failure_is_reported_and_cleaned_up(tmp_path):
    root = tmp_path / "labs"
    topo = build_xgft(parse_xgft("2;4,2;1,2"))
    with pytest.raises(manage.LabError) as err:
        manage.up("bad", topo, root=root, opensm_options={"guid": "0xdead"}, timeout=30)
    message = str(err.value)
    assert "\n" not in message
    assert "OpenSM exited" in message and "ERR 2E10" in message
    assert not (root / "bad").exists()


def test_lab_from_topology_file(tmp_path):
    text = (Path(__file__).resolve().parents[1] / "data" / "small-fabric.net").read_text()
    topo = normalize_for_ibsim(parse_ibnetdiscover(text, "small-fabric.net"))
    jobs = write_jobs(
        tmp_path / "jobs.yaml",
        "jobs:\n  - {id: '5', nodes: 'node[01-04]', pattern: all-to-all,\n"
        "     rate_bytes_per_s: 1.0e8, duty: 1.0, period_s: 0.1}\n",
    )
    with Lab.create("file", topo, root=tmp_path / "labs", jobs=jobs, opensm_options=QUIET) as lab:
        lab.start()
        assert lab.topo.nodes[lab.sm_node].hostname == "opensm01"
        assert "SMINFO_MASTER" in lab.run(["sminfo"], check=True).stdout
        lab.tick(1.0)
        h1 = Port("H1", 1)
        assert lab.perfquery(h1)["PortXmitData"] == lab.written[h1][0] == int(1.0e8 // 4)
        # 4x SDR (no link type in the file): 1 GB/s per direction, enough for this job
        assert lab.topo.link_at(h1).rate_bytes_per_s == 1.0e9
    assert not (tmp_path / "labs" / "file").exists()


def test_lab_up_returns_once_the_jobs_traffic_is_in_the_counters(tmp_path, jobs):
    # What reads the fabric right after 'lab up' (the demo's first sections, a test)
    # must see the jobs: the supervisor answers only after a whole tick has been written.
    root = tmp_path / "labs"
    topo = build_xgft(parse_xgft("2;4,2;1,2"))
    tick_s = 2.0
    lab = manage.up("flow", topo, root=root, jobs=jobs, tick_s=tick_s)
    try:
        # the LID as the supervisor discovered it (perfquery reads the port itself)
        found = parse_ibnetdiscover(lab.paths.discovered.read_text(), "ibnetdiscover")
        host = next(n for n in found.nodes.values() if n.desc.startswith("cn0001 "))
        lid = found.lids[Port(host.id, 1)]
        node = lab.resolve_node("cn0001")
        out = lab.run(["perfquery", "-x", str(lid), "1"], host=node, check=True).stdout
        got = {
            m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+):\.*(\d+)$", out, re.MULTILINE)
        }
        # job 1 sends 2e9 B/s half of the time: 2e9 bytes in one tick; allow for a
        # compute-first phase but not for a tick of ~0 s
        assert got["PortXmitData"] * 4 >= 0.25 * 2.0e9 * 0.5 * tick_s
        assert manage.status("flow", root=root)["ticks"] >= 1
    finally:
        manage.down("flow", root=root)
    assert not (root / "flow").exists()
