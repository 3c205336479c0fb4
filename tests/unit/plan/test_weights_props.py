"""Properties of :func:`ibqos.plan.weights.quantize` over seeded random and exhaustive inputs.

The inputs cover what the planner and the tuner pass: 1 to 8 lanes, targets spread up to 64
(and beyond: geometric laws over 8 lanes), favour-light and favour-heavy laws normalised by
the smallest target, equal targets, and ``per_entry`` for every MTU (``255 // (mtu / 64)``:
3 at 4096 bytes up to 63 at 256 bytes, and 127, 255 beyond) with budgets from one entry a
lane to 64 entries.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator, Sequence

import pytest

from ibqos.config.lanes import CREDIT_BYTES
from ibqos.plan.weights import interleave, lane_entries, quantize

#: Packets per entry for MTUs of 4096, 2048, ..., 256 bytes, and two smaller packets.
PER_ENTRY = (3, 7, 15, 31, 63, 127, 255)
#: The worst log error :func:`quantize` is content with (0.5 %).
STOP = 0.005
#: Slack for float sums and logs.
TOL = 1e-9

Case = tuple[list[float], int, int]
#: A case with quantize's counts and error.
Answer = tuple[list[float], int, int, list[int], float]


def _entries(counts: Sequence[int], per_entry: int) -> int:
    return sum(-(-c // per_entry) for c in counts)


def _worst(counts: Sequence[int], targets: Sequence[float]) -> float:
    """Worst ``|log(count / target)|`` at the best common scale: half the spread of the logs."""
    logs = [math.log(c / t) for c, t in zip(counts, targets, strict=True)]
    return (max(logs) - min(logs)) / 2


def _targets(rng: random.Random, n: int) -> list[float]:
    """Targets of one of the shapes the weight laws and the tuner produce, the smallest 1."""
    shape = rng.randrange(5)
    if shape == 0:  # geometric, favour-light, spread up to 64
        ratio = rng.uniform(1.0, 64 ** (1 / max(n - 1, 1)))
        raw = [ratio**r for r in range(n)]
    elif shape == 1:  # geometric, favour-heavy (ratio < 1): normalised by the smallest
        ratio = rng.uniform(0.25, 1.0)
        raw = [ratio**r for r in range(n)]
    elif shape == 2:  # linear, spread up to 64
        step = rng.uniform(0.0, 63 / max(n - 1, 1))
        raw = [1 + r * step for r in range(n)]
    elif shape == 3:  # anything in 1..64, with ties
        pool = [rng.uniform(1, 64) for _ in range(rng.randint(1, n))]
        raw = [rng.choice(pool) for _ in range(n)]
    else:  # wide: geometric laws over many lanes reach 2 ** 7 and more
        raw = [rng.uniform(1, 1000) for _ in range(n)]
    rng.shuffle(raw)
    low = min(raw)
    return [t / low for t in raw]


def _cases(seed: int, count: int) -> Iterator[Case]:
    rng = random.Random(seed)
    for _ in range(count):
        n = rng.randint(1, 8)
        yield _targets(rng, n), rng.choice(PER_ENTRY), rng.randint(n, 64)


CASES = list(_cases(20261127, 3000))


@pytest.fixture(scope="module")
def answers() -> list[Answer]:
    """Each case with quantize's counts and error, computed once for the tests that share them."""
    return [(t, p, b, *quantize(t, p, b)) for t, p, b in CASES]


def _ceiling_base(targets: Sequence[float], per_entry: int, budget: int) -> int:
    """Largest *b* (0 if none) at which ``ceil(b * target)`` packets a lane fit in *budget*."""
    b = 0
    while _entries([math.ceil((b + 1) * t - TOL) for t in targets], per_entry) <= budget:
        b += 1
    return b


def _optimum(targets: Sequence[float], per_entry: int, budget: int) -> float:
    """Least worst log error of any counts that fit, or any value <= STOP if one is reached.

    The best counts can be taken to be, for some lane at some *k* packets, the fewest packets
    that keep every lane's ``count / target`` at or above that lane's ``k / target``: lowering
    a lane to that floor fits as well and cannot raise the worst error.
    """
    best = math.inf
    for tj in targets:
        for k in itertools.count(1):
            counts = [max(1, math.ceil(t * k / tj - TOL)) for t in targets]
            if _entries(counts, per_entry) > budget:
                break
            best = min(best, _worst(counts, targets))
            if best <= STOP:
                return best
    return best


