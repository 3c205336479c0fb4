"""Attribution fitted through the routes: flows routed over D-mod-K tables give the
counters, and the fit must find each job's per-level traffic from them."""

from __future__ import annotations

import logging
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from ibqos.attribute.attribution import Attributor
from ibqos.attribute.jobmap import MappedJob, map_jobs
from ibqos.attribute.patterns import traffic_matrix
from ibqos.collect.per_sl import SlRateTracker, SlReadings
from ibqos.config.classes import Thresholds
from ibqos.config.lanes import LaneConfig
from ibqos.fabric.model import Fabric
from ibqos.fabric.routes import Router
from ibqos.fabric.topology import Port
from ibqos.fabric.xgft import parse_xgft
from ibqos.jobs.model import Job
from ibqos.mad import pma
from ibqos.metrics.families import exposition, families
from ibqos.metrics.snapshot import Snapshot
from ibqos.plan.decide import Decider
from ibqos.plan.output import to_json
from ibqos.sim.network import dmodk_lfts, xgft_network
from tests.support.scripted_pma import reply as per_sl_reply


def hosts(*numbers: int) -> tuple[str, ...]:
    return tuple(f"cn{n:04d}" for n in numbers)


class Bench:
    """A fabric, its D-mod-K tables, and counters made by routing the jobs' flows."""

    def __init__(self, xgft: str) -> None:
        net = xgft_network(parse_xgft(xgft))  # with LIDs and D-mod-K tables
        self.topo = net.topo
        self.fabric = Fabric(self.topo)
        self.lfts = dmodk_lfts(self.topo)
        self.router = Router(self.topo, self.lfts)
        self.ca_of = {n.hostname: n for n in self.topo.cas()}

    def run(self, jobs: list[Job]) -> tuple[pd.DataFrame, dict[str, list[float]]]:
        """The rates table the flows give, and each job's true bytes/s per level."""
        src, dst, dlid, weight, owner = [], [], [], [], []
        for j, job in enumerate(jobs):
            m = traffic_matrix(job)
            for a, b in zip(*np.nonzero(m), strict=True):
                s = self.port(job.nodes[a])
                d = self.port(job.nodes[b])
                src.append(self.router.port_index[s])
                dst.append(self.router.port_index[d])
                dlid.append(self.topo.lids[d])
                weight.append(m[a, b])
                owner.append(j)
        args = [np.array(v, dtype=np.int64) for v in (src, dlid, dst)]
        xmit, rcv = self.router.route(*args, np.array(weight, dtype=np.float64))
        rows = [
            (self.topo.nodes[p.node].guid, p.num, xmit[i], rcv[i])
            for i, p in enumerate(self.router.ports)
        ]
        rates = pd.DataFrame(
            rows, columns=["node_guid", "port", "xmit_bytes_per_s", "rcv_bytes_per_s"]
        ).astype({"node_guid": "uint64", "port": "int64"})
        truth = {job.id: [0.0] * self.fabric.height for job in jobs}
        ports = self.router.ports
        for lvl in range(1, self.fabric.height):
            comp = self.fabric.components(lvl)
            for s, d, w, j in zip(src, dst, weight, owner, strict=True):
                if comp[ports[s].node] != comp[ports[d].node]:
                    truth[jobs[j].id][lvl] += w
        for j, job in enumerate(jobs):
            truth[job.id][0] = float(sum(w for w, o in zip(weight, owner, strict=True) if o == j))
        return rates, truth

    def sl_rates(self, jobs: list[Job], sl: dict[str, int]) -> pd.DataFrame:
        """Per-SL transmit rates of every switch port, as per-SL counters would give."""
        frames = []
        for job in jobs:
            rates, _ = self.run([job])
            rates = rates[rates["node_guid"].isin(self._switch_guids())]
            frames.append(rates.assign(sl=sl[job.id]))
        return pd.concat(frames, ignore_index=True)

    def _switch_guids(self) -> list[int]:
        return [n.guid for n in self.topo.switches() if n.guid is not None]

    def port(self, host: str) -> Port:
        node = self.ca_of[host]
        return next(p for p in self.topo.ports(node.id))

    def mapped(self, jobs: list[Job]) -> list[MappedJob]:
        out, warnings = map_jobs(jobs, self.fabric)
        assert not warnings
        return out


