"""Tests for ibqos.jobs: the job file schema, every problem of a file at once."""

from __future__ import annotations

import datetime as dt
import json
import pathlib
import re
import textwrap

import pytest
import yaml

from ibqos.errors import JobsError
from ibqos.jobs.hosts import expand_hosts
from ibqos.jobs.jobfile import check_hosts, dump_jobs, load_jobs, parse_jobs
from ibqos.jobs.model import PATTERNS, TRAFFIC_KEYS, Job, shared_nodes
from tests.support.paths import ROOT

EXAMPLE = ROOT / "examples" / "lab-jobs.yaml"
LAB_HOSTS = [f"cn{i:04d}" for i in range(1, 33)]

# A valid job; cases below append or override keys (later YAML keys win in PyYAML).
BASE = """\
jobs:
  - id: "1001"
    nodes: cn[0001-0004]
    pattern: ring
    rate_bytes_per_s: 2.0e9
    duty: 0.5
    period_s: 0.05
"""


def parse(text: str, base: str = BASE) -> tuple[Job, ...]:
    """Parse BASE (a lab job) with extra job keys (indented under the first job)."""
    extra = textwrap.indent(textwrap.dedent(text), "    ")
    return parse_jobs(yaml.safe_load(base + extra), "t.yaml", traffic=True)


def parse_error(text: str, base: str = BASE) -> str:
    with pytest.raises(JobsError) as info:
        parse(text, base)
    msg = str(info.value)
    assert all(line.startswith("t.yaml: jobs[0].") for line in msg.splitlines()), msg
    return msg


def test_minimal_job() -> None:
    (job,) = parse("")
    assert job == Job(
        id="1001",
        nodes=("cn0001", "cn0002", "cn0003", "cn0004"),
        pattern="ring",
        rate_bytes_per_s=2.0e9,
        duty=0.5,
        period_s=0.05,
    )
    assert job.name == "" and job.user is None and job.start_time is None


# (extra YAML keys for the first job, attribute, expected value)
GOOD = [
    ("id: 1001", "id", "1001"),
    ("name: ft\nuser: alice", "user", "alice"),
    ("name: ft", "name", "ft"),
    ("user: null", "user", None),
    ("rate_bytes_per_s: 2e9", "rate_bytes_per_s", 2e9),  # PyYAML: a string
    ("rate_bytes_per_s: 200000000", "rate_bytes_per_s", 2e8),
    ("rate_bytes_per_s: '6.0e9'", "rate_bytes_per_s", 6e9),
    ("duty: 1", "duty", 1.0),
    ("period_s: 1e-3", "period_s", 0.001),
    ("nodes: cn[0003,0001-0002],cn0004", "nodes", ("cn0001", "cn0002", "cn0003", "cn0004")),
    ("nodes: [cn0009, 'cn[0001-0002]']", "nodes", ("cn0001", "cn0002", "cn0009")),
    ("nodes: cn[0001-0004]!cn0002", "nodes", ("cn0001", "cn0003", "cn0004")),
    ("nodes: cn0001", "nodes", ("cn0001",)),
    ("start_time: 1700000000", "start_time", 1700000000.0),
    ("start_time: 1.5e9", "start_time", 1.5e9),
    ("start_time: 2026-11-21T10:00:00Z", "start_time", 1795255200.0),
    ("start_time: 2026-11-21T10:00:00", "start_time", 1795255200.0),  # naive = UTC
    ("start_time: '2026-11-21T11:00:00+01:00'", "start_time", 1795255200.0),
    ("start_time: 2026-11-21", "start_time", 1795219200.0),
    ("start_time: null", "start_time", None),
    ("pattern: halo", "halo_dims", None),
    ("pattern: halo\nhalo_dims: [2, 2]", "halo_dims", (2, 2)),
    ("pattern: halo\nhalo_dims: [4, 1]", "halo_dims", (4, 1)),
    ("pattern: random-pairs\nseed: 7", "seed", 7),
    ("pattern: random-pairs", "seed", None),
    (
        "pattern: matrix\nmatrix: [[0, 1, 0, 0], [0, 0, 2.5, 0], [0, 0, 0, 0], ['1e3', 0, 0, 0]]",
        "matrix",
        ((0, 1, 0, 0), (0, 0, 2.5, 0), (0, 0, 0, 0), (1000, 0, 0, 0)),
    ),
]