# -- what every answer satisfies ----------------------------------------------------------


def test_error_is_the_worst_log_error_of_the_counts(answers: list[Answer]) -> None:
    for targets, per_entry, budget, counts, error in answers:
        assert math.log1p(error) == pytest.approx(_worst(counts, targets), abs=TOL), (
            targets,
            per_entry,
            budget,
        )


def test_counts_are_whole_fit_and_follow_the_targets(answers: list[Answer]) -> None:
    for targets, per_entry, budget, counts, _ in answers:
        case = (targets, per_entry, budget, counts)
        assert len(counts) == len(targets), case
        assert all(isinstance(c, int) and c >= 1 for c in counts), case
        assert _entries(counts, per_entry) <= budget, case
        for (t1, c1), (t2, c2) in itertools.combinations(zip(targets, counts, strict=True), 2):
            if t1 == t2:
                assert c1 == c2, case
            elif t1 < t2:
                assert c1 <= c2, case
            else:
                assert c1 >= c2, case


def test_only_the_ratios_of_the_targets_matter(answers: list[Answer]) -> None:
    for targets, per_entry, budget, counts, error in answers[:300]:
        scaled = quantize([t * 3.7 for t in targets], per_entry, budget)
        assert scaled == (counts, pytest.approx(error, abs=TOL)), (targets, per_entry, budget)


# -- accuracy -----------------------------------------------------------------------------


def test_error_is_within_half_a_packet_of_the_base_that_fits(answers: list[Answer]) -> None:
    """With *b* the most packets for the smallest target at which ``ceil(b * target)`` packets
    fit, the worst log error is at most ``max(0.005, ln(1 + 1/b) / 2)`` (about ``1/(2b)``):
    those counts are within one packet above ``b * target``, so every ``log(count / target)``
    lies in ``[log b, log(b + 1)]``.
    """
    checked = 0
    for targets, per_entry, budget, _, error in answers:
        b = _ceiling_base(targets, per_entry, budget)
        if b == 0:
            continue  # the targets' range does not fit at all
        checked += 1
        bound = max(STOP, math.log1p(1 / b) / 2)
        assert math.log1p(error) <= bound + TOL, (targets, per_entry, budget, b, error)
    assert checked > len(answers) // 2  # the bound is exercised, not skipped


def test_error_is_the_least_any_counts_reach(answers: list[Answer]) -> None:
    """Above 0.5 % no counts that fit have a smaller worst error (against an independent
    search over the counts that can be best, see :func:`_optimum`)."""
    for targets, per_entry, budget, _, error in answers[:600]:
        best = _optimum(targets, per_entry, budget)
        assert math.log1p(error) <= max(STOP, best) + TOL, (targets, per_entry, budget, best)


@pytest.mark.parametrize("per_entry", [3, 7])
def test_error_is_the_least_of_all_counts_on_small_tables(per_entry: int) -> None:
    """Exhaustive: every count vector that fits a small table, for 1 to 3 lanes."""
    rng = random.Random(per_entry)
    for _ in range(150):
        n = rng.randint(1, 3)
        targets = _targets(rng, n)
        budget = rng.randint(n, n + 2)
        cap = per_entry * (budget - n + 1)
        best = min(
            _worst(c, targets)
            for c in itertools.product(range(1, cap + 1), repeat=n)
            if _entries(c, per_entry) <= budget
        )
        _, error = quantize(targets, per_entry, budget)
        assert math.log1p(error) <= max(STOP, best) + TOL, (targets, per_entry, budget, best)


