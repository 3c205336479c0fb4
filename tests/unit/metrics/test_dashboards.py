"""The Grafana dashboards, Prometheus rules and scrape config in ``dashboards/``.

Static checks (JSON structure, variables, legends, every metric documented in
``docs/metrics.md``) and promtool's own checks and rule unit tests.  Running the panel
queries against a live exporter is the integration tests' job (``tests/support/dashqueries.py``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.dashqueries import (
    DASHBOARDS_DIR,
    dashboard_files,
    iter_panels,
    legend_labels,
    load_dashboard,
    panel_queries,
    substitute,
)

DOCS = DASHBOARDS_DIR.parent / "docs" / "metrics.md"
RULES = DASHBOARDS_DIR / "ibqos.rules.yml"
RULE_TESTS = DASHBOARDS_DIR / "ibqos.rules.test.yml"
CONFIG = DASHBOARDS_DIR / "prometheus.yml"

DASHBOARDS = {
    "ibqos-lanes.json": "ibqos / Lanes",
    "ibqos-plan.json": "ibqos / Plan",
    "ibqos-jobs.json": "ibqos / Jobs",
    "ibqos-agent.json": "ibqos / Agent health",
}
VARIABLES = {
    "instance": "127.0.0.1:9683",
    "fabric": "lab",
    "job_id": "42",
    "level": "1",
}
FABRIC_QUERY = "label_values(ibqos_fabric_info, fabric)"
INSTANCE_QUERY = 'label_values(ibqos_fabric_info{fabric=~"$fabric"}, instance)'
JOB_ID_QUERY = 'label_values(ibqos_job_info{instance=~"$instance"}, job_id)'
INSTANCE_MATCHER = 'instance=~"$instance"'

METRIC = re.compile(r"(?<![\w:])ibqos[_:][A-Za-z0-9_:]*")
# a metric name (or `up`) and its matchers, if any
SELECTOR = re.compile(r"(?<![\w:])(ibqos[_:][A-Za-z0-9_:]*|up)(?![\w(])\s*(\{[^}]*\})?")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
SEVERITIES = {"critical", "warning", "info"}


# ------------------------------------------------------------------ helpers


def promtool(*args: str, cwd: Path = DASHBOARDS_DIR) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("promtool")
    if exe is None:
        pytest.fail("promtool not found: run scripts/setup.sh (Debian package prometheus)")
    return subprocess.run(
        [exe, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def documented_metrics() -> set[str]:
    return set(re.findall(r"ibqos_[a-z0-9_]+", DOCS.read_text(encoding="utf-8")))


def documented_labels() -> set[str]:
    """Label names in docs/metrics.md: its label table, `{a, b}` and the labels column."""
    labels = {"instance", "job"}  # added by Prometheus to every scraped series
    for line in DOCS.read_text(encoding="utf-8").splitlines():
        if (m := re.match(r"\| `([a-z_]+)` \|", line)) and not m.group(1).startswith("ibqos_"):
            labels.add(m.group(1))
        if m := re.match(r"\| `ibqos_\w+(?:\{([^}]*)\})?` \| ([^|]*)\|", line):
            labels.update(x.strip() for x in (m.group(1) or "").split(",") if x.strip())
            labels.update(re.findall(r"`([a-z_]+)`", m.group(2)))
    return labels


def rules() -> list[dict[str, Any]]:
    with open(RULES, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    return [rule for group in doc["groups"] for rule in group["rules"]]


def recorded() -> set[str]:
    return {r["record"] for r in rules() if "record" in r}


def alerts() -> list[dict[str, Any]]:
    return [r for r in rules() if "alert" in r]


def all_exprs(model: dict[str, Any]) -> Iterator[str]:
    """Every PromQL of a dashboard: targets, annotations, variable queries."""
    for panel in iter_panels(model):
        for target in panel.get("targets", []):
            yield target.get("expr", "")
    for annotation in model["annotations"]["list"]:
        yield annotation.get("expr", "")
    for var in model["templating"]["list"]:
        if var["type"] == "query":
            yield var["query"] if isinstance(var["query"], str) else var["query"]["query"]


def datasource_refs(node: Any) -> Iterator[Any]:
    """Every value of a "datasource" key anywhere in *node*."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource":
                yield value
            yield from datasource_refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from datasource_refs(item)


