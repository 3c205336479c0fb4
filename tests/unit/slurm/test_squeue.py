"""squeue output -> running jobs: recorded Slurm 22.05.8 output, the 23.02+ JSON shape, text."""

from __future__ import annotations

import copy
import json

import pytest

from ibqos.errors import SlurmError
from ibqos.jobs.model import Job
from ibqos.slurm.squeue import is_running, parse_json, parse_text, parse_version
from tests.support.paths import TESTS

DATA = TESTS / "data" / "squeue"
START = 1795329376.0  # both running jobs of the recording started then
#: what the recording holds: a 2-node job, an array task (its own job id 4), two pending
WANT = (
    Job("1", ("cn0001", "cn0002"), name="ring app", user="root", start_time=START),
    Job("4", ("cn0003",), name="arr|pipe", user="root", start_time=START),
)


def recorded() -> dict:
    return json.loads((DATA / "22.05-mix.json").read_text())


def test_squeue_json_of_slurm_22_05() -> None:
    jobs, warnings = parse_json((DATA / "22.05-mix.json").read_text())
    assert (jobs, warnings) == (WANT, [])


def test_squeue_json_of_slurm_23_02_and_later() -> None:
    # 23.02 made job_state a list of flags and numbers {"set", "infinite", "number"}
    doc = recorded()
    for job in doc["jobs"]:
        job["job_state"] = [job["job_state"]]
        job["start_time"] = {"set": True, "infinite": False, "number": job["start_time"]}
        job["job_id"] = {"set": True, "infinite": False, "number": job["job_id"]}
    assert parse_json(json.dumps(doc)) == (WANT, [])


def test_squeue_text_fallback(monkeypatch) -> None:
    # squeue prints local time without a zone; the recording was made in UTC
    monkeypatch.setenv("TZ", "UTC")
    import time

    time.tzset()
    try:
        assert parse_text((DATA / "22.05-mix.txt").read_text()) == (WANT, [])
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


@pytest.mark.parametrize(
    ("states", "running"),
    [
        (["RUNNING"], True),
        (["CONFIGURING"], True),  # prolog still running: a TaskProlog may ask already
        (["RUNNING", "CONFIGURING"], True),
        (["SUSPENDED"], True),
        (["COMPLETING"], False),
        (["RUNNING", "COMPLETING"], False),
        (["PENDING"], False),
        (["COMPLETED"], False),
    ],
)
def test_which_states_run(states, running) -> None:
    assert is_running(states) is running


def test_slurmctld_down_is_an_error_naming_squeue() -> None:
    # what squeue 22.05.8 --json printed with slurmctld stopped (exit status 0)
    doc = recorded() | {
        "jobs": [],
        "errors": [
            {
                "description": "Failed while looking for jobs",
                "error_number": -1,
                "error": "Unspecified error",
                "source": "slurm_load_jobs",
            }
        ],
    }
    with pytest.raises(SlurmError, match=r"^squeue --json: squeue reported an error: Failed whi"):
        parse_json(json.dumps(doc))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", r"squeue --json: not JSON \(line 1, column 2\)"),
        ("[]", "expected an object with a 'jobs' list"),
        ('{"jobs": 3}', "expected an object with a 'jobs' list"),
    ],
)
def test_output_that_is_not_squeue_json(text, message) -> None:
    with pytest.raises(SlurmError, match=message):
        parse_json(text)


def test_a_bad_job_entry_is_skipped_with_a_warning_and_the_others_kept() -> None:
    doc = recorded()
    bad = copy.deepcopy(doc["jobs"][0]) | {"job_id": 7, "nodes": "cn[0001-"}
    doc["jobs"] += [bad, {"job_id": "x"}, 5]
    jobs, warnings = parse_json(json.dumps(doc))
    assert jobs == WANT
    assert warnings[0].startswith("squeue --json: job 7: nodes: bad host list 'cn[0001-'")
    assert warnings[1:] == [
        "squeue --json: jobs[5]: no job_id or job_state this reader knows; skipped",
        "squeue --json: jobs[6]: expected an object; skipped",
    ]


def test_text_lines_that_do_not_parse() -> None:
    text = "1|root|RUNNING|N/A|cn0001|a\ngarbage\n2|root|RUNNING|N/A|cn[1-|b\n"
    jobs, warnings = parse_text(text)
    assert jobs == (Job("1", ("cn0001",), name="a", user="root"),)
    assert warnings[0] == "squeue: line 2: expected 6 '|'-separated fields; skipped"
    assert warnings[1].startswith("squeue: line 3 (job 2): nodes: bad host list")


