"""Communication traces: how many bytes each rank sent to each other rank, per interval.

The ibqos trace format is CSV text (``docs/characterize.md``)::

    # ibqos communication trace
    # ranks: 4
    start_s,end_s,src,dst,bytes
    0.0,1.0,0,1,1048576
    0.0,1.0,1,2,1048576

- lines starting with ``#`` are comments; ``# ranks: N`` declares the rank count (ranks
  that never send or receive would otherwise be missed; without it, the largest rank + 1);
- the first other line is the header, exactly ``start_s,end_s,src,dst,bytes``;
- every record: an interval (seconds from the trace's start, ``end_s > start_s``), a
  source and a destination rank (integers >= 0, not the same rank), and the bytes sent
  in that interval (a number >= 0);
- records of the same ``(start_s, end_s)`` belong to one interval; two different intervals
  must not overlap.  Time between intervals is time without traffic.

A trace is turned into node traffic (:meth:`CommTrace.node_traffic`) by placing ranks on
nodes in blocks of ``ranks_per_node``, as schedulers place MPI ranks by default; traffic
between ranks of one node stays inside the node and never reaches the network.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ibqos.classify.traffic import NodeTraffic
from ibqos.errors import TraceError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

HEADER = ("start_s", "end_s", "src", "dst", "bytes")


@dataclass(frozen=True)
class CommTrace:
    """Bytes sent between ranks per interval.

    Attributes:
        source: where it came from, for messages.
        ranks: number of ranks (0 .. ranks - 1).
        starts_s, ends_s: per interval, its start and end (seconds from the trace start),
            sorted, not overlapping.
        interval, src, dst: per record, its interval's index and the two ranks.
        bytes: per record, bytes sent in the interval.
    """

    source: str
    ranks: int
    starts_s: FloatArray
    ends_s: FloatArray
    interval: IntArray
    src: IntArray
    dst: IntArray
    bytes: FloatArray

    @property
    def span_s(self) -> float:
        """Seconds from the first interval's start to the last one's end."""
        return float(self.ends_s.max() - self.starts_s.min())

    @property
    def total_bytes(self) -> float:
        """Bytes sent over the whole trace."""
        return float(self.bytes.sum())

    def rank_matrix(self) -> FloatArray:
        """Mean bytes per second from rank i to rank j over the trace's span."""
        m = np.zeros((self.ranks, self.ranks))
        np.add.at(m, (self.src, self.dst), self.bytes)
        return m / self.span_s

    def node_traffic(self, ranks_per_node: int = 1) -> NodeTraffic:
        """The trace's traffic between nodes, ranks placed in blocks of *ranks_per_node*
        (rank r on node ``r // ranks_per_node``); traffic within a node is dropped."""
        if ranks_per_node < 1:
            raise TraceError(f"{self.source}: ranks per node must be at least 1")
        s, d = self.src // ranks_per_node, self.dst // ranks_per_node
        off = s != d
        return NodeTraffic(
            nodes=-(-self.ranks // ranks_per_node),
            interval_s=self.ends_s - self.starts_s,
            span_s=self.span_s,
            interval=self.interval[off],
            src=s[off],
            dst=d[off],
            bytes=self.bytes[off],
        )


def build_trace(
    source: str,
    ranks: int,
    records: list[tuple[float, float, int, int, float]],
) -> CommTrace:
    """A trace from (start_s, end_s, src, dst, bytes) records (checked by the callers).

    Raises:
        TraceError: there are no records, or two different intervals overlap.
    """
    if not records:
        raise TraceError(f"{source}: no records: nothing was sent")
    spans = sorted({(r[0], r[1]) for r in records})
    for (s0, e0), (s1, e1) in itertools.pairwise(spans):
        if s1 < e0:
            raise TraceError(f"{source}: intervals {s0}-{e0} s and {s1}-{e1} s overlap")
    index = {span: i for i, span in enumerate(spans)}
    return CommTrace(
        source=source,
        ranks=ranks,
        starts_s=np.array([s for s, _ in spans], dtype=np.float64),
        ends_s=np.array([e for _, e in spans], dtype=np.float64),
        interval=np.array([index[(r[0], r[1])] for r in records], dtype=np.int64),
        src=np.array([r[2] for r in records], dtype=np.int64),
        dst=np.array([r[3] for r in records], dtype=np.int64),
        bytes=np.array([r[4] for r in records], dtype=np.float64),
    )


def parse_csv_trace(text: str, source: str) -> CommTrace:
    """Parse the ibqos trace format (see the module docstring).

    Raises:
        TraceError: ``<source>:<line>: <what is wrong>``.
    """
    declared: int | None = None
    header_seen = False
    records: list[tuple[float, float, int, int, float]] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        where = f"{source}:{lineno}"
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            key, sep, value = stripped[1:].partition(":")
            if sep and key.strip() == "ranks":
                declared = _int(value.strip(), where, "ranks", low=1)
            continue
        fields = next(csv.reader(io.StringIO(stripped)))
        if not header_seen:
            if tuple(f.strip() for f in fields) != HEADER:
                raise TraceError(f"{where}: expected the header {','.join(HEADER)}, got {line!r}")
            header_seen = True
            continue
        if len(fields) != len(HEADER):
            raise TraceError(f"{where}: expected {len(HEADER)} fields, got {len(fields)}")
        start = _float(fields[0], where, "start_s")
        end = _float(fields[1], where, "end_s")
        if not end > start:
            raise TraceError(f"{where}: end_s {end} is not after start_s {start}")
        src = _int(fields[2], where, "src")
        dst = _int(fields[3], where, "dst")
        if src == dst:
            raise TraceError(f"{where}: src and dst are the same rank {src}")
        if declared is not None and max(src, dst) >= declared:
            raise TraceError(f"{where}: rank {max(src, dst)} is not below ranks: {declared}")
        records.append((start, end, src, dst, _float(fields[4], where, "bytes")))
    if not header_seen:
        raise TraceError(f"{source}: no header line {','.join(HEADER)}")
    if not records:
        raise TraceError(f"{source}: no records: nothing was sent")
    ranks = declared if declared is not None else max(max(r[2], r[3]) for r in records) + 1
    return build_trace(source, ranks, records)


def load_csv_trace(path: Path) -> CommTrace:
    """Read an ibqos trace file (:func:`parse_csv_trace`)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as err:
        raise TraceError(f"{path}: cannot read") from err
    return parse_csv_trace(text, str(path))


def format_csv_trace(trace: CommTrace) -> str:
    """The trace in the ibqos trace format (what :func:`parse_csv_trace` reads back)."""
    out = io.StringIO()
    out.write(f"# ibqos communication trace\n# ranks: {trace.ranks}\n")
    w = csv.writer(out, lineterminator="\n")
    w.writerow(HEADER)
    for i, s, d, b in zip(
        trace.interval.tolist(),
        trace.src.tolist(),
        trace.dst.tolist(),
        trace.bytes.tolist(),
        strict=True,
    ):
        w.writerow((repr(float(trace.starts_s[i])), repr(float(trace.ends_s[i])), s, d, repr(b)))
    return out.getvalue()


def _float(text: str, where: str, key: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TraceError(f"{where}: {key}: expected a number, got {text.strip()!r}") from None
    if not math.isfinite(value) or value < 0:
        raise TraceError(f"{where}: {key}: expected a finite number >= 0, got {text.strip()!r}")
    return value


def _int(text: str, where: str, key: str, low: int = 0) -> int:
    try:
        value = int(text)
    except ValueError:
        raise TraceError(f"{where}: {key}: expected an integer, got {text.strip()!r}") from None
    if value < low:
        raise TraceError(f"{where}: {key}: expected an integer >= {low}, got {value}")
    return value
