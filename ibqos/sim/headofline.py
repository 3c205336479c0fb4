"""Head-of-line paces of the fluid model's switch buffers, compiled.

:meth:`ibqos.sim.inputs.InputBuffers.paces` states the rule; this module walks it.  A full
column (one lane of one link) holds the switch input buffers that feed it: each moves no
more bytes per second per host than the fastest host the column lets through it, and the
links into those inputs back up in turn.  The walk goes from every full column up the
links that feed it, once per event of a buffered run, so it is compiled with numba like
the solver (:mod:`ibqos.sim.maxmin`); in Python it took half of a buffered run.

Units: bytes per second per host; ``alpha`` a sender's share (0..1] of its declared rate.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ibqos.sim.maxmin import FloatArray, IntArray, njit


@njit
def input_paces(
    full: IntArray,
    held: FloatArray,
    alpha: FloatArray,
    active: npt.NDArray[np.bool_],
    col_ptr: IntArray,
    sub_ptr: IntArray,
    sub_switch: npt.NDArray[np.bool_],
    sub_key: IntArray,
    col_of_key: IntArray,
    row: IntArray,
    through: FloatArray,
    in_pair: IntArray,
    in_per_host: FloatArray,
    filled: npt.NDArray[np.bool_],
) -> FloatArray:
    """Per input buffer key (input link x lanes + lane), the most bytes per second per
    host it lets any sender through (inf: not held).

    Args:
        full: the full columns.
        held: per input of a column, its fastest active host's bytes per second through
            the input (over every output) at *alpha*.
        alpha, active: every sender's rate share, and which ones send.
        col_ptr, sub_ptr: each column's inputs, each input's entries.
        sub_switch, sub_key: per input of a column, a switch's (not a host's port), and
            its buffer's key.
        col_of_key: the column of the link and lane a key's traffic comes over (-1: none).
        row, through: per entry, its sender, and that sender's bytes per second per host
            through the entry's input at full rate.
        in_pair, in_per_host: sorted codes ``sender x keys + key`` of every sender at a
            switch input, and its bytes per second per host through it at full rate.
        filled: per input buffer key, whether its packets waiting at the outputs fill it
            (a full column holds only the inputs whose buffers its backlog fills).
    """
    n_keys = len(col_of_key)
    pace = np.full(n_keys, np.inf)
    # (column, the input key its link feeds, -1 for a full column): typed for numba
    todo = [(np.int64(0), np.int64(-1)) for _ in range(0)]
    for c in full:
        todo.append((np.int64(c), np.int64(-1)))
    while len(todo):
        c, below = todo.pop()
        for s in range(col_ptr[c], col_ptr[c + 1]):
            if not sub_switch[s]:
                continue
            if below < 0 and not filled[sub_key[s]]:
                continue  # its packets wait too short a time to fill its buffer
            p = held[s]
            if below >= 0:  # the column's link feeds input *below*, which holds it too
                p = 0.0
                for e in range(sub_ptr[s], sub_ptr[s + 1]):
                    r = row[e]
                    if not active[r]:
                        continue
                    at = np.searchsorted(in_pair, r * n_keys + below)
                    a = min(alpha[r], pace[below] / in_per_host[at])
                    p = max(p, through[e] * a)
            key = sub_key[s]
            if p <= 0.0 or p >= pace[key]:
                continue
            pace[key] = p
            if col_of_key[key] >= 0:  # the same lane of the link it came over
                todo.append((np.int64(col_of_key[key]), np.int64(key)))
    return pace
