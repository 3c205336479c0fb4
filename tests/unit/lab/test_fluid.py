"""The lab's fluid contention mode, its QoS read-back and its progress metrics, without ibsim.

The traffic model runs on a small XGFT with D-mod-K routes (``xgft_network``); its results
are checked against the contention simulator run on its own.  The read-back parses saquery
and smpquery replies recorded on a lab (tests/data/saquery, tests/data/smpquery).
"""

from __future__ import annotations

import logging
import urllib.request
from collections.abc import Sequence

import numpy as np
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from ibqos.errors import IbqosError, LabError
from ibqos.fabric.topology import Port, parse_ibnetdiscover
from ibqos.fabric.xgft import parse_xgft
from ibqos.jobs.model import Job
from ibqos.lab.progress import LabCollector, Window, serve
from ibqos.lab.readback import (
    OPENSM_DEFAULT,
    Probe,
    QosSetup,
    ReadBack,
    parse_high_limit,
    parse_sl2vl,
    parse_vlarb,
    pick_probe,
    read_tables,
)
from ibqos.lab.traffic import XMIT_WAIT_TICKS_PER_S, TrafficModel
from ibqos.sim.fluid import FluidSim
from ibqos.sim.network import Network, xgft_network
from ibqos.sim.qos import Arbitration
from ibqos.sim.workload import prepare
from tests.support.paths import TESTS

DATA = TESTS / "data"
SAQUERY = DATA / "saquery"
PORTINFO = DATA / "smpquery" / "spine" / "stdout.txt"
EDR_4X = 12.5e9

#: everything on one lane (VL 0), as with OpenSM's defaults and no QoS policy
ONE_LANE = Arbitration({}, (0,) * 16, ((0, 32),))


def split(favoured: str, other: str, ratio: int = 4) -> Arbitration:
    """*favoured* on VL 2 with *ratio* times the packets per round of *other* on VL 1."""
    return Arbitration(
        {other: 1, favoured: 2}, (0, 1, 2) + (0,) * 13, ((0, 32), (1, 32), (2, 32 * ratio))
    )


def cn(*numbers: int) -> tuple[str, ...]:
    return tuple(f"cn{i:04d}" for i in numbers)


def job(jid: str, nodes: tuple[str, ...], rate: float, duty: float, period: float = 0.1) -> Job:
    return Job(jid, nodes, "all-to-all", rate, duty, period)


# On 2;8,4;1,2 (leaves of 8 hosts, 2 uplinks each): two all-to-alls across leaves 1 and 2.
# D-mod-K sends destination d up uplink d mod 2: cn0009 and cn0013 (d = 8, 12) share one
# uplink, cn0010 and cn0014 the other, so every uplink carries 2 x 4 GB/s of each job:
# 16 GB/s on 12.5 GB/s while both communicate.
HEAVY = job("H", cn(1, 2, 9, 10), 1.2e10, 1.0)
LIGHT = job("L", cn(3, 4, 13, 14), 1.2e10, 0.5)
# Inside leaf 4: shares no link with them.
ALONE = job("A", cn(25, 26), 2.0e9, 0.5, period=0.05)


@pytest.fixture(scope="module")
def net() -> Network:
    return xgft_network(parse_xgft("2;8,4;1,2"))


def fluid_model(net: Network, arb: Arbitration = ONE_LANE, **kw: float) -> TrafficModel:
    hosts: dict[str, list[Port]] = {}
    for ca in net.topo.cas():
        hosts.setdefault(ca.hostname, []).extend(net.topo.ports(ca.id))
    return TrafficModel(net.topo, net.router, hosts, network=net, arbitration=arb, **kw)


def run(model: TrafficModel, seconds: float, dt: float = 0.05, vls: bool = False) -> None:
    """Tick *seconds* in ticks of *dt* (the last one shorter if need be)."""
    n = int(seconds / dt + 1e-9)
    for step in [dt] * n + ([seconds - n * dt] if seconds - n * dt > 1e-12 else []):
        model.tick(step, vls=model.vls() if vls else None)


