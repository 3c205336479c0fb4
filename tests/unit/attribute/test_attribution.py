"""Attribution on a recorded fabric with hand-made rates: sums, priors, measured shares;
and the vectorized split against the formulas on random workloads."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from ibqos.attribute.attribution import Attribution, Attributor
from ibqos.attribute.jobmap import MappedJob, map_jobs
from ibqos.attribute.patterns import traffic_matrix
from ibqos.fabric.model import Fabric
from ibqos.fabric.xgft import build_xgft, parse_xgft
from ibqos.jobs.model import Job
from tests.support.fabric_rates import leaf_up_ports, random_jobs, random_rates, rates, setup


def job(jid: str, nodes: list[str], pattern: str = "") -> Job:
    return Job(jid, tuple(nodes), pattern, 1e9, 1.0, 1.0)


def test_level_0_is_the_hosts_and_subtree_totals_are_split_exactly() -> None:
    fabric, hp = setup()
    a = job("a", ["cn0001", "cn0002", "cn0009"])  # 2 on leaf 1, 1 on leaf 2
    b = job("b", ["cn0003", "cn0004", "cn0005", "cn0017"])  # 3 on leaf 1, 1 on leaf 3
    mapped = [MappedJob(j, tuple(hp[h] for h in j.nodes), j.nodes) for j in (a, b)]
    xmit = {hp[h]: 1e9 for h in (*a.nodes, *b.nodes)}
    up1 = leaf_up_ports(fabric, "sw-L1-0001")
    for k in up1:
        xmit[k] = 1.5e9  # 3 GB/s leave leaf 1 in all
    result = Attributor(fabric).attribute(rates(fabric, xmit), mapped)
    ja, jb = result.jobs["a"], result.jobs["b"]
    assert ja.bytes_per_s[0] == 3e9 and jb.bytes_per_s[0] == 4e9
    assert ja.measured[0] == jb.measured[0] == 1.0
    # gravity priors on leaf 1: a: 2 hosts x 1/2 outside = 1e9; b: 3 hosts x 1/3 = 1e9
    leaf1_a = 3e9 * 1e9 / 2e9
    # leaves 2 and 3 report no uplink traffic: nothing more to give
    assert math.isclose(ja.bytes_per_s[1], leaf1_a)
    assert math.isclose(ja.bytes_per_s[1] + jb.bytes_per_s[1], 3e9)  # the counters, exactly
    assert ja.measured[1] == 0.0  # shared subtree: estimated


def test_a_job_alone_in_its_subtrees_is_measured() -> None:
    fabric, hp = setup()
    a = job("a", ["cn0025", "cn0026", "cn0017"])  # leaf 4 and leaf 3, nobody else there
    mapped = [MappedJob(a, tuple(hp[h] for h in a.nodes), a.nodes)]
    xmit = {hp[h]: 2e9 for h in a.nodes}
    for k in leaf_up_ports(fabric, "sw-L1-0004") + leaf_up_ports(fabric, "sw-L1-0003"):
        xmit[k] = 1e9
    r = Attributor(fabric).attribute(rates(fabric, xmit), mapped).jobs["a"]
    assert r.bytes_per_s[1] == 4e9 and r.measured[1] == 1.0 and r.measured_share == 1.0


def test_a_pattern_prior_follows_the_pattern() -> None:
    fabric, hp = setup()
    # ring over cn0001, cn0002 (leaf 1), cn0009 (leaf 2): from leaf 1 only cn0002 -> cn0009
    # leaves, while gravity would say 1/2 of each of the two hosts' traffic
    ring = job("ring", ["cn0001", "cn0002", "cn0009"], "ring")
    a2a = job("a2a", ["cn0003", "cn0004", "cn0010"], "all-to-all")
    mapped = [MappedJob(j, tuple(hp[h] for h in j.nodes), j.nodes) for j in (ring, a2a)]
    xmit = {hp[h]: 1e9 for h in (*ring.nodes, *a2a.nodes)}
    for k in leaf_up_ports(fabric, "sw-L1-0001"):
        xmit[k] = 1e9  # 2 GB/s leave leaf 1
    r = Attributor(fabric).attribute(rates(fabric, xmit), mapped).jobs
    # priors on leaf 1: ring 1e9 (cn0002 only), a2a 2 x 1e9 x 1/2 = 1e9: an even split
    assert math.isclose(r["ring"].bytes_per_s[1], 1e9)
    assert math.isclose(r["a2a"].bytes_per_s[1], 1e9)


def test_a_pattern_without_a_rate_is_a_profile_too() -> None:
    """An agent job file may declare only the pattern: the split is the same."""
    fabric, hp = setup()
    ring = job("ring", ["cn0001", "cn0002", "cn0009"], "ring")
    bare = Job("ring", ring.nodes, "ring")  # no rate, duty or period
    a2a = job("a2a", ["cn0003", "cn0004", "cn0010"], "all-to-all")
    xmit = {hp[h]: 1e9 for h in (*ring.nodes, *a2a.nodes)}
    xmit[leaf_up_ports(fabric, "sw-L1-0001")[0]] = 1.5e9
    got = []
    for r in (ring, bare):
        mapped = [MappedJob(j, tuple(hp[h] for h in j.nodes), j.nodes) for j in (r, a2a)]
        got.append(Attributor(fabric).attribute(rates(fabric, xmit), mapped).jobs["ring"])
    assert got[0].bytes_per_s[1] > 0
    assert got[0].bytes_per_s == got[1].bytes_per_s


def test_unknown_rates_stay_unknown() -> None:
    fabric, hp = setup()
    a = job("a", ["cn0001", "cn0009"])
    mapped = [MappedJob(a, tuple(hp[h] for h in a.nodes), a.nodes)]
    xmit = {hp["cn0001"]: float("nan"), hp["cn0009"]: 1e9}
    r = Attributor(fabric).attribute(rates(fabric, xmit), mapped).jobs["a"]
    assert math.isnan(r.bytes_per_s[0])  # never a silent zero


# -- the vectorized split against the formulas, one subtree at a time ---------------------


def reference(fabric: Fabric, table: pd.DataFrame, mapped: list[MappedJob]):
    """The module docstring's split in plain Python: (bytes, measured) by job and level,
    and the unattributed bytes/s by level."""
    xmit = dict(
        zip(
            zip(table["node_guid"].tolist(), table["port"].tolist(), strict=True),
            table["xmit_bytes_per_s"].tolist(),
            strict=True,
        )
    )

    def rate(key):
        return xmit.get(key, math.nan)

    def parts(mj):  # the job's share of each of its ports (a host it shares: below 1)
        return mj.share or (1.0,) * len(mj.ports)

    nan = math.nan
    out = {}
    for mj in mapped:
        r = [rate(k) * p for k, p in zip(mj.ports, parts(mj), strict=True)]
        known = sum(0.0 if math.isnan(x) else x for x in r)
        own = sum(0.0 if math.isnan(x) else x for x, p in zip(r, parts(mj), strict=True) if p == 1)
        level0 = nan if any(map(math.isnan, r)) else sum(r)
        out[mj.id] = ({0: level0}, {0: own / known if known > 0 else 1.0})
    ca = {n.guid: n for n in fabric.topo.cas()}
    unattributed = {}
    for lvl in range(1, fabric.height):
        comp = fabric.components(lvl)
        total: dict[int, float] = {}
        blind = set()
        for fp in fabric.uplinks(lvl):
            s, x = comp[fp.node_id], rate(fp.key)
            blind |= {s} if math.isnan(x) else set()
            total[s] = total.get(s, 0.0) + (0.0 if math.isnan(x) else x)
        prior: dict[tuple[str, int], float] = {}
        for mj in mapped:
            subs = [comp[ca[k[0]].id] if k[0] in ca else None for k in mj.ports]
            n = max(len({k[0] for k in mj.ports}), 1)
            share = {}
            if mj.job.pattern:  # the pattern's share of each host's traffic leaving its subtree
                m = traffic_matrix(replace(mj.job, rate_bytes_per_s=1.0))
                where = {}
                for k, s in zip(mj.ports, subs, strict=True):
                    if s is not None and k[0] in ca and ca[k[0]].hostname in mj.job.nodes:
                        where[mj.job.nodes.index(ca[k[0]].hostname)] = s
                for i, s in where.items():
                    sent = m[i].sum()
                    away = sum(m[i, j] for j, t in where.items() if t != s)
                    share[i] = away / sent if sent > 0 else 0.0
            for k, s, p in zip(mj.ports, subs, parts(mj), strict=True):
                if s is None:
                    continue
                out_share = (n - subs.count(s)) / (n - 1) if n > 1 else 0.0  # gravity
                host = ca[k[0]].hostname if k[0] in ca else ""
                if host in mj.job.nodes and mj.job.nodes.index(host) in share:
                    out_share = share[mj.job.nodes.index(host)]
                w = rate(k) * p * out_share
                prior[(mj.id, s)] = prior.get((mj.id, s), 0.0) + (0.0 if math.isnan(w) else w)
        weight_sum: dict[int, float] = {}
        jobs_in: dict[int, int] = {}
        for (_, s), w in prior.items():
            weight_sum[s] = weight_sum.get(s, 0.0) + w
            jobs_in[s] = jobs_in.get(s, 0) + (w > 0)
        got: dict[str, float] = {mj.id: 0.0 for mj in mapped}
        mine = dict(got)
        unknown = set()
        for (j, s), w in prior.items():
            if s in blind:
                unknown.add(j)
                continue
            part = w / weight_sum[s] * total.get(s, 0.0) if weight_sum[s] > 0 else 0.0
            got[j] += part
            mine[j] += part if jobs_in[s] == 1 and w > 0 else 0.0
        for mj in mapped:
            j = mj.id
            out[j][0][lvl] = nan if j in unknown else got[j]
            out[j][1][lvl] = mine[j] / got[j] if got[j] > 0 else 1.0
        unattributed[lvl] = sum(
            t for s, t in total.items() if weight_sum.get(s, 0.0) == 0 and s not in blind
        )
    return out, unattributed


def same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-3)


def check(fabric: Fabric, got: Attribution, table: pd.DataFrame, mapped: list[MappedJob]) -> None:
    want, unattributed = reference(fabric, table, mapped)
    assert list(got.jobs) == [mj.id for mj in mapped]
    for mj in mapped:
        jt = got.jobs[mj.id]
        assert set(jt.bytes_per_s) == set(want[mj.id][0]) == set(range(fabric.height))
        for lvl in jt.bytes_per_s:
            assert same(jt.bytes_per_s[lvl], want[mj.id][0][lvl]), (mj.id, lvl)
            assert same(jt.measured[lvl], want[mj.id][1][lvl]), (mj.id, lvl)
    for lvl, value in unattributed.items():
        assert same(got.unattributed[lvl], value)
    shares = [got.jobs[mj.id].measured_share for mj in mapped]
    np.testing.assert_allclose(got.measured_share, shares, rtol=1e-12)


@pytest.mark.parametrize("xgft", ["2;8,4;1,2", "3;4,4,3;1,2,2"])
def test_the_vectorized_split_follows_the_formulas(xgft: str) -> None:
    fabric = Fabric(build_xgft(parse_xgft(xgft)))
    rng = np.random.default_rng(5)
    mapped, _ = map_jobs(random_jobs(fabric, rng, 12), fabric, log=False)
    at = Attributor(fabric)
    for nan_share in (0.0, 0.0, 0.05):
        table = random_rates(fabric, rng, nan_share)
        check(fabric, at.attribute(table, mapped), table, mapped)


def test_ports_the_fabric_does_not_have_change_nobody_else_s_share() -> None:
    """A job map one cycle behind a fabric change: ports without a subtree take no part
    in the split (they once counted as the previous job's hosts in the last subtree)."""
    fabric = Fabric(build_xgft(parse_xgft("3;4,4,3;1,2,2")))
    rng = np.random.default_rng(5)
    mapped, _ = map_jobs(random_jobs(fabric, rng, 12), fabric, log=False)
    mapped = [MappedJob(mj.job, (*mj.ports, (0xDEAD, 1)), mj.hosts) for mj in mapped]
    at = Attributor(fabric)
    for nan_share in (0.0, 0.0, 0.05):
        table = random_rates(fabric, rng, nan_share)
        check(fabric, at.attribute(table, mapped), table, mapped)


def test_what_is_kept_follows_the_jobs_and_the_rates_table() -> None:
    """One attributor over cycles where jobs start and end and the table's rows move
    gives what a new one gives."""
    fabric = Fabric(build_xgft(parse_xgft("3;4,4,3;1,2,2")))
    rng = np.random.default_rng(8)
    jobs = random_jobs(fabric, rng, 10)
    later = [*jobs[2:], *random_jobs(fabric, rng, 3, prefix="new")]
    at = Attributor(fabric)
    a, _ = map_jobs(jobs, fabric, log=False)
    b, _ = map_jobs(later, fabric, log=False)
    equal = [replace(mj) for mj in b]  # equal, not the same objects
    t1, t2 = random_rates(fabric, rng), random_rates(fabric, rng, 0.02)
    moved = t2.iloc[rng.permutation(len(t2))].reset_index(drop=True)
    for mapped, table in ((a, t1), (a, t2), (b, t2), (b, moved), (equal, moved), (a, t1)):
        got = at.attribute(table, mapped)
        check(fabric, got, table, mapped)
        fresh = Attributor(fabric).attribute(table, mapped)
        np.testing.assert_array_equal(got.bytes_per_s, fresh.bytes_per_s)
        np.testing.assert_array_equal(got.measured, fresh.measured)


def test_no_jobs() -> None:
    fabric, _ = setup()
    got = Attributor(fabric).attribute(rates(fabric, {}, 1e9), [])
    assert got.jobs == {} and got.bytes_per_s.shape == (0, 2) and len(got.measured_share) == 0
    assert got.unattributed[1] > 0  # every uplink's bytes: nobody takes them


def test_the_measured_share_is_of_the_upper_levels_only() -> None:
    from ibqos.attribute.attribution import JobTraffic

    # level 0 is always measured; counting it would make an all-estimated job look half known
    t = JobTraffic("j", {0: 100.0, 1: 100.0, 2: 300.0}, {0: 1.0, 1: 0.0, 2: 0.5})
    assert t.measured_share == (0.0 * 100 + 0.5 * 300) / 400
    assert JobTraffic("j", {0: 5.0, 1: 0.0}, {0: 1.0, 1: 0.0}).measured_share == 1.0


def test_two_jobs_on_one_node_split_its_port_and_say_it_is_estimated() -> None:
    fabric, hp = setup()
    # cn0002 runs both: a declares 3 GB/s per node, b 1 GB/s, so a has 3/4 of its port
    a = replace(job("a", ["cn0001", "cn0002", "cn0009"]), rate_bytes_per_s=3e9)
    b = job("b", ["cn0002", "cn0017"])
    mapped, warnings = map_jobs([a, b], fabric)
    assert warnings == [] and [m.id for m in mapped] == ["a", "b"]
    xmit = {hp["cn0001"]: 1e9, hp["cn0002"]: 2e9, hp["cn0009"]: 1e9, hp["cn0017"]: 1e9}
    for k in leaf_up_ports(fabric, "sw-L1-0001"):
        xmit[k] = 1e9  # 2 GB/s leave leaf 1 in all
    result = Attributor(fabric).attribute(rates(fabric, xmit), mapped)
    ja, jb = result.jobs["a"], result.jobs["b"]
    assert ja.bytes_per_s[0] == 1e9 + 0.75 * 2e9 + 1e9
    assert jb.bytes_per_s[0] == 0.25 * 2e9 + 1e9
    assert ja.bytes_per_s[0] + jb.bytes_per_s[0] == sum(xmit[hp[h]] for h in hp if hp[h] in xmit)
    # level 0: the share of the shared port is estimated, the hosts of their own measured
    assert math.isclose(ja.measured[0], 2e9 / 3.5e9) and math.isclose(jb.measured[0], 1 / 1.5)
    # both have weight on leaf 1 (a through cn0001 and cn0002, b through cn0002): estimated
    assert math.isclose(ja.bytes_per_s[1] + jb.bytes_per_s[1], 2e9 + 0.0)
    assert jb.bytes_per_s[1] > 0 and ja.measured[1] < 1 and jb.measured[1] < 1
    assert ja.measured_share < 1 and jb.measured_share < 1
    np.testing.assert_allclose(result.measured_share, [ja.measured_share, jb.measured_share])


def test_a_job_only_on_shared_nodes_gets_its_share() -> None:
    fabric, hp = setup()
    a, b = job("a", ["cn0001", "cn0002"]), job("b", ["cn0002"])  # b has no node of its own
    mapped, _ = map_jobs([a, b], fabric)
    xmit = {hp["cn0001"]: 1e9, hp["cn0002"]: 2e9}
    result = Attributor(fabric).attribute(rates(fabric, xmit), mapped)
    assert result.jobs["a"].bytes_per_s[0] == 2e9 and result.jobs["b"].bytes_per_s[0] == 1e9
    assert result.jobs["b"].measured[0] == 0.0 and result.jobs["b"].measured_share == 0.0


def test_the_measured_share_counts_an_estimated_injection() -> None:
    from ibqos.attribute.attribution import JobTraffic

    # a job on shared hosts: its injection is partly a split, and that shows
    t = JobTraffic("j", {0: 100.0, 1: 100.0}, {0: 0.25, 1: 1.0})
    assert t.measured_share == 0.25
    assert JobTraffic("j", {0: 100.0, 1: 0.0}, {0: 0.5, 1: 1.0}).measured_share == 0.5
