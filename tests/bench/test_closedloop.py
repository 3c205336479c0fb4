"""bench.closedloop.bench's command line: named mixes, an admin's own job file on any
fabric, and the errors; no lab is brought up."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bench.closedloop import bench, mixes
from ibqos.errors import IbqosError, JobsError, TopologyError
from ibqos.jobs.hosts import expand_hosts

FABRIC = Path(__file__).parents[1] / "data" / "fabric" / "sharp-2level.ibnetdiscover.txt"


def _plan(*argv: str) -> tuple[list[mixes.Mix], int, str]:
    found, topo, label = bench.plan(bench.parse(list(argv)))
    return found, len(topo.cas()), label


def _jobs(tmp_path: Path, nodes: str, **extra: object) -> Path:
    job = {"id": "7", "nodes": nodes, "pattern": "ring", "rate_bytes_per_s": 4e9}
    job |= {"duty": 0.5, "period_s": 0.05, **extra}
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump({"jobs": [job]}))
    return path


def test_the_named_mixes_run_on_the_lab_fabric_by_default() -> None:
    found, cas, label = _plan()
    assert [m.name for m in found] == ["two", "three", "four", "six-on-3", "apps"]
    assert label == f"XGFT {mixes.XGFT}" and cas >= 32
    found, _, _ = _plan("--mix", "apps", "--mix", "two")
    assert [m.name for m in found] == ["two", "apps"]


def test_the_apps_mix_is_four_matrices_on_every_leaf() -> None:
    (mix,) = _plan("--mix", "apps")[0]
    assert [j["pattern"] for j in mix.jobs] == ["matrix"] * 4
    for job in mix.jobs:
        hosts = expand_hosts(job["nodes"], "test")
        assert len(hosts) == 8 and len(job["matrix"]) == 8
        assert {(int(h[2:]) - 1) // 8 for h in hosts} == {0, 1, 2, 3}  # every leaf


def test_an_own_job_file_on_an_xgft(tmp_path: Path) -> None:
    path = _jobs(tmp_path, "cn[0001-0004]")
    found, cas, label = _plan("--jobs", str(path), "--xgft", "2;4,2;1,2")
    assert label == "XGFT 2;4,2;1,2" and cas == 9  # 8 hosts and OpenSM's
    (mix,) = found
    assert mix.name == "mine" and mix.jobs[0]["id"] == "7" and mix.jobs[0]["pattern"] == "ring"


def test_an_own_job_file_on_a_topology_file(tmp_path: Path) -> None:
    topo, _ = mixes.fabric(None, FABRIC)
    host = sorted(mixes.hosts(topo))[0]
    found, _, label = _plan("--jobs", str(_jobs(tmp_path, host)), "--topology", str(FABRIC))
    assert label == f"topology {FABRIC.name}" and found[0].jobs[0]["nodes"] == host


def test_jobs_not_on_the_fabric_or_without_traffic_are_refused(tmp_path: Path) -> None:
    with pytest.raises(JobsError, match="unknown host cn0009"):
        _plan("--jobs", str(_jobs(tmp_path, "cn0009")), "--xgft", "2;4,2;1,2")
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump({"jobs": [{"id": "1", "nodes": "cn0001"}]}))
    with pytest.raises(JobsError):
        _plan("--jobs", str(bare))
    with pytest.raises(IbqosError, match="mix two: hosts not on XGFT 2;4,2;1,2"):
        _plan("--mix", "two", "--xgft", "2;4,2;1,2")
    with pytest.raises(TopologyError):
        _plan("--xgft", "2;4,x;1,2")
    with pytest.raises(TopologyError, match="cannot read"):
        _plan("--topology", str(tmp_path / "none.txt"))


@pytest.mark.parametrize(
    "argv",
    [
        ["--jobs", "x.yaml", "--mix", "two"],
        ["--xgft", "2;4,2;1,2", "--topology", "f.txt"],
        ["--from-json", "r.json", "--jobs", "x.yaml"],
        ["--window", "0"],
        ["--mix", "nine"],
    ],
)
def test_usage_errors_exit_2(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        bench.parse(argv)
    assert stop.value.code == 2 and "error:" in capsys.readouterr().err


def test_main_says_what_is_wrong_before_any_lab(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _jobs(tmp_path, "cn0099")
    assert bench.main(["--jobs", str(path)]) == 2
    assert "unknown host cn0099" in capsys.readouterr().err
