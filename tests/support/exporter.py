"""The agent's metrics on a registry of the test's own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from ibqos.metrics import AgentMetrics, Counters


def metrics(counters: Counters | None = None) -> AgentMetrics:
    return AgentMetrics(
        counters or Counters(),
        fabric="lab",
        routing_engine="ftree",
        dry_run=False,
        registry=CollectorRegistry(),
    )