@pytest.mark.parametrize(("extra", "attr", "expected"), GOOD)
def test_good(extra: str, attr: str, expected: object) -> None:
    (job,) = parse(extra)
    assert getattr(job, attr) == expected


@pytest.mark.parametrize("pattern", PATTERNS)
def test_every_pattern(pattern: str) -> None:
    extra = f"pattern: {pattern}\n"
    if pattern == "matrix":
        extra += "matrix: [[0, 1, 1, 1], [1, 0, 1, 1], [1, 1, 0, 1], [1, 1, 1, 0]]\n"
    assert parse(extra)[0].pattern == pattern


# (extra YAML keys for the first job, the message after "t.yaml: jobs[0].")
BAD = [
    ("colour: red", "colour: unknown key"),
    ("duty: 1.5", "duty: expected a number in (0, 1], got 1.5"),
    ("duty: 0", "duty: expected a number in (0, 1], got 0"),
    ("duty: true", "duty: expected a number in (0, 1], got True"),
    ("rate_bytes_per_s: true", "rate_bytes_per_s: expected a number > 0, got True"),
    ("rate_bytes_per_s: -1", "rate_bytes_per_s: expected a number > 0, got -1"),
    ("rate_bytes_per_s: .nan", "rate_bytes_per_s: expected a number > 0, got nan"),
    ("rate_bytes_per_s: inf", "rate_bytes_per_s: expected a number > 0, got 'inf'"),
    ("rate_bytes_per_s: fast", "rate_bytes_per_s: expected a number > 0, got 'fast'"),
    ("rate_bytes_per_s: [1]", "rate_bytes_per_s: expected a number > 0, got [1]"),
    ("rate_bytes_per_s: null", "rate_bytes_per_s: expected a number > 0, got None"),
    ("period_s: 0", "period_s: expected a number > 0, got 0"),
    ("id: true", "id: expected a non-empty string, got True"),
    ("id: ''", "id: expected a non-empty string, got ''"),
    ("id: 1.5", "id: expected a non-empty string, got 1.5"),
    ("name: 7", "name: expected a string, got 7"),
    ("user: [a]", "user: expected a string, got ['a']"),
    ("pattern: mesh", "pattern: expected one of all-to-all, ring, halo, random-pairs, matrix"),
    ("nodes: ''", "nodes: expected at least one host, got ''"),
    ("nodes: []", "nodes: expected at least one host, got []"),
    ("nodes: 7", "nodes: expected a host list string or a list of them, got 7"),
    ("nodes: cn[0001-0004],cn0002", "nodes: host cn0002 is listed more than once"),
    ("nodes: [cn0001, 'cn[0001-0002]']", "nodes: host cn0001 is listed more than once"),
    ("nodes: cn[0001-", "nodes: bad host list 'cn[0001-': missing bracket"),
    ("nodes: cn1,,cn2", "nodes: bad host list 'cn1,,cn2': missing nodeset operand"),
    ("nodes: [cn1, 'cn[3-1]']", "nodes[1]: bad host list 'cn[3-1]': bad range"),
    ("nodes: '@compute'", "nodes: invalid host name '@compute' (node groups are not supported)"),
    ("start_time: yesterday", "start_time: expected seconds since epoch or an ISO 8601 time"),
    ("start_time: true", "start_time: expected seconds since epoch or an ISO 8601 time"),
    ("halo_dims: [2, 2]", "halo_dims: only allowed with pattern halo, not ring"),
    ("pattern: halo\nhalo_dims: [3, 2]", "halo_dims: product 6 != node count 4"),
    ("pattern: halo\nhalo_dims: [4, true]", "halo_dims: expected a list of integers > 0"),
    ("pattern: halo\nhalo_dims: []", "halo_dims: expected a list of integers > 0, got []"),
    ("pattern: halo\nhalo_dims: [4, 0]", "halo_dims: expected a list of integers > 0"),
    ("seed: 7", "seed: only allowed with pattern random-pairs, not ring"),
    ("pattern: random-pairs\nseed: -1", "seed: expected an integer >= 0, got -1"),
    ("pattern: random-pairs\nseed: 1.0", "seed: expected an integer >= 0, got 1.0"),
    ("pattern: random-pairs\nseed: false", "seed: expected an integer >= 0, got False"),
    ("pattern: matrix", "matrix: required with pattern matrix"),
    ("matrix: [[0]]", "matrix: only allowed with pattern matrix, not ring"),
    ("pattern: matrix\nmatrix: [[0, 1], [1, 0]]", "matrix: expected a 4 x 4 list of lists"),
    (
        "pattern: matrix\nmatrix: [[0, 1, 1, 1], [1, 0, 1], [1, 1, 0, 1], [1, 1, 1, 0]]",
        "matrix[1]: expected a list of 4 numbers, got [1, 0, 1]",
    ),
    (
        "pattern: matrix\nmatrix: [[0, 1, 1, 1], [1, 0, -1, 1], [1, 1, 0, 1], [1, 1, 1, 0]]",
        "matrix[1][2]: expected a number >= 0, got -1",
    ),
    (
        "pattern: matrix\nmatrix: [[0, 1, 1, 1], [1, 0, true, 1], [1, 1, 0, 1], [1, 1, 1, 0]]",
        "matrix[1][2]: expected a number >= 0, got True",
    ),
    (
        "pattern: matrix\nmatrix: [[0, 1, 1, 1], [1, 1, 1, 1], [1, 1, 0, 1], [1, 1, 1, 0]]",
        "matrix[1][1]: expected 0 on the diagonal, got 1",
    ),
    (
        "pattern: matrix\nmatrix: [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]",
        "matrix: all weights are 0; at least one node must send",
    ),
]


