"""The exporter's series: values from a decision cycle, vanishing jobs, promtool's lint."""

from __future__ import annotations

import gzip
import math
import subprocess
import urllib.request

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from ibqos.collect.rates import VL_WAIT_RATE_COLUMNS
from ibqos.config.classes import Thresholds
from ibqos.config.lanes import LaneConfig
from ibqos.config.models import MetricsConfig
from ibqos.jobs.model import Job
from ibqos.metrics import AgentMetrics, Counters, build_snapshot, level_capacities
from ibqos.metrics.families import SnapshotCollector
from ibqos.metrics.server import Exporter, metrics_app
from ibqos.plan.decide import Decider
from ibqos.plan.output import lane_weights
from tests.support.exporter import metrics
from tests.support.fabric_rates import INTERVAL, WAIT, full_rates, leaf_up_ports, setup

LINK = 12.5e9  # 4x EDR, bytes/s per direction
HEAVY = Job("h", ("cn0001", "cn0002", "cn0009", "cn0010"), name="ft", user="ann")
LIGHT = Job("l", ("cn0017", "cn0018", "cn0025", "cn0026"), name="pairs")


def cycle(jobs=(HEAVY, LIGHT), heavy=0.8, light=0.01, vl_wait=False, per_port=False, fresh=True):
    """One decision on the recorded 4-leaf fabric, each job alone on two leaves."""
    fabric, hp = setup()
    xmit = {}
    for job, util, leaves in ((HEAVY, heavy, (1, 2)), (LIGHT, light, (3, 4))):
        if job not in jobs:
            continue
        for host in job.nodes:
            xmit[hp[host]] = 2 * LINK * util
        for leaf in leaves:
            for key in leaf_up_ports(fabric, f"sw-L1-000{leaf}"):
                xmit[key] = LINK * util
    table = full_rates(fabric, xmit)
    if vl_wait:
        for vl, col in enumerate(VL_WAIT_RATE_COLUMNS):
            table[col] = [float(vl) if fp.role == "up" else 0.0 for fp in fabric.ports.values()]
    decider = Decider(fabric, LaneConfig(min_interval_s=0.0), Thresholds(tau_s=0.0))
    decision = decider.decide(table, list(jobs), 0.0)
    capacity = level_capacities(fabric)
    snap = build_snapshot(decision, table, capacity, 1.7e9, per_port=per_port, fresh=fresh)
    return fabric, decision, snap