def simulated(net: Network, jobs: Sequence[Job], arb: Arbitration, seconds: float) -> FluidSim:
    sim = FluidSim(net, prepare(net, jobs), arb)
    sim.advance(seconds)
    return sim


# --- the fluid traffic model ------------------------------------------------------------


def test_fluid_needs_an_arbitration(net: Network) -> None:
    hosts = {ca.hostname: list(net.topo.ports(ca.id)) for ca in net.topo.cas()}
    with pytest.raises(ValueError, match="arbitration"):
        TrafficModel(net.topo, net.router, hosts, network=net)


def test_bytes_per_tick_are_the_simulators(net: Network) -> None:
    model = fluid_model(net)
    model.set_jobs((HEAVY, LIGHT))
    run(model, 2.0)
    sim = simulated(net, (HEAVY, LIGHT), ONE_LANE, 2.0)
    assert [model.jobs[j].iterations for j in "HL"] == sim.iterations.tolist()
    np.testing.assert_allclose(model.xmit_bytes, sim.link_bytes, rtol=1e-9)
    for i, jid in enumerate("HL"):
        load = model.jobs[jid]
        np.testing.assert_allclose(load.truth, load.level_rate * sim.sent[i], rtol=1e-9)
        # bytes received: every byte sent arrives, over the same ports' peers
        assert model.rcv_bytes.sum() == pytest.approx(model.xmit_bytes.sum(), rel=1e-9)
    # one lane: both held to 12.5/16 of their rate while they overlap
    assert sim.iterations[0] < 20 and sim.iterations[1] < 20


def test_a_different_arbitration_changes_the_bytes_per_tick(net: Network) -> None:
    """Favouring L (4x its packets per round on its own VL) gives it its full rate on the
    shared uplinks: its bytes per tick and iterations rise, H's fall, as the simulator
    says under each setup."""
    per_setup = {}
    for name, arb in (("one lane", ONE_LANE), ("L favoured", split("L", "H"))):
        model = fluid_model(net, arb)
        model.set_jobs((HEAVY, LIGHT))
        run(model, 2.0)
        sim = simulated(net, (HEAVY, LIGHT), arb, 2.0)
        sent = {j: model.jobs[j].truth[0] / model.jobs[j].level_rate[0] for j in "HL"}
        assert [sent["H"], sent["L"]] == pytest.approx(sim.sent.tolist(), rel=1e-9), name
        per_setup[name] = (sent, {j: model.jobs[j].iterations for j in "HL"})
    (sent1, it1), (sent2, it2) = per_setup["one lane"], per_setup["L favoured"]
    assert sent2["L"] > sent1["L"] and sent2["H"] < sent1["H"]
    assert it2["L"] == 20  # alone-speed: 10 per second
    assert it1["L"] <= 18 and it2["H"] < it1["H"]


def test_set_arbitration_mid_run_is_the_simulators_set_arbitration(net: Network) -> None:
    model = fluid_model(net)
    model.set_jobs((HEAVY, LIGHT))
    run(model, 1.0)
    model.set_arbitration(ONE_LANE)  # the same setup: nothing happens
    model.set_arbitration(split("L", "H"))
    run(model, 1.0)
    sim = FluidSim(net, prepare(net, (HEAVY, LIGHT)), ONE_LANE)
    sim.advance(1.0)
    sim.set_arbitration(split("L", "H"))
    sim.advance(1.0)
    assert [model.jobs[j].iterations for j in "HL"] == sim.iterations.tolist()
    np.testing.assert_allclose(model.xmit_bytes, sim.link_bytes, rtol=1e-9)
    assert model.vls() == {"H": 1, "L": 2}


