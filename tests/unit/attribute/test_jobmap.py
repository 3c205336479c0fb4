"""Tests for ibqos.attribute.jobmap: job sources and mapping jobs to fabric ports."""

from __future__ import annotations

import dataclasses
import logging
import os
import pathlib
import time

import pytest

from ibqos.attribute.jobmap import (
    FileJobSource,
    JobMapper,
    JobSource,
    MappedJob,
    host_ports,
    map_jobs,
)
from ibqos.errors import ConfigError, JobsError
from ibqos.fabric.hostnames import HostMatcher
from ibqos.fabric.model import Fabric, fabric_from_file, fabric_from_text
from ibqos.fabric.topology import Link, Port
from ibqos.fabric.xgft import build_xgft, parse_xgft
from ibqos.jobs.jobfile import Version
from ibqos.jobs.model import Job
from tests.support.paths import TESTS

DATA = TESTS / "data"
LAB = DATA / "lab-xgft-2_8.4_1.2" / "ibnetdiscover.txt"
CN = 0x0C42A10301000000  # node GUID of cn0001; cn(k+1) is CN + 4k


def job(job_id: str, *nodes: str, start: float | None = None, name: str = "") -> Job:
    return Job(
        id=job_id,
        nodes=nodes,
        pattern="ring",
        rate_bytes_per_s=1e9,
        duty=0.5,
        period_s=0.1,
        name=name,
        start_time=start,
    )


def cn(k: int) -> str:
    return f"cn{k:04d}"


@pytest.fixture(scope="module")
def lab() -> Fabric:
    return fabric_from_file(LAB)


def job_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "ibqos.attribute.jobmap"]


# --- mapping on the recorded lab fabric -------------------------------------------------------


def test_map_recorded(lab: Fabric, caplog: pytest.LogCaptureFixture) -> None:
    jobs = [job("1", cn(1), cn(2), cn(25)), job("2", cn(32))]
    with caplog.at_level(logging.WARNING):
        mapped, warnings = map_jobs(jobs, lab)
    assert warnings == [] and job_warnings(caplog) == []
    assert mapped == [
        MappedJob(
            jobs[0],
            ports=((CN, 1), (CN + 4, 1), (CN + 4 * 24, 1)),
            hosts=(cn(1), cn(2), cn(25)),
        ),
        MappedJob(jobs[1], ports=((CN + 4 * 31, 1),), hosts=(cn(32),)),
    ]
    assert [m.id for m in mapped] == ["1", "2"]


def test_index_has_only_ca_ports(lab: Fabric) -> None:
    index = host_ports(lab)
    assert sorted(index) == sorted([cn(k) for k in range(1, 33)] + ["opensm01"])
    assert all(not lab.ports[key].is_switch for keys in index.values() for key in keys)
    assert index[cn(1)] == [(CN, 1)]


def test_unknown_hosts_partly_mapped(lab: Fabric, caplog: pytest.LogCaptureFixture) -> None:
    jobs = [job("7", cn(1), "gpu01", "gpu02", cn(3), name="ft")]
    with caplog.at_level(logging.WARNING):
        mapped, warnings = map_jobs(jobs, lab)
    assert mapped == [
        MappedJob(jobs[0], ((CN, 1), (CN + 8, 1)), (cn(1), cn(3)), ("gpu01", "gpu02"))
    ]
    assert warnings == ["job 7 (ft): 2 hosts of 4 not on the fabric: gpu[01-02]"]
    assert job_warnings(caplog) == warnings


def test_switch_name_is_not_a_host(lab: Fabric) -> None:
    mapped, warnings = map_jobs([job("1", "sw-L1-0001", cn(1))], lab)
    assert mapped[0].hosts == (cn(1),) and mapped[0].missing == ("sw-L1-0001",)
    assert len(warnings) == 1


