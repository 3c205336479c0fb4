"""The fluid model's senders: who gets a rate of its own, and the links its flows cross.

A *sender* is one host of one job while the job communicates (or, in a mix too large for
that, a whole job: its hosts move together; :data:`Granularity`).  :class:`Senders` routes
every flow of a mix once and groups the flows by sender: each sender's declared rate, and
the (sender, link, input) entries its flows cross, with the bytes per second it puts on
each at full rate.  The switch buffers the commands give a fluid run follow the same
choice (:func:`auto_buffers`).

Routing and grouping a 2,048-node mix takes about 0.5 s and ``ibqos simulate`` runs one
mix many times, so the senders of the last mix are kept for the next run
(:func:`senders_of`, :func:`forget_mix`).

Units: rates in bytes per second; buffers in MTU packets per lane per switch input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from ibqos.errors import SimError
from ibqos.sim.network import Network
from ibqos.sim.workload import SimJob

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: who gets a rate of its own: each (job, host), each job (all its hosts at one rate), or
#: auto: per host up to :data:`AUTO_HOSTS` sending hosts, per job beyond
Granularity = Literal["host", "job", "auto"]
GRANULARITIES: tuple[Granularity, ...] = ("auto", "host", "job")
#: the most sending hosts "auto" simulates per host.  Per host, a phase ends in as many
#: events as the job has hosts that finish apart, each one a new solve of the rates: at
#: 2,048 hosts that is 50 times slower than per job (docs/simulate-benchmark.md).
AUTO_HOSTS = 512
#: MTU packets of buffer per lane per switch input of a
#: :class:`~ibqos.sim.fluid.FluidSim` (and :func:`~ibqos.sim.fluid.simulate_fluid`) not
#: given any: none, the model without buffers.  The commands choose with
#: :func:`auto_buffers` instead.
BUFFER_PACKETS = 0
#: buffers of the commands' fluid runs with senders per host (:func:`auto_buffers`): with
#: buffers, head of line and the drain, the fluid model ranks the policies as the packet
#: model does far better (mean rho 0.86, against 0.41 without: docs/simulate-validation.md),
#: at up to thirty times the cost of a run without (docs/simulate-benchmark.md)
AUTO_BUFFER_PACKETS = 8


def granularity(jobs: Sequence[SimJob]) -> Granularity:
    """What "auto" means for this mix: "host" up to :data:`AUTO_HOSTS` sending hosts."""
    sending = sum(len(np.unique(j.flows.src_host)) for j in jobs)
    return "host" if sending <= AUTO_HOSTS else "job"


def auto_buffers(
    jobs: Sequence[SimJob], per: Granularity = "auto", given: int | None = None
) -> int:
    """The switch buffers (MTU packets per lane per input) the commands' fluid runs of
    this mix get: *given*, else :data:`AUTO_BUFFER_PACKETS` with senders per host and none
    per job.  Per job, a buffered run is still too slow for a what-if (over 20 s at 2,048
    nodes against a 10 s target, docs/simulate-validation.md); the runs of one mix (its
    jobs alone too) must share the value, so it follows the whole mix's granularity."""
    if given is not None:
        return given
    per = granularity(jobs) if per == "auto" else per
    return AUTO_BUFFER_PACKETS if per == "host" else 0


