"""Tests for ibqos.jobs.reader: a job file or directory read again only where it changed,
and a directory's bad jobs left out one by one."""

from __future__ import annotations

import os
import pathlib

import pytest
import yaml

import ibqos.jobs.schema as schema
from ibqos.errors import JobsError
from ibqos.jobs.jobfile import load_jobs, read_version
from ibqos.jobs.reader import JobReader


def entry(i: int, nodes: str | None = None) -> dict[str, object]:
    return {"id": str(i), "nodes": nodes or f"cn[{2 * i:04d}-{2 * i + 1:04d}]", "pattern": "ring"}


def write(path: pathlib.Path, entries: list[dict[str, object]], bump: int = 0) -> None:
    path.write_text(yaml.safe_dump({"jobs": entries}, sort_keys=False))
    if bump:  # a new mtime even on a coarse clock
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + bump * 10**9))


@pytest.fixture
def validations(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every entry validated, as it is validated."""
    seen: list[object] = []
    validate = schema.JobEntry.model_validate

    def counting(item: object, **kwargs: object) -> schema.JobEntry:
        seen.append(item)
        return validate(item, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(schema.JobEntry, "model_validate", counting)
    return seen


def test_a_changed_file_validates_only_its_new_entries(
    tmp_path: pathlib.Path, validations: list[object]
) -> None:
    path = tmp_path / "jobs.yaml"
    entries = [entry(i) for i in range(50)]
    write(path, entries)
    reader = JobReader(path)
    first = reader.read().jobs
    assert len(first) == 50 and len(validations) == 50
    validations.clear()
    entries[7] = entry(1000)  # one job ends, another starts
    write(path, entries, bump=1)
    again = reader.read().jobs
    assert validations == [entry(1000)]
    assert again == load_jobs(path)
    # the jobs that did not change are the same objects (the job mapper keeps them)
    assert all(a is b for k, (a, b) in enumerate(zip(first, again, strict=True)) if k != 7)


def test_a_file_with_a_problem_raises_as_load_jobs(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "jobs.yaml"
    write(path, [entry(1), entry(2)])
    reader = JobReader(path)
    reader.read()
    write(path, [entry(1), entry(2, "cn[0001-"), entry(1)], bump=1)
    with pytest.raises(JobsError) as got:
        reader.read()
    with pytest.raises(JobsError) as want:
        load_jobs(path)
    assert str(got.value) == str(want.value)
    assert "jobs[1].nodes: bad host list" in str(got.value)
    assert "jobs[2].id: duplicate id '1'" in str(got.value)


def test_read_version_reports_and_counts_the_jobs_left_out(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "jobs.yaml"
    write(path, [entry(1), entry(2, "@group"), entry(3), entry(1, "cn0100")])
    version = read_version(path)
    assert [job.id for _, job in version.jobs] == ["1", "3"]
    assert version.rejected == 2
    assert len(version.problems) == 2 and "jobs[1].nodes: invalid host name" in version.problems[0]


def test_one_bad_host_in_a_directory_leaves_out_only_its_job(tmp_path: pathlib.Path) -> None:
    for i in (1, 2, 3):
        write(tmp_path / f"{i}.yaml", [entry(i)])
    reader = JobReader(tmp_path)
    assert [j.id for j in reader.read().jobs] == ["1", "2", "3"]
    write(tmp_path / "4.yaml", [entry(4, "cn[0001-")])  # a new job with a bad host list
    write(tmp_path / "5.yaml", [entry(5)])
    reading = reader.read()
    assert [j.id for j in reading.jobs] == ["1", "2", "3", "5"]
    assert reading.rejected == 1 and reading.files == 5
    (problem,) = reading.problems
    assert problem.startswith(f"{tmp_path / '4.yaml'}: jobs[0].nodes: bad host list")
    assert problem.endswith("(job left out)")
    (tmp_path / "4.yaml").unlink()  # its epilog removes it
    reading = reader.read()
    assert reading.rejected == 0 and reading.problems == ()


def test_a_directory_file_that_does_not_parse_keeps_its_previous_jobs(
    tmp_path: pathlib.Path,
) -> None:
    write(tmp_path / "1.yaml", [entry(1)])
    write(tmp_path / "2.yaml", [entry(2)])
    reader = JobReader(tmp_path)
    reader.read()
    (tmp_path / "2.yaml").write_text("jobs: [\n  {id: 2")  # half written
    reading = reader.read()
    assert [j.id for j in reading.jobs] == ["1", "2"] and reading.rejected == 0
    (problem,) = reading.problems
    assert "2.yaml: invalid YAML" in problem and "(keeping its previous 1 jobs)" in problem
    (tmp_path / "3.yaml").write_text("jobs: [")  # a new file that never parsed: no jobs
    reading = reader.read()
    assert [j.id for j in reading.jobs] == ["1", "2"] and reading.rejected == 1
    assert reading.problems[-1].endswith("(no jobs from it)")


def test_a_directory_that_cannot_be_listed_raises(tmp_path: pathlib.Path) -> None:
    reader = JobReader(tmp_path / "jobs.d")
    (tmp_path / "jobs.d").mkdir()
    assert reader.read().jobs == ()
    (tmp_path / "jobs.d").rmdir()
    with pytest.raises(JobsError, match="cannot read job file"):
        reader.read()  # gone: read as a file that is not there


VARIANTS = {
    "indented": 'jobs:\n  - id: "1"\n    nodes: cn0001\n  - id: "2"\n    nodes: cn0002\n',
    "at column 0": 'jobs:\n- id: "1"\n  nodes: cn0001\n- id: "2"\n  nodes: cn0002\n',
    "comments, blanks, a document marker": (
        '# jobs\n---\njobs:   # all of them\n\n  # the first\n  - id: "1"\n    nodes: cn0001\n'
        '\n  - id: "2"   # the second\n    nodes: [cn0002]\n# the end\n'
    ),
    "block scalars and nested lists": (
        'jobs:\n  -\n    id: "1"\n    nodes: cn[0001-0002]\n    pattern: matrix\n'
        "    matrix:\n      - [0, 1]\n      - [1, 0]\n"
        '  - id: "2"\n    nodes: cn0003\n    name: >\n      a name\n      - on two lines\n'
    ),
    "anchors (the whole-file parser)": (
        'jobs:\n  - id: "1"\n    nodes: &n cn0001\n  - id: "2"\n    nodes: cn0002\n'
    ),
    "another key after jobs (the whole-file parser)": (
        'jobs:\n  - id: "1"\n    nodes: cn0001\nmore: 1\n'
    ),
}


@pytest.mark.parametrize("text", list(VARIANTS.values()), ids=list(VARIANTS))
def test_a_yaml_file_read_item_by_item_reads_as_a_whole(tmp_path: pathlib.Path, text: str) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text(text)
    reader = JobReader(path)

    def both() -> tuple[object, object]:
        try:
            got: object = reader.read().jobs
        except JobsError as err:
            got = str(err)
        try:
            want: object = load_jobs(path)
        except JobsError as err:
            want = str(err)
        return got, want

    got, want = both()
    assert got == want
    # the second job's hosts change, then a third job comes
    path.write_text(text.replace("cn0002", "cn0009").replace("cn0003", "cn0008"))
    os.utime(path, ns=(1, 10**9))
    got, want = both()
    assert got == want
    path.write_text(path.read_text() + '  - {id: "3", nodes: cn0100}\n')
    os.utime(path, ns=(1, 2 * 10**9))
    got, want = both()
    assert got == want


def test_a_changed_yaml_file_parses_only_its_new_items(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "jobs.yaml"
    entries = [entry(i) for i in range(30)]
    write(path, entries)
    reader = JobReader(path)
    reader.read()
    parsed: list[str] = []
    load = yaml.load

    def counting(text: str, **kwargs: object) -> object:
        parsed.append(text)
        return load(text, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr("ibqos.jobs.chunks.yaml.load", counting)
    entries[3] = entry(1003)
    write(path, entries, bump=1)
    assert [j.id for j in reader.read().jobs][3] == "1003"
    assert len(parsed) == 1 and "1003" in parsed[0]


def test_a_directory_file_being_written_keeps_its_previous_jobs(tmp_path: pathlib.Path) -> None:
    """Truncated to nothing (a writer that does not rename), a file is no job file at all
    for a moment: its job is kept, not ended."""
    write(tmp_path / "1.yaml", [entry(1)])
    write(tmp_path / "2.yaml", [entry(2)])
    reader = JobReader(tmp_path)
    reader.read()
    (tmp_path / "2.yaml").write_text("")
    reading = reader.read()
    assert [j.id for j in reading.jobs] == ["1", "2"] and reading.rejected == 0
    (problem,) = reading.problems
    assert "2.yaml: expected a mapping with the key 'jobs', got None" in problem
    assert problem.endswith("(keeping its previous 1 jobs)")
    write(tmp_path / "2.yaml", [entry(3)], bump=1)
    assert [j.id for j in reader.read().jobs] == ["1", "3"]