def test_no_host_on_fabric_skipped(lab: Fabric) -> None:
    mapped, warnings = map_jobs([job("1", "x1", "x2"), job("2", cn(1))], lab)
    assert [m.id for m in mapped] == ["2"]
    assert warnings == [
        "job 1: 2 hosts of 2 not on the fabric: x[1-2]",
        "job 1: no host on the fabric; skipped",
    ]


def test_empty_job_skipped(lab: Fabric) -> None:
    mapped, warnings = map_jobs([job("1"), job("2", cn(1))], lab)
    assert [m.id for m in mapped] == ["2"]
    assert warnings == ["job 1: no hosts; skipped"]


def test_no_jobs(lab: Fabric) -> None:
    assert map_jobs([], lab) == ([], [])


# --- shared nodes: every job keeps them, and their traffic is split --------------------------


def test_two_jobs_on_one_node_both_keep_it(lab: Fabric) -> None:
    late = job("1", cn(1), cn(2), cn(3), start=200.0)
    early = job("2", cn(3), cn(4), start=100.0)
    mapped, warnings = map_jobs([late, early], lab)
    assert warnings == []
    assert [(m.id, m.hosts, m.shared) for m in mapped] == [
        ("1", (cn(1), cn(2), cn(3)), (cn(3),)),
        ("2", (cn(3), cn(4)), (cn(3),)),
    ]
    assert mapped[0].ports == ((CN, 1), (CN + 4, 1), (CN + 8, 1))
    assert mapped[1].ports == ((CN + 8, 1), (CN + 12, 1))
    # both declare the same rate (job()): the shared port is split in halves
    assert mapped[0].share == (1.0, 1.0, 0.5) and mapped[1].share == (0.5, 1.0)


def test_a_node_with_one_job_is_not_split(lab: Fabric) -> None:
    mapped, _ = map_jobs([job("1", cn(1)), job("2", cn(2))], lab)
    assert [(m.share, m.shared) for m in mapped] == [((), ()), ((), ())]


@pytest.mark.parametrize(
    ("jobs", "shares"),
    [
        # declared mean rates per node (rate x duty): 3 : 1
        (
            [
                Job("a", (cn(1),), "ring", 3e9, 1.0, 1.0),
                Job("b", (cn(1),), "ring", 2e9, 0.5, 1.0),
            ],
            [0.75, 0.25],
        ),
        # no rates: the CPUs each holds on the node (Slurm's job_resources), 48 : 16
        (
            [
                Job("a", (cn(1), cn(2)), host_cpus=((cn(1), 48), (cn(2), 64))),
                Job("b", (cn(1),), host_cpus=((cn(1), 16),)),
            ],
            [0.75, 0.25],
        ),
        # one job's CPUs not known: equal shares, three jobs
        (
            [
                Job("a", (cn(1),), host_cpus=((cn(1), 48),)),
                Job("b", (cn(1),)),
                Job("c", (cn(1),), host_cpus=((cn(1), 8),)),
            ],
            [1 / 3, 1 / 3, 1 / 3],
        ),
        # one declares a rate, the other does not: the rate says nothing of the other
        (
            [Job("a", (cn(1),), "ring", 3e9, 1.0, 1.0), Job("b", (cn(1),))],
            [0.5, 0.5],
        ),
    ],
)
def test_how_a_shared_node_is_split(lab: Fabric, jobs: list[Job], shares: list[float]) -> None:
    mapped, _ = map_jobs(jobs, lab)
    got = [m.share[0] for m in mapped]
    assert got == pytest.approx(shares) and sum(got) == pytest.approx(1.0)


def test_a_node_shared_with_a_job_on_no_other_node(lab: Fabric) -> None:
    # a job on shared nodes only is still mapped: it keeps its SL
    mapped, warnings = map_jobs([job("10", cn(1)), job("9", cn(1))], lab)
    assert [m.id for m in mapped] == ["10", "9"] and warnings == []
    assert [m.share for m in mapped] == [(0.5,), (0.5,)]


