"""ibqos's opensm.conf and qos-policy.conf against the real OpenSM (ibsim lab).

The files are rendered from a real plan, checked, written atomically, and OpenSM is sent a
SIGHUP (only the lab's own OpenSM, by the pid in its pid file), which forces a heavy sweep
that re-reads opensm.conf and re-parses the policy (docs/design.md §6.3).  The sweep is over when
OpenSM logs ``SUBNET UP`` again.  Then the SA serves the new PathRecord SLs (docs/design.md §6.5)
and smpquery shows the SL2VL and VLArb tables OpenSM programmed (ibsim keeps what was Set,
docs/design.md §8.5).

The second test proves the checker mirrors a real trap: a policy it rejects is rejected by
OpenSM too, which drops the whole policy (every path back to SL 0).  The log lines OpenSM
writes are kept in ``tests/data/opensm/<case>/`` for log-checking code; set
``IBQOS_RECORD_OPENSM=1`` to record them again.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest

from ibqos.config.lanes import LaneConfig
from ibqos.config.models import OpenSMConfig
from ibqos.fsio import atomic_write
from ibqos.lab.fabric import fabric_from_lab
from ibqos.lab.opensm import MINIMAL_POLICY
from ibqos.opensm.check import check_conf, check_policy
from ibqos.opensm.conf import managed_values, parse_conf, render_conf
from ibqos.opensm.flavour import Detected
from ibqos.opensm.policy import PolicyJob, render_policy
from ibqos.opensm.render import render_checked
from ibqos.plan.planner import JobState, Tables, plan
from tests.integration.labcheck import QUIET
from tests.integration.opensm_lab import (
    JOB_HOSTS,
    errors,
    host_ports,
    path_sl,
    sighup,
)

DATA = Path(__file__).resolve().parents[1] / "data" / "opensm"
RECORD = os.environ.get("IBQOS_RECORD_OPENSM") == "1"
LANES = LaneConfig(data_vls=8, vlarb_low_cap=8, vlarb_high_cap=8, reserved_sls=(0, 5))
CAPS = {"data_vls": 8, "vlarb_low_cap": 8, "vlarb_high_cap": 8}
STORAGE_HOST = "cn0008"
#: the site's own part: a storage group whose paths get SL 5, and the DEFAULT level
ADMIN_POLICY = (
    MINIMAL_POLICY
    + """\