@pytest.mark.parametrize(("extra", "message"), BAD)
def test_bad(extra: str, message: str) -> None:
    assert parse_error(extra).startswith(f"t.yaml: jobs[0].{message}")


@pytest.mark.parametrize("key", ["id", "nodes", "pattern", "rate_bytes_per_s", "duty", "period_s"])
def test_required_key_missing(key: str) -> None:
    """The lab (traffic=True) needs every traffic key."""
    doc = yaml.safe_load(BASE)
    del doc["jobs"][0][key]
    with pytest.raises(JobsError, match=rf"^t\.yaml: jobs\[0\]\.{key}: required key is missing$"):
        parse_jobs(doc, "t.yaml", traffic=True)
    # The other keys are still checked.
    doc["jobs"][0]["name"] = 7
    with pytest.raises(JobsError) as info:
        parse_jobs(doc, "t.yaml", traffic=True)
    assert str(info.value).splitlines() == [
        f"t.yaml: jobs[0].{key}: required key is missing",
        "t.yaml: jobs[0].name: expected a string, got 7",
    ]


@pytest.mark.parametrize("key", ["id", "nodes"])
def test_agent_required_key_missing(key: str) -> None:
    doc = {"jobs": [{"id": "7", "nodes": "cn0001"}]}
    del doc["jobs"][0][key]
    with pytest.raises(JobsError, match=rf"^t\.yaml: jobs\[0\]\.{key}: required key is missing$"):
        parse_jobs(doc, "t.yaml")


