"""OTF2 import: archives written by the OTF2 library itself (its Python bindings), laid out
as Score-P writes MPI traces (a process location group and a thread per rank, the MPI
COMM_LOCATIONS group, MPI_COMM_WORLD), read back through the same library."""

from __future__ import annotations

from pathlib import Path

import otf2
import pytest
from otf2.enums import CollectiveOp, GroupType, LocationGroupType, LocationType, Paradigm

from ibqos.characterize.otf2trace import load_otf2
from ibqos.errors import TraceError

NS = 1_000_000_000  # timer ticks per second


def write_trace(
    path: Path, ranks: int, sends: list[tuple[float, int, int, int]], allreduce: int = 0
) -> Path:
    """An MPI trace: *sends* are (seconds, src, dst, bytes) point-to-point sends (MpiSend,
    odd ones as MpiIsend); with *allreduce*, every rank ends one MPI_Allreduce at 0.5 s
    having sent that many bytes."""
    with otf2.writer.open(str(path), timer_resolution=NS) as trace:
        defs = trace.definitions
        root = defs.system_tree_node("machine")
        locations = []
        for r in range(ranks):
            node = defs.system_tree_node(f"node{r}", parent=root)
            group = defs.location_group(
                f"MPI Rank {r}",
                location_group_type=LocationGroupType.PROCESS,
                system_tree_parent=node,
            )
            locations.append(
                defs.location("Master thread", type=LocationType.CPU_THREAD, group=group)
            )
        defs.group(
            "", group_type=GroupType.COMM_LOCATIONS, paradigm=Paradigm.MPI, members=locations
        )
        world_group = defs.group(
            "", group_type=GroupType.COMM_GROUP, paradigm=Paradigm.MPI, members=list(range(ranks))
        )
        world = defs.comm("MPI_COMM_WORLD", group=world_group)
        writers = [trace.event_writer_from_location(loc) for loc in locations]
        # every location's events in time order, as a tracer records them
        for i, (t, src, dst, size) in enumerate(sorted(sends)):
            if i % 2:
                writers[src].mpi_isend(int(t * NS), dst, world, 0, size, i)
            else:
                writers[src].mpi_send(int(t * NS), dst, world, 0, size)
        if allreduce:
            for w in writers:
                w.mpi_collective_end(
                    int(0.5 * NS), CollectiveOp.ALLREDUCE, world, 0, allreduce, allreduce
                )
    return path / "traces.otf2"


def test_point_to_point_sends_become_a_trace(tmp_path: Path) -> None:
    sends = [
        (0.1, 0, 1, 1000),
        (0.2, 1, 2, 2000),
        (1.5, 2, 3, 3000),
        (1.6, 3, 0, 4000),
        (1.7, 0, 1, 500),
    ]
    anchor = write_trace(tmp_path / "ring", 4, sends)
    imported = load_otf2(anchor.parent, interval_s=1.0)  # the directory works too
    trace = imported.trace
    assert imported.sends == 5 and imported.collective_bytes == 0
    assert trace.ranks == 4 and trace.total_bytes == 10500
    assert trace.starts_s.tolist() == [0.0, 1.0] and trace.ends_s.tolist() == [1.0, 2.0]
    per_interval = {
        (int(i), int(s), int(d)): b
        for i, s, d, b in zip(trace.interval, trace.src, trace.dst, trace.bytes, strict=True)
    }
    # times count from the first event (the clock's global offset)
    assert per_interval == {
        (0, 0, 1): 1000,
        (0, 1, 2): 2000,
        (1, 2, 3): 3000,
        (1, 3, 0): 4000,
        (1, 0, 1): 500,
    }


def test_collectives_are_spread_over_the_communicator(tmp_path: Path) -> None:
    anchor = write_trace(tmp_path / "ar", 4, [(0.0, 0, 1, 10)], allreduce=300)
    imported = load_otf2(anchor)
    m = imported.trace.rank_matrix() * imported.trace.span_s  # bytes
    assert imported.collective_bytes == 4 * 300
    assert m[2, 0] == pytest.approx(100) and m[0, 1] == pytest.approx(110)  # 300 / 3 peers + 10


def test_bad_archives(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="no such OTF2 anchor file"):
        load_otf2(tmp_path / "missing.otf2")
    junk = tmp_path / "junk.otf2"
    junk.write_text("not an archive\n")
    with pytest.raises(TraceError, match=r"junk\.otf2: not a readable OTF2 archive"):
        load_otf2(junk)
    anchor = write_trace(tmp_path / "quiet", 2, [(0.0, 0, 0, 64)])  # only a send to itself
    with pytest.raises(TraceError, match="no MPI sends between different ranks"):
        load_otf2(anchor)