port-groups
  port-group
    name: storage
    port-guid: {guid:#018x}
  end-port-group
end-port-groups
qos-levels
  qos-level
    name: storage
    sl: 5
  end-qos-level
end-qos-levels
qos-match-rules
  qos-match-rule
    destination: storage
    qos-level-name: storage
  end-qos-match-rule
end-qos-match-rules
"""
)


def sl2vl_rows(lab, lid: int, port: int | None = None) -> dict[tuple[int, int], list[int]]:
    """``smpquery sl2vl``: (in port, out port) -> VL of SL 0..15."""
    argv = ["smpquery", "sl2vl", str(lid), *([str(port)] if port is not None else [])]
    out = lab.run(argv, check=True).stdout
    rows = re.findall(r"^ports: in\s+(\d+), out\s+(\d+): \|(.*)\|$", out, re.M)
    assert rows, out
    return {(int(i), int(o)): [int(v) for v in vls.split("|")] for i, o, vls in rows}


def vlarb(lab, lid: int, port: int | None = None) -> tuple[list[tuple[int, int]], ...]:
    """``smpquery vlarb``: the (VL, weight) entries of the low and the high table."""
    argv = ["smpquery", "vlarb", str(lid), *([str(port)] if port is not None else [])]
    out = lab.run(argv, check=True).stdout
    rows = re.findall(r"^(VL|WEIGHT)\s*: \|(.*)\|$", out, re.M)
    values = [[int(x, 16) for x in cells.split("|")] for _, cells in rows]
    assert [name for name, _ in rows] == ["VL", "WEIGHT", "VL", "WEIGHT"], out
    low, high = zip(values[0], values[1], strict=True), zip(values[2], values[3], strict=True)
    return list(low), list(high)


def padded(entries: tuple[tuple[int, int], ...], cap: int = 8) -> list[tuple[int, int]]:
    return [*entries, *[(0, 0)] * (cap - len(entries))]


def test_rendered_files_take_effect(make_lab) -> None:
    lab = make_lab("2;4,2;1,2", opensm_options=QUIET)
    fabric = fabric_from_lab(lab)
    hosts = host_ports(fabric)
    files = lab.paths.opensm
    a1, a2 = (hosts[h] for h in JOB_HOSTS["A"])
    b1, b2 = (hosts[h] for h in JOB_HOSTS["B"])
    storage = hosts[STORAGE_HOST]
    leaf = a1.peer  # the leaf switch port a1 is cabled to: a switch external port (swe)
    leaf_lid = next(fp.lid for fp in fabric.ports.values() if fp.node_id == leaf.node)
    assert leaf_lid is not None and a1.lid is not None
    # before: OpenSM's defaults, no job SLs (the lab's policy is DEFAULT only)
    assert path_sl(lab, a1, a2) == 0
    assert vlarb(lab, leaf_lid, leaf.num)[1][0] == (0, 4)  # the default high table 0:4,...

    result = plan([JobState("A", expected="high"), JobState("B", expected="low")], LANES, None, 0)
    sls = result.plan.job_sl
    tables = result.plan.tables
    assert isinstance(tables, Tables) and sls == {"A": 1, "B": 2}
    old_conf = files.conf.read_text()
    values = managed_values(tables, ("ca", "swe"))
    conf = render_conf(old_conf, values)
    assert lines_kept(old_conf, conf)
    jobs = [
        PolicyJob(job, sls[job], tuple(hosts[h].port_guid or 0 for h in JOB_HOSTS[job]))
        for job in ("A", "B")
    ]
    admin = ADMIN_POLICY.format(guid=storage.port_guid)
    policy = render_policy(admin, jobs)
    assert check_conf(conf, str(files.conf), **CAPS) == []
    assert check_policy(policy, str(files.policy)) == []
    atomic_write(files.conf, conf)
    atomic_write(files.policy, policy)

    log, stdout, sweep_s = sighup(lab)
    t0 = time.monotonic()
    assert path_sl(lab, a1, a2) == path_sl(lab, a2, a1) == sls["A"]
    pr_s = time.monotonic() - t0
    assert path_sl(lab, b1, b2) == sls["B"]
    assert path_sl(lab, a1, b1) == 0  # between two jobs: DEFAULT
    assert path_sl(lab, a1, storage) == 5  # the admin's rule, in its own sections
    assert errors(log) == [], errors(log)
    assert "SUBNET UP" in log[-1]
    # OpenSM re-read exactly the keys that changed ("qos TRUE" did not)
    loaded = dict(re.findall(r"Loading Cached Option:(\w+) = (.*)$", "\n".join(stdout), re.M))
    assert loaded == {k: v for k, v in values.items() if k != "qos"}
    assert sweep_s < 5.0 and pr_s < 5.0, (sweep_s, pr_s)
    print(f"SIGHUP -> SUBNET UP {sweep_s:.3f} s; then the new PathRecord SL in {pr_s:.3f} s")

    # what OpenSM programmed: a leaf's external port (swe) and a CA port (ca)
    for rows in (sl2vl_rows(lab, leaf_lid, leaf.num), sl2vl_rows(lab, a1.lid)):
        assert rows and all(vls == list(tables.sl_to_vl) for vls in rows.values()), rows
    for lid, port in ((leaf_lid, leaf.num), (a1.lid, None)):
        low, high = vlarb(lab, lid, port)
        assert low == padded(tables.vlarb_low)
        assert all(weight == 0 for _, weight in high)  # "0:0", not OpenSM's default 0:4
    # rendering again from what is on disk changes nothing (nothing to write, no SIGHUP)
    assert render_conf(files.conf.read_text(), values) == conf
    assert parse_conf(conf)["qos_policy_file"] == str(files.policy)  # the lab's, untouched
    assert render_policy(files.policy.read_text(), jobs) == policy


def lines_kept(old: str, new: str) -> bool:
    """Every line of the lab's opensm.conf is still there (the lab sets ``qos TRUE``, which
    ibqos now owns: it moves into the block)."""
    kept = [line for line in old.splitlines() if line != "qos TRUE"]
    return all(line in new.splitlines() for line in kept)


CASES = {
    # a reserved keyword inside a name (docs/design.md §6.1, lexer 2): a syntax error
    "keyword-in-name": lambda good: good.replace("ibqos_job_A", "job-port-groups-A"),
    # no DEFAULT qos-level: OpenSM's validation rejects it (ERR AC10)
    "no-default": lambda good: good.replace("name: DEFAULT", "name: fallback"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_opensm_rejects_what_the_checker_rejects(make_lab, case: str) -> None:
    lab = make_lab("2;4,2;1,2", opensm_options=QUIET)
    hosts = host_ports(fabric_from_lab(lab))
    files = lab.paths.opensm
    a1, a2 = (hosts[h] for h in JOB_HOSTS["A"])
    good = render_policy(
        files.policy.read_text(), [PolicyJob("A", 3, (a1.port_guid or 0, a2.port_guid or 0))]
    )
    atomic_write(files.policy, good)
    assert errors(sighup(lab)[0]) == []
    assert path_sl(lab, a1, a2) == 3

    bad = CASES[case](good)
    findings = [f for f in check_policy(bad, "qos-policy.conf") if f.severity == "error"]
    assert findings, "the checker must reject it"
    atomic_write(files.policy, bad)
    log, stdout, _ = sighup(lab)
    assert path_sl(lab, a1, a2) == 0  # the whole policy is gone, not just the bad part
    err = errors(log)
    if case == "keyword-in-name":
        # OpenSM reports the line the checker reports
        line = findings[0].line
        assert [tail(e) for e in err] == [
            f"yyerror: ERR AC05: Syntax error (line {line}:26): syntax error",
            "osm_qos_parse_policy_file: ERR AC03: Failed parsing QoS policy file (<policy>)",
        ]
        assert stdout == [f"Error in QoS Policy File (line {line}:26): syntax error."]
    else:
        assert findings[0].line == 1 and "ERR AC10" in findings[0].message
        assert [tail(e) for e in err] == [
            "osm_qos_policy_validate: ERR AC10: Default qos-level (default) not defined.",
            "osm_qos_parse_policy_file: ERR AC04: Error(s) in QoS policy file (<policy>)",
        ]
        assert stdout == [f"Error(s) in QoS policy file ({files.policy})"]

    fixture = DATA / case
    if RECORD:
        fixture.mkdir(exist_ok=True)
        (fixture / "qos-policy.conf").write_text(bad)
        (fixture / "opensm.log").write_text("\n".join(err) + "\n")
        (fixture / "stdout.txt").write_text("\n".join(stdout) + "\n")
    recorded = (fixture / "opensm.log").read_text().splitlines()
    assert [tail(e) for e in recorded] == [tail(e) for e in err]
    recorded_policy = (fixture / "qos-policy.conf").read_text()
    assert [f for f in check_policy(recorded_policy, case) if f.severity == "error"]

    atomic_write(files.policy, good)  # the last good file, back: OpenSM takes it again
    assert errors(sighup(lab)[0]) == []
    assert path_sl(lab, a1, a2) == 3


def tail(line: str) -> str:
    """A log line without its time stamp and thread, with the policy path as ``<policy>``."""
    text = line.split(" -> ", 1)[-1]
    return re.sub(r"\(/[^)]*qos-policy\.conf\)", "(<policy>)", text)


def test_upstream_opensm_gets_no_sw2sw_keys_and_skips_an_unknown_one(make_lab) -> None:
    """The agent's render tells the lab's OpenSM 3.3.23 from its log and writes no
    ``qos_sw2sw_*`` key; a key OpenSM does not know is skipped with 'Unrecognized token'
    while the rest of the file takes effect, which is why the checker only warns of it."""
    lab = make_lab("2;4,2;1,2", opensm_options=QUIET)
    fabric = fabric_from_lab(lab)
    files = lab.paths.opensm
    a1 = host_ports(fabric)["cn0001"]
    leaf = a1.peer
    leaf_lid = next(fp.lid for fp in fabric.ports.values() if fp.node_id == leaf.node)
    assert leaf_lid is not None
    cfg = OpenSMConfig(conf=files.conf, policy_file=files.policy, log=files.log)
    decided = plan([JobState("A", expected="high")], LANES, None, 0).plan
    tables = decided.tables
    assert isinstance(tables, Tables)
    guids = tuple(fp.port_guid or 0 for fp in (a1, host_ports(fabric)["cn0005"]))
    rendered = render_checked(cfg, LANES, decided, [("A", guids, "app")])
    assert rendered.flavour == Detected("upstream", f"'OpenSM 3.3.23' in {files.log}")
    conf = rendered.files[files.conf]
    assert "sw2sw" not in conf and "qos_swe_sl2vl" in conf
    # an option upstream OpenSM does not know, after ibqos's block: a warning only
    conf += "qos_sw2sw_sl2vl 0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0\n"
    (warning,) = [f for f in check_conf(conf, "c", flavour="upstream") if "sw2sw" in f.message]
    assert warning.severity == "warning"
    atomic_write(files.conf, conf)
    atomic_write(files.policy, rendered.files[files.policy])
    log, stdout, _ = sighup(lab)
    assert errors(log) == [], errors(log)
    assert ' Unrecognized token: "qos_sw2sw_sl2vl"' in stdout
    # the rest of the file took effect: the swe tables on a leaf's external port
    rows = sl2vl_rows(lab, leaf_lid, leaf.num)
    assert rows and all(vls == list(tables.sl_to_vl) for vls in rows.values()), rows
