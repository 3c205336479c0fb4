"""PrometheusServer against the real Prometheus 2.42 scraping a prometheus_client exporter.

Prometheus 2.42 hands static targets to its scrape loop only after its 5 s discovery
throttle, so each server here takes about 5.5 s to its first sample.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from ibqos.errors import LabError, PrometheusQueryError
from ibqos.lab import prometheus as prom_mod
from ibqos.lab.procs import start_time
from ibqos.lab.prometheus import PrometheusServer, duration

FIRST_SCRAPE = 15.0  # seconds: 5 s discovery throttle plus slack for a loaded machine
RULES = """\
groups:
  - name: ibqos-test
    rules:
      - record: lane:ibqos_test_bytes:sum
        expr: sum by (job) (ibqos_test_bytes)
"""


@pytest.fixture
def exporter():
    """A prometheus_client HTTP server on 127.0.0.1 with its own registry and one gauge."""
    registry = CollectorRegistry()
    gauge = Gauge("ibqos_test_bytes", "Test gauge in bytes.", ["lane"], registry=registry)
    gauge.labels(lane="a").set(1.5)
    gauge.labels(lane="b").set(2.5)
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    yield f"127.0.0.1:{server.server_port}", gauge
    server.shutdown()
    server.server_close()
    thread.join(5)


def processes_mentioning(text: str) -> list[int]:
    """Pids whose command line contains *text* (to prove nothing was left behind)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline and start_time(int(entry.name)) is not None:
            pids.append(int(entry.name))
    return pids


def assert_gone(pid: int, workdir: Path) -> None:
    assert start_time(pid) is None, f"prometheus pid {pid} still runs"
    assert processes_mentioning(str(workdir)) == []


def by_lane(result):
    return {entry["metric"]["lane"]: entry for entry in result}


def test_scrape_query_stale_and_stop(tmp_path, exporter):
    target, gauge = exporter
    with PrometheusServer(tmp_path, [target], scrape_interval=0.5, evaluation_interval=0.5) as prom:
        pid = prom.pid
        assert pid is not None and prom.running()
        assert "scrape_interval: 500ms" in prom.config.read_text()

        prom.wait_for('up{job="ibqos"} == 1', bool, FIRST_SCRAPE)
        [tgt] = prom.targets()
        assert tgt["health"] == "up" and tgt["lastError"] == ""
        assert tgt["labels"] == {"instance": target, "job": "ibqos"}

        lanes = by_lane(prom.query("ibqos_test_bytes"))
        assert set(lanes) == {"a", "b"}
        assert lanes["a"]["metric"] == {
            "__name__": "ibqos_test_bytes",
            "instance": target,
            "job": "ibqos",
            "lane": "a",
        }
        assert float(lanes["a"]["value"][1]) == 1.5
        assert float(lanes["b"]["value"][1]) == 2.5

        # A series missing from a scrape gets a staleness marker at once, so it leaves
        # instant queries after one scrape rather than after the 5 min lookback.
        before = time.time()
        gauge.remove("b")
        prom.wait_for("ibqos_test_bytes", lambda r: set(by_lane(r)) == {"a"}, 3.0)
        # ...while an instant query at an earlier time still sees it
        [old_b] = prom.query('ibqos_test_bytes{lane="b"}', time=before)
        assert float(old_b["value"][1]) == 2.5

        end = time.time()
        [series_a] = prom.query_range('ibqos_test_bytes{lane="a"}', end - 5, end, 0.5)
        assert len(series_a["values"]) >= 2
        assert {float(v) for _, v in series_a["values"]} == {1.5}
        assert {s["lane"] for s in prom.series("ibqos_test_bytes", end - 60, end)} == {"a", "b"}

        with pytest.raises(PrometheusQueryError, match=r"'sum\(ibqos_test_bytes': .*parse error"):
            prom.query("sum(ibqos_test_bytes")
        with pytest.raises(PrometheusQueryError) as info:
            prom.query_range("ibqos_test_bytes", end, end - 5, 0.5)
        assert info.value.error_type == "bad_data" and "end timestamp" in info.value.error

    assert prom.pid is None and not prom.running()
    assert_gone(pid, tmp_path)
    assert (tmp_path / "data").is_dir() and (tmp_path / "prometheus.log").stat().st_size > 0


def test_recording_rule(tmp_path, exporter):
    target, _ = exporter
    rules = tmp_path / "rules.yml"
    rules.write_text(RULES)
    with PrometheusServer(
        tmp_path, [target], scrape_interval=0.5, evaluation_interval=0.5, rule_files=[rules]
    ) as prom:
        [entry] = prom.wait_for("lane:ibqos_test_bytes:sum", bool, FIRST_SCRAPE)
        assert entry["metric"] == {"__name__": "lane:ibqos_test_bytes:sum", "job": "ibqos"}
        assert float(entry["value"][1]) == 4.0
        [group] = prom.rules()
        assert group["name"] == "ibqos-test" and group["file"] == str(rules)
        assert [(r["name"], r["health"]) for r in group["rules"]] == [
            ("lane:ibqos_test_bytes:sum", "ok")
        ]


def test_bad_config_names_promtool_error(tmp_path):
    # a typo in a passed-through key; promtool 2.42 does not check `scheme` values
    server = PrometheusServer(
        tmp_path, ["127.0.0.1:9"], scrape_extra={"tls_config": {"ca_fil": "x"}}
    )
    try:
        with pytest.raises(
            LabError, match=r"promtool check config rejected .*field ca_fil not found"
        ):
            server.start()
    finally:
        server.stop()
    assert server.proc is None and not (tmp_path / "data").exists()


def test_bad_rule_file_names_promtool_error(tmp_path):
    rules = tmp_path / "rules.yml"
    rules.write_text(RULES.replace("sum by (job)", "sum by (job"))
    server = PrometheusServer(tmp_path, ["127.0.0.1:9"], rule_files=[rules])
    try:
        with pytest.raises(LabError, match=r"promtool check config rejected .*rules\.yml"):
            server.start()
    finally:
        server.stop()


def test_start_timeout_leaves_no_process(tmp_path):
    server = PrometheusServer(tmp_path, ["127.0.0.1:9"], start_timeout=0.0)
    try:
        with pytest.raises(LabError, match="not ready within"):
            server.start()
    finally:
        pid = server.pid
        server.stop()
    assert pid is None
    assert processes_mentioning(str(tmp_path)) == []


def test_taken_port_is_retried(tmp_path, monkeypatch):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = iter([taken.getsockname()[1]])
        real = prom_mod.free_port
        monkeypatch.setattr(prom_mod, "free_port", lambda: next(ports, None) or real())
        with PrometheusServer(tmp_path, ["127.0.0.1:9"]) as prom:
            assert prom.port != taken.getsockname()[1]
            assert prom.query("vector(1)")[0]["value"][1] == "1"
        assert "address already in use" in (tmp_path / "prometheus.log").read_text()
    assert processes_mentioning(str(tmp_path)) == []


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.5, "500ms"), (1, "1s"), (1.25, "1250ms"), (15.0, "15s")]
)
def test_duration(seconds, text):
    assert duration(seconds) == text


@pytest.mark.parametrize("seconds", [0, 0.0001, -1, float("nan"), float("inf")])
def test_duration_rejects(seconds):
    with pytest.raises(ValueError, match="at least 1 ms"):
        duration(seconds)