@dataclass(frozen=True)
class Senders:
    """The senders of a mix: one row per (job, source host) with traffic.

    Attributes:
        job: index of each row's job in the mix.
        rate: bytes per second each row sends at its job's declared rate.
        first: index of each job's first row (rows of a job are contiguous), then the
            row count.
        e_row, e_link, e_in, e_load: the (row, link, input) triples the rows' flows
            cross, sorted by row, link, then input, with the bytes per second the row puts
            there at full rate.  The input is the link the flows arrive on (the switch
            port whose buffer they wait in), -1 at the first hop (the host's own queue).
        e_hosts: the source hosts behind each entry (1 per host; a per-job row stands for
            all its hosts that come in over that input, each served in turn upstream).
        hops: per job, the links each of its flows crosses (:meth:`Network.hops`), kept
            so the buffered model's paths need no second routing.
    """

    job: IntArray
    rate: FloatArray
    first: IntArray
    e_row: IntArray
    e_link: IntArray
    e_in: IntArray
    e_load: FloatArray
    e_hosts: FloatArray
    hops: tuple[IntArray, ...]

    @classmethod
    def of(cls, net: Network, jobs: Sequence[SimJob], per: Granularity = "auto") -> Senders:
        """Route every flow of *jobs* and group them by (job, source host), or by job.

        A job with no flows gets one row with no links, so its communication phase
        lasts its declared length as for any job that meets no one.
        """
        n = net.links
        per = granularity(jobs) if per == "auto" else per
        rows_max = sum(max(len(np.unique(j.flows.src_host)), 1) for j in jobs)
        if rows_max * (n + 1) * n >= 2**62:  # the packed keys below
            raise SimError(f"{rows_max} senders on {n} links: too large for the fluid model")
        job_of, rates, firsts = [], [], []
        keys, loads, srcs = [], [], []
        tables: list[IntArray] = []
        row0 = 0
        for j, sim_job in enumerate(jobs):
            firsts.append(row0)
            flows = sim_job.flows
            hosts, host_row = np.unique(flows.src_host, return_inverse=True)
            if per == "job":  # one row: the job's hosts move together
                hosts, host_row = hosts[:1], np.zeros_like(host_row)
            count = max(len(hosts), 1)
            job_of.append(np.full(count, j, dtype=np.int64))
            rate = np.bincount(host_row, weights=flows.rate, minlength=count)
            rates.append(rate.astype(float))
            table = net.hops(flows) if len(hosts) else np.zeros((0, 0), dtype=np.int64)
            tables.append(table)
            if len(hosts):
                row = row0 + host_row.astype(np.int64)
                for h in range(table.shape[1]):
                    on = table[:, h] >= 0
                    came = table[on, h - 1] if h else -1
                    keys.append(_entry_key(row[on], table[on, h], came, n))
                    loads.append(flows.rate[on])
                    srcs.append(flows.src_host[on].astype(np.int64))
            row0 += count
        firsts.append(row0)
        key: IntArray = np.zeros(0, dtype=np.int64)
        load: FloatArray = np.zeros(0)
        hosts_of: FloatArray = np.zeros(0)
        if keys:
            key, inv = np.unique(np.concatenate(keys), return_inverse=True)
            load = np.bincount(inv, weights=np.concatenate(loads)).astype(float)
            src = np.concatenate(srcs)
            width = int(src.max()) + 1
            pairs = np.unique(inv * width + src)  # each (entry, source host) once
            hosts_of = np.bincount(pairs // width, minlength=len(key)).astype(float)
        e_row, e_link, e_in = _entry_parts(key, n)
        return cls(
            job=np.concatenate(job_of) if job_of else np.zeros(0, dtype=np.int64),
            rate=np.concatenate(rates) if rates else np.zeros(0),
            first=np.array(firsts, dtype=np.int64),
            e_row=e_row,
            e_link=e_link,
            e_in=e_in,
            e_load=load.astype(float),
            e_hosts=hosts_of,
            hops=tuple(tables),
        )

    @property
    def rows(self) -> int:
        return len(self.job)

    def alone(self, j: int) -> Senders:
        """Job *j*'s senders as :meth:`of` builds them for that job alone (the same
        granularity): its rows and their entries, numbered from 0.  The same to the bit:
        each entry sums the same flows in the same order."""
        lo, hi = int(self.first[j]), int(self.first[j + 1])
        a, b = np.searchsorted(self.e_row, [lo, hi])
        return Senders(
            job=np.zeros(hi - lo, dtype=np.int64),
            rate=self.rate[lo:hi].copy(),
            first=np.array([0, hi - lo], dtype=np.int64),
            e_row=self.e_row[a:b] - lo,
            e_link=self.e_link[a:b].copy(),
            e_in=self.e_in[a:b].copy(),
            e_load=self.e_load[a:b].copy(),
            e_hosts=self.e_hosts[a:b].copy(),
            hops=(self.hops[j],),
        )


#: a mix by identity: its network, its jobs, and the granularity of its senders
_MixKey = tuple[int, tuple[int, ...], Granularity]


class _LastMix:
    """The senders of the last mix of several jobs simulated, to reuse.

    ``ibqos simulate`` runs one mix under several setups and each job of it alone, and
    routing and grouping a mix's flows is about 0.5 s at 2,048 nodes: the runs of one
    invocation (and the baseline and the plan of a what-if) share them.  Keyed by
    identity: a :class:`SimJob` and a :class:`Network` are not changed once built, and the
    objects are held here so that their ids are not reused.
    """

    def __init__(self) -> None:
        # the mix's key, the objects the key's ids stand for, and its senders
        self._last: tuple[_MixKey, tuple[Network, list[SimJob]], Senders] | None = None

    def senders(self, net: Network, jobs: Sequence[SimJob], per: Granularity) -> Senders:
        """:meth:`Senders.of` *jobs*, reused when they are the last mix or one of its jobs."""
        per = granularity(jobs) if per == "auto" else per
        key: _MixKey = (id(net), tuple(id(j) for j in jobs), per)
        if self._last is not None:
            mix_key, _, mix = self._last
            if key == mix_key:
                return mix
            net_id, job_ids, mix_per = mix_key
            if len(jobs) == 1 and (net_id, mix_per) == (id(net), per) and id(jobs[0]) in job_ids:
                return mix.alone(job_ids.index(id(jobs[0])))
        built = Senders.of(net, jobs, per)
        if len(jobs) > 1:  # a job alone does not replace the mix it came from
            self._last = (key, (net, list(jobs)), built)
        return built

    def forget(self) -> None:
        self._last = None


_last_mix = _LastMix()


def senders_of(net: Network, jobs: Sequence[SimJob], per: Granularity = "auto") -> Senders:
    """:meth:`Senders.of` *jobs*, reused when they are the last mix built or one of its
    jobs (:class:`_LastMix`)."""
    return _last_mix.senders(net, jobs, per)


def forget_mix() -> None:
    """Drop the senders kept for reuse, so that the next run builds its own (a benchmark
    timing a run from scratch)."""
    _last_mix.forget()


def _entry_key(row: IntArray, link: IntArray, came: IntArray | int, n: int) -> IntArray:
    """(row, link, input) packed in one integer that sorts by row, link, then input."""
    key: IntArray = (row * n + link) * (n + 1) + np.asarray(came, dtype=np.int64) + 1
    return key


def _entry_parts(key: IntArray, n: int) -> tuple[IntArray, IntArray, IntArray]:
    """The (row, link, input) of packed keys (:func:`_entry_key`)."""
    row_link = key // (n + 1)
    return row_link // n, row_link % n, key % (n + 1) - 1