@pytest.mark.parametrize("change", ["add", "remove"])
def test_mix_change_keeps_progress(net: Network, change: str) -> None:
    """A job that starts or ends elsewhere leaves H and L exactly where an uninterrupted
    simulation has them: same iterations, same phase, same bytes."""
    model = fluid_model(net)
    first, then = ((HEAVY, LIGHT), (HEAVY, LIGHT, ALONE))
    if change == "remove":
        first, then = then, first
    model.set_jobs(first)
    run(model, 1.03)  # mid-phase
    model.set_jobs(then)
    run(model, 0.97)
    sim = simulated(net, (HEAVY, LIGHT), ONE_LANE, 2.0)
    assert [model.jobs[j].iterations for j in "HL"] == sim.iterations.tolist()
    for i, jid in enumerate("HL"):
        load = model.jobs[jid]
        np.testing.assert_allclose(load.truth, load.level_rate * sim.sent[i], rtol=1e-9)
    if change == "add":  # A started at 1.03 s with its compute phase, alone: 20 per second
        assert model.jobs["A"].iterations == int(0.97 / 0.05)
    else:
        assert model.finished["A"].iterations == int(1.03 / 0.05)


def test_changed_job_keeps_its_count_and_restarts_its_iteration(net: Network) -> None:
    model = fluid_model(net)
    model.set_jobs((ALONE,))
    run(model, 1.0)
    assert model.jobs["A"].iterations == 20
    faster = job("A", ALONE.nodes, 2.0e9, 0.5, period=0.025)
    model.set_jobs((faster,))
    run(model, 1.0)
    assert model.jobs["A"].iterations == 20 + 40
    assert not model.finished


def test_a_job_on_an_unserved_vl_stalls(net: Network, caplog: pytest.LogCaptureFixture) -> None:
    """SL 3 maps to VL 3, which has no VLArb entry: L stops dead and H runs alone; once
    VL 3 is served L goes on from where it stopped."""
    stalls = Arbitration({"L": 3}, tuple(range(16)), ((0, 32), (1, 32)))
    model = fluid_model(net)
    model.set_jobs((HEAVY, LIGHT))
    run(model, 0.5)
    done = model.jobs["L"].iterations
    bytes_l = model.jobs["L"].truth.copy()
    with caplog.at_level(logging.WARNING, logger="ibqos.lab.traffic"):
        model.set_arbitration(stalls)
        run(model, 0.5)
        run(model, 0.5)
    assert caplog.text.count("no VLArb entry serves") == 1  # said once
    assert model.jobs["L"].iterations == done
    np.testing.assert_array_equal(model.jobs["L"].truth, bytes_l)
    assert model.jobs["L"].last_rate.sum() == 0.0
    assert model.jobs["H"].iterations >= 5 + 10 - 1  # alone: 10 per second
    assert model.vls()["L"] == 3
    model.set_arbitration(Arbitration({"L": 3}, tuple(range(16)), ((0, 32), (3, 32))))
    run(model, 0.5)
    assert model.jobs["L"].iterations > done


def test_xmit_wait_while_communicating(net: Network) -> None:
    """A ring at 4x its links' rate, half of each period computing (alone): it
    communicates 4x longer than declared, so 0.02 s of each 0.025 s iteration, and its
    host port waits (L - C) / L of that time."""
    ring = Job("R", cn(1, 9), "ring", 5e10, 0.5, 0.01)
    model = fluid_model(net)
    model.set_jobs((ring,))
    run(model, 1.0, dt=0.01)
    src = model.router.port_index[net.hosts["cn0001"]]
    assert model.jobs["R"].iterations == 40
    assert model.xmit_wait[src] == pytest.approx(0.8 * 0.75 * XMIT_WAIT_TICKS_PER_S, rel=1e-6)
    assert model.xmit_bytes[src] == pytest.approx(0.8 * EDR_4X, rel=1e-6)
    assert model.xmit_bytes.max() <= EDR_4X * (1 + 1e-9)  # never above the link


