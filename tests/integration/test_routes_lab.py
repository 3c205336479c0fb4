"""OpenSM's forwarding tables into the agent, on a lab: its dump, the ibroute fallback.

The agent's route source (built as ``ibqos run`` builds it, from the lab's config) reads the
dump OpenSM writes; with the dump gone, ``ibroute -n`` reads of every switch (real SMPs
through ibsim) give the same tables; a link that goes down makes OpenSM route again and
rewrite the dump, which the source reads at its next poll.
"""

from __future__ import annotations

import time

from ibqos.agent.pipeline import Pipeline
from ibqos.collect.routes import RouteSource, ibroute_runner, switch_lids
from ibqos.config.load import load_config
from ibqos.fabric.lfts import read_lft_dump
from ibqos.fabric.model import fabric_from_file


def test_the_agent_reads_the_dump_and_ibroute_gives_the_same(make_lab, tmp_path) -> None:
    lab = make_lab("2;8,4;1,2")
    config = load_config(lab.paths.config)
    dump = lab.paths.opensm.lfts_dump
    assert config.fabric.lft_dump == dump and config.fabric.routes == "auto"
    fabric = fabric_from_file(lab.paths.discovered)
    lids = switch_lids(fabric)

    src = Pipeline.routes_for(config)
    assert src.poll(fabric) is True
    assert src.source == "dump" and sorted(src.tables or {}) == lids
    from_dump = src.tables
    assert from_dump == read_lft_dump(dump.read_text())

    # the dump unavailable: auto falls back to ibroute, run as the agent runs it
    src = RouteSource(
        "auto",
        tmp_path / "no-such.dump",
        300.0,
        run=ibroute_runner(env=lab.env(), cwd=lab.paths.run),
    )
    t0 = time.monotonic()
    assert src.poll(fabric) is False  # reading in the background: the cycle goes on
    started = time.monotonic() - t0
    src.wait(60)
    assert src.poll(fabric) is True
    print(
        f"ibroute: {len(lids)} switches in {src.last_read_s:.3f} s"
        f" ({1000 * (src.last_read_s or 0) / len(lids):.1f} ms per switch);"
        f" the poll that started it took {1000 * started:.1f} ms"
    )
    assert started < 0.5
    assert src.source == "ibroute" and src.problem == ""
    assert src.tables == from_dump


def test_the_dump_rewritten_after_a_link_goes_down(make_lab) -> None:
    lab = make_lab("2;4,2;1,2")
    config = load_config(lab.paths.config)
    fabric = fabric_from_file(lab.paths.discovered)
    src = Pipeline.routes_for(config)
    assert src.poll(fabric)
    before = src.tables
    assert before is not None
    lid = lab.topo.lids[next(iter(lab.topo.ports(lab.resolve_node("cn0002"))))]
    assert all(lid in table for table in before.values())
    lab.link_down("cn0002", 1)
    deadline = time.monotonic() + 30
    while not src.poll(fabric):  # OpenSM's heavy sweep drops the CA: a new dump
        assert time.monotonic() < deadline, f"no new tables: {src.problem or 'dump unchanged'}"
        time.sleep(0.2)
    after = src.tables
    assert after is not None and sorted(after) == sorted(before)
    assert all(lid not in table for table in after.values())
