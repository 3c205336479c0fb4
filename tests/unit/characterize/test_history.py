"""A job's recorded history from Prometheus range queries.  The replies in
``tests/data/prometheus/`` were recorded from a real Prometheus 2.42 scraping ``ibqos run``
on a lab (``tests/integration/test_characterize_lab.py`` with IBQOS_RECORD_PROMETHEUS):
job A, all-to-all on 4 hosts over 2 leaves at 1e8 bytes/s a host."""

from __future__ import annotations

import json

import pytest

from ibqos.characterize.history import JOB_METRICS, job_history, job_query, parse_query_range
from ibqos.errors import TraceError
from tests.support.paths import TESTS

DATA = TESTS / "data" / "prometheus"


def recorded(kind: str) -> object:
    return json.loads((DATA / f"query_range_{kind}.json").read_text())


def test_recorded_replies_give_the_job_history() -> None:
    series = {kind: parse_query_range(recorded(kind), kind) for kind in JOB_METRICS}
    assert {s.labels["level"] for s in series["bytes"]} == {"0", "1"}
    assert all(s.labels["job_id"] == "A" for ss in series.values() for s in ss)
    h = job_history("A", series)
    l0, l1 = h.levels
    assert l1.samples == len(series["bytes"][1].values) >= 5
    # what the lab's job sends: 4 hosts x 1e8 at level 0; 2 of each host's 3 peers are
    # on the other leaf, so 2/3 of it crosses level 1 (the measured figures are close)
    assert l0.bytes_per_s == pytest.approx(4e8, rel=0.1)
    assert l1.bytes_per_s == pytest.approx(4e8 * 2 / 3, rel=0.1)
    assert l1.avail_bytes_per_s == pytest.approx(2 * 2 * 12.5e9)  # 2 leaves x 2 uplinks
    assert h.intensity == pytest.approx(l1.util) and h.level == 1 and h.cls == "low"
    assert l1.peak_bytes_per_s == max(series["bytes"][1].values)
    assert h.start_s < h.end_s


def test_other_jobs_series_are_ignored_and_none_is_an_error() -> None:
    series = {kind: parse_query_range(recorded(kind), kind) for kind in JOB_METRICS}
    with pytest.raises(TraceError, match="job B: no samples of ibqos_job_traffic"):
        job_history("B", series)


def test_prometheus_errors_and_other_result_types() -> None:
    error = json.loads((DATA / "query_range_error.json").read_text())
    with pytest.raises(TraceError, match=r"q: Prometheus answered an error: bad_data: 1:43: parse"):
        parse_query_range(error, "q")
    instant = json.loads((DATA / "query_instant.json").read_text())
    with pytest.raises(TraceError, match=r"q: data\.resultType: expected 'matrix'.*got 'vector'"):
        parse_query_range(instant, "q")


def damaged(path: str, value: object) -> object:
    doc = recorded("bytes")
    target = doc
    keys = path.split("/")
    for key in keys[:-1]:
        target = target[int(key) if key.isdigit() else key]  # type: ignore[index]
    last = keys[-1]
    target[int(last) if last.isdigit() else last] = value  # type: ignore[index]
    return doc


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "f.json: expected a JSON object, got list"),
        ({"status": "weird"}, "f.json: status: expected 'success'"),
        (damaged("data", []), "f.json: data: expected an object"),
        (damaged("data/result", {}), "f.json: data.result: expected a list"),
        (damaged("data/result/1/metric", {"level": 1}), "f.json: data.result[1].metric: expected"),
        (
            damaged("data/result/0/values/2", [1.0]),
            'f.json: data.result[0].values[2]: expected [time, "value"]',
        ),
        (
            damaged("data/result/0/values/2/1", "many"),
            "f.json: data.result[0].values[2]: 'many' is not a number",
        ),
        (damaged("data/result/0/values", None), "f.json: data.result[0].values: expected a list"),
    ],
)
def test_malformed_replies_name_the_key(doc: object, message: str) -> None:
    with pytest.raises(TraceError) as info:
        parse_query_range(doc, "f.json")
    assert str(info.value).startswith(message), str(info.value)


def test_job_ids_are_quoted_for_promql() -> None:
    assert job_query("m", 'a"b') == 'm{job_id="a\\"b"}'