@pytest.fixture(scope="module", params=sorted(DASHBOARDS))
def dashboard(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return request.param, load_dashboard(DASHBOARDS_DIR / request.param)


# ------------------------------------------------------------------ promtool


def test_promtool_check_rules() -> None:
    run = promtool("check", "rules", RULES.name)
    assert run.returncode == 0, run.stdout + run.stderr


def test_promtool_test_rules() -> None:
    run = promtool("test", "rules", RULE_TESTS.name)
    assert run.returncode == 0, run.stdout + run.stderr


def test_promtool_check_config() -> None:
    run = promtool("check", "config", CONFIG.name)
    assert run.returncode == 0, run.stdout + run.stderr


# ------------------------------------------------------------------ rules


def test_alerts_have_severity_and_templated_annotations() -> None:
    names = {a["alert"] for a in alerts()}
    assert {
        "IbqosAgentDown",
        "IbqosCyclesStalled",
        "IbqosRollback",
        "IbqosVerificationFailures",
        "IbqosConfigLoadError",
        "IbqosLevelSaturated",
    } <= names
    for alert in alerts():
        assert alert["labels"]["severity"] in SEVERITIES, alert["alert"]
        for key in ("summary", "description"):
            assert "{{" in alert["annotations"][key], (alert["alert"], key)


def test_rule_tests_cover_every_rule() -> None:
    """Each alert fires in one case and stays quiet in another; each record is checked."""
    with open(RULE_TESTS, encoding="utf-8") as f:
        cases = yaml.safe_load(f)["tests"]
    fired: Counter[str] = Counter()
    quiet: Counter[str] = Counter()
    checked = set()
    for case in cases:
        for t in case.get("alert_rule_test", []):
            (fired if t.get("exp_alerts") else quiet)[t["alertname"]] += 1
        for t in case.get("promql_expr_test", []):
            checked.update(METRIC.findall(t["expr"]))
    for alert in alerts():
        assert fired[alert["alert"]] and quiet[alert["alert"]], alert["alert"]
    assert recorded() <= checked


def test_rules_use_documented_metrics() -> None:
    known = documented_metrics() | recorded()
    for rule in rules():
        for name in METRIC.findall(rule["expr"]):
            assert name in known, (rule.get("record") or rule.get("alert"), name)


# ------------------------------------------------------------------ dashboards


def test_every_dashboard_is_there() -> None:
    assert sorted(p.name for p in dashboard_files()) == sorted(DASHBOARDS)
    uids = [load_dashboard(p)["uid"] for p in dashboard_files()]
    assert len(set(uids)) == len(uids)


def test_dashboard_model(dashboard: tuple[str, dict[str, Any]]) -> None:
    name, model = dashboard
    assert model["title"] == DASHBOARDS[name]
    assert 36 <= model["schemaVersion"] <= 41
    assert model["id"] is None and model["uid"]
    assert "ibqos" in model["tags"]


def test_variables(dashboard: tuple[str, dict[str, Any]]) -> None:
    name, model = dashboard
    variables = {v["name"]: v for v in model["templating"]["list"]}
    ds = variables["datasource"]
    assert (ds["type"], ds["query"]) == ("datasource", "prometheus")
    assert variables["fabric"]["query"] == FABRIC_QUERY
    assert variables["instance"]["query"] == INSTANCE_QUERY
    for var in ("fabric", "instance"):
        assert variables[var]["type"] == "query"
        assert variables[var]["multi"] and variables[var]["includeAll"]
    if name == "ibqos-jobs.json":
        assert variables["job_id"]["query"] == JOB_ID_QUERY
    # every variable used is defined (Grafana's built-ins aside)
    used = {
        m.group(1) or m.group(2)
        for expr in all_exprs(model)
        for m in re.finditer(r"\$\{(\w+)[^}]*\}|\$(\w+)", expr)
    }
    assert {u for u in used if not u.startswith("__")} <= set(variables), name


def test_no_hard_coded_datasource(dashboard: tuple[str, dict[str, Any]]) -> None:
    _, model = dashboard
    refs = list(datasource_refs(model))
    assert refs
    for ref in refs:
        assert ref == {"type": "prometheus", "uid": "${datasource}"}, ref


def test_panels(dashboard: tuple[str, dict[str, Any]]) -> None:
    name, model = dashboard
    panels = list(iter_panels(model))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), f"{name}: duplicate panel ids"
    for panel in panels:
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"]), panel["title"]
        if panel["type"] == "row":
            continue
        assert panel["targets"], (name, panel["title"])
        for target in panel["targets"]:
            where = (name, panel["title"], target.get("refId"))
            assert target.get("expr"), where
            assert legend_labels(target.get("legendFormat", "")), where
            assert target.get("refId"), where


