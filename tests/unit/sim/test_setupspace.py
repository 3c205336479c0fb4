"""The setup space of the search: canonical points, and moves of every kind."""

from __future__ import annotations

import random

from ibqos.sim.setupspace import Space


def test_the_moves_reach_every_kind_of_setup() -> None:
    space = Space({1: 0.9, 2: 0.5, 3: 0.2, 4: 0.1}, lanes=4)
    here = space.point([(1,), (2,), (3, 4)], [2, 4, 8])
    assert here == (((1,), 1), ((2,), 2), ((3, 4), 4))  # divided by their gcd
    moves = list(space.moves(here, random.Random(0)))
    assert here not in moves and len(moves) == len(set(moves))
    as_sets = [{frozenset(sls): p for sls, p in m} for m in moves]
    assert {frozenset({1}): 1, frozenset({2}): 3, frozenset({3, 4}): 4} in as_sets  # a rung
    assert {frozenset({1}): 4, frozenset({2}): 2, frozenset({3, 4}): 1} in as_sets  # swap
    # not contiguous in intensity: the heaviest SL with the lightest
    assert any(frozenset({1, 4}) in m for m in as_sets)
    assert any(len(m) == 4 for m in as_sets) and any(len(m) == 2 for m in as_sets)
    assert all(1 <= len(m) <= space.lanes for m in moves)
    # no more lanes than allowed; one lane has no weight to move
    full = Space({1: 0.9, 2: 0.5}, lanes=2)
    two = full.point([(1,), (2,)], [1, 1])
    assert all(len(m) <= 2 for m in full.moves(two, random.Random(0)))
    one = full.point([(1, 2)], [3])
    assert one == (((1, 2), 1),)
    splits = {((1,), 1), ((2,), 1)}, {((1,), 2), ((2,), 1)}, {((1,), 1), ((2,), 2)}
    got = list(full.moves(one, random.Random(0)))  # the splits: 1:1, 2:1 and 1:2
    assert len(got) == 3 and set(map(frozenset, got)) == set(map(frozenset, splits))
