"""A job's recorded history: ibqos's own per-level series, read back from Prometheus.

The agent exports, per running job and level, ``ibqos_job_traffic_bytes_per_second``,
``ibqos_job_available_bytes_per_second`` and ``ibqos_job_utilization_ratio``
(``docs/metrics.md``).  A Prometheus that scraped it holds their history; the HTTP API's
range query (``/api/v1/query_range``) returns it as JSON::

    {"status": "success",
     "data": {"resultType": "matrix",
              "result": [{"metric": {"job_id": "A", "level": "1", ...},
                          "values": [[1700000000.5, "1.5e9"], ...]}]}}

:func:`parse_query_range` checks that document strictly (every error names the input and
the key path), :func:`fetch_query_range` asks a server for it, and :func:`job_history`
turns the three series of a job into per-level means and peaks, its intensity and class:
the same figures a characterization gives, measured instead of modelled.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ibqos.classify.classifier import class_of, intensity
from ibqos.config.classes import Class, Thresholds
from ibqos.errors import TraceError

#: the per-level series of a job, by what they measure
JOB_METRICS = {
    "bytes": "ibqos_job_traffic_bytes_per_second",
    "avail": "ibqos_job_available_bytes_per_second",
    "util": "ibqos_job_utilization_ratio",
}


@dataclass(frozen=True)
class Series:
    """One series of a range query.

    Attributes:
        labels: its label set.
        times_s: sample times, seconds since the epoch.
        values: sample values.
    """

    labels: Mapping[str, str]
    times_s: tuple[float, ...]
    values: tuple[float, ...]


@dataclass(frozen=True)
class LevelHistory:
    """One level of a job's history.

    Attributes:
        level: the fat-tree level.
        samples: samples of the traffic series.
        bytes_per_s, peak_bytes_per_s: mean and largest traffic, bytes per second.
        avail_bytes_per_s: mean available bandwidth (None: not exported, the top level).
        util, peak_util: mean and largest utilization (None where none was exported).
    """

    level: int
    samples: int
    bytes_per_s: float
    peak_bytes_per_s: float
    avail_bytes_per_s: float | None
    util: float | None
    peak_util: float | None


@dataclass(frozen=True)
class JobHistory:
    """A job's recorded behaviour.

    Attributes:
        job_id: the job.
        start_s, end_s: first and last sample, seconds since the epoch.
        levels: by level.
        intensity: the largest mean utilization over levels >= 1
            (:func:`ibqos.classify.classifier.intensity`).
        level: the level that gave it (None when no level has a utilization).
        cls: the class of that intensity.
    """

    job_id: str
    start_s: float
    end_s: float
    levels: tuple[LevelHistory, ...]
    intensity: float
    level: int | None
    cls: Class


def parse_query_range(doc: object, source: str) -> list[Series]:
    """The series of a query_range reply (already decoded from JSON).

    Raises:
        TraceError: ``<source>: <key path>: <what is wrong>``, or Prometheus's own error.
    """
    if not isinstance(doc, Mapping):
        raise TraceError(f"{source}: expected a JSON object, got {type(doc).__name__}")
    status = doc.get("status")
    if status == "error":
        raise TraceError(
            f"{source}: Prometheus answered an error: {doc.get('errorType', '')}:"
            f" {doc.get('error', '')}"
        )
    if status != "success":
        raise TraceError(f"{source}: status: expected 'success', got {status!r}")
    data = doc.get("data")
    if not isinstance(data, Mapping):
        raise TraceError(f"{source}: data: expected an object")
    if data.get("resultType") != "matrix":
        raise TraceError(
            f"{source}: data.resultType: expected 'matrix' (a range query),"
            f" got {data.get('resultType')!r}"
        )
    result = data.get("result")
    if not isinstance(result, list):
        raise TraceError(f"{source}: data.result: expected a list")
    out = []
    for i, entry in enumerate(result):
        where = f"{source}: data.result[{i}]"
        if not isinstance(entry, Mapping):
            raise TraceError(f"{where}: expected an object")
        labels = entry.get("metric")
        if not isinstance(labels, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in labels.items()
        ):
            raise TraceError(f"{where}.metric: expected an object of string labels")
        values = entry.get("values")
        if not isinstance(values, list):
            raise TraceError(f"{where}.values: expected a list")
        times: list[float] = []
        nums: list[float] = []
        for j, pair in enumerate(values):
            if not (
                isinstance(pair, list)
                and len(pair) == 2
                and isinstance(pair[0], int | float)
                and not isinstance(pair[0], bool)
                and isinstance(pair[1], str)
            ):
                raise TraceError(
                    f'{where}.values[{j}]: expected [time, "value"], got {json.dumps(pair)[:60]}'
                )
            try:
                value = float(pair[1])
            except ValueError:
                raise TraceError(f"{where}.values[{j}]: {pair[1]!r} is not a number") from None
            times.append(float(pair[0]))
            nums.append(value)
        out.append(Series(dict(labels), tuple(times), tuple(nums)))
    return out


def fetch_query_range(
    url: str, expr: str, start_s: float, end_s: float, step_s: float, timeout_s: float = 30.0
) -> list[Series]:
    """Run a range query on the Prometheus at *url* (``http://host:9090``).

    Raises:
        TraceError: the server cannot be reached, or its reply is not a good one.
    """
    query = urllib.parse.urlencode(
        {"query": expr, "start": f"{start_s:.3f}", "end": f"{end_s:.3f}", "step": f"{step_s:.3f}"}
    )
    full = f"{url.rstrip('/')}/api/v1/query_range?{query}"
    if not full.startswith(("http://", "https://")):
        raise TraceError(f"{url}: expected an http:// or https:// URL")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(full, timeout=timeout_s) as resp:
            body = resp.read()
    except urllib.error.HTTPError as err:
        with err:  # 400/422/503 carry Prometheus's JSON error
            body = err.read()
    except OSError as err:
        raise TraceError(f"{url}: cannot reach Prometheus") from err
    try:
        doc = json.loads(body)
    except ValueError:
        raise TraceError(f"{url}: query {expr!r}: the reply is not JSON") from None
    return parse_query_range(doc, f"{url} query {expr!r}")


def job_query(metric: str, job_id: str) -> str:
    """The PromQL selector of one of the job's series (the id escaped as PromQL wants)."""
    return f"{metric}{{job_id={json.dumps(job_id)}}}"


def job_history(
    job_id: str,
    series: Mapping[str, Sequence[Series]],
    thresholds: Thresholds | None = None,
) -> JobHistory:
    """A job's history from its series (``series[kind]`` for each kind of
    :data:`JOB_METRICS`; series of other jobs are ignored).

    Raises:
        TraceError: the job has no traffic samples, or a series has no ``level`` label.
    """
    by_level: dict[str, dict[int, list[float]]] = {kind: {} for kind in JOB_METRICS}
    times: list[float] = []
    for kind in JOB_METRICS:
        for s in series.get(kind, ()):
            if s.labels.get("job_id") != job_id:
                continue
            level_text = s.labels.get("level", "")
            if not level_text.isdigit():
                raise TraceError(f"{JOB_METRICS[kind]}: a series of job {job_id} has no level")
            values = [v for v in s.values if math.isfinite(v)]
            by_level[kind].setdefault(int(level_text), []).extend(values)
            if kind == "bytes":
                times.extend(s.times_s)
    if not times:
        raise TraceError(f"job {job_id}: no samples of {JOB_METRICS['bytes']} in the range")
    levels = []
    for level in sorted(by_level["bytes"]):
        rates = by_level["bytes"][level]
        avail = by_level["avail"].get(level)
        util = by_level["util"].get(level)
        levels.append(
            LevelHistory(
                level=level,
                samples=len(rates),
                bytes_per_s=_mean(rates),
                peak_bytes_per_s=max(rates, default=0.0),
                avail_bytes_per_s=_mean(avail) if avail else None,
                util=_mean(util) if util else None,
                peak_util=max(util) if util else None,
            )
        )
    value, top = intensity({lh.level: lh.util for lh in levels if lh.util is not None})
    return JobHistory(
        job_id=job_id,
        start_s=min(times),
        end_s=max(times),
        levels=tuple(levels),
        intensity=value,
        level=top,
        cls=class_of(value, thresholds or Thresholds()),
    )


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0
