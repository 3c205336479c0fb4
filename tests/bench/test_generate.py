"""The seeded mix generator, the real applications' mixes and the held-out mix."""

from __future__ import annotations

from collections import Counter

from bench.sim import generate
from bench.sim.mixes import FEW_LANES, Mix, held_out, leaves, network

DRAWN = generate.generate(60, seed=5)


def _check(mix: Mix) -> None:
    """A mix's jobs sit on distinct hosts of its fabric."""
    hosts = set(network(mix.xgft).hosts)
    seen: set[str] = set()
    for job in mix.jobs:
        assert set(job.nodes) <= hosts and not seen & set(job.nodes), mix.name
        assert list(job.nodes) == sorted(job.nodes)
        seen |= set(job.nodes)


def test_the_same_seed_draws_the_same_mix_and_another_seed_others() -> None:
    assert generate.draw(5, 17) == DRAWN[17]
    assert generate.generate(3, seed=5, start=17)[0] == DRAWN[17]
    others = generate.generate(60, seed=6)
    assert sum(a.jobs != b.jobs for a, b in zip(DRAWN, others, strict=True)) > 50


def test_drawn_mixes_are_valid_and_cover_the_space() -> None:
    for mix in DRAWN:
        _check(mix)
        assert 2 <= len(mix.jobs) <= 6
        for job in mix.jobs:
            assert len(job.nodes) >= 2 and 0 < job.duty <= 1
            if job.pattern == "matrix":
                assert len(job.nodes) in generate.APP_HOSTS
    assert {m.xgft for m in DRAWN} == set(generate.TREES.values())
    assert {m.placement for m in DRAWN} == set(generate.PLACEMENTS)
    patterns = Counter(j.pattern for m in DRAWN for j in m.jobs)
    assert set(patterns) == {"all-to-all", "ring", "halo", "random-pairs", "matrix"}
    assert {len(m.jobs) for m in DRAWN} == {2, 3, 4, 5, 6}
    assert any(m.lanes == FEW_LANES for m in DRAWN)
    assert any(m.xgft.startswith("3;") for m in DRAWN)


def test_interleaving_deals_every_leaf_in_turn() -> None:
    by_leaf = [["a1", "a2", "a3"], ["b1", "b2", "b3"]]
    assert generate.interleave([3, 2, 1], by_leaf) == [
        ("a1", "a2", "b1"),
        ("a3", "b2"),
        ("b3",),
    ]


def test_the_held_out_mix_is_on_every_leaf() -> None:
    mix = held_out()
    _check(mix)
    assert mix.xgft == "2;8,8;1,2"
    assert [(j.pattern, len(j.nodes), j.rate_bytes_per_s, j.duty) for j in mix.jobs] == [
        ("all-to-all", 32, 11e9, 0.5),
        ("random-pairs", 16, 8e9, 0.35),
        ("halo", 16, 4e9, 0.2),
    ]
    assert {j.period_s for j in mix.jobs} == {0.02} and mix.jobs[2].halo_dims == (4, 4)
    for leaf in leaves(network(mix.xgft)):
        assert [len(set(leaf) & set(j.nodes)) for j in mix.jobs] == [4, 2, 2]


def test_the_application_mixes_use_the_recorded_matrices() -> None:
    mixes = generate.app_mixes()
    assert len(mixes) >= 3
    for mix in mixes:
        _check(mix)
        assert all(j.pattern == "matrix" and j.matrix is not None for j in mix.jobs)
    names = {j.name for m in mixes for j in m.jobs}
    assert {"lulesh", "cg", "amg2013", "minife"} <= names