def blind(mapped: list[MappedJob]) -> list[MappedJob]:
    """The jobs as a scheduler gives them: no declared pattern."""
    return [MappedJob(replace(mj.job, pattern=""), mj.ports, mj.hosts) for mj in mapped]


def errors(result, truth) -> list[float]:
    out = []
    for job_id, want in truth.items():
        for lvl, true in enumerate(want):
            if lvl and true > 0:
                out.append(abs(result.jobs[job_id].bytes_per_s[lvl] - true) / true)
    return out


# leaves of 4 hosts: jobs share leaf switches, so the split is not by subtree alone
MIX = [
    Job("ring", hosts(1, 2, 5, 6, 9, 10), pattern="ring", rate_bytes_per_s=2e9),
    Job("a2a", hosts(3, 4, 7, 8), pattern="all-to-all", rate_bytes_per_s=3e9),
    Job("halo", hosts(11, 12, 13, 14, 15, 16), pattern="halo", rate_bytes_per_s=1e9),
]


def test_on_a_full_tree_the_routes_pin_every_job_without_a_pattern():
    bench = Bench("2;4,4;1,4")
    rates, truth = bench.run(MIX)
    mapped = blind(bench.mapped(MIX))
    fitted = Attributor(bench.fabric, bench.lfts).attribute(rates, mapped)
    subtree = Attributor(bench.fabric).attribute(rates, mapped)
    assert max(errors(fitted, truth)) < 1e-3
    assert np.mean(errors(subtree, truth)) > 0.05  # the gravity prior alone is off
    assert fitted.residual[1] < 5e-3  # the fit stops within TOLERANCE per family
    for jt in fitted.jobs.values():
        assert jt.bytes_per_s[0] == pytest.approx(truth[jt.job_id][0])


def test_a_declared_pattern_stays_exact_on_a_slimmed_tree():
    bench = Bench("2;4,4;1,1")
    rates, truth = bench.run(MIX)
    fitted = Attributor(bench.fabric, bench.lfts).attribute(rates, bench.mapped(MIX))
    assert max(errors(fitted, truth)) < 1e-6


def test_per_sl_counters_split_a_shared_link_exactly():
    # one spine: every leaf's single uplink carries all its jobs, so without per-SL
    # counters the split rests on the prior
    bench = Bench("2;4,4;1,1")
    rates, truth = bench.run(MIX)
    mapped = blind(bench.mapped(MIX))
    without = Attributor(bench.fabric, bench.lfts).attribute(rates, mapped)
    assert max(errors(without, truth)) > 0.05
    sl = {"ring": 1, "a2a": 2, "halo": 3}
    at = Attributor(bench.fabric, bench.lfts)
    with_sl = at.attribute(rates, mapped, bench.sl_rates(MIX, sl), sl)
    # exact within the fit's stopping tolerance (TOLERANCE of the links' total)
    assert max(errors(with_sl, truth)) < 5e-3
    assert with_sl.measured[:, 1] == pytest.approx(np.ones(len(MIX)))


def test_a_link_without_a_rate_leaves_the_jobs_over_it_unknown():
    bench = Bench("2;4,4;1,4")
    rates, _ = bench.run(MIX)
    up = next(fp for fp in bench.fabric.uplinks(1) if fp.key is not None)
    hit = (rates["node_guid"] == up.key[0]) & (rates["port"] == up.key[1])
    rates.loc[hit, ["xmit_bytes_per_s"]] = np.nan
    peer = bench.fabric.ports[(bench.topo.nodes[up.peer.node].guid, up.peer.num)]
    hit = (rates["node_guid"] == peer.key[0]) & (rates["port"] == peer.key[1])
    rates.loc[hit, ["rcv_bytes_per_s"]] = np.nan
    result = Attributor(bench.fabric, bench.lfts).attribute(rates, blind(bench.mapped(MIX)))
    level1 = result.bytes_per_s[:, 1]
    assert np.isnan(level1).any()
    assert np.isfinite(level1).any()


