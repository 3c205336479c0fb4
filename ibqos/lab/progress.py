"""Jobs' progress in the lab: iterations per second over a sliding window, as metrics.

What a user of a real cluster would call a job's speed is how fast it iterates.  The lab's
traffic model counts each job's finished iterations (:mod:`ibqos.lab.traffic`);
:class:`Window` turns the counts into iterations per second over the last *window_s*
seconds of lab time (10 s by default), and the lab supervisor serves them to Prometheus
from its own registry on a loopback port (:func:`serve`):

- ``ibqos_lab_job_iterations_total{job_id}`` (counter): iterations finished;
- ``ibqos_lab_job_iterations_per_second{job_id}`` (gauge): over the window;
- ``ibqos_lab_job_vl{job_id}`` (gauge, fluid contention only): the VL the job's SL maps
  to in the tables read back from the fabric;
- ``ibqos_lab_model_time_seconds``, ``ibqos_lab_info{lab,contention}``, and, in fluid
  mode, ``ibqos_lab_qos_reads_total`` / ``ibqos_lab_qos_read_failures_total``.

Per-job series come from the lab's latest truth (``truth.json``'s content) at scrape time,
so ended jobs leave the page instead of lingering (STYLE P10).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

log = logging.getLogger(__name__)

#: seconds of lab time the iteration rate is averaged over, by default
WINDOW_S = 10.0

Snapshot = Callable[[], Mapping[str, Any]]


class Window:
    """Iterations per second over the last *window_s* seconds of samples.

    Args:
        window_s: the window, seconds.
        t0: time of the first sample (the job's start), seconds.
        iterations: iterations done at *t0*.
    """

    def __init__(self, window_s: float, t0: float, iterations: int = 0) -> None:
        self.window_s = window_s
        self._samples: deque[tuple[float, int]] = deque([(t0, iterations)])

    def add(self, t: float, iterations: int) -> None:
        """Record the iteration count at time *t* (non-decreasing)."""
        self._samples.append((t, iterations))
        # keep one sample at or before the window's start, so the span covers the window
        while len(self._samples) > 2 and self._samples[1][0] <= t - self.window_s:
            self._samples.popleft()

    def rate(self) -> float:
        """Iterations per second from the oldest kept sample to the newest (0 before a
        second sample)."""
        (t0, i0), (t1, i1) = self._samples[0], self._samples[-1]
        return (i1 - i0) / (t1 - t0) if t1 > t0 else 0.0


class LabCollector:
    """Yields the lab's metric families from its latest truth (see the module docstring).

    Args:
        snapshot: returns the lab's latest truth (``Lab.truth()``'s result).
        lab: the lab's name.
    """

    def __init__(self, snapshot: Snapshot, lab: str) -> None:
        self.snapshot = snapshot
        self.lab = lab

    def collect(self) -> Iterator[Metric]:
        truth = self.snapshot()
        contention = str(truth.get("contention", "crude"))
        info = GaugeMetricFamily(
            "ibqos_lab_info",
            "The lab and its contention model (always 1).",
            labels=["lab", "contention"],
        )
        info.add_metric([self.lab, contention], 1.0)
        yield info
        yield GaugeMetricFamily(
            "ibqos_lab_model_time_seconds",
            "Seconds the lab's traffic model has advanced since the lab came up.",
            value=float(truth.get("time_s", 0.0)),
        )
        total = CounterMetricFamily(
            "ibqos_lab_job_iterations",
            "Iterations the job has finished in the lab's traffic model.",
            labels=["job_id"],
        )
        rate = GaugeMetricFamily(
            "ibqos_lab_job_iterations_per_second",
            "Iterations per second of the job over the lab's progress window "
            "(truth.json progress_window_s, seconds of lab time).",
            labels=["job_id"],
        )
        lane = GaugeMetricFamily(
            "ibqos_lab_job_vl",
            "VL of the job's SL in the SL2VL table read back from the fabric (fluid contention).",
            labels=["job_id"],
        )
        for jid, job in sorted(truth.get("jobs", {}).items()):
            if not job.get("running"):
                continue
            total.add_metric([jid], float(job.get("iterations", 0)))
            rate.add_metric([jid], float(job.get("iterations_per_second", 0.0)))
            if job.get("vl") is not None:
                lane.add_metric([jid], float(job["vl"]))
        yield total
        yield rate
        if contention == "fluid":
            yield lane
            reads = truth.get("qos_reads", {})
            yield CounterMetricFamily(
                "ibqos_lab_qos_reads",
                "Queries the lab made to read the QoS setup back from the fabric.",
                value=float(reads.get("reads", 0)),
            )
            yield CounterMetricFamily(
                "ibqos_lab_qos_read_failures",
                "Of those, queries that failed (the last setup read was kept).",
                value=float(reads.get("failures", 0)),
            )


class MetricsServer:
    """The lab's metrics endpoint: loopback HTTP on an ephemeral port (see :func:`serve`).

    Attributes:
        url: ``http://127.0.0.1:<port>/metrics``.
    """

    def __init__(self, snapshot: Snapshot, lab: str, host: str = "127.0.0.1") -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(LabCollector(snapshot, lab))
        self._server, self._thread = start_http_server(0, addr=host, registry=self.registry)
        port = self._server.server_port
        self.url = f"http://{host}:{port}/metrics"
        log.info("lab metrics on %s", self.url)

    def close(self) -> None:
        """Stop serving."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def serve(snapshot: Snapshot, lab: str) -> MetricsServer:
    """Serve the lab's metrics on 127.0.0.1, on a port the kernel picks."""
    return MetricsServer(snapshot, lab)