def test_jobs_lanes_and_levels_of_a_cycle() -> None:
    fabric, decision, snap = cycle()
    m = metrics()
    m.snapshot.publish(snap)
    get = m.registry.get_sample_value
    h, lt = decision.jobs
    assert get("ibqos_snapshot_timestamp_seconds") == 1.7e9
    # per job: what the decision measured, per level
    assert math.isclose(
        get("ibqos_job_traffic_bytes_per_second", {"job_id": "h", "level": "1"}), 4 * LINK * 0.8
    )
    assert get("ibqos_job_available_bytes_per_second", {"job_id": "h", "level": "1"}) == 4 * LINK
    assert math.isclose(get("ibqos_job_utilization_ratio", {"job_id": "h", "level": "1"}), 0.8)
    assert get("ibqos_job_utilization_ratio", {"job_id": "h", "level": "2"}) is None  # top
    assert get("ibqos_job_class", {"job_id": "h", "class": "high"}) == 1
    assert get("ibqos_job_class", {"job_id": "l", "class": "low"}) == 1
    assert get("ibqos_job_class", {"job_id": "h", "class": "low"}) is None
    assert get("ibqos_job_sl", {"job_id": "h"}) == h.sl
    assert get("ibqos_job_vl", {"job_id": "l"}) == lt.vl
    assert get("ibqos_job_info", {"job_id": "h", "name": "ft", "user": "ann"}) == 1
    assert get("ibqos_job_nodes", {"job_id": "h"}) == 4
    assert get("ibqos_job_measured_share_ratio", {"job_id": "h"}) == 1.0
    assert math.isclose(get("ibqos_job_intensity_ratio", {"job_id": "h"}), 0.8)
    # per level: the measured sums and the capacity
    cap1 = fabric.uplink_capacity_bytes_per_s(1)
    assert get("ibqos_level_capacity_bytes_per_second", {"level": "1"}) == cap1 == 8 * LINK
    assert get("ibqos_level_capacity_bytes_per_second", {"level": "2"}) is None  # no uplinks
    assert math.isclose(
        get("ibqos_level_traffic_bytes_per_second", {"level": "1"}), 4 * LINK * 0.81
    )
    assert get("ibqos_level_xmit_wait_ticks_per_second", {"level": "1"}) == 8 * WAIT
    # per lane: the jobs' traffic summed, over the level's capacity; weights; SL2VL
    vl_h = str(h.vl)
    assert math.isclose(
        get("ibqos_lane_traffic_bytes_per_second", {"vl": vl_h, "level": "1"}), 4 * LINK * 0.8
    )
    assert math.isclose(
        get("ibqos_lane_utilization_ratio", {"vl": vl_h, "level": "1"}), 4 * LINK * 0.8 / cap1
    )
    weights = lane_weights(decision.plan.tables)
    assert get("ibqos_lane_weight", {"vl": vl_h}) == weights[h.vl]
    assert get("ibqos_lane_weight", {"vl": str(lt.vl)}) > get("ibqos_lane_weight", {"vl": vl_h})
    assert get("ibqos_lane_jobs", {"vl": vl_h}) == 1
    assert get("ibqos_lane_class_jobs", {"vl": vl_h, "class": "high"}) == 1
    assert get("ibqos_lane_class_jobs", {"vl": vl_h, "class": "low"}) == 0
    assert get("ibqos_lane_sls", {"vl": vl_h}) == 1
    assert get("ibqos_sl_vl", {"sl": str(h.sl)}) == h.vl
    assert get("ibqos_sl_vl", {"sl": "15"}) is not None  # every SL has a lane
    # congestion without per-VL counters: the level's wait split by traffic share
    share = 0.8 / 0.81
    wait = get(
        "ibqos_lane_xmit_wait_ticks_per_second", {"vl": vl_h, "level": "1", "source": "port"}
    )
    assert math.isclose(wait, 8 * WAIT * share)


def test_per_vl_counters_give_measured_lane_congestion() -> None:
    _, decision, snap = cycle(vl_wait=True)
    m = metrics()
    m.snapshot.publish(snap)
    h = decision.jobs[0]
    labels = {"vl": str(h.vl), "level": "1", "source": "vl"}
    # every level-1 up port waited h.vl ticks/s on VL h.vl: 8 ports
    assert m.registry.get_sample_value("ibqos_lane_xmit_wait_ticks_per_second", labels) == 8 * h.vl
    labels["source"] = "port"
    assert m.registry.get_sample_value("ibqos_lane_xmit_wait_ticks_per_second", labels) is None


def test_an_ended_job_s_series_vanish_with_the_next_snapshot() -> None:
    m = metrics()
    m.snapshot.publish(cycle()[2])
    assert m.registry.get_sample_value("ibqos_job_sl", {"job_id": "l"}) is not None
    text = generate_latest(m.registry).decode()
    assert 'job_id="l"' in text
    m.snapshot.publish(cycle(jobs=(HEAVY,))[2])
    assert 'job_id="l"' not in generate_latest(m.registry).decode()
    assert m.registry.get_sample_value("ibqos_job_sl", {"job_id": "h"}) is not None


def test_unknown_values_are_left_out_not_zero() -> None:
    fabric, _ = setup()
    table = full_rates(fabric, {})
    table["xmit_bytes_per_s"] = np.nan  # nothing answered
    table["xmit_wait_per_s"] = np.nan
    decider = Decider(fabric, LaneConfig(), Thresholds(tau_s=0.0))
    decision = decider.decide(table, [HEAVY], 0.0)
    m = metrics()
    m.snapshot.publish(build_snapshot(decision, table, level_capacities(fabric), 0.0))
    get = m.registry.get_sample_value
    assert get("ibqos_level_traffic_bytes_per_second", {"level": "1"}) is None
    assert get("ibqos_level_xmit_wait_ticks_per_second", {"level": "1"}) is None
    assert get("ibqos_job_traffic_bytes_per_second", {"job_id": "h", "level": "1"}) is None
    assert get("ibqos_job_intensity_ratio", {"job_id": "h"}) is None
    assert get("ibqos_job_sl", {"job_id": "h"}) is not None  # planned all the same
    assert "NaN" not in generate_latest(m.registry).decode()


