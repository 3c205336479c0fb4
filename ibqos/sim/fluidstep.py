"""The fluid run's bookkeeping between two events, compiled.

:class:`ibqos.sim.fluid.FluidSim` advances its senders from one phase change to the next.
With per-job senders a 2,048-node what-if takes some ten thousand such steps, and in numpy
each cost about twenty array calls on arrays of twenty items: a third of the run.  This is
the same arithmetic in one compiled pass, in the same order, so the results are the same
to the bit.

Units: seconds; a sender's progress in full-rate seconds and in shares of its bytes.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from ibqos.sim.maxmin import EPS, FloatArray, IntArray, njit

#: a sender or compute phase within this fraction of the step is done in it
DONE_TOL = 1e-9


@njit
def advance(
    until: float,
    now: float,
    alpha: FloatArray,
    job: IntArray,
    rate: FloatArray,
    comm_s: FloatArray,
    compute_s: FloatArray,
    job_rate: FloatArray,
    comm: npt.NDArray[np.bool_],
    compute_left: FloatArray,
    bytes_left: FloatArray,
    moved: FloatArray,
    sent: FloatArray,
    done_comm: npt.NDArray[np.bool_],
) -> tuple[float, int]:
    """Advance to the next event or to *until*, whichever is first, in place.

    Args:
        until, now: simulated seconds to stop at (inf: the next event), and now.
        alpha: each sender's share of its declared rate.
        job, rate: each sender's job, and its bytes per second at full rate.
        comm_s, compute_s, job_rate: per job, the communication phase at full rate and
            the compute phase (s), and its declared bytes per second.
        comm, compute_left, bytes_left, moved, sent: the run's state (see FluidSim),
            updated; a job whose phase ended has its next one begun.
        done_comm: set to the jobs that finished an iteration in this step.

    Returns:
        The step's length (inf, nothing changed: no sender can move and no job computes)
        and the phase changes in it (senders done and compute phases ended).
    """
    n_rows = len(job)
    n_jobs = len(comm)
    to_go = np.empty(n_rows)
    step = math.inf
    for r in range(n_rows):
        to_go[r] = math.inf
        if comm[job[r]] and bytes_left[r] > 0:
            need = bytes_left[r] * comm_s[job[r]]
            to_go[r] = need / alpha[r] if alpha[r] > 0 else math.inf
            step = min(step, to_go[r])
    for i in range(n_jobs):
        if not comm[i]:
            step = min(step, compute_left[i])
    if math.isinf(step) and math.isinf(until):
        return math.inf, 0
    step = min(step, until - now)
    went = np.empty(n_rows)
    any_moved = False
    for r in range(n_rows):
        went[r] = alpha[r] * step
        any_moved = any_moved or went[r] != 0
    if any_moved:
        by_job = np.zeros(n_jobs)
        for r in range(n_rows):
            moved[r] += went[r]
            by_job[job[r]] += went[r] * rate[r]
        for i in range(n_jobs):
            if job_rate[i] > 0:
                sent[i] += by_job[i] / job_rate[i]
            elif comm[i]:
                sent[i] += step
    limit = step * (1 + DONE_TOL) + EPS
    changed = 0
    left = np.zeros(n_jobs)
    for r in range(n_rows):
        if comm[job[r]] and bytes_left[r] > 0 and to_go[r] <= limit:
            bytes_left[r] = 0.0
            changed += 1
        else:
            length = comm_s[job[r]]  # > 0 (duty > 0); guarded all the same
            rest = bytes_left[r] - (went[r] / length if length > 0 else went[r] * math.inf)
            bytes_left[r] = 0.0 if rest < 0 else rest
        left[job[r]] += bytes_left[r]
    computed = np.zeros(n_jobs, dtype=np.bool_)
    for i in range(n_jobs):
        done_comm[i] = comm[i] and left[i] <= 0
        if not comm[i]:
            computed[i] = compute_left[i] <= limit
            compute_left[i] -= step
            changed += computed[i]
    for i in range(n_jobs):
        if done_comm[i]:
            comm[i] = False
            compute_left[i] = compute_s[i]
        elif computed[i]:
            comm[i] = True
    for r in range(n_rows):
        if computed[job[r]]:
            bytes_left[r] = 1.0
    return step, changed
