"""The job-SL server's health as metrics: whether it serves, and what it refused.

The agent's SL server (:mod:`ibqos.agent.slserve`) bounds its connections per peer and in
all, closes the ones that do not ask in time, and restarts after an unexpected error; a
user who floods it is visible here, and an alert fires while it does not serve
(``IbqosSlServerDown``, docs/metrics.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

__all__ = ["SlServerHealth", "sl_server_families"]


@dataclass
class SlServerHealth:
    """The SL server's health: what it counts since the agent started (the server's
    threads write it; a scrape reads a copy).

    Attributes:
        up: its thread serves (False: it ended and is not started again yet, or its
            socket could not be bound).
        open: connections open now.
        cap: connections it may hold at once (``agent.sl_max_connections``, at most the
            soft limit of open files less the agent's reserve).
        refused: connections answered ``ERROR busy`` and closed at once, by reason:
            "peer" (``agent.sl_max_per_peer``), "total" (:attr:`cap`).
        timed_out: connections closed without a whole question within ``agent.sl_idle_s``.
        fd_pauses: times accepting paused because the process was out of file descriptors.
        restarts: times serving started again after an unexpected error.
    """

    up: bool = False
    open: int = 0
    cap: int = 0
    refused: dict[str, int] = field(default_factory=lambda: {"peer": 0, "total": 0})
    timed_out: int = 0
    fd_pauses: int = 0
    restarts: int = 0


def sl_server_families(health: SlServerHealth | None) -> Iterator[Metric]:
    """The families of *health*; none while the server is not meant to serve (observe
    mode, no ``agent.socket`` and no ``agent.sl_listen``)."""
    if health is None:
        return
    yield GaugeMetricFamily(
        "ibqos_sl_server_up",
        "1 while the job-SL server serves agent.socket / agent.sl_listen, 0 while it does not"
        " (its socket could not be bound, or its thread ended and is not started yet).",
        value=int(health.up),
    )
    yield GaugeMetricFamily(
        "ibqos_sl_connections", "Connections the job-SL server holds now.", value=health.open
    )
    yield GaugeMetricFamily(
        "ibqos_sl_connections_limit",
        "Connections the job-SL server may hold at once: agent.sl_max_connections, at most"
        " the soft limit of open files less the 128 kept for the agent's cycle.",
        value=health.cap,
    )
    refused = CounterMetricFamily(
        "ibqos_sl_connections_refused",
        "Connections to the job-SL server answered 'ERROR busy' and closed at once, by"
        " reason: peer (agent.sl_max_per_peer from one user or address), total (the limit).",
        labels=["reason"],
    )
    for reason, count in sorted(health.refused.items()):
        refused.add_metric([reason], count)
    yield refused
    yield CounterMetricFamily(
        "ibqos_sl_connections_timed_out",
        "Connections to the job-SL server closed because no whole question came (or the"
        " answer was not taken) within agent.sl_idle_s.",
        value=health.timed_out,
    )
    yield CounterMetricFamily(
        "ibqos_sl_accept_pauses",
        "Times the job-SL server stopped accepting for 0.1 s because the process was out of"
        " file descriptors (askers wait in the kernel's listen queue).",
        value=health.fd_pauses,
    )
    yield CounterMetricFamily(
        "ibqos_sl_server_restarts",
        "Times the job-SL server started serving again after an unexpected error.",
        value=health.restarts,
    )