def test_a_host_with_three_ports_shares_them_all() -> None:
    # cn0007's HCA is renamed "cn0008 mlx5_1", and cn0008's HCA gets a second linked port
    topo = build_xgft(parse_xgft("2;4,2;1,2"))
    by_desc = {node.desc: node for node in topo.nodes.values()}
    cn7, cn8 = by_desc["cn0007 mlx5_0"], by_desc["cn0008 mlx5_0"]
    leaf2 = by_desc["sw-L1-0002"]
    topo.nodes[cn7.id] = dataclasses.replace(cn7, desc="cn0008 mlx5_1")
    topo.nodes[cn8.id] = dataclasses.replace(cn8, nports=2)
    assert cn8.guid is not None
    topo.port_guids[Port(cn8.id, 2)] = cn8.guid + 2
    topo.add_link(Link(Port(cn8.id, 2), Port(leaf2.id, leaf2.nports), 4, "EDR"))
    fabric = Fabric(topo)
    mapped, _ = map_jobs([job("1", cn(6), cn(8)), job("2", cn(8))], fabric)
    assert len(mapped[0].ports) == 4 and len(mapped[1].ports) == 3
    assert mapped[0].share == (1.0, 0.5, 0.5, 0.5) and mapped[1].share == (0.5, 0.5, 0.5)


def test_shared_unknown_host_is_just_missing(lab: Fabric) -> None:
    mapped, warnings = map_jobs([job("1", cn(1), "x1"), job("2", cn(2), "x1")], lab)
    assert [m.missing for m in mapped] == [("x1",), ("x1",)]
    assert all("not on the fabric" in w for w in warnings)


def test_warnings_logged_capped(lab: Fabric, caplog: pytest.LogCaptureFixture) -> None:
    jobs = [job(str(i), f"x{i}") for i in range(30)]
    with caplog.at_level(logging.WARNING):
        mapped, warnings = map_jobs(jobs, lab)
    assert mapped == [] and len(warnings) == 60
    logged = job_warnings(caplog)
    assert logged[:10] == warnings[:10]
    assert logged[10:] == ["... and 50 more job mapping warnings"]