def test_no_lane_series_when_the_routing_engine_owns_sl2vl() -> None:
    fabric, _ = setup()
    table = full_rates(fabric, {})
    lanes = LaneConfig(routing_engine="dfsssp")
    decision = Decider(fabric, lanes, Thresholds(tau_s=0.0)).decide(table, [HEAVY], 0.0)
    m = metrics()
    m.snapshot.publish(build_snapshot(decision, table, level_capacities(fabric), 0.0))
    text = generate_latest(m.registry).decode()
    assert "ibqos_lane_" not in text and "ibqos_sl_vl{" not in text
    assert m.registry.get_sample_value("ibqos_job_sl", {"job_id": "h"}) is not None
    assert m.registry.get_sample_value("ibqos_job_vl", {"job_id": "h"}) is None


def test_per_port_series_only_when_asked_three_per_port() -> None:
    fabric, _, snap = cycle(per_port=True)
    m = metrics()
    m.snapshot.publish(snap)
    text = generate_latest(m.registry).decode()
    for name in ("transmit_bytes", "receive_bytes", "xmit_wait_ticks"):
        lines = [ln for ln in text.splitlines() if ln.startswith(f"ibqos_port_{name}_per_second{{")]
        assert len(lines) == len(fabric.ports)
    m.snapshot.publish(cycle()[2])
    assert "ibqos_port_" not in generate_latest(m.registry).decode()


def test_the_agent_s_own_series() -> None:
    counters = Counters(cycles=7, failures=1, rollbacks=2, reloads=3, sweep_answered=40)
    m = metrics(counters)
    get = m.registry.get_sample_value
    assert get("ibqos_cycles_total") == 7
    counters.cycles += 1  # read at scrape time: no second set of instruments
    assert get("ibqos_cycles_total") == 8
    assert get("ibqos_rollbacks_total") == 2 and get("ibqos_opensm_reloads_total") == 3
    assert get("ibqos_sweep_ports", {"result": "answered"}) == 40
    assert get("ibqos_config_load_error") == 0 and get("ibqos_dry_run") == 0
    assert get("ibqos_last_success_timestamp_seconds") is None  # no good cycle yet
    assert get("ibqos_fabric_info", {"fabric": "lab", "routing_engine": "ftree"}) == 1
    m.cycle_seconds.observe(0.03)
    assert get("ibqos_cycle_duration_seconds_count") == 1
    assert get("ibqos_cycle_duration_seconds_bucket", {"le": "0.05"}) == 1
    # before the first cycle there is no snapshot, and nothing pretends there is one
    assert get("ibqos_snapshot_timestamp_seconds") is None


def test_the_routes_in_use(monkeypatch) -> None:
    m = metrics()
    get = m.registry.get_sample_value
    assert get("ibqos_routes_info", {"source": "none"}) is None  # no source: no series
    doc = {"source": "dump", "switches": 12, "read_s": 1000.0, "problem": None}
    m.health.routes = lambda: doc
    monkeypatch.setattr("ibqos.metrics.health.time.time", lambda: 1030.0)
    assert get("ibqos_routes_info", {"source": "dump"}) == 1
    assert get("ibqos_routes_switches") == 12
    assert get("ibqos_routes_age_seconds") == 30.0
    assert get("ibqos_routes_error") == 0
    doc.update(source="none", switches=0, read_s=None, problem="x: bad")
    assert get("ibqos_routes_info", {"source": "none"}) == 1
    assert get("ibqos_routes_age_seconds") is None and get("ibqos_routes_error") == 1


def test_sweep_coverage_and_invalid_samples() -> None:
    counters = Counters()
    m = metrics(counters)
    get = m.registry.get_sample_value
    assert get("ibqos_sweep_coverage_ratio") is None  # no sweep yet: no pretend value
    assert get("ibqos_invalid_samples_total") == 0
    counters.sweep_coverage, counters.invalid_samples = 0.29, 3
    assert get("ibqos_sweep_coverage_ratio") == 0.29
    assert get("ibqos_invalid_samples_total") == 3