def test_xmit_wait_splits_over_the_read_back_vls(net: Network) -> None:
    """Two rings on the same hosts, each on its own VL: the wait splits by the bytes
    each offers (3:1)."""
    a = Job("a", cn(1, 9), "ring", 3e10, 1.0, 0.01)
    b = Job("b", cn(1, 9), "ring", 1e10, 1.0, 0.01)
    arb = Arbitration({"a": 2, "b": 5}, tuple(range(16)), ((2, 32), (5, 32)))
    model = fluid_model(net, arb)
    model.set_jobs((a, b))
    run(model, 0.1, dt=0.01, vls=True)
    i = model.router.port_index[net.hosts["cn0001"]]
    wait = (1 - EDR_4X / 4e10) * XMIT_WAIT_TICKS_PER_S * 0.1
    assert model.xmit_wait[i] == pytest.approx(wait)
    assert model.vl_xmit_wait is not None
    assert model.vl_xmit_wait[i, 2] == pytest.approx(0.75 * wait)
    assert model.vl_xmit_wait[i, 5] == pytest.approx(0.25 * wait)


# --- read-back: recorded replies -----------------------------------------------------------


def reply(name: str) -> str:
    return (SAQUERY / name).read_text()


def test_parse_recorded_tables() -> None:
    assert parse_sl2vl(reply("sl2vl-5-1-2.txt")) == (*range(8), *range(8))
    assert parse_sl2vl(reply("ibqos-sl2vl-3-1-5.txt")) == (0, 2, 1) + (0,) * 13
    assert parse_vlarb(reply("vlar-5-1-1.txt")) == tuple((vl, 4) for vl in range(1, 8))
    assert parse_vlarb(reply("vlar-3-5-3.txt")) == ((0, 4),)
    assert parse_vlarb(reply("ibqos-vlar-3-5-1.txt")) == ((0, 32), (2, 64), (1, 32))
    assert parse_vlarb(reply("ibqos-vlar-3-5-3.txt")) == ()
    assert parse_high_limit(PORTINFO.read_text()) == 0
    assert parse_high_limit("VLHighLimit:.....................12\n") == 12


@pytest.mark.parametrize(
    ("parse", "text"),
    [
        (parse_sl2vl, ""),
        (parse_sl2vl, "SL2VLTableRecord dump:\n\t\tVL: 0| 1| 2|\n"),
        (parse_vlarb, "VLArbTableRecord dump:\n"),
        (parse_vlarb, reply("pr-10-11.txt")),
        (parse_high_limit, reply("pr-10-11.txt")),
    ],
)
def test_parse_bad_replies(parse, text: str) -> None:
    with pytest.raises(IbqosError):
        parse(text)


class FakeFabric:
    """Serves recorded replies by command line; counts calls; can be told to fail."""

    def __init__(self, replies: dict[str, str]) -> None:
        self.replies = replies
        self.calls: list[tuple[str, str | None]] = []
        self.fail: set[str] = set()

    def __call__(self, argv: Sequence[str], host: str | None) -> str:
        line = " ".join(argv)
        self.calls.append((line, host))
        if line in self.fail or "*" in self.fail:
            raise LabError(f"{line} failed (1): timeout")
        return self.replies[line]


PROBE = Probe("S-leaf", 3, 1, 5)
PR_L = "saquery PR --slid 8 --dlid 9"


def default_fabric() -> FakeFabric:
    return FakeFabric(
        {
            "saquery SL2VL 3/1/5": reply("sl2vl-5-1-2.txt"),
            "saquery VLAR 3/5/1": reply("vlar-5-1-1.txt"),
            "saquery VLAR 3/5/3": reply("vlar-3-5-3.txt"),
            "smpquery portinfo 3 5": PORTINFO.read_text(),
            PR_L: reply("pr-10-11.txt"),
        }
    )


def ibqos_fabric() -> FakeFabric:
    return FakeFabric(
        {
            "saquery SL2VL 3/1/5": reply("ibqos-sl2vl-3-1-5.txt"),
            "saquery VLAR 3/5/1": reply("ibqos-vlar-3-5-1.txt"),
            "saquery VLAR 3/5/3": reply("ibqos-vlar-3-5-3.txt"),
            "smpquery portinfo 3 5": PORTINFO.read_text(),
            PR_L: reply("ibqos-pr-8-9.txt"),
        }
    )