def test_long_host_list_is_cut(lab: Fabric) -> None:
    hosts = ["abcdefghij"[i % 10] * (1 + i // 10) for i in range(100)]  # no digits to fold
    _, warnings = map_jobs([job("1", cn(1), *hosts)], lab)
    assert warnings[0].startswith("job 1: 100 hosts of 101 not on the fabric: ")
    assert warnings[0].endswith("...") and len(warnings[0]) < 200


# --- host names from node descriptions ------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "desc", "host"),
    [
        (r"^(\S+)", "cn0001 mlx5_0", "cn0001"),
        (r"^(\S+)", "cn0001", "cn0001"),
        (r"^(\S+)", "", None),
        (r"^node-(\S+)", "node-cn01 HCA-1", "cn01"),
        (r"^node-(\S+)", "cn01 HCA-1", None),
        (r"(cn\d+)", "MF0;cn07:ConnectX-7", "cn07"),
        (r"^(?:node-)?(\w+)", "node-a1 x", "a1"),
        (r"^(x)?", "cn01", None),  # the group did not take part
    ],
)
def test_host_matcher(pattern: str, desc: str, host: str | None) -> None:
    assert HostMatcher(pattern).hostname(desc) == host


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        (r"^(\S+", "host pattern '^(\\S+': invalid regular expression: missing ), unterminated"),
        (
            r"^\S+",
            "host pattern '^\\S+': expected exactly one group (...) around the host name, got 0",
        ),
        (r"^(\S+) (\S+)", "expected exactly one group (...) around the host name, got 2"),
    ],
)
def test_bad_host_pattern(pattern: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        HostMatcher(pattern)
    assert message in str(info.value)


def test_custom_pattern(lab: Fabric) -> None:
    text = LAB.read_text().replace('"cn0', '"node-cn0')
    fabric = fabric_from_text(text, "renamed")
    jobs = [job("1", cn(1), cn(2))]
    mapped, warnings = map_jobs(jobs, fabric)
    assert mapped == [] and "2 hosts of 2 not on the fabric" in warnings[0]
    mapped, warnings = map_jobs(jobs, fabric, HostMatcher(r"^node-(\S+)"))
    assert warnings == [] and mapped[0].ports == ((CN, 1), (CN + 4, 1))


def test_host_with_several_ports() -> None:
    # cn0007's HCA is renamed "cn0008 mlx5_1", and cn0008's HCA gets a second linked port.
    topo = build_xgft(parse_xgft("2;4,2;1,2"))
    by_desc = {node.desc: node for node in topo.nodes.values()}
    cn7, cn8 = by_desc["cn0007 mlx5_0"], by_desc["cn0008 mlx5_0"]
    leaf2 = by_desc["sw-L1-0002"]
    topo.nodes[cn7.id] = dataclasses.replace(cn7, desc="cn0008 mlx5_1")
    topo.nodes[cn8.id] = dataclasses.replace(cn8, nports=2)
    assert cn8.guid is not None and cn7.guid is not None
    topo.port_guids[Port(cn8.id, 2)] = cn8.guid + 2
    topo.add_link(Link(Port(cn8.id, 2), Port(leaf2.id, leaf2.nports), 4, "EDR"))
    fabric = Fabric(topo)
    mapped, warnings = map_jobs([job("1", cn(6), cn(7), cn(8))], fabric)
    assert warnings == ["job 1: 1 host of 3 not on the fabric: cn0007"]
    by_port = sorted([(cn7.guid, 1), (cn8.guid, 1), (cn8.guid, 2)])
    assert mapped[0].hosts == (cn(6), cn(8))
    assert mapped[0].ports[1:] == tuple(by_port)


def test_scale() -> None:
    # 1024 hosts, 4096 jobs of 1-8 hosts, one of 40 unknown hosts: the index makes it linear.
    fabric = Fabric(build_xgft(parse_xgft("2;32,32;1,16")))
    jobs = [
        job(str(i), *(cn(1 + (i * 8 + k) % 1024) for k in range(1 + i % 8))) for i in range(4096)
    ]
    jobs.append(job("x", *(f"gpu{k:03d}" for k in range(40))))
    begin = time.perf_counter()
    mapped, warnings = map_jobs(jobs, fabric)
    elapsed = time.perf_counter() - begin
    assert len(host_ports(fabric)) == 1025
    assert len(mapped) == 4096 and warnings[-1].startswith("job x: no host")
    # each of the 576 hosts the jobs have is in 32 jobs; its shares add up to its traffic
    shares: dict[tuple[int, int], float] = {}
    for m in mapped:
        for port, part in zip(m.ports, m.share, strict=True):
            shares[port] = shares.get(port, 0.0) + part
    assert len(shares) == 576 and all(abs(v - 1.0) < 1e-9 for v in shares.values())
    assert {part for m in mapped for part in m.share} == {1 / 32}
    assert elapsed < 30  # generous: a quadratic mapping would take minutes, not seconds


# --- the job mapper: map_jobs for every cycle --------------------------------------------------


MAPPER_CYCLES = [
    # (what changes, the jobs of the cycle)
    ("start", [job("1", cn(1), cn(2)), job("2", cn(3), cn(9)), job("3", cn(17))]),
    ("same", [job("1", cn(1), cn(2)), job("2", cn(3), cn(9)), job("3", cn(17))]),
    ("end and start", [job("1", cn(1), cn(2)), job("4", cn(17), cn(18), cn(30))]),
    ("unknown host", [job("1", cn(1), cn(2)), job("5", cn(40), cn(4), name="x")]),
    ("host in two jobs", [job("1", cn(1), cn(2), start=5.0), job("6", cn(2), cn(5), start=1.0)]),
    ("repeated host", [job("7", cn(6), cn(6)), job("1", cn(1), cn(2))]),
    ("empty and off-fabric", [job("8"), job("9", "gpu01"), job("1", cn(1), cn(2))]),
    ("no jobs", []),
    ("back", [job("1", cn(1), cn(2)), job("2", cn(3), cn(9)), job("3", cn(17))]),
]


def test_mapper_maps_as_map_jobs(lab: Fabric) -> None:
    """The same mapping and warnings as map_jobs, cycle after cycle."""
    mapper = JobMapper(lab)
    assert mapper.index == host_ports(lab)
    for what, jobs in MAPPER_CYCLES:
        assert mapper.map(jobs) == map_jobs(jobs, lab, log=False), what
        assert mapper.map(tuple(jobs)) == map_jobs(jobs, lab, log=False), what  # again


def test_mapper_keeps_a_running_job_s_mapping(lab: Fabric) -> None:
    mapper = JobMapper(lab)
    a, b = job("1", cn(1), cn(2)), job("2", cn(3))
    first, _ = mapper.map([a, b])
    later, _ = mapper.map([b, job("3", cn(4)), dataclasses.replace(a)])  # equal, not the same
    assert later[0] is first[1] and later[2] is first[0]
    later.clear()  # the caller may change the lists it gets
    assert len(mapper.map([b, job("3", cn(4)), a])[0]) == 3


def test_mapper_keeps_a_shared_job_until_its_shares_change(lab: Fabric) -> None:
    mapper = JobMapper(lab)
    a, b, c = job("1", cn(1), cn(2)), job("2", cn(2)), job("3", cn(2), cn(3))
    first, _ = mapper.map([a, b])
    again, _ = mapper.map([b, a, job("4", cn(9))])  # a new job elsewhere: same shares
    assert again[1] is first[0] and again[0] is first[1]
    third, _ = mapper.map([a, b, c])  # a third job on cn0002: a third each
    assert third[0] is not first[0] and third[0].share == pytest.approx((1.0, 1 / 3))
    assert mapper.map([a, b, c]) == map_jobs([a, b, c], lab, log=False)


# --- the file job source ----------------------------------------------------------------------

ONE = """\
jobs:
  - id: "{id}"
    nodes: {nodes}
    pattern: ring
    rate_bytes_per_s: 1.0e9
    duty: 0.5
    period_s: 0.1
"""


def write(path: pathlib.Path, text: str, bump: int = 0) -> None:
    """Write a file and move its mtime by `bump` seconds (coarse-mtime file systems)."""
    path.write_text(text)
    if bump:
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + bump * 10**9))


