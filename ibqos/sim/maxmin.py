"""The fluid model's solver: max-min fair rates by progressive freezing, compiled.

:mod:`ibqos.sim.fluid` states the sharing rule; this module computes it.  The
loop runs once per distinct bottleneck level, and each round water-fills every hot link
three times over (between lanes, between a lane's inputs, within an input), so it is
compiled with numba: in numpy each round cost about a hundred array passes, and a
2,048-node what-if solves thousands of times (docs/simulate-benchmark.md).  numba caches
the machine code beside the module (or in ``NUMBA_CACHE_DIR``), so only the first run on a
machine compiles (a few seconds); where it can write neither, each process compiles.

Units: rates are bytes per second, ``alpha`` a sender's share (0..1] of its declared rate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import numba
import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: a capacity is met when the demand is within this fraction above it
EPS = 1e-12
#: senders within this fraction of the least grant are fixed together
TIE = 1e-9

F = TypeVar("F", bound=Callable[..., Any])


def njit(fn: F) -> F:
    """Compile *fn*, keeping the machine code in numba's cache when it has a writable
    place for it (beside this file, or ``NUMBA_CACHE_DIR``); where it has none (a
    read-only install under systemd's ProtectSystem=), numba would refuse at import, so
    compile in each process instead."""
    try:
        return cast(F, numba.njit(cache=True)(fn))
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return cast(F, numba.njit(fn))


@njit
def fill(demand: FloatArray, weight: FloatArray, cap: float, out: FloatArray) -> None:
    """Weighted max-min shares of *cap* into *out*: each item gets ``min(demand, level x
    weight)``, the level the highest that fits; an item of weight 0 gets nothing unless
    everything fits."""
    n = len(demand)
    _fill(demand, weight, cap, out, np.empty(n), np.empty(n, dtype=np.int64))


@njit
def _fill(
    demand: FloatArray,
    weight: FloatArray,
    cap: float,
    out: FloatArray,
    ratio: FloatArray,
    order: IntArray,
) -> None:
    """:func:`fill` with scratch space for the items' ratios and their order (at least
    as long as *demand*): the solver calls it thousands of times a round."""
    n = len(demand)
    total = 0.0
    for i in range(n):
        total += demand[i]
    if total <= cap * (1 + EPS):
        for i in range(n):
            out[i] = demand[i]
        return
    left_w = 0.0
    for i in range(n):
        if demand[i] <= 0:
            ratio[i] = 0.0
        elif weight[i] <= 0:
            ratio[i] = np.inf
        else:
            ratio[i] = demand[i] / weight[i]
            left_w += weight[i]
    if n > 32:
        order[:n] = np.argsort(ratio[:n])
    else:  # insertion sort: the few items of a link or an input
        for i in range(n):
            j = i
            while j > 0 and ratio[order[j - 1]] > ratio[i]:
                order[j] = order[j - 1]
                j -= 1
            order[j] = i
    left = cap
    k = 0
    while k < n:  # the items whose demand fits under the level of those still waiting
        i = order[k]
        if demand[i] <= 0:
            out[i] = 0.0
        elif weight[i] <= 0 or ratio[i] * left_w > left:
            break
        else:
            out[i] = demand[i]
            left -= demand[i]
            left_w -= weight[i]
        k += 1
    level = max(left, 0.0) / left_w if left_w > 0 else 0.0
    while k < n:
        i = order[k]
        out[i] = level * weight[i] if demand[i] > 0 and weight[i] > 0 else 0.0
        k += 1


@njit
def _lane_shares(
    demand: FloatArray,
    weight: FloatArray,
    hi: IntArray,
    lo: IntArray,
    cap: float,
    high_share: float,
    out: FloatArray,
    scratch: FloatArray,
    order: IntArray,
) -> None:
    """Each lane's share of one link: the high-priority lanes (*hi*) first, at most
    *high_share* of the link while low-priority data waits, then the low ones (*lo*),
    each by weighted max-min.  *scratch* holds four rows as long as the lanes."""
    if len(hi) == 0:
        _fill(demand, weight, cap, out, scratch[0], order)
        return
    low_total = 0.0
    for i in lo:
        low_total += demand[i]
    room = max(cap * high_share, cap - low_total) if low_total > 0 else cap
    high_total = 0.0
    for part, limit in ((hi, min(room, cap)), (lo, -1.0)):
        n = len(part)
        for k in range(n):
            scratch[1, k] = demand[part[k]]
            scratch[2, k] = weight[part[k]]
        if limit < 0:  # the low lanes: what the high ones left
            limit = max(cap - high_total, 0.0)
        _fill(scratch[1, :n], scratch[2, :n], limit, scratch[3, :n], scratch[0], order)
        for k in range(n):
            out[part[k]] = scratch[3, k]
            high_total += scratch[3, k]


@njit
def freeze(
    load: FloatArray,
    hosts: FloatArray,
    sender: IntArray,
    n_senders: int,
    group: IntArray,
    n_groups: int,
    entry_col: IntArray,
    sub_ptr: IntArray,
    sub_entries: IntArray,
    col_ptr: IntArray,
    n_links: int,
    lane_weight: FloatArray,
    lane_high: npt.NDArray[np.bool_],
    link_cap: FloatArray,
    high_share: float,
) -> tuple[FloatArray, int]:
    """``alpha`` of every sender, and the rounds it took.

    Args:
        load: bytes per second each entry (a sender on a hot link, over one input) puts
            there at full rate.
        hosts: each entry's weight within its input: the source hosts it stands for.
        sender: each entry's sender (0..n_senders-1).
        group: each sender's group (0..n_groups-1): senders of different groups share no
            hot link, so each group's least grant is fixed on its own.
        entry_col: each entry's column.
        sub_ptr, sub_entries: the entries of input *s* are
            ``sub_entries[sub_ptr[s]:sub_ptr[s + 1]]``.
        col_ptr: the inputs of column *c* are ``col_ptr[c]..col_ptr[c + 1] - 1``; column
            ``lane x n_links + link``.
        lane_weight, lane_high: each lane's packets per arbitration round, and priority.
        link_cap: each hot link's bytes per second.
        high_share: the most of a link high-priority lanes get while low data waits.
    """
    n_e = len(load)
    n_lanes = len(lane_weight)
    n_col = n_lanes * n_links
    fixed = np.zeros(n_senders, dtype=np.bool_)
    rate = np.ones(n_senders)
    offer = np.ones(n_e)
    want = load.copy()
    grant = np.empty(n_e)
    demand = np.empty(n_col)
    share = np.empty(n_col)
    n_sub = len(sub_ptr) - 1
    wanted = np.zeros(n_sub)
    got = np.zeros(n_sub)
    least = np.empty(n_senders)
    lane_d = np.empty(n_lanes)
    lane_s = np.empty(n_lanes)
    widest = 1  # scratch space for the largest column or input
    for c in range(n_col):
        widest = max(widest, col_ptr[c + 1] - col_ptr[c])
    for s in range(n_sub):
        widest = max(widest, sub_ptr[s + 1] - sub_ptr[s])
    ones = np.ones(widest)
    buf_in = np.empty(widest)
    buf_out = np.empty(widest)
    buf_w = np.empty(widest)
    widest = max(widest, n_lanes)
    ratio = np.empty(widest)
    order = np.empty(widest, dtype=np.int64)
    hi_lanes = np.flatnonzero(lane_high)
    lo_lanes = np.flatnonzero(~lane_high)
    lane_scratch = np.empty((4, n_lanes))
    on = np.empty(n_e, dtype=np.int64)  # each entry's link (a division once, not per round)
    for e in range(n_e):
        on[e] = entry_col[e] % n_links
    # Work is kept between rounds: only a sender fixed in the last round offers something
    # new, so only its links (all their lanes: lanes share a link) are filled again.
    # *unfixed_on*: entries of senders not fixed yet per link (a link is live while > 0).
    unfixed_on = np.zeros(n_links, dtype=np.int64)
    for e in range(n_e):
        unfixed_on[on[e]] += 1
    first_of = np.zeros(n_senders + 1, dtype=np.int64)  # each sender's entries: a CSR
    for e in range(n_e):
        first_of[sender[e] + 1] += 1
    for s in range(n_senders):
        first_of[s + 1] += first_of[s]
    by_sender = np.empty(n_e, dtype=np.int64)
    fill_at = first_of[:-1].copy()
    for e in range(n_e):
        by_sender[fill_at[sender[e]]] = e
        fill_at[sender[e]] += 1
    dirty = np.ones(n_links, dtype=np.bool_)
    low = np.empty(n_groups)
    settled = np.zeros(n_groups, dtype=np.bool_)
    now = np.zeros(n_senders, dtype=np.bool_)
    open_link = np.zeros(n_links, dtype=np.bool_)
    held = np.empty(n_e, dtype=np.int64)  # entries held back at their grant, per round
    rounds = 0
    left = n_senders
    while left > 0:
        rounds += 1
        for link in range(n_links):  # between lanes
            if not dirty[link] or unfixed_on[link] == 0:
                continue
            for lane in range(n_lanes):
                c = lane * n_links + link
                total_c = 0.0
                for sub in range(col_ptr[c], col_ptr[c + 1]):
                    total = 0.0
                    for k in range(sub_ptr[sub], sub_ptr[sub + 1]):
                        total += want[sub_entries[k]]
                    wanted[sub] = total
                    total_c += total
                demand[c] = total_c
                lane_d[lane] = total_c
            if n_lanes == 1:  # what _lane_shares gives one lane, without its sort
                cap = link_cap[link]
                if lane_d[0] <= cap * (1 + EPS):
                    share[link] = lane_d[0]
                elif lane_weight[0] > 0:
                    share[link] = cap / lane_weight[0] * lane_weight[0]
                else:
                    share[link] = 0.0
                continue
            _lane_shares(
                lane_d,
                lane_weight,
                hi_lanes,
                lo_lanes,
                link_cap[link],
                high_share,
                lane_s,
                lane_scratch,
                order,
            )
            for lane in range(n_lanes):
                share[lane * n_links + link] = lane_s[lane]
        for c in range(n_col):  # between a lane's inputs, then within each input
            lo, hi = col_ptr[c], col_ptr[c + 1]
            link = c % n_links
            if hi == lo or not dirty[link] or unfixed_on[link] == 0:
                continue
            _fill(wanted[lo:hi], ones[: hi - lo], share[c], got[lo:hi], ratio, order)
            for sub in range(lo, hi):
                a, b = sub_ptr[sub], sub_ptr[sub + 1]
                if wanted[sub] <= got[sub] * (1 + EPS):  # all it brings passes
                    for k in range(a, b):
                        grant[sub_entries[k]] = offer[sub_entries[k]]
                    continue
                if b - a == 1:  # one sender: it gets what its input gets
                    e = sub_entries[a]
                    grant[e] = got[sub] / load[e] if load[e] > 0 else offer[e]
                    continue
                for k in range(a, b):
                    buf_in[k - a] = want[sub_entries[k]]
                    buf_w[k - a] = hosts[sub_entries[k]]
                _fill(buf_in[: b - a], buf_w[: b - a], got[sub], buf_out[: b - a], ratio, order)
                for k in range(a, b):
                    e = sub_entries[k]
                    grant[e] = buf_out[k - a] / load[e] if load[e] > 0 else offer[e]
        dirty[:] = False
        low[:] = np.inf  # per group of senders: groups do not affect each other
        for s in range(n_senders):  # only the senders not fixed yet: their entries
            if fixed[s]:
                continue
            smallest = 1.0
            for k in range(first_of[s], first_of[s + 1]):
                smallest = min(smallest, grant[by_sender[k]])
            least[s] = smallest
            low[group[s]] = min(low[group[s]], smallest)
        # Fixed now, first the ones that are final: senders granted their full rate
        # (grants only rise as others are fixed lower), and senders held back at a link
        # where every sender not yet fixed, in any lane, is held back (no one there will
        # give anything back).  A group with neither fixes its senders granted the least:
        # the link that holds them may still get bytes back from a sender fixed lower
        # elsewhere later, which then go unused (shares are in bytes, the least in alpha).
        now[:] = False
        open_link[:] = False
        settled[:] = False
        n_held = 0
        for s in range(n_senders):
            if fixed[s]:
                continue
            for k in range(first_of[s], first_of[s + 1]):
                e = by_sender[k]
                if grant[e] <= least[s] * (1 + TIE) + EPS:
                    held[n_held] = e
                    n_held += 1
                else:
                    open_link[on[e]] = True
        for k in range(n_held):
            e = held[k]
            if not open_link[on[e]]:
                now[sender[e]] = True
                settled[group[sender[e]]] = True
        for s in range(n_senders):
            if fixed[s]:
                continue
            if least[s] >= 1.0:
                now[s] = True
            elif not settled[group[s]] and least[s] <= low[group[s]] * (1 + TIE) + EPS:
                now[s] = True
        for s in range(n_senders):
            if not now[s]:
                continue
            rate[s] = least[s]
            fixed[s] = True
            left -= 1
            for k in range(first_of[s], first_of[s + 1]):  # what it offers from now on
                e = by_sender[k]
                unfixed_on[on[e]] -= 1
                if rate[s] < 1.0:  # at its full rate it offers what it did
                    offer[e] = rate[s]
                    want[e] = load[e] * rate[s]
                    dirty[on[e]] = True
    return rate, rounds


@njit
def hot_groups(
    active: npt.NDArray[np.bool_],
    pair_ptr: IntArray,
    pair_link: IntArray,
    pair_load: FloatArray,
    cap: FloatArray,
) -> tuple[npt.NDArray[np.bool_], IntArray, IntArray, IntArray]:
    """The links the *active* senders overload, and each sender's group: senders linked
    through such links share a label (-1: on none of them), the group's least sender.
    Also the groups' senders in *order* (by group, then sender), group *g* being
    ``order[bounds[g]:bounds[g + 1]]``.

    Args:
        active: which senders send now.
        pair_ptr, pair_link, pair_load: sender *r*'s links are
            ``pair_link[pair_ptr[r]:pair_ptr[r + 1]]``, with the bytes per second it puts
            on each at full rate.
        cap: each link's bytes per second.
    """
    n_rows = len(active)
    offered = np.zeros(len(cap))
    for r in range(n_rows):
        if active[r]:
            for p in range(pair_ptr[r], pair_ptr[r + 1]):
                offered[pair_link[p]] += pair_load[p]
    hot = np.zeros(len(cap), dtype=np.bool_)
    parent = np.arange(n_rows)
    first = np.full(len(cap), -1, dtype=np.int64)  # a sender on each hot link
    label = np.full(n_rows, -1, dtype=np.int64)
    for r in range(n_rows):
        if not active[r]:
            continue
        for p in range(pair_ptr[r], pair_ptr[r + 1]):
            x = pair_link[p]
            if offered[x] <= cap[x] * (1 + EPS):
                continue
            hot[x] = True
            label[r] = 0
            other = first[x]
            if other < 0:
                first[x] = r
                continue
            a, b = _root(parent, r), _root(parent, other)
            if a != b:  # the smaller index as root, so a label is its group's least sender
                parent[max(a, b)] = min(a, b)
    size = np.zeros(n_rows + 1, dtype=np.int64)
    for r in range(n_rows):
        if label[r] >= 0:
            label[r] = _root(parent, r)
            size[label[r] + 1] += 1
    for r in range(n_rows):  # where each group starts in *order*
        size[r + 1] += size[r]
    order = np.empty(size[n_rows], dtype=np.int64)
    at = size[:-1].copy()
    for r in range(n_rows):
        if label[r] >= 0:
            order[at[label[r]]] = r
            at[label[r]] += 1
    n_groups = 0
    for r in range(n_rows):
        if label[r] == r:
            n_groups += 1
    bounds = np.empty(n_groups + 1, dtype=np.int64)
    g = 0
    for r in range(n_rows):
        if label[r] == r:
            bounds[g] = size[r]
            g += 1
    bounds[n_groups] = len(order)
    return hot, label, order, bounds


@njit
def _root(parent: IntArray, r: int) -> int:
    """Union-find's root of *r*, halving the path on the way."""
    while parent[r] != r:
        parent[r] = parent[parent[r]]
        r = parent[r]
    return r


