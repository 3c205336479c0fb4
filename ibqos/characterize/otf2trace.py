"""Import OTF2 traces (the format Score-P, Vampir and Scalasca use) as communication traces.

Read through the OTF2 library's own Python bindings (the ``otf2`` package).  What is taken
from an archive (OTF2 3.x event and definition records):

- MPI ranks: the locations of the MPI paradigm's ``COMM_LOCATIONS`` group, in its order
  (rank r is member r, as Score-P writes them);
- point-to-point sends: ``MpiSend`` and ``MpiIsend`` records, ``msgLength`` bytes from the
  location's rank to the ``receiver``-th member of the record's communicator;
- collectives: ``MpiCollectiveEnd`` records, whose ``sizeSent`` bytes name no peer; they
  are spread evenly over the communicator's other members (what a tree or ring algorithm
  averages to), and counted apart (:attr:`Otf2Import.collective_bytes`);
- time: ticks converted to seconds with the clock properties (``timerResolution`` ticks
  per second, from ``globalOffset``); records are summed into intervals of
  ``interval_s`` seconds.

Other records (receives, RMA, I/O, regions) are not traffic of their own or not between
ranks, and are skipped.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ibqos.characterize.extra import extra_module
from ibqos.characterize.trace import CommTrace, build_trace
from ibqos.errors import TraceError


@dataclass(frozen=True)
class Otf2Import:
    """An imported archive.

    Attributes:
        trace: the communication trace.
        sends: point-to-point send records read.
        collective_bytes: bytes of collectives spread over their communicators.
    """

    trace: CommTrace
    sends: int
    collective_bytes: float


def load_otf2(path: Path, interval_s: float = 1.0) -> Otf2Import:
    """Read an OTF2 archive (its anchor file, ``traces.otf2``, or the directory holding it).

    Raises:
        TraceError: the archive cannot be read, is not an MPI trace, or records no sends.
    """
    otf2 = extra_module("otf2", "OTF2 traces")  # only the OTF2 import needs the library

    if not (math.isfinite(interval_s) and interval_s > 0):
        raise TraceError(f"{path}: interval {interval_s!r} s: expected a number > 0")
    anchor = path / "traces.otf2" if path.is_dir() else path
    if not anchor.is_file():
        raise TraceError(f"{anchor}: no such OTF2 anchor file")
    try:
        with otf2.reader.open(str(anchor)) as reader:
            return _read(reader, str(anchor), interval_s)
    except TraceError:
        raise
    except Exception as err:  # the bindings raise their own error types, and OSError
        raise TraceError(f"{anchor}: not a readable OTF2 archive ({err})") from err


def _read(reader: Any, source: str, interval_s: float) -> Otf2Import:
    from otf2.enums import GroupType, Paradigm
    from otf2.events import MpiCollectiveEnd, MpiIsend, MpiSend

    defs = reader.definitions
    world = next(
        (
            g
            for g in defs.groups
            if g.group_type == GroupType.COMM_LOCATIONS and g.paradigm == Paradigm.MPI
        ),
        None,
    )
    if world is None:
        raise TraceError(f"{source}: no MPI locations group: not a trace of an MPI program")
    ranks = len(world.members)
    clock = defs.clock_properties
    ticks_per_s = float(clock.timer_resolution)
    offset = clock.global_offset
    buckets: dict[tuple[int, int, int], float] = {}
    sends = 0
    collective = 0.0

    def add(time: int, src: int, dst: int, size: float) -> None:
        k = int(max(0, time - offset) / ticks_per_s // interval_s)
        buckets[k, src, dst] = buckets.get((k, src, dst), 0.0) + size

    for location, event in _events(reader):
        if isinstance(event, MpiSend | MpiIsend):
            src = world.rank(location)
            dst = world.rank(event.communicator.location(event.receiver))
            sends += 1
            if src != dst:
                add(event.time, src, dst, float(event.msg_length))
        elif isinstance(event, MpiCollectiveEnd) and event.size_sent > 0:
            src = world.rank(location)
            peers = [world.rank(m) for m in event.communicator.group.members]
            peers = [p for p in peers if p != src]
            for dst in peers:
                add(event.time, src, dst, event.size_sent / len(peers))
            collective += float(event.size_sent) if peers else 0.0
    if not buckets:
        raise TraceError(f"{source}: no MPI sends between different ranks")
    records = [
        (k * interval_s, (k + 1) * interval_s, src, dst, size)
        for (k, src, dst), size in sorted(buckets.items())
    ]
    return Otf2Import(build_trace(source, ranks, records), sends, collective)


def _events(reader: Any) -> Iterator[tuple[Any, Any]]:
    yield from reader.events