def test_agent_job_without_traffic_keys() -> None:
    """A scheduler's view of a job: no pattern, no rates; the agent reads it as is."""
    (job,) = parse_jobs({"jobs": [{"id": 7, "nodes": "cn[0001-0002]", "name": "lammps"}]}, "t")
    assert (job.pattern, job.rate_bytes_per_s, job.has_rates) == ("", 0.0, False)
    assert job.to_dict() == {"id": "7", "name": "lammps", "nodes": "cn[0001-0002]"}
    assert parse_jobs({"jobs": [job.to_dict()]}, "t") == (job,)
    with pytest.raises(JobsError) as info:
        parse_jobs({"jobs": [job.to_dict()]}, "t", traffic=True)
    assert str(info.value).splitlines() == [
        f"t: jobs[0].{key}: required key is missing" for key in TRAFFIC_KEYS
    ]


def test_agent_job_with_a_pattern_only() -> None:
    """A declared pattern alone is the job's profile (attribution uses its shape)."""
    doc = {"jobs": [{"id": 7, "nodes": "cn[0001-0004]", "pattern": "halo", "halo_dims": [2, 2]}]}
    (job,) = parse_jobs(doc, "t")
    assert (job.pattern, job.halo_dims, job.has_rates) == ("halo", (2, 2), False)
    assert parse_jobs({"jobs": [job.to_dict()]}, "t") == (job,)


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ({"duty": 0.5}, "jobs[0].pattern: required with duty"),
        (
            {"pattern": "ring", "rate_bytes_per_s": 1e9},
            "jobs[0].duty: required with rate_bytes_per_s",
        ),
        ({"halo_dims": [2]}, "jobs[0].halo_dims: only allowed with pattern halo, not None"),
    ],
)
def test_agent_half_a_traffic_model(item: dict[str, object], message: str) -> None:
    doc = {"jobs": [{"id": "7", "nodes": "cn[0001-0002]", **item}]}
    with pytest.raises(JobsError, match=r"^t: " + re.escape(message)):
        parse_jobs(doc, "t")


# (whole document, expected message)
BAD_DOCUMENTS = [
    ("", "t.yaml: expected a mapping with the key 'jobs', got None"),
    ("[]", "t.yaml: expected a mapping with the key 'jobs', got []"),
    ("jobs:", "t.yaml: jobs: expected a list (or []), got None"),
    ("jobs: {}", "t.yaml: jobs: expected a list (or []), got {}"),
    ("jobs: []\nversion: 2", "t.yaml: version: unknown key (only 'jobs' is allowed)"),
    ("jobs: [7]", "t.yaml: jobs[0]: expected a mapping, got 7"),
    (
        BASE + BASE.removeprefix("jobs:\n"),
        "t.yaml: jobs[1].id: duplicate id '1001' (first used at t.yaml: jobs[0])",
    ),
]


@pytest.mark.parametrize(("text", "message"), BAD_DOCUMENTS)
def test_bad_document(text: str, message: str) -> None:
    with pytest.raises(JobsError) as info:
        parse_jobs(yaml.safe_load(text), "t.yaml")
    assert str(info.value) == message


def test_empty_job_list() -> None:
    assert parse_jobs({"jobs": []}, "t.yaml") == ()


def test_error_message_lists_every_problem_one_per_line() -> None:
    doc = yaml.safe_load(BASE)
    job = doc["jobs"][0]
    doc["jobs"] = [dict(job, id="1"), dict(job, id="2"), dict(job, id="3", duty=1.5, colour=1)]
    doc["jobs"][1]["period_s"] = -1
    with pytest.raises(JobsError) as info:
        parse_jobs(doc, "lab.yaml")
    assert str(info.value) == (
        "lab.yaml: jobs[1].period_s: expected a number > 0, got -1\n"
        "lab.yaml: jobs[2].duty: expected a number in (0, 1], got 1.5\n"
        "lab.yaml: jobs[2].colour: unknown key"
    )
    assert info.value.category == "jobs"


