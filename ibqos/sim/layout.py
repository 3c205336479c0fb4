"""Where the fluid solver finds things: the kept entries indexed by column and input.

The allocator (:mod:`ibqos.sim.allocator`) keeps the (sender, link, input) entries of the
links that some mix of its senders could overload, sorted by lane, link, input, then
sender.  A run of entries of one lane, link and input is an *input* (one switch input
buffer of that lane, or at a host's own port one sender); a run of one lane and link is a
*column*, the unit whose share the arbitration decides and whose switch buffers fill and
drain.  :func:`lay_out` indexes those runs once per setup: the compiled solver
(:mod:`ibqos.sim.maxmin`), the head-of-line walk (:mod:`ibqos.sim.inputs`) and the
buffers (:mod:`ibqos.sim.buffers`) read them.

Units: loads in bytes per second at full rate; everything else is an index or a count.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


class Layout(NamedTuple):
    """The kept entries, in the order (lane, link, input, sender), and their runs.

    The compiled kernels take its arrays one by one, not the tuple: numba unboxes a
    named tuple of this size in about 4 us a call against 0.5 us for six arrays, and a
    buffered run calls them several times an event (7 % of its time, measured).

    Attributes:
        row, link, load, hosts: each entry's sender, link, bytes per second at full rate,
            and the source hosts behind it (its weight within its input).
        sub_ptr: the entries of input *s* are ``sub_ptr[s]..sub_ptr[s + 1] - 1``.
        col_ptr, col_lane: the inputs of column *c* are ``col_ptr[c]..col_ptr[c + 1] - 1``;
            its lane (index among the lanes in use).
        link_col_ptr, link_col: the columns of link *x* are
            ``link_col[link_col_ptr[x]:link_col_ptr[x + 1]]``.
        row_ptr, row_entries: the entries of sender *r* are
            ``row_entries[row_ptr[r]:row_ptr[r + 1]]``.
        sub_switch, sub_key: per input, whether it is a switch's (not a host's port), and
            the key of its buffer: input link x lanes + lane (0 at a host's port).
        entry_sub, sub_col, col_start: each entry's input, each input's column, each
            column's first entry.
        col_link, col_key: each column's link, and its key (link x lanes + lane).
        col_of_key: the column of each key; -1 for a lane of a link no column stands for.
    """

    row: IntArray
    link: IntArray
    load: FloatArray
    hosts: FloatArray
    sub_ptr: IntArray
    col_ptr: IntArray
    col_lane: IntArray
    link_col_ptr: IntArray
    link_col: IntArray
    row_ptr: IntArray
    row_entries: IntArray
    sub_switch: BoolArray
    sub_key: IntArray
    entry_sub: IntArray
    sub_col: IntArray
    col_start: IntArray
    col_link: IntArray
    col_key: IntArray
    col_of_key: IntArray

    @property
    def columns(self) -> int:
        """How many columns (one lane of one kept link each)."""
        return len(self.col_ptr) - 1

    @property
    def n_keys(self) -> int:
        """How many input buffer keys: links x lanes in use."""
        return len(self.col_of_key)


def lay_out(
    row: IntArray,
    link: IntArray,
    load: FloatArray,
    hosts: FloatArray,
    lane: IntArray,
    inlet: IntArray,
    n_links: int,
    n_rows: int,
    n_lanes: int,
) -> Layout:
    """Index the kept entries, sorted by (*lane*, *link*, *inlet*, *row*).

    Args:
        row, link, load, hosts: the entries (:class:`Layout`).
        lane, inlet: each entry's lane, and its input: the link it comes in over plus 1,
            or ``-1 - row`` at a host's own port (each sender an input of its own).
        n_links, n_rows, n_lanes: links in the network, senders, lanes in use (at least 1).
    """
    n_e = len(row)
    new_col = np.ones(n_e, dtype=bool)
    new_col[1:] = (lane[1:] != lane[:-1]) | (link[1:] != link[:-1])
    new_sub = new_col.copy()
    new_sub[1:] |= inlet[1:] != inlet[:-1]
    sub_ptr = np.append(np.flatnonzero(new_sub), n_e)
    sub_of_col = np.flatnonzero(new_col[new_sub])  # each column's first input
    col_ptr = np.append(sub_of_col, len(sub_ptr) - 1)
    col_start = np.flatnonzero(new_col)  # each column's first entry
    col_lane, col_link = lane[col_start], link[col_start]
    link_col = np.argsort(col_link, kind="stable")
    link_col_ptr = np.searchsorted(col_link[link_col], np.arange(n_links + 1))
    # Each input's buffer (one per lane per switch input) serves every output the lane's
    # traffic through it goes to (head of line): the key (input link, lane) of each input.
    sub_in = inlet[sub_ptr[:-1]] - 1
    sub_switch = sub_in >= 0  # a switch's input, not a host's
    sub_key = np.where(sub_switch, sub_in * n_lanes + lane[sub_ptr[:-1]], 0)
    # the column of each (link, lane) kept, by the key of an input that comes over it
    col_key = col_link * n_lanes + col_lane
    col_of_key = np.full(n_links * n_lanes, -1, dtype=np.int64)
    col_of_key[col_key] = np.arange(len(col_key))
    row_entries = np.argsort(row, kind="stable")
    return Layout(
        row=row,
        link=link,
        load=load,
        hosts=hosts,
        sub_ptr=sub_ptr,
        col_ptr=col_ptr,
        col_lane=col_lane,
        link_col_ptr=link_col_ptr,
        link_col=link_col,
        row_ptr=np.searchsorted(row[row_entries], np.arange(n_rows + 1)),
        row_entries=row_entries,
        sub_switch=sub_switch,
        sub_key=sub_key,
        entry_sub=np.repeat(np.arange(len(sub_ptr) - 1), np.diff(sub_ptr)),
        sub_col=np.repeat(np.arange(len(col_ptr) - 1), np.diff(col_ptr)),
        col_start=col_start,
        col_link=col_link,
        col_key=col_key,
        col_of_key=col_of_key,
    )