def ids(source: JobSource) -> list[str]:
    return [j.id for j in source.jobs()]


def test_file_source_rereads_on_change(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "jobs.yaml"
    write(path, ONE.format(id="1", nodes="cn[0001-0002]"))
    source = FileJobSource(path)
    first = source.jobs()
    assert [j.nodes for j in first] == [("cn0001", "cn0002")]
    assert source.jobs() is first  # unchanged: not re-read
    write(path, ONE.format(id="2", nodes="cn0003"), bump=1)
    assert ids(source) == ["2"]


def test_file_source_not_reread_when_unchanged(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "jobs.json"
    write(path, '{"jobs": []}')
    source = FileJobSource(str(path))
    assert source.jobs() == ()
    reads: list[pathlib.Path] = []

    def read(p: pathlib.Path, *args: object, **kwargs: object) -> Version:
        reads.append(p)
        return Version(())

    monkeypatch.setattr("ibqos.jobs.reader.read_version", read)
    for _ in range(3):
        source.jobs()
    assert reads == []


def test_file_source_keeps_last_good(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "jobs.yaml"
    write(path, ONE.format(id="1", nodes="cn0001"))
    source = FileJobSource(path)
    good = source.jobs()
    write(path, "jobs: [\n  {id: 1", bump=1)
    with caplog.at_level(logging.WARNING):
        assert source.jobs() == good
        assert source.jobs() == good  # the same bad version: no second warning
    (msg,) = job_warnings(caplog)
    assert msg.startswith(f"{path}: invalid YAML") and "keeping the previous 1 jobs" in msg
    write(path, ONE.format(id="1", nodes="cn[0001-0002]"), bump=2)
    assert source.jobs()[0].nodes == ("cn0001", "cn0002")


def test_file_source_invalid_job_keeps_last_good(
    tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "jobs.yaml"
    write(path, ONE.format(id="1", nodes="cn0001"))
    source = FileJobSource(path)
    source.jobs()
    write(path, ONE.format(id="1", nodes="cn[0001-"), bump=1)
    with caplog.at_level(logging.WARNING):
        assert ids(source) == ["1"]
    (msg,) = job_warnings(caplog)
    assert f"{path}: jobs[0].nodes: bad host list" in msg


def test_file_source_deleted_file(tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "jobs.yaml"
    write(path, ONE.format(id="1", nodes="cn0001"))
    source = FileJobSource(path)
    source.jobs()
    path.unlink()
    with caplog.at_level(logging.WARNING):
        assert ids(source) == ["1"]
    (msg,) = job_warnings(caplog)
    assert msg.startswith(f"{path}: cannot read job file: No such file or directory")
    write(path, ONE.format(id="5", nodes="cn0001"))
    assert ids(source) == ["5"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (None, "cannot read job file"),
        ("jobs: [", "invalid YAML"),
        ("jobs:\n", "expected a list"),
    ],
)
def test_file_source_first_read_raises(
    tmp_path: pathlib.Path, text: str | None, message: str
) -> None:
    path = tmp_path / "jobs.yaml"
    if text is not None:
        write(path, text)
    source = FileJobSource(path)
    with pytest.raises(JobsError, match=message):
        source.jobs()
    with pytest.raises(JobsError):  # still no good read: still raises
        source.jobs()
    write(path, ONE.format(id="1", nodes="cn0001"), bump=1)
    assert ids(source) == ["1"]


def test_directory_source(tmp_path: pathlib.Path, caplog: pytest.LogCaptureFixture) -> None:
    source = FileJobSource(tmp_path)
    assert source.jobs() == ()  # an empty directory: no jobs
    write(tmp_path / "100.yaml", ONE.format(id="100", nodes="cn0001"))
    write(
        tmp_path / "101.json",
        '{"jobs": [{"id": "101", "nodes": "cn0002", "pattern": "ring",'
        ' "rate_bytes_per_s": 1e9, "duty": 1, "period_s": 1}]}',
    )
    assert ids(source) == ["100", "101"]  # a new file is seen without any mtime bump
    write(tmp_path / ".101.json.swp", "garbage")  # hidden and other files do not count
    write(tmp_path / "notes.txt", "garbage")
    assert ids(source) == ["100", "101"]
    (tmp_path / "100.yaml").unlink()  # the epilog removes a finished job's file
    assert ids(source) == ["101"]
    write(tmp_path / "101.json", '{"jobs": []}', bump=1)
    assert ids(source) == []
    write(tmp_path / "102.yaml", ONE.format(id="102", nodes="cn0003"))
    write(tmp_path / "103.yaml", ONE.format(id="102", nodes="cn0004"))  # duplicate id
    with caplog.at_level(logging.WARNING):
        assert ids(source) == ["102"]  # the later file's job is left out, the first kept
    (msg,) = job_warnings(caplog)
    assert "103.yaml: jobs[0].id: duplicate id '102'" in msg and "(job left out)" in msg
    assert source.up is True and source.rejected == 1


def test_directory_source_missing(tmp_path: pathlib.Path) -> None:
    with pytest.raises(JobsError, match="cannot read job file"):
        FileJobSource(tmp_path / "nope").jobs()
