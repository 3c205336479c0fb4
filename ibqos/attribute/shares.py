"""Each job's share of a shared link, learnt from how the counters move over time.

One set of counters cannot always tell jobs apart: on a slimmed tree several destinations
come down one link, and when they belong to different jobs only the prior splits that
link (:mod:`ibqos.attribute.tomography`).  Over a few sweeps it can: a job's flows keep
their shape while its injection rises and falls, so a link's counter follows

    link(t) = background + sum over the jobs j on the link of  a_j * injection_j(t)

where ``a_j`` (0 to 1) is the share of job *j*'s injection that crosses the link, and
``background`` is traffic no job accounts for.  With injections that do not move in step,
least squares over the last sweeps gives every ``a_j``; the fit then takes
``a_j * injection_j(now)`` as a measurement of job *j*'s load on the link.

A link's regression is used only when it is sound:

- the sweeps used are those where exactly the same jobs crossed the link as now (a
  signature of the set, kept per sweep);
- at least ``k + 3`` of them for *k* jobs (and the background);
- every job's injection moves (standard deviation at least ``MIN_MOVE`` of its mean), and
  the jobs do not move in step (the smallest eigenvalue of the correlation matrix of their
  injections is at least ``MIN_SPREAD``): jobs that send at steady rates give none;
- every share is within 0 to 1 and the background not below 0 (with a small slack), and
  the model explains the counter: its misfit is within ``MAX_MISFIT`` of the counter's
  mean and ``MAX_UNEXPLAINED`` of how much the counter moved, and within ``MAX_MISFIT`` of
  this sweep's counter (a job whose traffic changed shape shows there first).

Otherwise the link keeps its whole-link equation and the prior splits it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: sweeps kept (at the default 10 s interval, the last 160 s)
WINDOW = 16
#: smallest eigenvalue of the correlation matrix of the jobs' injections over the sweeps:
#: below it, jobs move too much in step to be told apart
MIN_SPREAD = 0.05
#: smallest standard deviation of a job's injection over the sweeps, as a share of its mean
MIN_MOVE = 0.05
#: largest root-mean-square misfit of a link's regression, as a share of its mean counter
MAX_MISFIT = 0.05
#: ... and as a share of the counter's own standard deviation over the sweeps
MAX_UNEXPLAINED = 0.2
#: slack on the shares' 0..1 bounds (noise)
SLACK = 0.05
#: links shared by more jobs than this are not regressed (too many unknowns per window)
MAX_JOBS = 6


@dataclass(frozen=True)
class _Sweep:
    """What one sweep left for the regressions.

    Attributes:
        job_ids: the running jobs, in that cycle's order.
        injection: per job, bytes/s its hosts sent.
        link: per router port, the link's bytes/s (NaN: no rate).
        signature: per router port, a sum of per-job random numbers over the jobs whose
            flows crossed it: equal signatures, equal job sets (to one chance in 2^40).
    """

    job_ids: tuple[str, ...]
    injection: FloatArray
    link: FloatArray
    signature: FloatArray


@dataclass(frozen=True)
class Shares:
    """The sound regressions of one cycle: per (link, job), the job's share of its
    injection on the link.

    Attributes:
        row: the (link, job) pair's row in what :meth:`LinkShares.add` was given.
        port: router port of each row.
        job: the job's index in this cycle's order.
        share: a_j, 0 to 1.
    """

    row: IntArray
    port: IntArray
    job: IntArray
    share: FloatArray


class LinkShares:
    """The last ``WINDOW`` sweeps of one fabric and its routes, and the regressions.

    Args:
        n_ports: router ports (the dense index of :class:`ibqos.fabric.routes.Router`).
        window: sweeps kept.
    """

    def __init__(self, n_ports: int, window: int = WINDOW) -> None:
        self._n = n_ports
        self._sweeps: deque[_Sweep] = deque(maxlen=window)
        self._tags: dict[str, float] = {}
        self._rng = np.random.default_rng(0x1B05)

    def _tag(self, job_id: str) -> float:
        tag = self._tags.get(job_id)
        if tag is None:  # an integer below 2^40: sums of thousands stay exact in a float
            tag = self._tags[job_id] = float(self._rng.integers(1, 2**40))
        return tag

    def add(
        self,
        job_ids: tuple[str, ...],
        injection: FloatArray,
        link: FloatArray,
        inc_port: IntArray,
        inc_job: IntArray,
    ) -> Shares:
        """Keep this sweep and regress every shared link over the window.

        Args:
            job_ids: the running jobs, in the cycle's order.
            injection: per job, bytes/s its hosts sent (NaN: not known).
            link: per router port, the link's bytes/s (NaN: no rate).
            inc_port, inc_job: the (link, job) pairs whose flows cross, one row each,
                sorted by port.
        """
        if len(self._tags) > 8 * max(len(job_ids), 1) + 1024:  # jobs long gone
            self._tags = {j: self._tag(j) for j in job_ids}
        tags = np.array([self._tag(j) for j in job_ids], dtype=np.float64)
        signature = np.bincount(inc_port, tags[inc_job], self._n).astype(np.float64)
        self._sweeps.append(_Sweep(job_ids, injection.copy(), link.copy(), signature))
        return self._solve(job_ids, inc_port, inc_job, signature)

    def _solve(
        self, job_ids: tuple[str, ...], inc_port: IntArray, inc_job: IntArray, sig: FloatArray
    ) -> Shares:
        none = np.zeros(0, np.int64)
        empty = Shares(none, none, none, np.zeros(0))
        t_n = len(self._sweeps)
        if t_n < 5:
            return empty
        # the jobs' injections over the window, in this cycle's order (NaN: not running)
        index = {j: i for i, j in enumerate(job_ids)}
        inj = np.full((t_n, len(job_ids)), np.nan)
        for t, sw in enumerate(self._sweeps):
            if sw.job_ids == job_ids:
                inj[t] = sw.injection
            else:
                for j, v in zip(sw.job_ids, sw.injection.tolist(), strict=True):
                    if (k := index.get(j)) is not None:
                        inj[t, k] = v
        links = np.stack([sw.link for sw in self._sweeps])  # (T, ports)
        sigs = np.stack([sw.signature for sw in self._sweeps])
        # the jobs on each shared link (the rows come sorted by port)
        port, job = inc_port, inc_job
        starts = np.flatnonzero(np.r_[True, port[1:] != port[:-1]])
        counts = np.diff(np.r_[starts, len(port)])
        out_row: list[IntArray] = []
        out_port: list[IntArray] = []
        out_job: list[IntArray] = []
        out_share: list[FloatArray] = []
        for k in range(2, MAX_JOBS + 1):
            first = starts[counts == k]
            if not len(first):
                continue
            cols = first[:, None] + np.arange(k)[None, :]
            ports, jobs = port[first], job[cols]  # (m,), (m, k)
            ok_t = (sigs[:, ports] == sig[ports][None, :]).T  # (m, T): same job set
            x = inj[:, jobs].transpose(1, 0, 2)  # (m, T, k)
            y = links[:, ports].T  # (m, T)
            ok_t &= ~np.isnan(y) & ~np.isnan(x).any(axis=2)
            a, background, good = _regress(np.nan_to_num(x), np.nan_to_num(y), ok_t)
            # and it must explain this sweep's counter: a job whose traffic changed
            # shape (a new phase of the code) shows here first
            now = links[-1, ports]
            said = background + np.einsum("mj,mj->m", a, np.nan_to_num(inj[-1, jobs]))
            good &= ~np.isnan(inj[-1, jobs]).any(axis=1) & ok_t[:, -1]
            good &= np.abs(said - now) <= MAX_MISFIT * np.maximum(np.abs(now), 1e-12)
            out_row.append(cols[good].ravel())
            out_port.append(np.repeat(ports[good], k))
            out_job.append(jobs[good].ravel())
            out_share.append(np.clip(a[good], 0.0, 1.0).ravel())
        if not out_port:
            return empty
        return Shares(
            np.concatenate(out_row),
            np.concatenate(out_port),
            np.concatenate(out_job),
            np.concatenate(out_share),
        )


def _regress(
    x: FloatArray, y: FloatArray, ok: npt.NDArray[np.bool_]
) -> tuple[FloatArray, FloatArray, npt.NDArray[np.bool_]]:
    """Least squares per link: ``y[i, t] ~ c_i + sum_j a[i, j] * x[i, t, j]`` over the
    sweeps *t* where ``ok[i, t]``; the shares ``a`` (m, k), the backgrounds ``c`` (m,) and
    which links are sound.

    Solved on the sweeps' deviations from their means (which takes the background ``c_i``
    out), so the tests below are on how the injections *move*."""
    m, _, k = x.shape
    w = ok.astype(np.float64)
    used = np.maximum(w.sum(axis=1), 1.0)
    x_mean = np.einsum("mtj,mt->mj", x, w) / used[:, None]
    y_mean = (y * w).sum(axis=1) / used
    xc = (x - x_mean[:, None, :]) * w[:, :, None]
    yc = (y - y_mean[:, None]) * w
    gram = np.einsum("mti,mtj->mij", xc, xc)
    rhs = np.einsum("mti,mt->mi", xc, yc)
    var = np.einsum("mii->mi", gram)  # each job's sum of squared deviations
    sd = np.sqrt(np.maximum(var, 0.0) / used[:, None])
    scale = np.sqrt(np.maximum(var, 1e-300))
    spread = np.linalg.eigvalsh(gram / scale[:, :, None] / scale[:, None, :])[:, 0]
    enough = (
        (w.sum(axis=1) >= k + 3)
        & (spread >= MIN_SPREAD)
        & (sd >= MIN_MOVE * np.abs(x_mean)).all(axis=1)
    )
    a = np.zeros((m, k))
    if enough.any():
        a[enough] = np.linalg.solve(gram[enough], rhs[enough][:, :, None])[:, :, 0]
    background = y_mean - np.einsum("mj,mj->m", a, x_mean)
    misfit = np.sqrt(((yc - np.einsum("mtj,mj->mt", xc, a)) ** 2).sum(axis=1) / used)
    y_sd = np.sqrt((yc**2).sum(axis=1) / used)
    sound = (
        enough
        & (misfit <= MAX_MISFIT * np.maximum(y_mean, 1e-12))
        & (misfit <= MAX_UNEXPLAINED * y_sd)
        & (background >= -SLACK * np.abs(y_mean))
        & (a >= -SLACK).all(axis=1)
        & (a <= 1 + SLACK).all(axis=1)
    )
    return a, background, sound