@pytest.mark.parametrize(
    ("text", "version"),
    [("slurm-wlm 22.05.8\n", (22, 5)), ("slurm 20.11.9", (20, 11)), ("what?", None)],
)
def test_versions(text, version) -> None:
    assert parse_version(text) == version


# --- nodes that several jobs share: the CPUs each job holds there ------------------------------

SHARED = DATA / "25.05-shared.json"


def test_squeue_json_of_slurm_25_05_with_a_shared_node() -> None:
    # 4101 (12 CPUs on each of cn0001-cn0002) and 4102 (4 CPUs) share cn0002; 4103 has
    # whole nodes; 4104 is pending
    jobs, warnings = parse_json(SHARED.read_text())
    assert warnings == []
    assert [(j.id, j.nodes, j.user) for j in jobs] == [
        ("4101", ("cn0001", "cn0002"), "alice"),
        ("4102", ("cn0002",), "bob"),
        ("4103", ("cn0003", "cn0004"), "carol"),
    ]
    # only the shared node's counts are kept: they split its traffic
    assert [j.host_cpus for j in jobs] == [(("cn0002", 12),), (("cn0002", 4),), ()]
    assert jobs[1].start_time == 1790000300.0


def test_the_shared_node_of_the_squeue_fixture_is_split_by_cpus() -> None:
    from ibqos.attribute.jobmap import map_jobs
    from ibqos.fabric.model import fabric_from_file

    fabric = fabric_from_file(DATA.parent / "lab-xgft-2_8.4_1.2" / "ibnetdiscover.txt")
    jobs, _ = parse_json(SHARED.read_text())
    mapped, warnings = map_jobs(jobs, fabric)
    assert warnings == [] and [m.id for m in mapped] == ["4101", "4102", "4103"]
    assert [m.share for m in mapped] == [(1.0, 0.75), (0.25,), ()]
    assert [m.shared for m in mapped] == [("cn0002",), ("cn0002",), ()]


def test_cpus_on_a_shared_node_in_the_22_05_and_23_x_shape() -> None:
    # 22.05-23.11 list allocated_nodes with a core map; cpus_used stays 0 for running jobs
    doc = recorded()
    one, four = doc["jobs"][0], doc["jobs"][1]
    four["nodes"] = four["job_resources"]["nodes"] = "cn0002"
    four["job_resources"]["allocated_nodes"][0]["nodename"] = "cn0002"
    four["job_resources"]["allocated_nodes"][0]["sockets"] = {
        "0": {"cores": {"1": "allocated", "2": "allocated", "3": "unassigned"}}
    }
    assert one["job_resources"]["allocated_nodes"][1]["cpus_used"] == 0  # as recorded
    jobs, _ = parse_json(json.dumps(doc))
    assert [j.host_cpus for j in jobs] == [(("cn0002", 1),), (("cn0002", 2),)]


def test_cpus_on_a_shared_node_in_the_21_08_shape() -> None:
    # 21.08: allocated_nodes keyed by the node's index in job_resources.nodes, with cpus
    doc = recorded()
    for job, nodes, cpus in ((doc["jobs"][0], "cn[0001-0002]", 6), (doc["jobs"][1], "cn0002", 2)):
        job["nodes"] = nodes
        job["job_resources"] = {
            "nodes": nodes,
            "allocated_cpus": cpus,
            "allocated_hosts": 1,
            "allocated_nodes": {
                str(i): {"sockets": {"0": "assigned"}, "cores": {}, "memory": 0, "cpus": cpus}
                for i in range(len(nodes.split("-")))
            },
        }
    jobs, _ = parse_json(json.dumps(doc))
    assert [j.host_cpus for j in jobs] == [(("cn0002", 6),), (("cn0002", 2),)]


@pytest.mark.parametrize(
    "resources",
    [None, {}, [], {"nodes": {"allocation": "x"}}, {"allocated_nodes": [{"nodename": 3}]}],
)
def test_job_resources_not_understood_give_no_cpus(resources) -> None:
    doc = recorded()
    for job in doc["jobs"][:2]:
        job["nodes"] = "cn0001"
        job["job_resources"] = resources
    jobs, warnings = parse_json(json.dumps(doc))
    assert warnings == [] and [j.host_cpus for j in jobs] == [(), ()]
