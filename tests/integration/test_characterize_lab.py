"""Profiles on a real lab: ``ibqos run`` (real OpenSM, ibsim, PMA counters) gives a job
whose application has a profile the profiled class at its start, before any counter of
it is read; learns the job's measured class when it ends; and its history, scraped by a
real Prometheus, is read back by ``ibqos characterize history``.

With ``IBQOS_RECORD_PROMETHEUS=DIR`` the range-query replies are also saved there (that is
how ``tests/data/prometheus/`` was recorded)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from ibqos.characterize import history
from ibqos.classify.profiles import Profile, ProfileStore
from ibqos.lab.prometheus import PrometheusServer
from tests.integration.labcheck import QUIET
from tests.support.agentrun import agent_config, drive, start_agent, state, write_jobs

# a light job (1e8 B/s a node: low) and a job of an application profiled as high
JOB_A = {"id": "A", "name": "ft", "nodes": "cn[0001-0002,0005-0006]", "pattern": "all-to-all"}
JOB_A |= {"rate_bytes_per_s": 1.0e8, "duty": 1.0, "period_s": 0.1}
JOB_C = {"id": "C", "name": "late", "nodes": "cn[0003,0007]", "pattern": "ring"}
JOB_C |= {"rate_bytes_per_s": 1.0e8, "duty": 1.0, "period_s": 0.1}


def plan_job(tmp_path: Path, job_id: str) -> dict | None:
    plan = state(tmp_path).get("plan") or {}
    return next((j for j in plan.get("jobs", []) if j["id"] == job_id), None)


def test_a_profiled_job_starts_in_its_class_and_teaches_its_profile(make_lab, tmp_path):
    profiles = tmp_path / "profiles"
    ProfileStore(profiles).save(Profile("late", "high", 0.9))
    lab = make_lab("2;4,2;1,2", opensm_options=QUIET)
    write_jobs(lab, JOB_A)
    config = agent_config(
        lab,
        tmp_path,
        profiles={"dir": str(profiles), "learn": True},
        lanes={"default_class": "moderate", "min_hold_s": 0.0, "min_interval_s": 0.0},
    )
    proc = start_agent(lab, config, tmp_path)
    try:
        drive(lab, lambda: (plan_job(tmp_path, "A") or {}).get("measured_class") == "low", 60, proc)
        url = proc.metrics_url()
        assert url is not None
        target = url.removeprefix("http://").removesuffix("/metrics")
        prom_dir = tmp_path / "prom"
        prom_dir.mkdir()
        with PrometheusServer(prom_dir, [target], scrape_interval=1.0) as prom:
            started = time.time()
            # the profiled job starts: the agent plans it at once, from its job file,
            # before a sweep has read a counter of it
            write_jobs(lab, JOB_A, JOB_C)
            drive(lab, lambda: plan_job(tmp_path, "C") is not None, 30, proc)
            first = plan_job(tmp_path, "C")
            assert first is not None
            assert first["expected_class"] == "high"
            assert first["prior"] == "late.yaml: high (profile class, confidence 0.90)"
            assert first["class"] == "high" and first["measured_class"] is None
            # then it is measured: a light job, whatever its profile said
            drive(
                lab,
                lambda: (plan_job(tmp_path, "C") or {}).get("measured_class") == "low",
                60,
                proc,
            )
            # A's recorded history, read back from Prometheus: 10 s of scrapes at least
            drive(lab, lambda: time.time() - started > 10, 30, proc)
            end = time.time()
            series = {
                kind: prom.query_range(history.job_query(metric, "A"), started, end, 1.0)
                for kind, metric in history.JOB_METRICS.items()
            }
            record = os.environ.get("IBQOS_RECORD_PROMETHEUS")
            if record:
                save_replies(Path(record), prom.url, started, end)
            parsed = {
                kind: history.parse_query_range(
                    {"status": "success", "data": {"resultType": "matrix", "result": result}}, kind
                )
                for kind, result in series.items()
            }
            hist = history.job_history("A", parsed)
            assert hist.cls == "low" and hist.level == 1
            assert plan_job(tmp_path, "A")["class"] == hist.cls  # type: ignore[index]
            level1 = next(lv for lv in hist.levels if lv.level == 1)
            assert level1.samples >= 5 and level1.bytes_per_s > 0
            argv = ["characterize", "history", "--prometheus", prom.url, "--job", "A"]
            argv += ["--start", f"{started:.3f}", "--end", f"{end:.3f}", "--step", "1"]
            argv += ["--format", "json", "--save", "ft", "--profiles", str(profiles)]
            cli = subprocess.run(
                [sys.executable, "-m", "ibqos", *argv],
                capture_output=True,
                text=True,
                check=False,
                timeout=60,
            )
            assert cli.returncode == 0, cli.stderr
            doc = json.loads(cli.stdout)
            assert doc["class"] == "low" and doc["intensity"] == hist.intensity
            assert ProfileStore(profiles).get("ft").expected_class == "low"  # type: ignore[union-attr]

        # the job ends: its measured class goes into its profile (profiles.learn)
        write_jobs(lab, JOB_A)

        def learned() -> bool:
            p = ProfileStore(profiles).get("late")
            return p is not None and len(p.observations) == 1

        drive(lab, learned, 30, proc)
        doc = yaml.safe_load((profiles / "late.yaml").read_text())
        assert doc["observations"][0]["source"] == "job C"
        assert doc["observations"][0]["class"] == "low"
        assert (doc["expected_class"], doc["confidence"]) == ("low", 0.5)
    finally:
        assert proc.stop() == 0
    assert "ERROR" not in (tmp_path / "agent.log").read_text()


def save_replies(directory: Path, url: str, start: float, end: float) -> None:
    """The raw query_range replies of job A's series, as Prometheus sent them."""
    directory.mkdir(parents=True, exist_ok=True)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    for kind, metric in history.JOB_METRICS.items():
        query = urllib.parse.urlencode(
            {"query": history.job_query(metric, "A"), "start": f"{start:.3f}",
             "end": f"{end:.3f}", "step": "1"}
        )  # fmt: skip
        with opener.open(f"{url}/api/v1/query_range?{query}", timeout=30) as resp:
            (directory / f"query_range_{kind}.json").write_bytes(resp.read())