def test_every_problem_of_a_document_at_once() -> None:
    """Problems of the document, of several jobs and between jobs (a duplicate id among
    the valid ones), all in one error."""
    doc = yaml.safe_load(BASE)
    job = doc["jobs"][0]
    doc["version"] = 2
    doc["jobs"] = [
        job,
        dict(job, nodes=["cn[0001-", "cn[3-1]"], pattern="halo", halo_dims=[3]),
        7,
        dict(job, pattern="matrix", rate_bytes_per_s="fast"),
        dict(job),
    ]
    with pytest.raises(JobsError) as info:
        parse_jobs(doc, "t.yaml", traffic=True)
    assert str(info.value).splitlines() == [
        "t.yaml: jobs[1].nodes[0]: bad host list 'cn[0001-': missing bracket: \"cn[0001-\"",
        "t.yaml: jobs[1].nodes[1]: bad host list 'cn[3-1]': bad range:"
        ' "invalid values in range : "3-1""',
        "t.yaml: jobs[2]: expected a mapping, got 7",
        "t.yaml: jobs[3].rate_bytes_per_s: expected a number > 0, got 'fast'",
        "t.yaml: jobs[3].matrix: required with pattern matrix",
        "t.yaml: version: unknown key (only 'jobs' is allowed)",
        "t.yaml: jobs[4].id: duplicate id '1001' (first used at t.yaml: jobs[0])",
    ]
    assert type(info.value.__cause__).__name__ == "NodeSetParseError"  # the first cause


def test_exact_message_form() -> None:
    doc = yaml.safe_load(BASE)
    doc["jobs"] = [dict(doc["jobs"][0], id=str(i)) for i in range(3)]
    doc["jobs"][2]["duty"] = 1.5
    with pytest.raises(JobsError) as info:
        parse_jobs(doc, "lab.yaml")
    assert str(info.value) == "lab.yaml: jobs[2].duty: expected a number in (0, 1], got 1.5"


def test_host_list_error_chains_the_nodeset_error() -> None:
    with pytest.raises(JobsError) as info:
        parse("nodes: cn[0001-\nduty: 2")
    assert type(info.value.__cause__).__name__ == "NodeSetParseError"
    assert str(info.value).splitlines() == [
        "t.yaml: jobs[0].nodes: bad host list 'cn[0001-': missing bracket: \"cn[0001-\"",
        "t.yaml: jobs[0].duty: expected a number in (0, 1], got 2",
    ]


def test_expand_hosts_names_every_bad_host_list() -> None:
    assert expand_hosts("cn[0001-0002]", "squeue: job 1: nodes") == ("cn0001", "cn0002")
    with pytest.raises(JobsError) as info:
        expand_hosts(["cn[1-", "cn2", "cn[3-1]"], "squeue: job 1: nodes")
    assert str(info.value).splitlines() == [
        "squeue: job 1: nodes[0]: bad host list 'cn[1-': missing bracket: \"cn[1-\"",
        "squeue: job 1: nodes[2]: bad host list 'cn[3-1]': bad range:"
        ' "invalid values in range : "3-1""',
    ]


def test_to_dict_omits_defaults() -> None:
    (job,) = parse("")
    assert job.to_dict() == {
        "id": "1001",
        "nodes": "cn[0001-0004]",
        "pattern": "ring",
        "rate_bytes_per_s": 2e9,
        "duty": 0.5,
        "period_s": 0.05,
    }


ROUND_TRIP = [
    "",
    "name: ft\nuser: alice\nstart_time: 2026-11-21T10:00:00Z",
    "id: 7\nnodes: [cn0009, 'cn[0001-0003]', cn2]",
    "pattern: halo\nhalo_dims: [2, 2]",
    "pattern: random-pairs\nseed: 0",
    "pattern: matrix\nmatrix: [[0, 1, 0, 0], [0, 0, 2.5, 0], [0, 0, 0, 0], [1e-3, 0, 0, 0]]",
]


@pytest.mark.parametrize("extra", ROUND_TRIP)
def test_dump_round_trip(extra: str) -> None:
    jobs = parse(extra)
    assert parse_jobs(yaml.safe_load(dump_jobs(jobs)), "dump") == jobs


