"""The PromQL of the Grafana dashboards in ``dashboards/``, ready to run against Prometheus.

:func:`panel_queries` lists every panel target and every annotation query of every
dashboard with the Grafana variables substituted, and the labels each legend names, so a
test can run the queries through a real Prometheus and check that the legend's labels are
in the result.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.paths import ROOT

__all__ = [
    "BUILTIN_DEFAULTS",
    "DASHBOARDS_DIR",
    "PanelQuery",
    "dashboard_files",
    "iter_panels",
    "legend_labels",
    "load_dashboard",
    "panel_queries",
    "substitute",
]

DASHBOARDS_DIR = ROOT / "dashboards"

#: Grafana's built-in variables, when the caller does not give them
BUILTIN_DEFAULTS: Mapping[str, str] = {
    "__interval": "1m",
    "__rate_interval": "1m",
    "__range": "1h",
}

# $var, ${var}, ${var:format}, [[var]]
_VARIABLE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\$(\w+)|\[\[(\w+)(?::[^\]]*)?\]\]")
_LEGEND_LABEL = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


@dataclass(frozen=True)
class PanelQuery:
    """One query of a dashboard.

    Attributes:
        dashboard: the dashboard's file name, e.g. ``ibqos-lanes.json``.
        panel: the panel's title as written (with its ``$variables``); for an
            annotation, the annotation's name.
        ref_id: the target's refId (``A``, ``B``, ...); ``""`` for an annotation.
        expr: the PromQL with the variables substituted.
        legend_labels: the label names the legendFormat references (empty for annotations).
        instant: the target is an instant query (tables, stats over ``$__range``).
        annotation: the query is an annotation query, not a panel target.
    """

    dashboard: str
    panel: str
    ref_id: str
    expr: str
    legend_labels: frozenset[str]
    instant: bool = False
    annotation: bool = False


def dashboard_files() -> list[Path]:
    """The dashboard JSON files, sorted."""
    return sorted(DASHBOARDS_DIR.glob("*.json"))


def load_dashboard(path: Path) -> dict[str, Any]:
    """The dashboard model in *path*."""
    with open(path, encoding="utf-8") as f:
        model: dict[str, Any] = json.load(f)
    return model


def iter_panels(dashboard: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel of *dashboard*, the panels inside (collapsed) rows included; rows too."""
    for panel in dashboard.get("panels", []):
        yield panel
        yield from panel.get("panels", [])


def legend_labels(legend_format: str) -> frozenset[str]:
    """The label names ``{{name}}`` in a legendFormat."""
    return frozenset(_LEGEND_LABEL.findall(legend_format))


def substitute(expr: str, variables: Mapping[str, str]) -> str:
    """*expr* with every Grafana variable replaced by its value in *variables*.

    The built-ins ``$__interval``, ``$__rate_interval`` and ``$__range`` default to
    :data:`BUILTIN_DEFAULTS`.  A multi-value variable (``instance=~"$instance"``) just
    becomes the given value, not a regex of all values.

    Raises:
        KeyError: *expr* uses a variable that *variables* does not give.
    """
    values = {**BUILTIN_DEFAULTS, **variables}

    def value(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        if name not in values:
            raise KeyError(f"no value for Grafana variable ${name} in {expr!r}")
        return values[name]

    return _VARIABLE.sub(value, expr)


def panel_queries(variables: Mapping[str, str]) -> list[PanelQuery]:
    """Every panel target and annotation query of every dashboard, substituted.

    Args:
        variables: values of the dashboards' variables, e.g. ``{"instance":
            "127.0.0.1:9683", "fabric": "lab", "job_id": "42", "level": "1"}``; may also
            override the built-ins (``"__rate_interval": "30s"``).
    """
    out: list[PanelQuery] = []
    for path in dashboard_files():
        model = load_dashboard(path)
        for panel in iter_panels(model):
            for target in panel.get("targets", []):
                if "expr" not in target:
                    continue
                out.append(
                    PanelQuery(
                        dashboard=path.name,
                        panel=panel.get("title", ""),
                        ref_id=target.get("refId", ""),
                        expr=substitute(target["expr"], variables),
                        legend_labels=legend_labels(target.get("legendFormat", "")),
                        instant=bool(target.get("instant")) and not target.get("range"),
                    )
                )
        for annotation in model.get("annotations", {}).get("list", []):
            expr = annotation.get("expr") or annotation.get("target", {}).get("expr")
            if expr:
                out.append(
                    PanelQuery(
                        dashboard=path.name,
                        panel=annotation.get("name", ""),
                        ref_id="",
                        expr=substitute(expr, variables),
                        legend_labels=frozenset(),
                        annotation=True,
                    )
                )
    return out
