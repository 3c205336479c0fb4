"""The sharing report in the agent's exporter: every job's sharing of the fat tree."""

from __future__ import annotations

from prometheus_client import generate_latest

from ibqos.attribute.jobmap import JobMapper
from ibqos.attribute.sharing import SharingTables
from ibqos.config.lanes import LaneConfig
from ibqos.config.load import parse_config
from ibqos.fabric.hostnames import HostMatcher
from ibqos.jobs.model import Job
from ibqos.metrics import build_snapshot, level_capacities
from ibqos.plan.decide import Decider
from tests.support.exporter import metrics
from tests.support.fabric_rates import full_rates, setup

SHARED = [
    Job("A", ("cn0001", "cn0002", "cn0009"), name="a"),  # leaves 1, 2
    Job("B", ("cn0003", "cn0010", "cn0017"), name="b"),  # leaves 1, 2, 3
    Job("C", ("cn0025", "cn0026", "cn0027", "cn0028"), name="c"),  # leaf 4 alone
]


def test_sharing_metrics_in_the_exporter() -> None:
    fabric, _ = setup()
    table = full_rates(fabric, {})
    decision = Decider(fabric, LaneConfig()).decide(table, SHARED, 0.0)
    mapped, _ = JobMapper(fabric).map(SHARED)
    assert decision.sharing.get() == SharingTables(fabric).sharing(mapped)
    m = metrics()
    registry = m.registry
    m.snapshot.publish(build_snapshot(decision, table, level_capacities(fabric), 0.0))
    get = registry.get_sample_value
    assert get("ibqos_job_sharing_jobs", {"job_id": "A", "level": "1"}) == 1
    assert get("ibqos_job_subtrees", {"job_id": "B", "level": "1"}) == 3
    assert get("ibqos_job_fragmentation_ratio", {"job_id": "B"}) == 3.0
    assert get("ibqos_job_sharing_jobs", {"job_id": "C", "level": "1"}) == 0
    assert get("ibqos_job_fragmentation_ratio", {"job_id": "C"}) == 1.0
    assert "ibqos_job_sharing_jobs" in generate_latest(registry).decode()
    # an ended job's series go with it
    m.snapshot.publish(
        build_snapshot(
            Decider(fabric, LaneConfig()).decide(table, SHARED[:1], 0.0),
            table,
            level_capacities(fabric),
            0.0,
        )
    )
    assert get("ibqos_job_subtrees", {"job_id": "B", "level": "1"}) is None
    assert get("ibqos_job_sharing_jobs", {"job_id": "A", "level": "1"}) == 0


def test_sharing_on_three_levels_by_hand() -> None:
    from ibqos.characterize.command import fabric_of

    # 3;4,2,2;1,2,2: leaves of 4 hosts (cn1-4, cn5-8, cn9-12, cn13-16); leaves 1-2 and
    # 3-4 form the two level-2 subtrees
    fabric, _, _ = fabric_of("3;4,2,2;1,2,2", None)
    jobs = [
        Job("A", ("cn0001", "cn0002", "cn0005")),  # leaves 1, 2; subtree 1
        Job("B", ("cn0003", "cn0006")),  # leaves 1, 2; subtree 1
        Job("C", ("cn0009",)),  # leaf 3; subtree 2
        Job("D", ("cn0004", "cn0010")),  # leaves 1, 3; subtrees 1, 2
    ]
    s = SharingTables(fabric).sharing(JobMapper(fabric).map(jobs)[0])
    assert {j: (v.subtrees, v.sharing) for j, v in s.items()} == {
        "A": ({1: 2, 2: 1}, {1: 2, 2: 2}),  # B, D
        "B": ({1: 2, 2: 1}, {1: 2, 2: 2}),  # A, D
        "C": ({1: 1, 2: 1}, {1: 1, 2: 1}),  # D
        "D": ({1: 2, 2: 2}, {1: 3, 2: 3}),  # A, B (leaf 1) and C (leaf 3)
    }
    assert [v.fragmentation for v in s.values()] == [2.0, 2.0, 1.0, 2.0]


def test_hosts_that_run_no_jobs_are_not_leaf_capacity() -> None:
    # the lab fabric: 4 leaves of 8 compute hosts, and the OpenSM host opensm01 on leaf 1
    fabric, _ = setup()
    nine = [Job("N", tuple(f"cn{i:04d}" for i in range(1, 10)))]  # cn0001-8 and cn0009
    mapped = JobMapper(fabric).map(nine)[0]
    # 9 nodes need 2 leaves of 8 compute hosts: as compact as can be
    tables = SharingTables(fabric, exclude=("opensm01",))
    assert tables.hosts_per_leaf == 8
    assert tables.sharing(mapped)["N"].fragmentation == 1.0
    # counted as a host, opensm01 would make leaf 1 hold 9 and the job look spread
    assert SharingTables(fabric).sharing(mapped)["N"].fragmentation == 2.0
    # a host pattern that names only compute nodes leaves it out too
    assert SharingTables(fabric, HostMatcher(r"^(cn\d+)")).hosts_per_leaf == 8
    # the agent's tables take the config's jobs.exclude_hosts (default: the lab's SM host)
    decider = Decider.from_config(parse_config({}, "t"), fabric, LaneConfig())
    assert decider.sharing_tables.hosts_per_leaf == 8