def test_the_next_cycle_starts_from_the_last_fit_and_follows_the_counters():
    bench = Bench("2;4,4;1,2")
    mapped = blind(bench.mapped(MIX))
    at = Attributor(bench.fabric, bench.lfts)
    rates, truth = bench.run(MIX)
    first = at.attribute(rates, mapped)
    assert at.routes is not None
    passes = at.routes.passes
    again = at.attribute(rates, mapped)
    # it goes on from where the last fit stopped: no further from the counters, as near
    # the truth, in fewer passes
    assert sum(again.residual.values()) <= sum(first.residual.values())
    assert np.mean(errors(again, truth)) == pytest.approx(np.mean(errors(first, truth)), abs=0.01)
    assert at.routes.passes < passes
    # the same jobs at twice the rate: every figure doubles
    doubled = [replace(j, rate_bytes_per_s=2 * j.rate_bytes_per_s) for j in MIX]
    rates2, _ = bench.run(doubled)
    twice = at.attribute(rates2, mapped).bytes_per_s
    assert twice == pytest.approx(2 * again.bytes_per_s, rel=0.02)


def test_job_links_give_a_jobs_load_on_each_link():
    bench = Bench("2;4,4;1,4")
    rates, truth = bench.run(MIX)
    mapped = blind(bench.mapped(MIX))
    at = Attributor(bench.fabric, bench.lfts)
    at.attribute(rates, mapped)
    assert at.routes is not None
    links = at.routes.job_links(mapped[1])
    up = {fp.key for fp in bench.fabric.uplinks(1)}
    # what the job sends up out of its leaves is its level-1 traffic
    assert sum(v for k, v in links.items() if k in up) == pytest.approx(truth["a2a"][1], rel=1e-3)


def test_tables_that_miss_a_switch_fall_back_to_the_subtree_split(caplog):
    bench = Bench("2;4,4;1,2")
    lfts = dict(bench.lfts)
    lfts.pop(next(iter(lfts)))
    with caplog.at_level(logging.WARNING):
        at = Attributor(bench.fabric, lfts)
    assert at.routes is None
    assert "splitting subtree totals instead" in caplog.text
    rates, _ = bench.run(MIX)
    result = at.attribute(rates, bench.mapped(MIX))
    assert result.residual == {}


def test_constructed_per_sl_replies_split_a_shared_uplink_exactly():
    """From the bytes of PortXmitDataSL replies, through the per-SL rate tracker, to the
    jobs' split: one job per SL makes every shared link's split a measurement."""
    bench = Bench("2;4,4;1,1")
    rates, truth = bench.run(MIX)
    mapped = blind(bench.mapped(MIX))
    sl = {"ring": 1, "a2a": 2, "halo": 3}
    per_sl = bench.sl_rates(MIX, sl)  # what each SL puts on every switch port, bytes/s
    ports = per_sl[["node_guid", "port"]].drop_duplicates()
    words = np.zeros((len(ports), 16), dtype=np.int64)
    row = {k: i for i, k in enumerate(zip(ports["node_guid"], ports["port"], strict=True))}
    for g, p, s, b in per_sl[["node_guid", "port", "sl", "xmit_bytes_per_s"]].itertuples(
        index=False
    ):
        words[row[(g, p)], s] += round(b / 4)  # one second of traffic, in 4-octet words

    def sweep(counts: np.ndarray, t: float) -> SlReadings:
        n = len(ports)
        mads = {
            attr: np.frombuffer(
                b"".join(
                    per_sl_reply(attr, int(p), counts[i].tolist())
                    for i, p in enumerate(ports["port"])
                ),
                dtype=np.uint8,
            ).reshape(n, 256)
            for attr in (pma.ATTR_PORT_XMIT_DATA_SL, pma.ATTR_PORT_RCV_DATA_SL)
        }
        readings, why = SlReadings.decode(
            ports["node_guid"].to_numpy(np.uint64),
            ports["port"].to_numpy(np.int64),
            mads[pma.ATTR_PORT_XMIT_DATA_SL],
            [""] * n,
            np.full(n, t),
            mads[pma.ATTR_PORT_RCV_DATA_SL],
            [""] * n,
            np.full(n, t),
        )
        assert set(why) == {""}
        return readings

    tracker = SlRateTracker()
    tracker.update(sweep(np.zeros_like(words), 100.0))
    sl_rates = tracker.update(sweep(words, 101.0))
    assert sl_rates is not None
    result = Attributor(bench.fabric, bench.lfts).attribute(rates, mapped, sl_rates, sl)
    assert max(errors(result, truth)) < 5e-3
    assert result.measured[:, 1] == pytest.approx(np.ones(len(MIX)))