def test_ratios_of_small_integers_are_encoded_exactly() -> None:
    """Targets ``k / min(k)`` for integers k up to 9 whose counts ``k / gcd(k)`` fit come out
    exactly: any fewer packets are off by at least ``ln(1 + 1/81) / 2`` > 0.5 %."""
    rng, checked = random.Random(7), 0
    for _ in range(2000):
        ks = [rng.randint(1, 9) for _ in range(rng.randint(1, 8))]
        exact = [k // math.gcd(*ks) for k in ks]
        per_entry = rng.choice(PER_ENTRY)
        need = _entries(exact, per_entry)
        if need > 64:
            continue
        budget = rng.randint(max(need, len(ks)), 64)
        counts, error = quantize([k / min(ks) for k in ks], per_entry, budget)
        assert (counts, error) == (exact, pytest.approx(0, abs=TOL)), (ks, per_entry, budget)
        checked += 1
    assert checked > 1500


def test_ratios_of_integers_up_to_64_are_within_half_a_percent() -> None:
    """When exact counts for integer ratios up to 64 fit, 0.5 % is reached with no more
    packets than the exact counts."""
    rng, checked = random.Random(64), 0
    for _ in range(2000):
        ks = [rng.randint(1, 64) for _ in range(rng.randint(1, 8))]
        exact = [k // math.gcd(*ks) for k in ks]
        per_entry = rng.choice(PER_ENTRY)
        need = _entries(exact, per_entry)
        if need > 64:
            continue
        budget = rng.randint(max(need, len(ks)), 64)
        counts, error = quantize([k / min(ks) for k in ks], per_entry, budget)
        assert math.log1p(error) <= STOP + TOL, (ks, per_entry, budget, counts)
        assert sum(counts) <= sum(exact), (ks, per_entry, budget, counts)
        checked += 1
    assert checked > 1000


def test_close_targets_keep_distinct_counts() -> None:
    counts, error = quantize([1, 1.1], 7, 64)
    assert counts[0] < counts[1]
    assert error <= 0.005
    assert counts == [10, 11]  # the fewest packets that reach 0.5 %: 1.1 exactly


def test_powers_of_two_are_encoded_exactly() -> None:
    """The default law over 8 lanes: not one packet short of 1:2:...:128 when it fits."""
    targets = [2.0**r for r in range(8)]
    assert quantize(targets, 255, 64) == ([2**r for r in range(8)], 0.0)
    assert quantize(targets, 7, 64) == ([2**r for r in range(8)], 0.0)  # 42 entries


# -- VLArb entries ------------------------------------------------------------------------


@pytest.mark.parametrize("mtu", [256, 512, 1024, 2048, 4096])
def test_lane_entries_split_every_packet_count_evenly(mtu: int) -> None:
    credits = mtu // CREDIT_BYTES
    per_entry = 255 // credits
    for packets in range(1, 2001):
        got = lane_entries(4, packets, credits, per_entry)
        sizes = [w // credits for _, w in got]
        assert len(got) == -(-packets // per_entry), packets
        assert all(vl == 4 and 0 < w <= 255 and w % credits == 0 for vl, w in got), packets
        assert sum(w for _, w in got) == packets * credits, packets
        assert sizes == sorted(sizes, reverse=True) and sizes[0] - sizes[-1] <= 1, packets


def test_encoded_tables_carry_the_counts_within_the_budget(answers: list[Answer]) -> None:
    """quantize, lane_entries and interleave as the planner chains them: the table fits the
    budget, every weight is whole packets of at most 255 credits, each VL's entries add up to
    its packets and differ by at most one packet, and the VLs take turns."""
    for targets, per_entry, budget, counts, _ in answers:
        credits = 255 // per_entry  # the credits of a packet that fills an entry
        per_vl = [lane_entries(vl, c, credits, per_entry) for vl, c in enumerate(counts)]
        table = interleave(per_vl)
        case = (targets, per_entry, budget, counts)
        assert len(table) <= budget, case
        assert all(0 < w <= 255 and w % credits == 0 for _, w in table), case
        for vl, count in enumerate(counts):
            sizes = [w // credits for v, w in table if v == vl]
            assert sum(sizes) == count and max(sizes) - min(sizes) <= 1, case
        firsts = [v for v, _ in table[: len(counts)]]
        assert firsts == list(range(len(counts))), case  # one entry of each VL first
