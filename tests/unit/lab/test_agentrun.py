"""The agent-on-a-lab harness without a lab: job files, configs, the metrics URL in a log,
the state file, and a process started, scraped and ended by its pid (a stand-in agent)."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest
import yaml

from ibqos.errors import LabError
from ibqos.lab import procs
from ibqos.lab.agentrun import (
    AgentRun,
    agent_config,
    metrics_url,
    read_state,
    samples,
    write_jobs,
)

# A stand-in for ``ibqos run``: serves two metrics on a free port and logs the URL as the
# agent does; FAKE=deaf ignores SIGTERM, FAKE=dies exits 3 before it listens, FAKE=silent
# logs nothing.
FAKE_AGENT = """\
import http.server, os, signal, sys, threading
mode = os.environ.get("FAKE", "")
if mode == "dies":
    sys.exit(3)
if mode == "silent":
    signal.pause()
signal.signal(signal.SIGTERM, signal.SIG_IGN if mode == "deaf" else lambda *_: sys.exit(0))
class Metrics(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'ibqos_cycles_total 7.0\\nibqos_job_sl{job_id="B"} 2.0\\n'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Metrics)
threading.Thread(target=server.serve_forever, daemon=True).start()
print("argv " + " ".join(sys.argv[1:]), file=sys.stderr)
print(f"INFO ibqos.metrics.server: metrics on http://127.0.0.1:{server.server_port}/metrics",
      file=sys.stderr, flush=True)