@njit
def solve_sorted(
    todo: npt.NDArray[np.bool_],
    hot: npt.NDArray[np.bool_],
    row: IntArray,
    lane: IntArray,
    link: IntArray,
    inlet: IntArray,
    load: FloatArray,
    hosts: FloatArray,
    label: IntArray,
    lane_weight: FloatArray,
    lane_high: npt.NDArray[np.bool_],
    cap: FloatArray,
    high_share: float,
) -> tuple[FloatArray, int]:
    """``alpha`` of every sender (1 for the ones not solved), and the rounds.

    Builds the columns and inputs :func:`freeze` takes from the entries of the *todo*
    senders on *hot* links, which are in the order of (lane, link, input, sender), and
    solves them.

    Args:
        todo: the senders to solve (whole groups of :func:`hot_groups`).
        hot: the links they overload (:func:`hot_groups`).
        row, lane, link, inlet: each entry's sender, lane, link and input (the link it
            comes in over; at the first hop a key of its own per sender).
        load, hosts: bytes per second at full rate, and the source hosts behind it.
        label: each sender's group.
        lane_weight, lane_high: each lane's packets per arbitration round, and priority.
        cap: each link's bytes per second.
        high_share: the most of a link high-priority lanes get while low data waits.
    """
    picked = np.empty(len(row), dtype=np.int64)
    n = 0
    for e in range(len(row)):
        if todo[row[e]] and hot[link[e]]:
            picked[n] = e
            n += 1
    n_rows = len(label)
    local = np.full(n_rows, -1, dtype=np.int64)  # sender -> its index in the solve
    group_of = np.full(n_rows, -1, dtype=np.int64)  # group label -> its index
    hot_of = np.full(len(cap), -1, dtype=np.int64)
    lane_of = np.full(len(lane_weight), -1, dtype=np.int64)
    n_s = n_g = n_h = n_l = 0
    for k in range(n):
        e = picked[k]
        hot_of[link[e]] = 0
        lane_of[lane[e]] = 0
        if local[row[e]] < 0:
            local[row[e]] = 0
    for r in range(n_rows):  # in index order, so that rates map back by row
        if local[r] >= 0:
            local[r] = n_s
            n_s += 1
            if group_of[label[r]] < 0:
                group_of[label[r]] = n_g
                n_g += 1
    for x in range(len(cap)):  # in link order: columns then follow the entries' order
        if hot_of[x] >= 0:
            hot_of[x] = n_h
            n_h += 1
    for v in range(len(lane_weight)):
        if lane_of[v] >= 0:
            lane_of[v] = n_l
            n_l += 1
    sender = np.empty(n, dtype=np.int64)
    col = np.empty(n, dtype=np.int64)
    e_load = np.empty(n)
    e_hosts = np.empty(n)
    sub_ptr = np.empty(n + 1, dtype=np.int64)
    n_sub = 0
    for k in range(n):
        e = picked[k]
        sender[k] = local[row[e]]
        col[k] = lane_of[lane[e]] * n_h + hot_of[link[e]]
        e_load[k] = load[e]
        e_hosts[k] = hosts[e]
        if k == 0 or col[k] != col[k - 1] or inlet[e] != inlet[picked[k - 1]]:
            sub_ptr[n_sub] = k
            n_sub += 1
    sub_ptr[n_sub] = n
    n_col = n_l * n_h
    col_ptr = np.empty(n_col + 1, dtype=np.int64)
    c = 0
    for s in range(n_sub):  # the first input of each column (inputs are in column order)
        while c <= col[sub_ptr[s]]:
            col_ptr[c] = s
            c += 1
    while c <= n_col:
        col_ptr[c] = n_sub
        c += 1
    group = np.empty(n_s, dtype=np.int64)
    weight = np.empty(n_l)
    high = np.empty(n_l, dtype=np.bool_)
    cap_hot = np.empty(n_h)
    for r in range(n_rows):
        if local[r] >= 0:
            group[local[r]] = group_of[label[r]]
    for v in range(len(lane_weight)):
        if lane_of[v] >= 0:
            weight[lane_of[v]] = lane_weight[v]
            high[lane_of[v]] = lane_high[v]
    for x in range(len(cap)):
        if hot_of[x] >= 0:
            cap_hot[hot_of[x]] = cap[x]
    rate, rounds = freeze(
        e_load,
        e_hosts,
        sender,
        n_s,
        group,
        n_g,
        col,
        sub_ptr[: n_sub + 1].copy(),
        np.arange(n),
        col_ptr,
        n_h,
        weight,
        high,
        cap_hot,
        high_share,
    )
    alpha = np.ones(n_rows)
    for r in range(n_rows):
        if local[r] >= 0:
            alpha[r] = rate[local[r]]
    return alpha, rounds