def test_dump_many_and_none() -> None:
    jobs = parse_jobs(yaml.safe_load(EXAMPLE.read_text()), "example")
    assert parse_jobs(yaml.safe_load(dump_jobs(jobs)), "dump") == jobs
    assert parse_jobs(yaml.safe_load(dump_jobs([])), "dump") == ()


def write(path: pathlib.Path, text: str) -> pathlib.Path:
    path.write_text(textwrap.dedent(text))
    return path


def test_load_file(tmp_path: pathlib.Path) -> None:
    jobs = load_jobs(write(tmp_path / "jobs.yaml", BASE))
    assert [job.id for job in jobs] == ["1001"]


def test_load_json(tmp_path: pathlib.Path) -> None:
    doc = yaml.safe_load(BASE)
    doc["jobs"][0]["id"] = 5
    jobs = load_jobs(write(tmp_path / "jobs.json", json.dumps(doc)))
    assert jobs == parse("id: 5")


def test_load_directory_in_name_order(tmp_path: pathlib.Path) -> None:
    write(tmp_path / "b.yml", BASE.replace('"1001"', '"2"'))
    write(tmp_path / "a.yaml", BASE.replace('"1001"', '"1"'))
    write(tmp_path / "c.json", '{"jobs": []}')
    write(tmp_path / ".d.yaml", "not: valid")
    write(tmp_path / "notes.txt", "not: valid")
    (tmp_path / "sub.yaml").mkdir()
    assert [job.id for job in load_jobs(tmp_path)] == ["1", "2"]


def test_load_empty_directory(tmp_path: pathlib.Path) -> None:
    assert load_jobs(tmp_path) == ()


def test_load_directory_reports_every_file_s_problems(tmp_path: pathlib.Path) -> None:
    write(tmp_path / "a.yaml", BASE.replace("duty: 0.5", "duty: 2"))
    write(tmp_path / "b.yaml", BASE.replace('"1001"', '"2"').replace("ring", "mesh"))
    write(tmp_path / "c.yaml", BASE.replace('"1001"', '"2"'))
    with pytest.raises(JobsError) as info:
        load_jobs(tmp_path)
    a_yaml, b_yaml = tmp_path / "a.yaml", tmp_path / "b.yaml"
    assert str(info.value).splitlines() == [
        f"{a_yaml}: jobs[0].duty: expected a number in (0, 1], got 2",
        f"{b_yaml}: jobs[0].pattern: expected one of {', '.join(PATTERNS)}, got 'mesh'",
    ]  # c.yaml's job 2 is valid, and the only one with that id that is


def test_load_directory_ids_unique_across_files(tmp_path: pathlib.Path) -> None:
    write(tmp_path / "a.yaml", BASE)
    write(tmp_path / "b.yaml", BASE.replace("duty: 0.5", "duty: 2"))
    with pytest.raises(JobsError) as info:
        load_jobs(tmp_path)
    b_yaml, a_yaml = tmp_path / "b.yaml", tmp_path / "a.yaml"
    assert str(info.value) == (f"{b_yaml}: jobs[0].duty: expected a number in (0, 1], got 2")
    write(tmp_path / "b.yaml", BASE)
    with pytest.raises(JobsError) as info:
        load_jobs(tmp_path)
    assert str(info.value) == (
        f"{b_yaml}: jobs[0].id: duplicate id '1001' (first used at {a_yaml}: jobs[0])"
    )


def test_load_missing_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(JobsError) as info:
        load_jobs(path)
    assert str(info.value).startswith(f"{path}: cannot read job file: No such file or directory")
    assert isinstance(info.value.__cause__, FileNotFoundError)


