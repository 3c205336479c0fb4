"""Two jobs on the same hosts (Slurm's OverSubscribe), end to end on a lab: real OpenSM,
ibsim and ``ibqos run``.

Each job keeps its SL and its port-group; the shared hosts' ports are in both groups,
OpenSM takes the policy, and the SA serves each job its SL from a host of its own.  Between
two hosts both jobs have, the first matching rule wins (osm_qos_policy.c): the job listed
first in ibqos's block.  The shared ports' traffic is split by the jobs' declared rates.
"""

from __future__ import annotations

import re

from ibqos.lab.fabric import fabric_from_lab
from tests.support.agentrun import QUIET, agent_config, drive, lids, path_sl, start_agent, state
from tests.support.agentrun import write_jobs as write

# cn0002 and cn0003 run both jobs; A sends three times what B sends per node
JOB_A = {"id": "A", "name": "big", "nodes": "cn[0001-0003,0005]", "pattern": "all-to-all"}
JOB_A |= {"rate_bytes_per_s": 3.0e8, "duty": 1.0, "period_s": 0.1}
JOB_B = {"id": "B", "name": "small", "nodes": "cn[0002-0003,0006]", "pattern": "all-to-all"}
JOB_B |= {"rate_bytes_per_s": 1.0e8, "duty": 1.0, "period_s": 0.1}


def test_two_jobs_sharing_hosts_both_get_sls_and_their_traffic_is_split(make_lab, tmp_path):
    lab = make_lab("2;4,2;1,2", opensm_options=QUIET)
    write(lab, JOB_A, JOB_B)
    config = agent_config(lab, tmp_path)
    lid = lids(lab)
    proc = start_agent(lab, config, tmp_path)

    def planned() -> dict:
        return {j["id"]: j for j in (state(tmp_path).get("plan") or {}).get("jobs", [])}

    def measured() -> bool:
        jobs = planned()
        return (
            {"A", "B"} <= set(jobs)
            and all((jobs[j]["levels"]["0"]["bytes_per_s"] or 0) > 0 for j in "AB")
            and (state(tmp_path).get("last_apply") or {}).get("ok") is True
        )

    try:
        drive(lab, measured, 25, proc)
        sls = state(tmp_path)["job_sl"]
        assert sls["A"] != sls["B"] and 0 not in (sls["A"], sls["B"])
        # from a host of its own, each job is served its own SL
        drive(lab, lambda: path_sl(lab, lid["cn0001"], lid["cn0002"]) == sls["A"], 10, proc)
        assert path_sl(lab, lid["cn0006"], lid["cn0002"]) == sls["B"]
        assert path_sl(lab, lid["cn0005"], lid["cn0003"]) == sls["A"]
        # between two hosts both jobs have, the first rule in the file decides: A's
        assert path_sl(lab, lid["cn0002"], lid["cn0003"]) == sls["A"]
        jobs = planned()
    finally:
        assert proc.stop() == 0
    # the shared hosts' ports are in both jobs' port-groups, and OpenSM kept the policy
    policy = lab.paths.opensm.policy.read_text()
    fabric = fabric_from_lab(lab)
    guid = {
        fp.node_desc.split()[0]: fp.port_guid for fp in fabric.ports.values() if not fp.is_switch
    }
    for host in ("cn0002", "cn0003"):
        assert policy.count(f"port-guid: 0x{guid[host]:016x}") == 2, host
    assert not re.search(r"ERR AC", lab.paths.opensm.log.read_text())
    # the split: each shared port sends 3e8 + 1e8 B/s, A takes 3/4 of it, B 1/4
    a0, b0 = (jobs[j]["levels"]["0"]["bytes_per_s"] for j in "AB")
    assert abs(a0 / b0 - (4 * 3.0e8) / (3 * 1.0e8)) < 0.4, (a0, b0)  # 4.0; 14 if unsplit
    assert abs(a0 - 4 * 3.0e8) < 0.25 * 4 * 3.0e8, a0
    assert jobs["A"]["shared_nodes"] == jobs["B"]["shared_nodes"] == ["cn0002", "cn0003"]
    assert jobs["A"]["measured_share"] < 1 and jobs["B"]["measured_share"] < 1
    log = (tmp_path / "agent.log").read_text()
    assert "ERROR" not in log and "skipped" not in log, log[-2000:]