def test_a_fresh_lab_reads_opensms_defaults() -> None:
    fabric = default_fabric()
    assert read_tables(fabric, PROBE) == OPENSM_DEFAULT
    # the port info is read from the switch itself; the SA from OpenSM's host
    assert ("smpquery portinfo 3 5", "S-leaf") in fabric.calls
    assert all(host is None for line, host in fabric.calls if line.startswith("saquery"))
    arb = OPENSM_DEFAULT.arbitration()
    assert arb.vl_of("any") == 0 and arb.high_packets() == {0: 1}


def test_read_back_what_ibqos_programmed() -> None:
    clock = [0.0]
    back = ReadBack(ibqos_fabric(), PROBE, 2.0, clock=lambda: clock[0])
    assert back.setup == OPENSM_DEFAULT
    jobs = {"L": (8, 9), "single": None}
    assert not back.poll(jobs)  # read once: to be confirmed
    assert back.setup == OPENSM_DEFAULT
    assert back.poll(jobs)  # the next poll reads again at once, and confirms it
    setup = back.setup
    assert setup.sl_to_vl[:3] == (0, 2, 1)
    assert setup.vlarb_low == ((0, 32), (2, 64), (1, 32)) and setup.vlarb_high == ()
    assert setup.job_sl == (("L", 2),)
    arb = setup.arbitration()
    assert arb.vl_of("L") == 1 and arb.vl_of("single") == 0
    assert arb.low_packets() == {0: 1, 2: 2, 1: 1}
    assert back.reads == 4  # twice the tables and L's path (a single host asks nothing)
    assert setup.to_dict()["job_sl"] == {"L": 2}


def test_reads_are_spaced_and_changes_reported_once() -> None:
    clock = [0.0]
    fabric = default_fabric()
    back = ReadBack(fabric, PROBE, 2.0, clock=lambda: clock[0])
    jobs = {"L": (8, 9)}
    assert not back.poll(jobs)  # the first read: L's SL 0 is news, to be confirmed
    assert back.poll(jobs)
    calls = len(fabric.calls)
    clock[0] = 1.0
    assert not back.poll(jobs)  # not due
    assert len(fabric.calls) == calls
    clock[0] = 2.0
    assert not back.poll(jobs)  # read, unchanged
    assert len(fabric.calls) == calls + calls // 2
    fabric.replies = ibqos_fabric().replies  # ibqos applied a plan
    clock[0] = 2.5
    assert not back.poll(jobs, force=True)  # e.g. the job mix changed
    assert back.poll(jobs)
    assert back.setup.job_sl == (("L", 2),)


def test_a_reading_seen_once_is_not_taken() -> None:
    """OpenSM zeroes its cached tables while it reprograms them: a read then may show an
    all-zero SL2VL for a moment.  It is taken only if the next read shows it too."""
    clock = [0.0]
    fabric = ibqos_fabric()
    back = ReadBack(fabric, PROBE, 2.0, clock=lambda: clock[0])
    jobs = {"L": (8, 9)}
    back.poll(jobs)
    assert back.poll(jobs)
    good = back.setup
    zeroed = reply("ibqos-sl2vl-3-1-5.txt").replace("VL: 0| 2| 1|", "VL: 0| 0| 0|")
    fabric.replies["saquery SL2VL 3/1/5"] = zeroed
    clock[0] = 2.0
    assert not back.poll(jobs)
    fabric.replies = ibqos_fabric().replies  # the sweep is over
    assert not back.poll(jobs)  # read again at once: the same as before
    assert back.setup == good
    fabric.replies["saquery SL2VL 3/1/5"] = zeroed  # an admin's real all-zero SL2VL
    clock[0] = 4.0
    assert not back.poll(jobs)
    assert back.poll(jobs)
    assert back.setup.sl_to_vl == (0,) * 16


