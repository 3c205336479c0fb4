"""Weight laws, quantization to whole packets, and the encoding into VLArb entries."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ibqos.config.lanes import CREDIT_BYTES
from ibqos.plan.weights import interleave, lane_entries, quantize, weight_target

# -- weight laws ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("law", "ratio", "targets"),
    [
        ("geometric", 2.0, [1.0, 2.0, 4.0, 8.0]),
        ("geometric", 1.5, [1.0, 1.5, 2.25, 3.375]),
        ("linear", 2.0, [1.0, 2.0, 3.0, 4.0]),
        ("linear", 3.0, [1.0, 3.0, 5.0, 7.0]),
        ("equal", 2.0, [1.0, 1.0, 1.0, 1.0]),
    ],
)
def test_weight_target(law: str, ratio: float, targets: list[float]) -> None:
    assert [weight_target(r, law, ratio) for r in range(4)] == targets  # type: ignore[arg-type]


# -- quantize -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("targets", "per_entry", "budget", "counts"),
    [
        ([1, 2, 4], 7, 64, [1, 2, 4]),  # exact
        ([1, 1.5, 2.25], 7, 64, [4, 6, 9]),  # exact at a larger base
        ([1, 2, 4, 8], 3, 4, [1, 1, 2, 3]),  # one entry each, 3 packets at most
        ([4, 2, 1], 7, 64, [4, 2, 1]),  # any order, normalised by the smallest
        ([2, 4, 3, 6], 3, 5, [2, 3, 3, 5]),  # 15 % either way: not [1, 2, 2, 3], less spread
    ],
)
def test_quantize(targets: list[float], per_entry: int, budget: int, counts: list[int]) -> None:
    got, _ = quantize(targets, per_entry, budget)
    assert got == counts


@settings(deadline=None, max_examples=200)
@given(
    st.lists(st.floats(1, 100, allow_nan=False), min_size=1, max_size=15),
    st.integers(1, 63),
    st.integers(0, 50),
)
def test_quantize_fits_and_keeps_order(targets: list[float], per_entry: int, spare: int) -> None:
    targets = sorted(t / min(targets) for t in targets)
    budget = len(targets) + spare
    counts, error = quantize(targets, per_entry, budget)
    assert all(c >= 1 for c in counts)
    assert sum(-(-c // per_entry) for c in counts) <= budget
    assert counts == sorted(counts)
    assert error >= 0


# -- VLArb entries --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("packets", "mtu", "weights"),
    [
        (1, 2048, [32]),
        (7, 2048, [224]),  # 7 packets of 32 credits: one entry (<= 255)
        (8, 2048, [128, 128]),  # 8 packets: two entries, split evenly
        (4, 4096, [128, 128]),  # 4 KiB packets: at most 3 an entry
        (7, 4096, [192, 128, 128]),  # larger entries first
        (1, 256, [4]),
    ],
)
def test_lane_entries(packets: int, mtu: int, weights: list[int]) -> None:
    credits = mtu // CREDIT_BYTES
    got = lane_entries(5, packets, credits, 255 // credits)
    assert got == [(5, w) for w in weights]


@settings(deadline=None, max_examples=200)
@given(st.sampled_from([256, 512, 1024, 2048, 4096]), st.integers(1, 2000))
def test_lane_entries_carry_whole_packets_evenly(mtu: int, packets: int) -> None:
    credits = mtu // CREDIT_BYTES
    per_entry = 255 // credits
    entries = lane_entries(3, packets, credits, per_entry)
    assert len(entries) == -(-packets // per_entry)
    assert all(vl == 3 and 0 < w <= 255 and w % credits == 0 for vl, w in entries)
    assert sum(w for _, w in entries) == packets * credits
    counts = [w // credits for _, w in entries]
    assert counts == sorted(counts, reverse=True) and counts[0] - counts[-1] <= 1


def test_interleave_takes_one_entry_of_each_vl_in_turn() -> None:
    per_vl = [[(1, 10), (1, 11), (1, 12)], [(2, 20)], [], [(3, 30), (3, 31)]]
    assert interleave(per_vl) == ((1, 10), (2, 20), (3, 30), (1, 11), (3, 31), (1, 12))
    assert interleave([]) == ()


@given(st.lists(st.lists(st.integers(1, 255), max_size=5), max_size=8))
def test_interleave_keeps_every_entry_and_each_vls_order(weights: list[list[int]]) -> None:
    per_vl = [[(vl, w) for w in ws] for vl, ws in enumerate(weights)]
    out = interleave(per_vl)
    assert sorted(out) == sorted(e for entries in per_vl for e in entries)
    for vl, entries in enumerate(per_vl):
        assert [e for e in out if e[0] == vl] == entries
