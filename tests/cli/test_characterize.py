"""``ibqos characterize``: tables, files and plots, profiles, the sharing report, and bad
input as one line naming it with exit status 1 and nothing written."""

from __future__ import annotations

import csv
import json
import struct
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from ibqos.agent.state import AgentState, load_state, save_state
from ibqos.classify.prior import FinishedJob
from ibqos.cli import cli
from ibqos.jobs.model import Job

DATA = Path(__file__).resolve().parents[1] / "data"
FABRIC = DATA / "lab-xgft-2_8.4_1.2" / "ibnetdiscover.txt"  # 4 leaves of 8 hosts, 2 spines

TRACE = """# ranks: 4
start_s,end_s,src,dst,bytes
0,1,0,1,2.0e9
0,1,1,2,2.0e9
0,1,2,3,2.0e9
0,1,3,0,2.0e9
"""


@pytest.fixture
def run(monkeypatch, tmp_path):
    monkeypatch.delenv("IBQOS_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)

    def invoke(*args: str):
        return CliRunner().invoke(cli, list(args))

    return invoke


def one_line_error(result, *needles: str) -> str:
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def png_colours(data: bytes) -> int:
    """Distinct non-grey colours of a PNG (grey: R = G = B, the axes, text and ground)."""
    import io

    from matplotlib.image import imread

    pixels = imread(io.BytesIO(data), format="png")[:, :, :3].reshape(-1, 3)
    coloured = pixels[(pixels.max(axis=1) - pixels.min(axis=1)) > 0.1]
    return len({tuple(p) for p in coloured.round(2).tolist()})


def test_a_trace_is_characterized_into_tables_plots_and_a_profile(run, tmp_path: Path) -> None:
    trace = tmp_path / "ring.csv"
    trace.write_text(TRACE)
    out, profiles = tmp_path / "out", tmp_path / "profiles"
    result = run(
        "characterize", "trace", str(trace), "--xgft", "2;2,4;1,2", "--out", str(out),
        "--save", "ringapp", "--profiles", str(profiles),
    )  # fmt: skip
    assert result.exit_code == 0, result.output + result.stderr
    # 4 ranks sending 2e9 B/s each in a ring on 4 leaves of 2 hosts: contiguous spans 2
    assert "trace ring.csv on 2;2,4;1,2" in result.stdout and "F1" in result.stdout
    assert sorted(p.name for p in out.iterdir()) == [
        "levels.csv", "levels.json", "levels.png", "spread.png",
    ]  # fmt: skip
    rows = list(csv.DictReader((out / "levels.csv").read_text().splitlines()))
    first = {r["level"]: r for r in rows if r["placement"] == "contiguous"}
    # 1->2 and 3->0 cross level 1: 4e9 of 2 leaves x 2 uplinks x 12.5e9
    assert float(first["1"]["bytes_per_s"]) == pytest.approx(4e9)
    assert float(first["1"]["util"]) == pytest.approx(0.08) and first["1"]["class"] == "low"
    assert first["2"]["util"] == ""  # the top level has no uplinks
    doc = json.loads((out / "levels.json").read_text())
    assert doc["fabric"] == "2;2,4;1,2" and doc["placements"][0]["levels"]["1"]["util"] == 0.08
    for plot in ("levels.png", "spread.png"):
        width, height = png_size((out / plot).read_bytes())
        assert width > 500 and height > 300
        # drawn, not blank: bars or lines in several colours besides white, black, greys
        assert png_colours((out / plot).read_bytes()) > 3, plot
    profile = yaml.safe_load((profiles / "ringapp-n4.yaml").read_text())
    assert profile["expected_class"] == "low" and profile["nodes"] == 4
    assert profile["model"]["pattern"] == "matrix" and profile["model"]["matrix"][0] == [0, 1, 0, 0]
    assert profile["model"]["rate_bytes_per_s"] == pytest.approx(2e9)
    listed = run("characterize", "profiles", "--profiles", str(profiles))
    assert listed.exit_code == 0 and "ringapp" in listed.stdout and "matrix" in listed.stdout


def test_svg_plots_and_json_output(run, tmp_path: Path) -> None:
    trace = tmp_path / "ring.csv"
    trace.write_text(TRACE)
    result = run(
        "characterize", "trace", str(trace), "--xgft", "2;2,4;1,2", "--placement", "F1",
        "--format", "json", "--out", str(tmp_path / "o"), "--plot-format", "svg",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [p["placement"] for p in doc["placements"]] == ["F1"]
    svg = (tmp_path / "o" / "spread.svg").read_text()
    assert svg.startswith("<?xml") and "<svg" in svg and len(svg) > 5000
    # drawn, not blank: the series' colour (matplotlib's first, #1f77b4) on real shapes.
    # spread: the L1 line on each of the two panels and in each legend
    assert svg.count("stroke: #1f77b4") >= 4 and svg.count("<!-- L1 -->") == 2
    # levels: F1's bars at L0 and L1 on each panel, and its legend patch
    bars = (tmp_path / "o" / "levels.svg").read_text()
    assert bars.count("fill: #1f77b4") >= 5 and "<!-- F1 -->" in bars


def test_lab_jobs_on_their_own_placement(run, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(
        "jobs:\n  - {id: '1', name: ft, nodes: 'cn[0001-0002,0009-0010]', pattern: all-to-all,\n"
        "     rate_bytes_per_s: 1.0e10, duty: 1, period_s: 1}\n"
    )
    result = run(
        "characterize", "jobs", "--jobs", str(jobs), "--topology", str(FABRIC), "--format", "json",
        "--save", "--profiles", str(tmp_path / "p"),
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    own = doc["placements"][0]
    # the same figures as the planner's prior test: 2.67e10 of 5e10
    assert own["placement"] == "job" and own["class"] == "high"
    assert own["intensity"] == pytest.approx(4 * 1e10 * 2 / 3 / 5e10, rel=1e-5)
    saved = yaml.safe_load((tmp_path / "p" / "ft.yaml").read_text())
    # the job's phases too: tuning's prediction gives a job of this profile them
    assert saved["model"] == {
        "pattern": "all-to-all",
        "rate_bytes_per_s": 1e10,
        "duty": 1.0,
        "period_s": 1.0,
    }


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("start_s,end_s,src,dst,bytes\n0,1,0,1,x\n", "bad.csv:2: bytes: expected a number"),
        ("nonsense\n", "bad.csv:1: expected the header"),
    ],
)
def test_a_malformed_trace_is_one_line_and_writes_nothing(run, tmp_path, text, needle) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text(text)
    out = tmp_path / "out"
    result = run(
        "characterize", "trace", str(bad), "--xgft", "2;2,4;1,2", "--out", str(out),
        "--save", "x", "--profiles", str(tmp_path / "p"),
    )  # fmt: skip
    assert one_line_error(result, needle).startswith("ibqos: trace: ")
    assert not out.exists() and not (tmp_path / "p").exists()


def test_a_bad_profile_directory_is_one_line(run, tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    bad = "version: 1\napplication: x\nexpected_class: big\nconfidence: 0.5\n"
    (tmp_path / "p" / "x.yaml").write_text(bad)
    result = run("characterize", "profiles", "--profiles", str(tmp_path / "p"))
    one_line_error(result, "ibqos: profile: ", "x.yaml: expected_class: expected one of")


def test_every_problem_of_a_bad_profile_is_a_line(run, tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    path = tmp_path / "p" / "x.yaml"
    path.write_text("version: 1\napplication: x\nexpected_class: big\n")
    result = run("characterize", "profiles", "--profiles", str(tmp_path / "p"))
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.splitlines() == [
        f"ibqos: profile: {path}: expected_class: expected one of low, moderate, high, got 'big'",
        f"{path}: confidence: expected a number in [0, 1], got None",
    ]


def test_a_placement_that_does_not_fit(run, tmp_path: Path) -> None:
    trace = tmp_path / "ring.csv"
    trace.write_text(TRACE)
    result = run("characterize", "trace", str(trace), "--xgft", "2;2,4;1,2", "--placement", "F3")
    one_line_error(result, "ibqos: topology: placement F3")


SHARED = [
    Job("A", ("cn0001", "cn0002", "cn0009"), name="a"),  # leaves 1, 2
    Job("B", ("cn0003", "cn0010", "cn0017"), name="b"),  # leaves 1, 2, 3
    Job("C", ("cn0025", "cn0026", "cn0027", "cn0028"), name="c"),  # leaf 4 alone
]


def test_the_sharing_report(run, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(yaml.safe_dump({"jobs": [j.to_dict() for j in SHARED]}))
    result = run(
        "characterize",
        "sharing",
        "--topology",
        str(FABRIC),
        "--jobs",
        str(jobs),
        "--format",
        "json",
    )
    assert result.exit_code == 0, result.stderr
    doc = {j["id"]: j for j in json.loads(result.stdout)["jobs"]}
    assert doc["A"]["subtrees"] == {"1": 2} and doc["A"]["sharing_jobs"] == {"1": 1}
    assert doc["B"]["subtrees"] == {"1": 3} and doc["B"]["sharing_jobs"] == {"1": 1}
    assert doc["C"]["sharing_jobs"] == {"1": 0} and doc["C"]["fragmentation"] == 1.0
    assert doc["B"]["fragmentation"] == 3.0  # 3 nodes fit one 8-host leaf; it spans 3
    table = run("characterize", "sharing", "--topology", str(FABRIC), "--jobs", str(jobs))
    assert table.exit_code == 0 and "L1 subtrees/sharing" in table.stdout
    assert any(line.split()[:4] == ["B", "b", "3", "3/1"] for line in table.stdout.splitlines())


def test_learn_counts_each_finished_job_once(run, tmp_path: Path) -> None:
    state_dir, profiles = tmp_path / "state", tmp_path / "p"
    job7 = FinishedJob("7", "ft", "alice", 4, "high", 0.5, 1000.0)
    save_state(state_dir, AgentState(history={"ft": "high"}, finished={"ft": job7}, updated_s=1))

    def learned() -> list[tuple[str, float]]:
        result = run(
            "characterize", "learn", "--state", str(state_dir), "--profiles", str(profiles)
        )
        assert result.exit_code == 0, result.stderr
        doc = yaml.safe_load((profiles / "ft.yaml").read_text())
        return [(o["source"], o["time_s"]) for o in doc["observations"]]

    assert learned() == [("job 7", 1000.0)]
    # the agent saves its state every cycle: the same job must not count again
    save_state(state_dir, AgentState(history={"ft": "high"}, finished={"ft": job7}, updated_s=2))
    assert learned() == [("job 7", 1000.0)]
    job8 = FinishedJob("8", "ft", "alice", 4, "low", 0.01, 2000.0)
    save_state(state_dir, AgentState(history={"ft": "low"}, finished={"ft": job8}, updated_s=3))
    assert learned() == [("job 7", 1000.0), ("job 8", 2000.0)]
    # the state file keeps the record whole
    assert load_state(state_dir).finished == {"ft": job8}


def test_ranks_are_not_placed_on_the_subnet_manager_host(run, tmp_path: Path) -> None:
    # the recorded lab fabric has opensm01 on leaf 1 beside cn0001-cn0008
    trace = tmp_path / "ring9.csv"
    trace.write_text(
        "# ranks: 9\nstart_s,end_s,src,dst,bytes\n"
        + "".join(f"0,1,{i},{(i + 1) % 9},1e9\n" for i in range(9))
    )
    result = run(
        "characterize", "trace", str(trace), "--topology", str(FABRIC), "--format", "json",
        "--placement", "contiguous", "--placement", "F8",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [p["hosts"] for p in doc["placements"]] == ["cn[0001-0009]", "cn[0001-0009]"]
    # 8 hosts a leaf: the spread starts with F8, 9 nodes on 2 leaves
    assert (doc["spread"][0]["placement"], doc["spread"][0]["leaves"]) == ("F8", 2)


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (("--save", "bad name"), "--save 'bad name': expected letters"),
        (("--save", "ok", "--user", "a/b"), "--user 'a/b': expected letters"),
    ],
)
def test_a_bad_profile_name_prints_and_writes_nothing(run, tmp_path, extra, needle) -> None:
    trace = tmp_path / "ring.csv"
    trace.write_text(TRACE)
    out, profiles = tmp_path / "out", tmp_path / "p"
    result = run(
        "characterize", "trace", str(trace), "--xgft", "2;2,4;1,2", "--out", str(out),
        "--profiles", str(profiles), *extra,
    )  # fmt: skip
    one_line_error(result, "ibqos: profile: ", needle)
    assert result.stdout == "" and not out.exists() and not profiles.exists()


def test_a_job_name_that_cannot_be_a_profile_writes_nothing(run, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs.yaml"
    jobs.write_text(
        "jobs:\n  - {id: '1', name: 'my app', nodes: 'cn[0001-0002]', pattern: ring,\n"
        "     rate_bytes_per_s: 1.0e9, duty: 1, period_s: 1}\n"
    )
    out, profiles = tmp_path / "out", tmp_path / "p"
    result = run(
        "characterize", "jobs", "--jobs", str(jobs), "--topology", str(FABRIC), "--save",
        "--out", str(out), "--profiles", str(profiles),
    )  # fmt: skip
    one_line_error(result, "jobs.yaml: job 1: --save: name 'my app'")
    assert result.stdout == "" and not out.exists() and not profiles.exists()