def test_a_failed_read_keeps_the_last_setup_and_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = [0.0]
    fabric = ibqos_fabric()
    back = ReadBack(fabric, PROBE, 1.0, clock=lambda: clock[0])
    jobs = {"L": (8, 9)}
    back.poll(jobs)
    assert back.poll(jobs)
    good = back.setup
    fabric.fail = {"*"}
    with caplog.at_level(logging.WARNING, logger="ibqos.lab.readback"):
        for t in (1.0, 2.0, 3.0):
            clock[0] = t
            assert not back.poll(jobs)
    assert back.setup == good
    assert caplog.text.count("reading the QoS tables failed") == 1
    assert caplog.text.count("job L: reading its PathRecord SL failed, keeping SL 2") == 1
    assert back.failures == 6
    # the path alone fails: the tables are read, L keeps its SL
    fabric.fail = {PR_L}
    fabric.replies = default_fabric().replies | {PR_L: ""}
    clock[0] = 4.0
    assert not back.poll(jobs)
    assert back.poll(jobs)
    assert back.setup.sl_to_vl == OPENSM_DEFAULT.sl_to_vl and back.setup.job_sl == (("L", 2),)


def test_pick_probe_on_the_recorded_lab() -> None:
    path = DATA / "lab-xgft-2_8.4_1.2" / "ibnetdiscover.txt"
    topo = parse_ibnetdiscover(path.read_text(), str(path))
    probe = pick_probe(topo)
    leaf = topo.nodes[probe.switch]
    assert leaf.desc.startswith("sw-L1-")
    assert topo.lids[Port(leaf.id, 0)] == probe.lid
    inside = topo.peer(Port(leaf.id, probe.in_port))
    outside = topo.peer(Port(leaf.id, probe.out_port))
    assert inside is not None and topo.nodes[inside.node].kind != "switch"
    assert outside is not None and topo.nodes[outside.node].desc.startswith("sw-L2-")


def test_setup_describes_itself() -> None:
    setup = QosSetup((0,) * 16, ((1, 32),), (), 0, 2048, (("a", 1),))
    assert setup.describe() == (
        "SL2VL 0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0; VLArb low 1:32 high - limit 0; jobs a:SL1"
    )


# --- progress metrics ---------------------------------------------------------------------


def test_window_rate() -> None:
    w = Window(10.0, t0=5.0, iterations=3)
    assert w.rate() == 0.0
    w.add(6.0, 13)
    assert w.rate() == pytest.approx(10.0)
    for t in range(7, 30):
        w.add(float(t), 13 + 2 * (t - 6))  # 2 per second from t = 6
    assert w.rate() == pytest.approx(2.0)
    assert len(w._samples) == 11  # one sample at the window's start, then one per second


TRUTH = {
    "time_s": 12.5,
    "contention": "fluid",
    "jobs": {
        "a": {"running": True, "iterations": 120, "iterations_per_second": 9.5, "vl": 2},
        "b": {"running": False, "iterations": 7, "iterations_per_second": 0.0},
    },
    "qos_reads": {"reads": 40, "failures": 2},
}


def test_collector_serves_running_jobs() -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LabCollector(lambda: TRUTH, "demo"))
    get = registry.get_sample_value
    assert get("ibqos_lab_job_iterations_total", {"job_id": "a"}) == 120
    assert get("ibqos_lab_job_iterations_per_second", {"job_id": "a"}) == 9.5
    assert get("ibqos_lab_job_vl", {"job_id": "a"}) == 2
    assert get("ibqos_lab_job_iterations_total", {"job_id": "b"}) is None  # ended
    assert get("ibqos_lab_model_time_seconds") == 12.5
    assert get("ibqos_lab_info", {"lab": "demo", "contention": "fluid"}) == 1
    assert get("ibqos_lab_qos_read_failures_total") == 2


def test_metrics_endpoint_on_loopback() -> None:
    truth = {"time_s": 1.0, "jobs": {"x": {"running": True, "iterations": 3}}}
    server = serve(lambda: truth, "t")
    try:
        assert server.url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(server.url, timeout=5) as resp:
            text = resp.read().decode()
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }
        assert samples[("ibqos_lab_job_iterations_total", (("job_id", "x"),))] == 3
        assert ("ibqos_lab_info", (("contention", "crude"), ("lab", "t"))) in samples
        assert not any(name == "ibqos_lab_job_vl" for name, _ in samples)  # crude: no lanes
    finally:
        server.close()
