"""The fluid model's solver: max-min fair rates by progressive freezing, compiled.

:mod:`ibqos.sim.allocator` states the sharing rule; this module computes it.  The loop runs
once per distinct bottleneck level; a round water-fills a link three times over (between
lanes, between a lane's inputs, within an input), and only the links whose offers changed
since the last round, or, for the first round, since the last call.  It is compiled with
numba: in numpy each round cost about a hundred array passes, and a 2,048-node what-if
solves thousands of times (docs/simulate-benchmark.md).  numba caches the machine code
beside the module (or in ``NUMBA_CACHE_DIR``), so only the first run on a machine
compiles (about 10 s here); where it can write neither, each process compiles.

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
def _refill(
    x: int,
    act: npt.NDArray[np.bool_],
    want: FloatArray,
    offer: FloatArray,
    load: FloatArray,
    hosts: FloatArray,
    sub_ptr: IntArray,
    col_ptr: IntArray,
    col_lane: IntArray,
    link_col_ptr: IntArray,
    link_col: IntArray,
    col_open: npt.NDArray[np.bool_],
    col_ask: FloatArray,
    lane_weight: FloatArray,
    hi_lanes: IntArray,
    lo_lanes: IntArray,
    cap: float,
    high_share: float,
    wanted: FloatArray,
    got: FloatArray,
    grant: FloatArray,
    scratch: FloatArray,
    order: IntArray,
    members: IntArray,
) -> None:
    """Fill link *x* again: each lane's share, each input's share of its lane, each active
    entry's grant within its input (as a share of its sender's rate).  A column with a
    backlog in its buffers asks its lane for at least *col_ask* (bytes per second; the
    whole link unless what is below holds it back); a column whose buffers
    still have room (*col_open*) grants every entry its offer."""
    n_lanes = len(lane_weight)
    lane_d = scratch[0, :n_lanes]
    lane_s = scratch[1, :n_lanes]
    lane_d[:] = 0.0
    for k in range(link_col_ptr[x], link_col_ptr[x + 1]):
        c = link_col[k]
        total_c = 0.0
        for sub in range(col_ptr[c], col_ptr[c + 1]):
            total = 0.0
            for e in range(sub_ptr[sub], sub_ptr[sub + 1]):
                if act[e]:
                    total += want[e]
            wanted[sub] = total
            total_c += total
        lane_d[col_lane[c]] = max(total_c, col_ask[c])
    _lane_shares(
        lane_d, lane_weight, hi_lanes, lo_lanes, cap, high_share, lane_s, scratch[2:6], order
    )
    ones, buf_in, buf_w = scratch[6], scratch[7], scratch[8]
    buf_out, ratio = scratch[9], scratch[10]
    for k in range(link_col_ptr[x], link_col_ptr[x + 1]):  # between a lane's inputs
        c = link_col[k]
        lo, hi = col_ptr[c], col_ptr[c + 1]
        if col_open[c]:  # the buffers take what the lane's share leaves
            for sub in range(lo, hi):
                got[sub] = wanted[sub]
                for e in range(sub_ptr[sub], sub_ptr[sub + 1]):
                    if act[e]:
                        grant[e] = offer[e]
            continue
        _fill(wanted[lo:hi], ones[: hi - lo], lane_s[col_lane[c]], got[lo:hi], ratio, order)
        for sub in range(lo, hi):  # within each input, between its active entries
            n = 0
            for e in range(sub_ptr[sub], sub_ptr[sub + 1]):
                if act[e]:
                    members[n] = e
                    n += 1
            if n == 0:
                continue
            if wanted[sub] <= got[sub] * (1 + EPS):  # all it brings passes
                for i in range(n):
                    grant[members[i]] = offer[members[i]]
                continue
            if n == 1:  # one sender: it gets what its input gets
                e = members[0]
                grant[e] = got[sub] / load[e] if load[e] > 0 else offer[e]
                continue
            for i in range(n):
                buf_in[i] = want[members[i]]
                buf_w[i] = hosts[members[i]]
            _fill(buf_in[:n], buf_w[:n], got[sub], buf_out[:n], ratio, order)
            for i in range(n):
                e = members[i]
                grant[e] = buf_out[i] / load[e] if load[e] > 0 else offer[e]


@njit
def solve_kept(
    todo: npt.NDArray[np.bool_],
    hot: npt.NDArray[np.bool_],
    label: IntArray,
    row: IntArray,
    link: IntArray,
    load: FloatArray,
    hosts: FloatArray,
    sub_ptr: IntArray,
    col_ptr: IntArray,
    col_lane: IntArray,
    link_col_ptr: IntArray,
    link_col: IntArray,
    row_ptr: IntArray,
    row_entries: IntArray,
    col_open: npt.NDArray[np.bool_],
    col_ask: FloatArray,
    row_cap: FloatArray,
    lane_weight: FloatArray,
    lane_high: npt.NDArray[np.bool_],
    cap: FloatArray,
    high_share: float,
    first: FloatArray,
    first_act: npt.NDArray[np.bool_],
    first_col: FloatArray,
    first_cap: FloatArray,
) -> tuple[FloatArray, int]:
    """``alpha`` of every sender (1 for the ones not in *todo*), and the rounds it took.

    Progressive freezing over the entries of the *todo* senders on *hot* links (the
    *active* entries): every sender not fixed yet asks for its full rate, the fixed ones
    offer their rate; a round fixes the senders nothing can raise any more, or, when there
    are none, each group's senders granted the least.  Only a sender fixed in the last
    round offers something new, so a round fills again only the links it crosses.  The
    first round (everyone at full rate) depends on each link's active entries only, so it
    is kept between calls in *first* and *first_act*, and a call fills again only the links
    whose active entries changed: usually those of the one job that changed phase.

    Args:
        todo: the senders to solve (whole groups of :func:`hot_groups`).
        hot: the links they overload (:func:`hot_groups`).
        label: each sender's group (:func:`hot_groups`).
        row, link, load, hosts: each kept entry's sender, link, bytes per second at full
            rate, and the source hosts behind it (its weight within its input).  Entries
            are in the order of (lane, link, input, sender).
        sub_ptr: the entries of input *s* are ``sub_ptr[s]..sub_ptr[s + 1] - 1``.
        col_ptr, col_lane: the inputs of column (one lane of one link) *c* are
            ``col_ptr[c]..col_ptr[c + 1] - 1``; its lane.
        link_col_ptr, link_col: the columns of link *x* are
            ``link_col[link_col_ptr[x]:link_col_ptr[x + 1]]``.
        row_ptr, row_entries: the entries of sender *r* are
            ``row_entries[row_ptr[r]:row_ptr[r + 1]]``.
        col_open, col_ask: per column, whether its buffers have room left (it limits
            no one), and what its backlog asks its lane for (bytes per second, 0: none):
            :class:`ibqos.sim.buffers.SwitchBuffers`.
        row_cap: the most (0..1] of its rate each sender may send (head of line, see
            :mod:`ibqos.sim.inputs`): it asks for that much, not its full rate.
        lane_weight, lane_high: each lane's packets per arbitration round, and priority.
        cap: each link's bytes per second.
        high_share: the most of a link high-priority lanes get while low data waits.
        first: the first round's state, updated: rows *wanted* (per input), *got* (per
            input) and *grant* (per entry), each as long as the longest of them.
        first_act: the active entries *first* was filled for, updated.
        first_col: the *col_open* and *col_ask* rows *first* was filled for, updated.
        first_cap: the *row_cap* *first* was filled for, updated.
    """
    n_e = len(row)
    n_rows = len(todo)
    n_links = len(cap)
    n_sub = len(sub_ptr) - 1
    act = np.zeros(n_e, dtype=np.bool_)
    unfixed_on = np.zeros(n_links, dtype=np.int64)
    dirty = np.zeros(n_links, dtype=np.bool_)  # links to fill again, and their list
    to_fill = np.empty(n_links, dtype=np.int64)
    n_fill = 0
    for e in range(n_e):
        act[e] = todo[row[e]] and hot[link[e]]
        if act[e]:
            unfixed_on[link[e]] += 1
        if act[e] != first_act[e] and not dirty[link[e]]:
            dirty[link[e]] = True
            to_fill[n_fill] = link[e]
            n_fill += 1
    for c in range(len(col_ptr) - 1):  # columns whose buffers changed state
        x = link[sub_ptr[col_ptr[c]]]
        if (col_open[c] != first_col[0, c] or col_ask[c] != first_col[1, c]) and not dirty[x]:
            dirty[x] = True
            to_fill[n_fill] = x
            n_fill += 1
    for r in range(n_rows):  # senders that ask for another share of their rate
        if row_cap[r] == first_cap[r]:
            continue
        for k in range(row_ptr[r], row_ptr[r + 1]):
            x = link[row_entries[k]]
            if not dirty[x]:
                dirty[x] = True
                to_fill[n_fill] = x
                n_fill += 1
    widest = max(len(lane_weight), 1)  # scratch space for the widest column or input
    for c in range(len(col_ptr) - 1):
        widest = max(widest, col_ptr[c + 1] - col_ptr[c])
    for s in range(n_sub):
        widest = max(widest, sub_ptr[s + 1] - sub_ptr[s])
    scratch = np.empty((11, widest))
    scratch[6, :] = 1.0
    order = np.empty(widest, dtype=np.int64)
    members = np.empty(widest, dtype=np.int64)
    hi_lanes = np.flatnonzero(lane_high)
    lo_lanes = np.flatnonzero(~lane_high)
    offer = np.empty(n_e)
    want = np.empty(n_e)
    for e in range(n_e):
        offer[e] = row_cap[row[e]]
        want[e] = load[e] * offer[e]
    wanted, got, grant = first[0, :n_sub], first[1, :n_sub], first[2, :n_e]
    for i in range(n_fill):  # the first round, where the active entries changed
        x = to_fill[i]
        dirty[x] = False
        _refill(
            x, act, want, offer, load, hosts, sub_ptr, col_ptr, col_lane, link_col_ptr,
            link_col, col_open, col_ask, lane_weight, hi_lanes, lo_lanes, cap[x],
            high_share, wanted, got, grant, scratch, order, members,
        )  # fmt: skip
    first_act[:] = act
    first_col[0, :] = col_open
    first_col[1, :] = col_ask
    first_cap[:] = row_cap
    wanted, got, grant = wanted.copy(), got.copy(), grant.copy()
    n_fill = 0
    fixed = ~todo
    rate = np.ones(n_rows)
    least = np.ones(n_rows)
    low = np.empty(n_rows)  # per group (a group's label is one of its senders)
    settled = np.zeros(n_rows, dtype=np.bool_)
    now = np.zeros(n_rows, dtype=np.bool_)
    open_link = np.zeros(n_links, dtype=np.bool_)
    held = np.empty(n_e, dtype=np.int64)  # entries held back at their grant, per round
    rounds = 0
    left = 0
    for r in range(n_rows):
        left += todo[r]
    while left > 0:
        rounds += 1
        if rounds > 1:
            for i in range(n_fill):
                x = to_fill[i]
                dirty[x] = False
                if unfixed_on[x] > 0:
                    _refill(
                        x, act, want, offer, load, hosts, sub_ptr, col_ptr, col_lane,
                        link_col_ptr, link_col, col_open, col_ask, lane_weight,
                        hi_lanes, lo_lanes, cap[x], high_share, wanted, got, grant,
                        scratch, order, members,
                    )  # fmt: skip
            n_fill = 0
        low[:] = np.inf  # per group of senders: groups do not affect each other
        for r in range(n_rows):  # only the senders not fixed yet: their entries
            if fixed[r]:
                continue
            smallest = row_cap[r]
            for k in range(row_ptr[r], row_ptr[r + 1]):
                e = row_entries[k]
                if act[e]:
                    smallest = min(smallest, grant[e])
            least[r] = smallest
            low[label[r]] = min(low[label[r]], smallest)
        # Fixed now, first the ones that are final: senders granted all they ask for
        # (grants only rise as others are fixed lower), and senders held back at a link
        # where every sender not yet fixed, in any lane, is held back (no one there will
        # give anything back).  A group with neither fixes its senders granted the least:
        # the link that holds them may still get bytes back from a sender fixed lower
        # elsewhere later, which then go unused (shares are in bytes, the least in alpha).
        now[:] = False
        open_link[:] = False
        settled[:] = False
        n_held = 0
        for r in range(n_rows):
            if fixed[r]:
                continue
            for k in range(row_ptr[r], row_ptr[r + 1]):
                e = row_entries[k]
                if not act[e]:
                    continue
                if grant[e] <= least[r] * (1 + TIE) + EPS:
                    held[n_held] = e
                    n_held += 1
                else:
                    open_link[link[e]] = True
        for k in range(n_held):
            e = held[k]
            if not open_link[link[e]]:
                now[row[e]] = True
                settled[label[row[e]]] = True
        for r in range(n_rows):
            if fixed[r]:
                continue
            if least[r] >= row_cap[r]:
                now[r] = True
            elif not settled[label[r]] and least[r] <= low[label[r]] * (1 + TIE) + EPS:
                now[r] = True
        for r in range(n_rows):
            if not now[r]:
                continue
            rate[r] = least[r]
            fixed[r] = True
            left -= 1
            for k in range(row_ptr[r], row_ptr[r + 1]):  # what it offers from now on
                e = row_entries[k]
                if not act[e]:
                    continue
                unfixed_on[link[e]] -= 1
                if rate[r] < row_cap[r]:  # granted all it asked, it offers what it did
                    offer[e] = rate[r]
                    want[e] = load[e] * rate[r]
                    if not dirty[link[e]]:
                        dirty[link[e]] = True
                        to_fill[n_fill] = link[e]
                        n_fill += 1
    return rate, rounds


@njit
def lane_outputs(
    into: FloatArray,
    ask: FloatArray,
    col_lane: IntArray,
    link_col_ptr: IntArray,
    link_col: IntArray,
    lane_weight: FloatArray,
    lane_high: npt.NDArray[np.bool_],
    cap: FloatArray,
    high_share: float,
) -> FloatArray:
    """What each column (one lane of one link) sends on, in bytes per second: its lane's
    share of the link when *into* (bytes per second coming in, per column) is offered,
    a column with a backlog asking its lane for at least *ask* (bytes per second)."""
    n_lanes = max(len(lane_weight), 1)
    hi_lanes = np.flatnonzero(lane_high)
    lo_lanes = np.flatnonzero(~lane_high)
    demand = np.zeros(n_lanes)
    share = np.zeros(n_lanes)
    scratch = np.empty((4, n_lanes))
    order = np.empty(n_lanes, dtype=np.int64)
    out = np.zeros(len(into))
    for x in range(len(link_col_ptr) - 1):
        lo, hi = link_col_ptr[x], link_col_ptr[x + 1]
        if lo == hi:
            continue
        demand[:] = 0.0
        for k in range(lo, hi):
            c = link_col[k]
            demand[col_lane[c]] = max(into[c], ask[c])
        _lane_shares(
            demand, lane_weight, hi_lanes, lo_lanes, cap[x], high_share, share, scratch, order
        )
        for k in range(lo, hi):
            c = link_col[k]
            out[c] = share[col_lane[c]]
    return out


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