def test_promtool_accepts_the_exposition() -> None:
    counters = Counters(cycles=3, last_success_s=1.7e9, sweep_coverage=0.5, invalid_samples=2)
    m = metrics(counters)
    m.cycle_seconds.observe(0.2)
    m.sweep_seconds.observe(0.02)
    m.snapshot.publish(cycle(per_port=True)[2])
    text = generate_latest(m.registry)
    out = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, check=False
    )
    assert out.returncode == 0, out.stdout.decode() + out.stderr.decode()
    assert not out.stdout.strip() and not out.stderr.strip()  # no lint warnings either


@pytest.mark.parametrize("bad", ["job", "instance", "exported_job"])
def test_no_label_collides_with_prometheus_target_labels(bad: str) -> None:
    m = metrics(Counters(last_success_s=1.0))
    m.snapshot.publish(cycle(per_port=True)[2])
    for family in m.registry.collect():
        for sample in family.samples:
            assert bad not in sample.labels, (family.name, sample.labels)


def test_the_fast_text_is_byte_for_byte_prometheus_client_s() -> None:
    odd = Job('q"\\x\ny', ("cn0003",), name='a "quoted"\\name', user="b\nc")  # escapes
    _, _, snap = cycle(jobs=(HEAVY, LIGHT, odd), per_port=True)
    collector = SnapshotCollector()
    collector.publish(snap)
    reference = CollectorRegistry()
    reference.register(collector)
    text = collector.text()
    assert text == generate_latest(reference)
    assert b'job_id="q\\"\\\\x\\ny"' in text
    assert collector.text() is text  # rendered once per snapshot


def steady(page: bytes) -> list[bytes]:
    """The lines of a page that do not change between two scrapes (not process_*)."""
    return [ln for ln in page.splitlines() if not ln.startswith(b"process_")]