def test_load_not_utf8(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "bin.yaml"
    path.write_bytes(b"jobs: [\xff]\n")
    with pytest.raises(JobsError, match=r"bin\.yaml: cannot read job file: 'utf-8' codec"):
        load_jobs(path)


def test_load_yaml_syntax_error(tmp_path: pathlib.Path) -> None:
    path = write(tmp_path / "bad.yaml", "jobs:\n  - id: a: b\n")
    with pytest.raises(JobsError) as info:
        load_jobs(path)
    # One line: which file, then PyYAML's problem and position from the chained cause.
    assert str(info.value) == (
        f'{path}: invalid YAML: mapping values are not allowed here in "{path}", line 2, column 10'
    )
    assert isinstance(info.value.__cause__, yaml.YAMLError)


def test_load_json_syntax_error(tmp_path: pathlib.Path) -> None:
    path = write(tmp_path / "bad.json", '{"jobs": [}')
    with pytest.raises(JobsError, match=r"bad\.json: invalid JSON: Expecting value: line 1"):
        load_jobs(path)


def test_load_validation_error_names_file(tmp_path: pathlib.Path) -> None:
    path = write(tmp_path / "jobs.yaml", BASE.replace("ring", "mesh"))
    with pytest.raises(JobsError, match=rf"^{path}: jobs\[0\]\.pattern: expected one of"):
        load_jobs(path)


def test_check_hosts() -> None:
    jobs = parse_jobs(
        {
            "jobs": [
                dict(yaml.safe_load(BASE)["jobs"][0], id="a"),
                dict(yaml.safe_load(BASE)["jobs"][0], id="b", nodes="cn[0031-0034]"),
                dict(yaml.safe_load(BASE)["jobs"][0], id="c", nodes="cn0099"),
            ]
        },
        "t.yaml",
    )
    check_hosts(jobs[:1], LAB_HOSTS, "t.yaml")
    with pytest.raises(JobsError) as info:
        check_hosts(jobs, LAB_HOSTS, "t.yaml")
    assert str(info.value) == (
        "t.yaml: jobs[1] (id b): unknown host cn0033 (2 unknown hosts)\n"
        "t.yaml: jobs[2] (id c): unknown host cn0099"
    )
    with pytest.raises(JobsError) as info:
        check_hosts(jobs[2:], set(LAB_HOSTS), "t.yaml")
    assert str(info.value) == "t.yaml: jobs[0] (id c): unknown host cn0099"


def test_shared_nodes() -> None:
    job = yaml.safe_load(BASE)["jobs"][0]
    jobs = parse_jobs(
        {
            "jobs": [
                dict(job, id="a", nodes="cn[0001-0003]"),
                dict(job, id="b", nodes="cn[0003-0005]"),
                dict(job, id="c", nodes="cn[0002-0003]"),
                dict(job, id="d", nodes="cn0009"),
            ]
        },
        "t.yaml",
    )
    assert shared_nodes(jobs) == {"cn0002": ("a", "c"), "cn0003": ("a", "b", "c")}
    assert shared_nodes(jobs[:1]) == {}


def test_example_lab_jobs() -> None:
    jobs = load_jobs(EXAMPLE)
    check_hosts(jobs, LAB_HOSTS, str(EXAMPLE))
    assert len(jobs) >= 4
    assert len({job.pattern for job in jobs}) >= 4
    assert all(2e8 <= job.rate_bytes_per_s <= 6e9 for job in jobs)
    # Some jobs span several leaf switches (8 hosts per leaf: cn0001-cn0008 is leaf 1).
    leaves = [{(int(node[2:]) - 1) // 8 for node in job.nodes} for job in jobs]
    assert sum(len(leaf) > 1 for leaf in leaves) >= 2


def test_start_time_datetime_objects() -> None:
    doc = yaml.safe_load(BASE)
    doc["jobs"][0]["start_time"] = dt.datetime(2026, 11, 21, 10, 0, tzinfo=dt.UTC)
    assert parse_jobs(doc, "t")[0].start_time == 1795255200.0


def test_docs_example() -> None:
    text = (EXAMPLE.parents[1] / "docs" / "jobs.md").read_text()
    block = text.split("```yaml\n", 1)[1].split("```", 1)[0]
    jobs = parse_jobs(yaml.safe_load(block), "docs/jobs.md")
    assert [job.pattern for job in jobs] == ["all-to-all", "halo", "matrix"]
    check_hosts(jobs, LAB_HOSTS, "docs/jobs.md")