def test_the_decision_json_and_metrics_show_the_fit_and_its_residual():
    bench = Bench("2;4,4;1,2")
    rates, _ = bench.run(MIX)
    decider = Decider(bench.fabric, LaneConfig(), Thresholds())
    plain = decider.decide(rates, MIX, 0.0)
    assert to_json(plain)["attribution"] == {"method": "subtree", "residual": {}}
    decider.set_routes(bench.lfts)
    decision = decider.decide(rates, MIX, 10.0)
    doc = to_json(decision)["attribution"]
    assert doc["method"] == "routes"
    assert set(doc["residual"]) == {"1"} and 0.0 <= doc["residual"]["1"] < 0.01
    snap = Snapshot(10.0, decision, {}, {}, {}, None)
    text = exposition(families(snap)).decode()
    assert 'ibqos_level_attribution_residual_ratio{level="1"}' in text
    assert (
        "ibqos_level_attribution_residual_ratio{"
        not in exposition(families(Snapshot(0.0, plain, {}, {}, {}, None))).decode()
    )


def test_tables_that_lead_a_flow_astray_fall_back_to_the_subtree_split(caplog):
    bench = Bench("2;4,4;1,2")
    rates, _ = bench.run(MIX)
    # every route to cn0001 ends at cn0002's port: tables of another fabric
    wrong = bench.topo.lids[bench.port("cn0002")]
    lid = bench.topo.lids[bench.port("cn0001")]
    lfts = {sw: {**table, lid: table[wrong]} for sw, table in bench.lfts.items()}
    at = Attributor(bench.fabric, lfts)
    with caplog.at_level(logging.WARNING):
        result = at.attribute(rates, blind(bench.mapped(MIX)))
    assert at.routes is None
    assert "splitting subtree totals instead" in caplog.text
    assert result.residual == {}
    assert np.isfinite(result.bytes_per_s).all()


def test_when_a_job_ends_the_others_go_on_from_their_last_fit():
    bench = Bench("2;4,4;1,4")
    at = Attributor(bench.fabric, bench.lfts)
    mapped = blind(bench.mapped(MIX))
    rates, _ = bench.run(MIX)
    at.attribute(rates, mapped)
    rest, rest_rates = mapped[1:], bench.run(MIX[1:])
    warm = at.attribute(rest_rates[0], rest)
    assert at.routes is not None and at.routes.passes <= 8  # warm: WARM_PASSES at most
    cold = Attributor(bench.fabric, bench.lfts).attribute(rest_rates[0], rest)
    assert warm.bytes_per_s == pytest.approx(cold.bytes_per_s, rel=0.01)
    assert max(errors(warm, rest_rates[1])) < 0.01


def test_jobs_whose_rates_move_apart_are_told_apart_over_a_few_sweeps():
    # one spine: the prior alone is 5 % off or more here (see the per-SL test)
    bench = Bench("2;4,4;1,1")
    mapped = blind(bench.mapped(MIX))
    at = Attributor(bench.fabric, bench.lfts)
    rng = np.random.default_rng(2)
    errs = []
    for _ in range(8):
        moved = [replace(j, rate_bytes_per_s=j.rate_bytes_per_s * rng.uniform(0.2, 1)) for j in MIX]
        rates, truth = bench.run(moved)
        result = at.attribute(rates, mapped)
        errs.append(max(errors(result, truth)))
    assert errs[0] > 0.05  # one sweep: the prior splits the shared links
    assert errs[-1] < 5e-3  # eight: each job's share of them is learnt
    assert result.measured[:, 1] == pytest.approx(np.ones(len(MIX)))


def test_steady_rates_leave_the_split_to_the_prior():
    bench = Bench("2;4,4;1,1")
    mapped = blind(bench.mapped(MIX))
    at = Attributor(bench.fabric, bench.lfts)
    rates, truth = bench.run(MIX)
    first = np.mean(errors(at.attribute(rates, mapped), truth))
    for _ in range(10):
        result = at.attribute(rates, mapped)
    assert np.mean(errors(result, truth)) == pytest.approx(first, abs=0.01)
    assert at.routes is not None
    assert len(at.routes.shares._sweeps) == 11
