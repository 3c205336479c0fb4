"""ibqos simulate: the per-job table, the JSON, and bad input."""

from __future__ import annotations

import inspect
import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from ibqos.cli import cli
from ibqos.sim import policies
from ibqos.sim.fluid import FluidSim, simulate_fluid
from ibqos.sim.workload import RunResult

ROOT = Path(__file__).resolve().parents[2]
MIX = """\
jobs:
  - {id: H, nodes: "cn[0001-0004,0009-0012,0017-0020,0025-0028]", pattern: all-to-all,
     rate_bytes_per_s: 10.0e9, duty: 0.6, period_s: 0.01}
  - {id: M, nodes: "cn[0005-0006,0013-0014,0021-0022,0029-0030]", pattern: halo,
     rate_bytes_per_s: 5.0e9, duty: 0.3, period_s: 0.01}
  - {id: L, nodes: "cn[0007-0008,0015-0016,0023-0024,0031-0032]", pattern: ring,
     rate_bytes_per_s: 2.0e9, duty: 0.2, period_s: 0.01}
"""


@pytest.fixture
def mix(tmp_path: Path) -> Path:
    path = tmp_path / "jobs.yaml"
    path.write_text(MIX)
    return path


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_json_has_the_documented_keys_and_consistent_figures(mix: Path) -> None:
    code, out, err = invoke(
        "simulate", "--xgft", "2;8,4;1,2", "--jobs", str(mix), "--policy", "one-vl",
        "--iterations", "3", "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert doc["policy"] == "one-vl" and doc["model"] == "fluid"
    assert [j["id"] for j in doc["jobs"]] == ["H", "M", "L"]
    for j in doc["jobs"]:
        assert j["contention_s"] == pytest.approx(j["t_sharing_s"] - j["t_alone_s"], abs=1e-9)
        assert j["t_alone_s"] >= 3 * 0.01 - 1e-12  # never faster than its declared period
    assert doc["total_contention_s"] == pytest.approx(sum(j["contention_s"] for j in doc["jobs"]))
    assert doc["total_contention_s"] > 0  # three jobs on one lane through 4:1 uplinks
    assert doc["efficiency"] == pytest.approx(1.0)


def test_all_policies_table_and_ibqos_beats_one_vl(mix: Path) -> None:
    code, out, err = invoke(
        "simulate", "--xgft", "2;8,4;1,2", "--jobs", str(mix), "--policy", "all",
        "--iterations", "3", "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    results = {r["policy"]: r for r in json.loads(out)["results"]}
    assert list(results) == ["one-vl", "equal", "bandwidth", "ibqos-fixed", "ibqos", "optimal"]
    assert {r["iterations"] for r in results.values()} == {3}
    assert results["ibqos-fixed"]["slowdown"] < results["one-vl"]["slowdown"]
    assert results["optimal"]["slowdown"] <= min(
        r["slowdown"] for p, r in results.items() if p != "ibqos"
    )
    # 3 iterations are less than a sweep (4 periods): the loop runs the first plan only
    assert err.startswith("ibqos: simulate: ibqos: 0 round(s) of tuning"), err
    assert "the run ended before its first round decided" in err
    code, table, _ = invoke(
        "simulate", "--xgft", "2;8,4;1,2", "--jobs", str(mix), "--policy", "equal",
        "--policy", "ibqos-fixed", "--iterations", "2",
    )  # fmt: skip
    assert code == 0
    assert "policy equal (fluid model, 8 packets of buffer per VL, 2 iterations)" in table
    assert "T_alone s" in table and "gain over one-vl by S" in table
    assert "\nibqos-fixed " in table  # the summary's names line up however long


def test_s_and_the_gain_lead_and_contention_is_beside_them(mix: Path) -> None:
    code, out, err = invoke(
        "simulate", "--xgft", "2;8,4;1,2", "--jobs", str(mix), "--policy", "one-vl",
        "--policy", "equal", "--iterations", "3", "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    base, equal = json.loads(out)["results"]
    for r in (base, equal):
        nodes = sum(j["nodes"] for j in r["jobs"])
        s = sum(j["nodes"] * j["t_sharing_s"] / j["t_alone_s"] for j in r["jobs"]) / nodes
        assert r["slowdown"] == pytest.approx(s)
        assert r["worst_slowdown"] == pytest.approx(max(j["slowdown"] for j in r["jobs"]))
        assert r["objective"] == "node-time" and r["bound"] is False
    assert base["slowdown"] > 1.0 and base["gain"] == 0.0
    assert equal["gain"] == pytest.approx(1 - (equal["slowdown"] - 1) / (base["slowdown"] - 1))
    code, out, _ = invoke(
        "simulate", "--xgft", "2;8,4;1,2", "--jobs", str(mix), "--policy", "one-vl",
        "--policy", "equal", "--iterations", "3", "--objective", "worst-job", "--format", "json",
    )  # fmt: skip
    base, equal = json.loads(out)["results"]
    assert equal["objective"] == "worst-job"
    assert equal["gain"] == pytest.approx(
        1 - (equal["worst_slowdown"] - 1) / (base["worst_slowdown"] - 1)
    )


def test_no_contention_is_no_gain_a_dash_not_inf() -> None:
    # the demo's jobs sit on the first two 16-host leaves of this tree: nothing contends
    args = ["simulate", "--xgft", "2;16,4;1,4", "--jobs", str(ROOT / "examples/demo-jobs.yaml")]
    args += ["--policy", "one-vl", "--policy", "equal", "--iterations", "2"]
    code, table, err = invoke(*args)
    assert code == 0, err
    assert "inf" not in table
    rows = [ln.split() for ln in table.splitlines() if ln.startswith(("one-vl ", "equal "))]
    assert [r[0] for r in rows] == ["one-vl", "equal"]
    for r in rows:  # S, worst, gain, contention, node-s, E
        assert r[1:4] == ["1.000", "1.000", "-"] and r[6] == "-", r
    code, out, _ = invoke(*args, "--format", "json")
    for r in json.loads(out)["results"]:
        assert r["gain"] is None and r["efficiency"] is None
        assert r["slowdown"] == pytest.approx(1.0, abs=1e-12)


def test_optimal_searches_by_the_objective_and_says_when_it_is_a_bound(mix: Path) -> None:
    def run(*extra: str) -> tuple[dict[str, Any], str]:
        code, out, err = invoke(
            "simulate", "--xgft", "2;8,4;1,2", "--jobs", str(mix), "--policy", "optimal",
            "--iterations", "2", "--workers", "1", "--format", "json", *extra,
        )  # fmt: skip
        assert code == 0, err
        return json.loads(out), err

    node, err = run()
    assert node["bound"] is False and "optimal: the optimum of" in err, err
    worst, _ = run("--objective", "worst-job")
    assert worst["worst_slowdown"] <= node["worst_slowdown"] + 1e-12
    assert node["slowdown"] <= worst["slowdown"] + 1e-12
    cut, err = run("--optimal-limit-s", "1e-9")
    assert cut["bound"] is True and "optimal: a bound: the best known of" in err, err
    assert cut["slowdown"] >= node["slowdown"] - 1e-12
    code, table, _ = invoke(
        "simulate", "--xgft", "2;8,4;1,2", "--jobs", str(mix), "--policy", "optimal",
        "--iterations", "2", "--optimal-limit-s", "1e-9",
    )  # fmt: skip
    assert code == 0 and "policy optimal (bound) (fluid model" in table


def test_ibqos_tunes_over_a_default_n_long_enough_for_its_rounds(mix: Path) -> None:
    # N is the same for every policy: 10, or with ibqos 4 rounds of tuning for the
    # longest period (23 sweeps a round by default; of 20 ms here: 184 iterations)
    def run(*args: str) -> tuple[dict[str, Any], str]:
        code, out, err = invoke(
            "simulate", "--xgft", "2;8,4;1,2", "--jobs", str(mix), "--buffers", "0",
            "--format", "json", *args,
        )  # fmt: skip
        assert code == 0, err
        doc = json.loads(out)
        return {r["policy"]: r for r in doc.get("results", [doc])}, err

    alone, err = run("--policy", "equal")
    assert alone["equal"]["iterations"] == 10 and err == ""
    both, err = run("--policy", "equal", "--policy", "ibqos", "--sweep-s", "0.02", "--no-predict")
    assert {r["iterations"] for r in both.values()} == {184}
    assert err.startswith("ibqos: simulate: ibqos: 1 round(s) of tuning"), err
    assert "sweeps of 20 ms); kept " in err and len(err.strip().splitlines()) == 1
    # without buffers only the grouping matters on this mix, and the round tries the
    # law's grouping at other weights: switching costs the jobs nothing, as it should
    assert both["ibqos"]["slowdown"] == pytest.approx(both["equal"]["slowdown"], rel=1e-9)
    code, _, err = invoke(
        "simulate", "--xgft", "2;8,4;1,2", "--jobs", str(mix), "--sweep-s", "0",
    )  # fmt: skip
    assert code == 2 and "--sweep-s" in err


def test_ibqos_tunes_in_the_fluid_model_only(mix: Path) -> None:
    code, out, err = invoke(
        "simulate", "--xgft", "2;8,4;1,2", "--jobs", str(mix), "--model", "packet",
        "--policy", "ibqos", "--iterations", "1",
    )  # fmt: skip
    assert code == 1 and out == ""
    assert err == (
        "ibqos: simulate: --policy ibqos: tunes in the fluid model only; use --model fluid,"
        " or --policy ibqos-fixed (the law without tuning)\n"
    )


def test_a_plan_file_is_simulated(mix: Path, tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {
                "jobs": [{"id": "H", "sl": 1}, {"id": "M", "sl": 2}, {"id": "L", "sl": 2}],
                "tables": {
                    "sl2vl": [0, 1, 2] + [0] * 13,
                    "vlarb_low": [[0, 32], [1, 32], [2, 128]],
                    "vlarb_high": [],
                    "high_limit": 0,
                },
                "lane_config": {"mtu": 2048},
            }
        )
    )
    code, out, err = invoke(
        "simulate", "--xgft", "2;8,4;1,2", "--jobs", str(mix), "--plan", str(plan),
        "--iterations", "2", "--format", "json",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    assert doc["policy"] == "plan plan.json"
    assert {j["id"]: j["vl"] for j in doc["jobs"]} == {"H": 1, "M": 2, "L": 2}


def test_all_on_the_readme_s_mix_runs_every_policy_that_can_and_says_why_not_optimal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """9 jobs on 8 lanes are too many for the exhaustive search: ``all`` runs the rest."""
    line = next(
        ln
        for ln in (ROOT / "README.md").read_text().splitlines()
        if ln.startswith("ibqos simulate")
    )
    monkeypatch.chdir(ROOT)  # the README's paths are relative to the checkout
    args = [*shlex.split(line)[1:], "--iterations", "2", "--format", "json"]
    assert args[args.index("--policy") + 1] == "all"
    code, out, err = invoke(*args)
    assert code == 0, err
    assert [r["policy"] for r in json.loads(out)["results"]] == [
        "one-vl", "equal", "bandwidth", "ibqos-fixed", "ibqos"
    ]  # fmt: skip
    notes = err.splitlines()
    assert notes[0] == (
        "ibqos: simulate: --policy all: left out optimal:"
        " 9 jobs on 8 lanes make more than 4000 setups to try"
    )
    assert len(notes) == 2 and notes[1].startswith("ibqos: simulate: ibqos: "), err
    # asked for by name, it is still refused
    optimal = [a if a != "all" else "optimal" for a in args]
    code, out, err = invoke(*optimal)
    assert code == 1 and out == "", out
    assert err == (
        "ibqos: simulate: --policy optimal: 9 jobs on 8 lanes make more than 4000 setups"
        " to try; use fewer jobs or lanes\n"
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--xgft", "2;8,4"], "--xgft '2;8,4': expected"),
        ([], "give --xgft SPEC, or --topology FILE with --lfts FILE"),
        (["--xgft", "2;8,4;1,2", "--plan", "/nonexistent.json"], "--plan /nonexistent.json"),
    ],
)
def test_bad_input_is_one_line(mix: Path, args: list[str], needle: str) -> None:
    code, out, err = invoke("simulate", "--jobs", str(mix), *args)
    assert code == 1, out
    lines = err.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], err


def test_unknown_hosts_are_named_one_job_per_line(mix: Path) -> None:
    code, out, err = invoke("simulate", "--jobs", str(mix), "--xgft", "2;2,2;1,1")
    assert code == 1, out
    lines = err.strip().splitlines()
    assert len(lines) == 3 and "jobs[0] (id H): unknown host cn0009" in lines[0], err


def test_a_job_without_rates_is_named(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    path.write_text('jobs:\n  - {id: X, nodes: "cn[0001-0002]"}\n')
    code, _, err = invoke("simulate", "--xgft", "2;2,2;1,1", "--jobs", str(path))
    assert code == 1
    assert "jobs[0].pattern: required key is missing" in err
    assert len(err.strip().splitlines()) == 4  # the four traffic keys, one line each


def test_senders_option(mix: Path) -> None:
    # Per job a job's hosts all wait for its slowest one, so no job comes out faster than
    # per host (the difference itself: tests/unit/sim/test_fluid.py), on the same model
    # (without buffers: per job the default has none, per host it has 8, and the buffered
    # model also counts the last packet's trip); auto is per host for 24 sending hosts.
    def times(senders: str, *more: str) -> dict[str, float]:
        code, out, err = invoke(
            "simulate", "--xgft", "2;8,4;1,2", "--jobs", str(mix), "--policy", "one-vl",
            "--iterations", "3", "--format", "json", "--senders", senders, *more,
        )  # fmt: skip
        assert code == 0, err
        return {j["id"]: j["t_sharing_s"] for j in json.loads(out)["jobs"]}

    assert times("auto") == times("host")
    host, job = times("host", "--buffers", "0"), times("job", "--buffers", "0")
    assert all(job[k] >= host[k] * (1 - 1e-9) for k in host)
    code, _, err = invoke("simulate", "--jobs", str(mix), "--senders", "rank")
    assert code == 2 and "--senders" in err


def test_buffers_option(mix: Path) -> None:
    # The fluid model has 8 packets of buffer per lane per input unless told otherwise,
    # where its senders are per host (24 sending hosts here), and none per job.  The
    # buffers move the mix's contention, but little: its 3-6 ms phases carry thousands of
    # buffers' worth.
    def totals(*extra: str) -> tuple[set[int], dict[str, float]]:
        code, out, err = invoke(
            "simulate", "--xgft", "2;8,4;1,2", "--jobs", str(mix), "--policy", "one-vl",
            "--policy", "equal", "--iterations", "3", "--format", "json", *extra,
        )  # fmt: skip
        assert code == 0, err
        results = json.loads(out)["results"]
        buffers = {r["buffer_packets"] for r in results}
        return buffers, {r["policy"]: r["total_contention_s"] for r in results}

    plain, none, eight = totals(), totals("--buffers", "0"), totals("--buffers", "8")
    assert plain == eight and plain[0] == {8} and none[0] == {0}
    assert none[1] != plain[1] and none[1] == pytest.approx(plain[1], rel=0.01)
    per_job, per_job_none = totals("--senders", "job"), totals("--senders", "job", "--buffers", "0")
    assert per_job == per_job_none and per_job[0] == {0}
    code, _, err = invoke("simulate", "--jobs", str(mix), "--buffers", "-1")
    assert code == 2 and "--buffers" in err


def test_every_fluid_run_of_a_command_has_the_same_buffers(
    mix: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The mix under every policy, optimal's search, ibqos's planning run and each job
    # alone: one value, the default's or --buffers', recorded where every run starts.
    seen: set[int] = set()
    init = FluidSim.__init__

    def spy(self: FluidSim, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        seen.add(self.buffer_packets)

    monkeypatch.setattr(FluidSim, "__init__", spy)
    # (ibqos's prediction is the agent's, with its own model: ibqos.sim.predict.Steady)
    for extra, want in (
        ((), {8}),
        (("--senders", "job"), {0}),
        (("--senders", "job", "--buffers", "8"), {8}),
    ):
        seen.clear()
        code, _, err = invoke(
            "simulate", "--xgft", "2;8,4;1,2", "--jobs", str(mix), "--policy", "all",
            "--iterations", "1", "--no-predict", *extra,
        )  # fmt: skip
        assert code == 0, err
        assert seen == want, extra


SMALL = """\
jobs:
  - {id: H, nodes: "cn[0001-0002,0005-0006]", pattern: all-to-all,
     rate_bytes_per_s: 10.0e9, duty: 0.6, period_s: 20.0e-6}
  - {id: M, nodes: "cn[0003,0007]", pattern: ring,
     rate_bytes_per_s: 5.0e9, duty: 0.3, period_s: 10.0e-6}
"""


def test_the_packet_model_s_buffers_are_not_the_fluid_model_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ibqos plans from a fluid run on one VL: under --model packet that run has the fluid
    # model's buffers (--fluid-buffers, default as under --model fluid: 8 with senders
    # per host, as here), whatever --buffers gives the packet model.  Recorded where the
    # fluid model is called, the real run going on.
    path = tmp_path / "small.yaml"
    path.write_text(SMALL)
    seen: list[int | None] = []
    params = inspect.signature(simulate_fluid)

    def spy(*args: Any, **kwargs: Any) -> RunResult:
        call = params.bind(*args, **kwargs)
        call.apply_defaults()
        seen.append(call.arguments["buffer_packets"])
        return simulate_fluid(*args, **kwargs)

    monkeypatch.setattr(policies, "simulate_fluid", spy)

    def run(*extra: str) -> None:
        code, _, err = invoke(
            "simulate", "--xgft", "2;4,2;1,2", "--jobs", str(path), "--policy", "ibqos-fixed",
            "--iterations", "2", *extra,
        )  # fmt: skip
        assert code == 0, err

    run("--model", "packet", "--buffers", "2")
    assert seen == [8]
    run("--model", "packet", "--buffers", "2", "--fluid-buffers", "4")
    assert seen == [8, 4]
    run("--model", "packet", "--buffers", "2", "--senders", "job")
    assert seen == [8, 4, 0]
    code, _, err = invoke(
        "simulate", "--jobs", str(path), "--xgft", "2;4,2;1,2", "--buffers", "2",
        "--fluid-buffers", "4",
    )  # fmt: skip
    assert code != 0 and "--fluid-buffers" in err and "--model fluid" in err
    code, _, err = invoke(
        "simulate", "--jobs", str(path), "--xgft", "2;4,2;1,2", "--model", "packet",
        "--policy", "equal", "--fluid-buffers", "4",
    )  # fmt: skip
    assert code != 0 and "--fluid-buffers: no policy asked plans with the fluid model" in err
    assert len(err.strip().splitlines()) == 1


def test_the_report_says_each_model_s_buffers(tmp_path: Path) -> None:
    # Under --model packet, the packet runs' buffers and, for the setups planned by the
    # fluid model, that model's.
    path = tmp_path / "small.yaml"
    path.write_text(SMALL)

    def results(*extra: str) -> dict[str, dict[str, Any]]:
        code, out, err = invoke(
            "simulate", "--xgft", "2;4,2;1,2", "--jobs", str(path), "--model", "packet",
            "--policy", "one-vl", "--policy", "ibqos-fixed", "--iterations", "1", "--format",
            "json", *extra,
        )  # fmt: skip
        assert code == 0, err
        return {r["policy"]: r for r in json.loads(out)["results"]}

    got = results()
    assert [got[p]["buffer_packets"] for p in got] == [8, 8]
    assert got["one-vl"]["plan_buffer_packets"] is None
    assert got["ibqos-fixed"]["plan_buffer_packets"] == 8
    got = results("--buffers", "2", "--senders", "job")
    assert [got[p]["buffer_packets"] for p in got] == [2, 2]
    assert got["ibqos-fixed"]["plan_buffer_packets"] == 0
    code, table, err = invoke(
        "simulate", "--xgft", "2;4,2;1,2", "--jobs", str(path), "--model", "packet",
        "--iterations", "1", "--fluid-buffers", "0", "--policy", "ibqos-fixed",
    )  # fmt: skip
    assert code == 0, err
    assert (
        "policy ibqos-fixed (packet model, 8 packets of buffer per VL; planned with the fluid"
        " model, no buffers, 1 iterations)"
    ) in table