def test_queries_filter_by_instance(dashboard: tuple[str, dict[str, Any]]) -> None:
    name, model = dashboard
    exprs = [t["expr"] for p in iter_panels(model) for t in p.get("targets", [])]
    exprs += [a["expr"] for a in model["annotations"]["list"]]
    for expr in exprs:
        selectors = SELECTOR.findall(expr)
        assert selectors, (name, expr)
        for metric, matchers in selectors:
            assert INSTANCE_MATCHER in matchers, (name, metric, expr)


def test_metrics_are_documented(dashboard: tuple[str, dict[str, Any]]) -> None:
    name, model = dashboard
    documented = documented_metrics()
    known = documented | recorded()
    for expr in all_exprs(model):
        for metric in METRIC.findall(expr):
            base = next(
                (metric.removesuffix(s) for s in HISTOGRAM_SUFFIXES if metric.endswith(s)),
                metric,
            )
            assert metric in known or base in documented, (name, metric)


def test_legend_labels_are_documented() -> None:
    labels = documented_labels()
    assert {"vl", "level", "sl", "job_id", "class", "source", "result"} <= labels
    for q in panel_queries(VARIABLES):
        assert q.legend_labels <= labels, (q.dashboard, q.panel, q.legend_labels - labels)


# ------------------------------------------------------------------ dashqueries


def test_panel_queries_cover_every_target() -> None:
    queries = panel_queries(VARIABLES)
    targets = sum(
        len(p.get("targets", []))
        for path in dashboard_files()
        for p in iter_panels(load_dashboard(path))
    )
    assert len([q for q in queries if not q.annotation]) == targets
    annotations = [q for q in queries if q.annotation]
    assert {q.dashboard for q in annotations} >= {"ibqos-plan.json"}
    assert all(not q.legend_labels for q in annotations)
    for q in queries:
        assert "$" not in q.expr and "[[" not in q.expr, q
        assert 'instance=~"127.0.0.1:9683"' in q.expr, q
    assert any('job_id="42"' in q.expr for q in queries)
    assert any('level=~"1"' in q.expr for q in queries)


def test_substitute_forms() -> None:
    values = {"instance": "h:1", "fabric": "f", "__rate_interval": "40s"}
    expr = 'rate(x{instance=~"$instance",f="${fabric}",g="${fabric:regex}",h="[[fabric]]"}'
    assert (
        substitute(expr + "[$__rate_interval]) / $__interval $__range", values)
        == 'rate(x{instance=~"h:1",f="f",g="f",h="f"}[40s]) / 1m 1h'
    )
    with pytest.raises(KeyError, match="job_id"):
        substitute('x{job_id="$job_id"}', values)