def test_the_endpoint_serves_the_agent_and_the_snapshot_gzipped() -> None:
    m = metrics(Counters(cycles=2, last_success_s=1.0))
    m.snapshot.publish(cycle()[2])
    exp = Exporter(metrics_app(m), MetricsConfig(listen=("127.0.0.1", 0)))
    try:
        req = urllib.request.Request(exp.url, headers={"Accept-Encoding": "gzip"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert resp.headers["Content-Encoding"] == "gzip"
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            body = gzip.decompress(resp.read())
        # the same page as the full registry (but for the process's CPU and memory, which
        # move between two scrapes)
        assert steady(body) == steady(generate_latest(m.registry))
        assert b"\nprocess_cpu_seconds_total " in body and b"\npython_info{" in body
        with urllib.request.urlopen(exp.url, timeout=5) as resp:
            assert steady(resp.read()) == steady(body) and resp.headers["Content-Encoding"] is None
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(exp.url.replace("/metrics", "/other"), timeout=5)
    finally:
        exp.close()


def test_byte_counters_add_each_fresh_sweep_and_only_go_up() -> None:
    m = metrics()
    get = m.registry.get_sample_value
    _, decision, snap = cycle(per_port=True)
    h = decision.jobs[0]
    m.snapshot.publish(snap)
    level1 = 4 * LINK * 0.81 * INTERVAL  # every up port's rate times its interval
    assert math.isclose(get("ibqos_level_traffic_bytes_total", {"level": "1"}), level1)
    assert get("ibqos_level_xmit_wait_ticks_total", {"level": "1"}) == 8 * WAIT * INTERVAL
    job_h1 = {"job_id": "h", "level": "1"}
    assert math.isclose(get("ibqos_job_traffic_bytes_total", job_h1), 4 * LINK * 0.8 * INTERVAL)
    lane_h1 = {"vl": str(h.vl), "level": "1"}
    assert math.isclose(get("ibqos_lane_traffic_bytes_total", lane_h1), 4 * LINK * 0.8 * INTERVAL)
    port = next(s.labels for s in _samples(m, "ibqos_port_transmit_bytes_total"))
    assert get("ibqos_port_transmit_bytes_total", port) is not None
    # the next sweep adds its interval; a cycle that reuses the rates (a job event) adds
    # nothing; a scrape that comes late still sees every byte
    m.snapshot.publish(cycle(per_port=True)[2])
    m.snapshot.publish(cycle(per_port=True, fresh=False)[2])
    assert math.isclose(get("ibqos_level_traffic_bytes_total", {"level": "1"}), 2 * level1)
    assert math.isclose(get("ibqos_job_traffic_bytes_total", job_h1), 2 * 4 * LINK * 0.8 * INTERVAL)
    # a quiet sweep (counters reset, nothing sent) never takes them down
    before = get("ibqos_level_traffic_bytes_total", {"level": "1"})
    m.snapshot.publish(cycle(heavy=0.0, light=0.0, per_port=True)[2])
    assert get("ibqos_level_traffic_bytes_total", {"level": "1"}) == before
    # an ended job's counter goes with its other series
    m.snapshot.publish(cycle(jobs=(LIGHT,))[2])
    assert get("ibqos_job_traffic_bytes_total", job_h1) is None
    assert get("ibqos_job_traffic_bytes_total", {"job_id": "l", "level": "0"}) > 0
    assert get("ibqos_level_traffic_bytes_total", {"level": "1"}) > before


def test_the_first_sweep_counts_nothing_and_unknown_rates_add_nothing() -> None:
    fabric, hp = setup()
    table = full_rates(fabric, {hp["cn0001"]: 1e9})
    table["interval_s"] = np.nan  # every port's first reading: no interval yet
    decider = Decider(fabric, LaneConfig(min_interval_s=0.0), Thresholds(tau_s=0.0))
    decision = decider.decide(table, [HEAVY], 0.0)
    snap = build_snapshot(decision, table, level_capacities(fabric), 1.0, fresh=True)
    assert snap.interval_s is None
    m = metrics()
    m.snapshot.publish(snap)
    assert m.registry.get_sample_value("ibqos_level_traffic_bytes_total", {"level": "0"}) is None
    assert (
        m.registry.get_sample_value("ibqos_job_traffic_bytes_total", {"job_id": "h", "level": "0"})
        == 0.0
    )


def _samples(m: AgentMetrics, name: str):
    return [s for f in m.registry.collect() for s in f.samples if s.name == name]


def test_the_process_s_own_metrics() -> None:
    m = metrics()
    get = m.registry.get_sample_value
    assert get("process_cpu_seconds_total") > 0
    assert get("process_resident_memory_bytes") > 0
    assert get("process_start_time_seconds") > 1.6e9
    assert [s.value for s in _samples(m, "python_info")] == [1.0]
    assert b"\nprocess_open_fds " in generate_latest(m.own)  # served by the endpoint


# what Prometheus 2.x and 3.x send, OpenMetrics first
PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0;q=0.5,"
    "application/openmetrics-text;version=0.0.1;q=0.4,"
    "text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
)


@pytest.mark.parametrize("accept", [PROMETHEUS_ACCEPT, "application/openmetrics-text"])
def test_openmetrics_when_the_scraper_asks_for_it(accept: str) -> None:
    m = metrics(Counters(cycles=2, last_success_s=1.0))
    m.snapshot.publish(cycle()[2])
    exp = Exporter(metrics_app(m), MetricsConfig(listen=("127.0.0.1", 0)))
    try:
        req = urllib.request.Request(exp.url, headers={"Accept": accept})
        with urllib.request.urlopen(req, timeout=5) as resp:
            kind = resp.headers["Content-Type"]
            body = resp.read().decode()
    finally:
        exp.close()
    assert kind.startswith("application/openmetrics-text; version=1.0.0")
    assert body.endswith("# EOF\n") and body.count("# EOF") == 1
    # the strict OpenMetrics parser takes it whole: agent, process and snapshot families
    parsed = {f.name: f for f in text_string_to_metric_families(body)}
    assert parsed["ibqos_cycles"].type == "counter"
    assert parsed["ibqos_cycles"].samples[0].value == 2
    assert parsed["ibqos_job_traffic_bytes"].type == "counter"
    assert parsed["ibqos_level_traffic_bytes_per_second"].type == "gauge"
    assert "process_cpu_seconds" in parsed
