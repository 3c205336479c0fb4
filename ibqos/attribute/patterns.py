"""Communication patterns as traffic matrices: who sends how much to whom in a job.

The lab's traffic model drives the simulated fabric with them, and attribution uses a job's
declared pattern as its prior (its "profile") where the job has one.
"""

from __future__ import annotations

import hashlib
import random

import numpy as np
import numpy.typing as npt

from ibqos.errors import JobsError
from ibqos.jobs.model import Job

FloatArray = npt.NDArray[np.float64]


def traffic_matrix(job: Job) -> FloatArray:
    """Bytes per second from host i to host j while the job communicates (node order).

    Each sending host injects ``rate_bytes_per_s`` in total, spread over its peers.
    """
    n = len(job.nodes)
    m = np.zeros((n, n))
    rate = job.rate_bytes_per_s
    if n < 2:
        return m
    idx = np.arange(n)
    if job.pattern == "all-to-all":
        m[:] = rate / (n - 1)
        np.fill_diagonal(m, 0.0)
    elif job.pattern == "ring":
        m[idx, (idx + 1) % n] = rate
    elif job.pattern == "halo":
        _halo(m, job.halo_dims or (n,), rate)
    elif job.pattern == "random-pairs":
        rng = random.Random(job.seed if job.seed is not None else _seed_of(job.id))
        order = list(range(n))
        rng.shuffle(order)
        for a, b in zip(order[0::2], order[1::2], strict=False):
            m[a, b] = m[b, a] = rate
    elif job.pattern == "matrix":
        assert job.matrix is not None  # jobs.py requires it for this pattern
        w = np.array(job.matrix, dtype=float)
        sums = w.sum(axis=1, keepdims=True)
        m = np.divide(w * rate, sums, out=np.zeros_like(w), where=sums > 0)
    else:
        raise JobsError(f"job {job.id}: unknown pattern {job.pattern!r}")
    return m


def _halo(m: FloatArray, dims: tuple[int, ...], rate: float) -> None:
    """Nearest neighbours on a periodic grid: +-1 along each dimension of size > 1."""
    coords = np.array(np.unravel_index(np.arange(m.shape[0]), dims)).T
    dirs = [
        (d, s) for d, size in enumerate(dims) if size > 1 for s in ((1, -1) if size > 2 else (1,))
    ]
    for d, step in dirs:
        nb = coords.copy()
        nb[:, d] = (nb[:, d] + step) % dims[d]
        m[np.arange(m.shape[0]), np.ravel_multi_index(nb.T, dims)] += rate / len(dirs)


def _seed_of(job_id: str) -> int:
    return int.from_bytes(hashlib.sha256(job_id.encode()).digest()[:8], "big")