signal.pause()
"""

LOG = """\
2025-01-01 10:00:00 INFO ibqos.agent.parts: lanes: 8 data VLs
2025-01-01 10:00:00 INFO ibqos.metrics.server: metrics on http://127.0.0.1:41369/metrics
2025-01-01 10:00:05 INFO ibqos.metrics.server: metrics on http://127.0.0.1:5/metrics
"""


def test_the_metrics_url_is_the_first_one_logged() -> None:
    assert metrics_url(LOG) == "http://127.0.0.1:41369/metrics"
    assert metrics_url(LOG.splitlines()[0]) is None
    assert metrics_url("") is None


def test_a_job_file_keeps_each_jobs_key_order(tmp_path: Path) -> None:
    path = tmp_path / "jobs.yaml"
    job = {"id": "B", "name": "pairs", "nodes": "cn[0003,0007]", "rate_bytes_per_s": 2.0e8}
    write_jobs(path, [job, {"id": "C", "nodes": "cn0004"}])
    assert yaml.safe_load(path.read_text()) == {"jobs": [job, {"id": "C", "nodes": "cn0004"}]}
    assert path.read_text().startswith("jobs:\n- id: B\n  name: pairs\n")
    write_jobs(path, [])
    assert yaml.safe_load(path.read_text()) == {"jobs": []}
    assert [p.name for p in tmp_path.iterdir()] == ["jobs.yaml"]  # no temporary left


def test_the_config_merges_layers_section_by_section(tmp_path: Path) -> None:
    base = tmp_path / "lab.yaml"
    base.write_text(
        "# the lab's\nmode: enforce\n"
        "metrics: {listen: '127.0.0.1:9999', fabric: lab}\nopensm: {conf: /x/opensm.conf}\n"
    )
    defaults = {"metrics": {"listen": "127.0.0.1:0"}, "agent": {"socket": "", "job_poll_s": 0.2}}
    own = {"agent": {"job_poll_s": 1.0}, "opensm": {"reload_budget": {"burst": 6}}}
    path = agent_config(base, tmp_path / "ibqos.yaml", defaults, own)
    assert path == tmp_path / "ibqos.yaml"
    assert yaml.safe_load(path.read_text()) == {
        "mode": "enforce",
        "metrics": {"listen": "127.0.0.1:0", "fabric": "lab"},  # the lab's fabric stays
        "opensm": {"conf": "/x/opensm.conf", "reload_budget": {"burst": 6}},
        "agent": {"socket": "", "job_poll_s": 1.0},  # the later layer wins
    }
    assert base.read_text().startswith("# the lab's\n")  # the lab's own is left alone


def test_the_config_keeps_the_bases_order_unless_sorted(tmp_path: Path) -> None:
    base = tmp_path / "lab.yaml"
    base.write_text("mode: enforce\nmetrics: {listen: x}\n")
    layer = {"collect": {"interval_s": 5}, "metrics": {"fabric": "demo"}}
    kept = agent_config(base, tmp_path / "a.yaml", layer, sort_keys=False).read_text()
    assert kept.splitlines()[:1] + kept.splitlines()[-2:] == [
        "mode: enforce",
        "collect:",
        "  interval_s: 5",
    ]
    assert "metrics:\n  listen: x\n  fabric: demo\n" in kept
    ordered = agent_config(base, tmp_path / "b.yaml", layer).read_text()
    assert ordered.splitlines()[0] == "collect:"


def test_the_state_is_empty_until_written_whole(tmp_path: Path) -> None:
    assert read_state(tmp_path) == {}
    (tmp_path / "state.json").write_text('{"job_sl": {"A"')
    assert read_state(tmp_path) == {}
    (tmp_path / "state.json").write_text('{"job_sl": {"A": 1}}')
    assert read_state(tmp_path) == {"job_sl": {"A": 1}}


def test_samples_are_keyed_by_name_and_labels() -> None:
    text = 'ibqos_cycles_total 7.0\nibqos_job_sl{job_id="B",sl="2"} 2.0\n'
    assert samples(text) == {
        ("ibqos_cycles_total", ()): 7.0,
        ("ibqos_job_sl", (("job_id", "B"), ("sl", "2"))): 2.0,
    }


@pytest.fixture
def fake(tmp_path: Path) -> Path:
    """The stand-in agent, an executable script."""
    path = tmp_path / "fake-ibqos"
    path.write_text(f"#!{sys.executable}\n{FAKE_AGENT}")
    path.chmod(0o755)
    return path


def _agent(fake: Path, tmp_path: Path, mode: str = "") -> AgentRun:
    env = os.environ | {"FAKE": mode}
    config = tmp_path / "ibqos.yaml"
    return AgentRun(
        config, tmp_path / "agent.log", "--once", env=env, cwd=tmp_path, program=str(fake)
    )


def test_an_agent_is_started_scraped_and_stopped_by_its_pid(fake: Path, tmp_path: Path) -> None:
    with _agent(fake, tmp_path) as agent:
        url = agent.wait_metrics_url(timeout_s=30)
        assert url.startswith("http://127.0.0.1:") and url == agent.metrics_url()
        assert agent.poll() is None and procs.start_time(agent.pid) is not None
        assert f"argv run --config {tmp_path / 'ibqos.yaml'} --once" in agent.log_text()
        assert agent.scrape().startswith(b"ibqos_cycles_total 7.0\n")
        assert agent.samples()[("ibqos_job_sl", (("job_id", "B"),))] == 2.0
        pid = agent.pid
    assert agent.poll() == 0  # SIGTERM on leaving the block: it ended, and was reaped
    assert procs.start_time(pid) is None
    assert agent.stop() == 0  # a second stop says the same


def test_an_agent_deaf_to_sigterm_is_killed(fake: Path, tmp_path: Path) -> None:
    agent = _agent(fake, tmp_path, "deaf").start()
    try:
        agent.wait_metrics_url(timeout_s=30)  # its SIGTERM handler is set by then
        t0 = time.monotonic()
        assert agent.stop(timeout_s=0.5) == -signal.SIGKILL
        assert time.monotonic() - t0 < 10
    finally:
        agent.stop(timeout_s=0.5)


def test_an_agent_that_exits_is_no_url_to_wait_for(fake: Path, tmp_path: Path) -> None:
    agent = _agent(fake, tmp_path, "dies").start()
    try:
        with pytest.raises(LabError, match=r"the agent exited \(3\)"):
            agent.wait_metrics_url(timeout_s=30)
        with pytest.raises(LabError, match="serves no metrics"):
            agent.scrape()
        assert agent.stop() == 3
    finally:
        agent.stop()


def test_waiting_steps_the_caller_and_gives_up(fake: Path, tmp_path: Path) -> None:
    steps: list[float] = []

    def step() -> None:  # an in-process lab would tick here
        steps.append(time.monotonic())
        time.sleep(0.05)

    with _agent(fake, tmp_path, "silent") as agent:
        with pytest.raises(LabError, match=r"no metrics URL within 0\.3 s"):
            agent.wait_metrics_url(0.3, step=step)
        assert len(steps) >= 3


def test_an_agent_runs_once(fake: Path, tmp_path: Path) -> None:
    agent = _agent(fake, tmp_path)
    with pytest.raises(LabError, match="not started"):
        agent.stop()
    with agent:
        with pytest.raises(LabError, match="started already"):
            agent.start()
