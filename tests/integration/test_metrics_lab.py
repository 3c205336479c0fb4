"""The exporter with the real thing: ``ibqos run`` on a lab, scraped by a real Prometheus
that also evaluates the shipped rules; every dashboard panel's query is run through
Prometheus's HTTP API and must return data with the labels its legend names."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from ibqos.lab.agentrun import scrape
from ibqos.lab.prometheus import PrometheusServer
from tests.integration.labcheck import QUIET
from tests.support.agentrun import (
    JOB_B,
    LIGHT_A,
    agent_config,
    drive,
    start_agent,
    write_jobs,
)
from tests.support.dashqueries import panel_queries

#: panels with data only once something happened: tuning's scores come with a prediction
#: or a trial
EVENT_PANELS = {"Tuning: candidate scores"}
ROOT = Path(__file__).parents[2]
RULES = ROOT / "dashboards" / "ibqos.rules.yml"
# offered 2e10 B/s per node: more than a 4x EDR link (1.25e10) carries, so host links and
# the leaf uplinks towards cn0005/cn0006 are overloaded and the lab model counts XmitWait
HEAVY_A = LIGHT_A | {"rate_bytes_per_s": 2.0e10}


def test_prometheus_scrapes_the_agent_and_every_panel_has_data(make_lab, tmp_path):
    lab = make_lab("2;4,2;1,2", opensm_options=QUIET)
    write_jobs(lab, HEAVY_A, JOB_B)
    config = agent_config(lab, tmp_path, metrics={"fabric": "labfab"})
    proc = start_agent(lab, config, tmp_path)
    try:
        drive(lab, lambda: proc.metrics_url() is not None, 30, proc)
        url = proc.metrics_url()
        assert url is not None
        target = url.removeprefix("http://").removesuffix("/metrics")
        # the agent's own exposition passes promtool's lint once jobs are planned
        drive(lab, lambda: b'ibqos_job_sl{job_id="B"}' in scrape(url), 30, proc)
        lint = subprocess.run(
            ["promtool", "check", "metrics"], input=scrape(url), capture_output=True, check=False
        )
        assert lint.returncode == 0, lint.stdout.decode() + lint.stderr.decode()

        prom_dir = tmp_path / "prom"
        prom_dir.mkdir()
        with PrometheusServer(
            # 1 s: the scrape timeout equals the interval, and a loaded 2-core CI machine
            # has been seen to take more than 0.5 s to answer one scrape
            prom_dir,
            [target],
            scrape_interval=1.0,
            evaluation_interval=1.0,
            rule_files=[RULES],
        ) as prom:

            def ready() -> bool:
                # classes measured, lanes planned, rules evaluated, and some history
                high = prom.query('ibqos_job_class{job_id="A", class="high"}')
                util = prom.query("ibqos:level_utilization:ratio")
                samples = prom.query("count_over_time(ibqos_cycles_total[1m])")
                up = {t["health"] for t in prom.targets()} == {"up"}
                return bool(high and util and samples and float(samples[0]["value"][1]) >= 6 and up)

            drive(lab, ready, 60, proc)
            rules = [r for group in prom.rules() for r in group["rules"]]
            assert rules and {r["health"] for r in rules} == {"ok"}, rules

            variables = {"instance": target, "fabric": "labfab", "job_id": "A", "level": "1"}
            checked = 0
            for q in panel_queries(variables):
                result = prom.query(q.expr)  # raises with Prometheus's error on a bad query
                if q.annotation or q.panel in EVENT_PANELS:
                    continue  # events: empty when nothing happened in the window
                assert result, f"{q.dashboard} / {q.panel}: no data for {q.expr}"
                for entry in result:
                    missing = set(q.legend_labels) - set(entry["metric"])
                    assert not missing, f"{q.dashboard} / {q.panel}: no {missing} in {entry}"
                checked += 1
            assert checked >= 20
            print(f"{checked} panel queries returned data with their legend's labels")

            # the heavy job overloads its leaves' uplinks: the lab model's XmitWait, read
            # through the PMA, shows at level 1 and on the heavy job's lane the most
            level = prom.query('ibqos_level_xmit_wait_ticks_per_second{level="1"}')
            assert level and float(level[0]["value"][1]) > 0
            wait = prom.query('ibqos_lane_xmit_wait_ticks_per_second{level="1"}')
            assert {e["metric"]["source"] for e in wait} == {"port"}
            heavy_vl = prom.query('ibqos_job_vl{job_id="A"}')[0]["value"][1]
            top = max(wait, key=lambda e: float(e["value"][1]))
            assert top["metric"]["vl"] == heavy_vl and float(top["value"][1]) > 0
            fabric = prom.query('ibqos_fabric_info{fabric="labfab"}')
            assert [e["metric"]["instance"] for e in fabric] == [target]

            # a job that ends: its series go from the exposition and from Prometheus
            write_jobs(lab, HEAVY_A)
            drive(lab, lambda: b'job_id="B"' not in scrape(url), 15, proc)
            t0 = time.monotonic()

            def b_gone_a_kept() -> bool:
                # one predicate: a scrape that times out on a loaded machine marks every
                # series stale for a moment, which must not pass for B's series leaving
                return not prom.query('{job_id="B"}') and bool(
                    prom.query('ibqos_job_sl{job_id="A"}')
                )

            drive(lab, b_gone_a_kept, 10, proc)
            print(f"an ended job's series left Prometheus {time.monotonic() - t0:.1f} s later")
    finally:
        assert proc.stop() == 0
    assert "ERROR" not in (tmp_path / "agent.log").read_text()
