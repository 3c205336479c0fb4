"""Head of line in the fluid model: how a full column holds the switch inputs that feed it.

Each switch input has one buffer per lane, a FIFO that takes packets for any output.  A
*column* (one lane of one link) whose buffers are full holds the inputs that feed it whose
buffers its backlog fills (by Little's law, an input's packets waiting for the column are
what it brings times their wait there): the packets of the lane behind its own in such a
buffer, for any output, come in no faster than the held ones, so no host's traffic
through the input moves more bytes than the fastest held host's.  The buffers up the links
that feed a held input back up in turn, up to the hosts.  :class:`InputBuffers` indexes
the senders by the input buffers they pass through and gives each sender its cap
(:meth:`InputBuffers.paces`); the walk up the links is compiled
(:func:`ibqos.sim.headofline.input_paces`).

Left out: that an input's one buffer is counted whole in every column it feeds.

Units: bytes per second (per host where said); ``alpha`` a sender's share (0..1] of its
declared rate; buffers in bytes.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ibqos.sim.layout import Layout
from ibqos.sim.senders import Senders

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: rates and bytes within this fraction of each other count as equal
TOL = 1e-7


class InputBuffers:
    """The switch input buffers the senders pass through, for the allocator's columns.

    Args:
        senders: the mix's senders.
        layout: the allocator's kept entries (:func:`ibqos.sim.layout.lay_out`).
        lane_of: each sender's lane (index among the lanes in use).
        n_lanes: the lanes in use (at least 1).
    """

    def __init__(self, senders: Senders, layout: Layout, lane_of: IntArray, n_lanes: int) -> None:
        # Per (sender, switch input buffer), kept or not, the bytes per second per host the
        # sender puts through it at full rate, over every output it goes to; and the same
        # for each kept entry's sender at the entry's input (0 at a host's port).  A
        # per-job sender's hosts there are counted as the most behind one output.
        self._layout = layout
        s = senders
        n_keys = layout.n_keys
        at_switch = np.flatnonzero(s.e_in >= 0)
        in_row = s.e_row[at_switch]
        in_key = s.e_in[at_switch] * n_lanes + lane_of[in_row]
        pair, pair_of = np.unique(in_row * n_keys + in_key, return_inverse=True)
        self._in_pair = pair
        self._in_row, self._in_key = pair // n_keys, pair % n_keys
        in_hosts = np.zeros(len(pair))
        np.maximum.at(in_hosts, pair_of, s.e_hosts[at_switch])
        self._in_per_host = np.bincount(pair_of, weights=s.e_load[at_switch]) / in_hosts
        self._in_hosts = in_hosts
        code = layout.row * n_keys + layout.sub_key[layout.entry_sub]
        at = np.minimum(np.searchsorted(pair, code), max(len(pair) - 1, 0))
        switch = layout.sub_switch[layout.entry_sub]
        self._through = np.where(switch, self._in_per_host[at] if len(pair) else 0.0, 0.0)

    def feeding(self, active: npt.NDArray[np.bool_]) -> FloatArray:
        """Per column, the switch inputs that bring it traffic of *active* senders.  Each
        one's buffer for the lane can fill with the column's packets whole, as a FIFO
        takes packets for any output until it is full; a column that fills it then holds
        the input's other outputs too (:meth:`paces`), so counting it in every column it
        feeds does not let two of them use it for long."""
        lay = self._layout
        if not len(lay.row):
            return np.zeros(lay.columns)
        offered = np.add.reduceat(lay.load * active[lay.row], lay.sub_ptr[:-1])
        bringing = (lay.sub_switch & (offered > 0)).astype(np.float64)
        return np.add.reduceat(bringing, lay.col_ptr[:-1])

    def paces(
        self,
        alpha: FloatArray,
        active: npt.NDArray[np.bool_],
        full: npt.NDArray[np.bool_],
        wait_s: FloatArray | None = None,
        buffer_bytes: float = 0.0,
    ) -> tuple[FloatArray, FloatArray]:
        """Per sender, the most (0..1] of its rate the input buffers it passes through let
        it send (head of line); and per column, the most bytes per second the input its
        link feeds lets through (inf: not held), which its backlog cannot leave faster
        than.  A switch input whose buffer for a lane feeds a *full*
        column holds packets for that column that leave only as fast as the column lets
        its senders through (at *alpha*).  Upstream, the link the input comes over serves
        its own inputs in turn, so the packets of the others come in no faster than the
        held ones: no host's traffic of the lane through the input, to any output, moves
        more bytes per second than the fastest held host's does (a host that sends less
        is not slowed: the in-cast of ``test_an_in_cast_downstream_...`` leaves M alone,
        as the packet model nearly does).  With *wait_s* (per column, how long its packets
        wait in its buffers), only the inputs whose packets waiting at the full columns
        fill their *buffer_bytes* are held (Little's law: what an input brings a column
        times that wait); an input that brings a column less has its packets taken as
        they come.  The link it comes over then backs up too (its
        receiver's buffer gives no credits), so the buffers feeding that link's lane are
        held to the bytes its senders get through the input below, and so on up to the
        hosts (:func:`ibqos.sim.headofline.input_paces`).

        Measured against the packet model (docs/simulate-validation.md): this rule ranks
        the policies closer to it than holding every sender to the fastest held sender's
        *share* of its rate (mean rho 0.71 against 0.68), or to the larger of the two
        (0.66); remeasured with the rules above, 0.77 against 0.71.  Holding only the
        inputs that bring a full column its max-min share or more ranked worse (0.60):
        the packet model's buffers also fill from inputs under their share."""
        # numba loads in about 0.5 s: only a run that uses it pays for it, not every
        # ibqos command that imports this module
        from ibqos.sim.headofline import input_paces

        lay = self._layout
        if not len(lay.row):
            return np.ones(len(alpha)), np.full(lay.columns, np.inf)
        row = lay.row
        on = active[row]
        # Little's law: an input's packets in the switch are what it sends to each output
        # times their wait there; it is held once they fill its buffer
        filled = np.ones(lay.n_keys, dtype=bool)
        if wait_s is not None:
            offered = np.add.reduceat(lay.load * alpha[row] * on, lay.sub_ptr[:-1])
            waiting = offered * wait_s[lay.sub_col]
            sw = lay.sub_switch
            occupied = np.bincount(lay.sub_key[sw], weights=waiting[sw], minlength=lay.n_keys)
            filled = occupied >= buffer_bytes * (1 - TOL)
        held = np.zeros(len(lay.sub_ptr) - 1)  # per input of a column: fastest host's
        np.maximum.at(held, lay.entry_sub[on], self._through[on] * alpha[row[on]])
        pace = input_paces(
            np.flatnonzero(full),
            held,
            alpha,
            active,
            lay.col_ptr,
            lay.sub_ptr,
            lay.sub_switch,
            lay.sub_key,
            lay.col_of_key,
            row,
            self._through,
            self._in_pair,
            self._in_per_host,
            filled,
        )
        cap = np.ones(len(alpha))
        sending = active[self._in_row]
        hosts = np.bincount(
            self._in_key[sending], weights=self._in_hosts[sending], minlength=lay.n_keys
        )[lay.col_key]
        with np.errstate(invalid="ignore"):  # inf x 0 hosts: not held
            below = np.where(hosts > 0, pace[lay.col_key] * hosts, np.inf)
        through = sending & np.isfinite(pace[self._in_key])
        np.minimum.at(
            cap,
            self._in_row[through],
            pace[self._in_key[through]] / self._in_per_host[through],
        )
        return cap, below
