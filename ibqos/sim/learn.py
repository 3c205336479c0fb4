"""The jobs' phases learnt from the setups tried: what the trials measured, explained.

The tuner predicts its candidates with the fluid model of the running jobs
(:mod:`ibqos.sim.predict`), and for a job whose phases nobody recorded it assumes them
(:data:`~ibqos.sim.estimate.ASSUMED_PHASES`: half of a 10 ms iteration communicating).
Each setup tried on the fabric measures every job's mean injection under it; a job whose
bursts are short and intense suffers, and gains from its lane, differently from one that
communicates smoothly, so the means measured across setups say something of the phases.
:func:`learn` fits, per job whose phases are not known, the duty and the period that make
the model's steady state (:func:`~ibqos.sim.predict.steady_times`) give the means measured.

**The model of a trial.**  The jobs carry the phases tried; each keeps the mean it would
inject alone (the estimate's rate times its duty: bursts get more intense as they get
shorter, capped at the slowest host link, beyond which the job communicates longer), and
its bytes per iteration are fixed by :func:`~ibqos.sim.predict.calibrate` to the mean
measured under the **reference** trial, the first: the setup in force when the jobs were
measured and estimated.  Every other trial is then predicted, a job's mean injection
being its bytes per iteration over its predicted time per iteration.  The **error** is the
mean, over those trials and their jobs, of ``|predicted - measured| / measured``: the
reference is left out, as it is matched by construction.

**The search** is coordinate descent over a small grid (:data:`DUTY_GRID`,
:data:`PERIOD_GRID_S`): for each job in turn, biggest first, every duty of the grid at its
current period, then every period at its best duty, keeping a value only if it lowers the
error by *min_gain*; sweeps repeat until one changes nothing (at most *sweeps*).  The
phases given are calibrated as the tuner's prediction does (three runs of the reference);
every other point starts from there (the phases change a job's slowdown, hence its
calibration, far less than that first calibration changes the estimate) and costs one
calibration run and one run per trial predicted, so a sweep over *k* jobs costs at most
``k x (6 + 5) x trials`` fluid runs, each of a few iterations (on 64 hosts, milliseconds:
``bench/sim/learn.py``).  A least-squares fit would need the error's derivatives, which
the model only gives by finite differences (as many runs per step as parameters, each
step small where the grid already spans what phases can be), and the error is flat in
some directions: in the model without switch buffers scaling every job's period scales
every time and changes no mean, so when no job's phases are known the biggest job's
period is held and only the others' ratios to it are fitted.  The threshold keeps the
phases given unless the trials say otherwise, and a job that did not move has learnt
nothing (with one trial besides the reference there are fewer measurements than phases,
so the fit stays near where it started rather than anywhere the error is low).  The
search's wall time may be bounded (*budget_s*).

With three trials or more, the last is held out: fitted on the others, the errors before
and after are also given on it (the honest figure of how the fitted model predicts a
setup it has not seen).  Jobs whose phases are known (declared, or recorded in their
profile by a person or a characterization: *known*, :func:`known_phases`) keep them;
phases a profile holds from earlier trials are where the fit starts.  :func:`record`
writes what was learnt to the jobs' profiles (:func:`ibqos.classify.prior.learn_phases`),
where the next run reads it (:func:`ibqos.agent.predictor.profile_phases`).

Units: seconds, bytes per second; duty a share of the iteration; errors ratios.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ibqos.classify.prior import Priors, learn_phases
from ibqos.classify.profiles import ProfileStore
from ibqos.config.classes import Class
from ibqos.errors import SimError
from ibqos.jobs.model import Job
from ibqos.sim.estimate import Phases
from ibqos.sim.network import Network
from ibqos.sim.predict import Steady, calibrate, steady_times
from ibqos.sim.qos import Arbitration
from ibqos.sim.workload import prepare

__all__ = [
    "DUTY_GRID",
    "FIT_STEADY",
    "PERIOD_GRID_S",
    "Learnt",
    "Trial",
    "known_phases",
    "learn",
    "record",
    "trial_error",
]

log = logging.getLogger(__name__)

#: A setup tried, and the mean bytes per second each job's hosts injected under it (all
#: its hosts together, the decision's level 0: :func:`ibqos.sim.estimate.injected`).
Trial = tuple[Arbitration, Mapping[str, float]]

#: duties tried: from bursts a tenth of the iteration to nearly always communicating
DUTY_GRID = (0.1, 0.2, 0.3, 0.5, 0.7, 0.9)
#: periods tried, seconds: the ms-scale iterations of tightly coupled codes
PERIOD_GRID_S = (0.002, 0.005, 0.01, 0.02, 0.05)
#: the steady state of the fit's runs: :func:`~ibqos.sim.predict.calibrate`'s, shorter
#: than a prediction's, as each job's mean over a run needs fewer iterations
FIT_STEADY = Steady(warmup=2, measure=6)


@dataclass(frozen=True)
class Learnt:
    """What :func:`learn` fitted.

    Attributes:
        phases: by job id, the phases fitted, for the jobs whose phases were not known
            and that the fit moved (the duty the model ran, raised where the burst was
            capped at a link); a job left where it started is not listed.
        error_before: mean relative error of the predicted per-job means over the
            trials fitted on (but the reference), with the phases given.
        error_after: the same with the phases fitted.
        trials: the trials fitted on, the reference included.
        held_out_before, held_out_after: the same errors on the trial held out (None:
            fewer than three trials, none held out).
        runs: fluid runs made.
        seconds: wall time of the fit.
        stopped: the search ran out of its time budget before it ended.
    """

    phases: Mapping[str, Phases]
    error_before: float
    error_after: float
    trials: int
    held_out_before: float | None = None
    held_out_after: float | None = None
    runs: int = 0
    seconds: float = 0.0
    stopped: bool = False

    def doc(self) -> dict[str, float | int]:
        """The errors for the state file's tuning section, under ``prediction_error``
        (``ibqos status`` shows them)."""
        return {"before": self.error_before, "after": self.error_after, "trials": self.trials}

    def status_line(self) -> str:
        """One line for ``ibqos status``: the prediction's error before and after."""
        held = ""
        if self.held_out_before is not None and self.held_out_after is not None:
            held = f"; on a setup held out {self.held_out_before:.1%} -> {self.held_out_after:.1%}"
        stop = ", stopped at its time budget" if self.stopped else ""
        return (
            f"prediction error {self.error_before:.1%} -> {self.error_after:.1%}"
            f" ({len(self.phases)} jobs' phases fitted on {self.trials} trials{held}{stop})"
        )


def trial_error(
    net: Network, jobs: Sequence[Job], trial: Trial, steady: Steady = FIT_STEADY
) -> float:
    """Mean over the jobs measured in *trial* of ``|predicted - measured| / measured``,
    predicted: the jobs (calibrated, with their phases) run under its setup."""
    arb, measured = trial
    sim_jobs = prepare(net, jobs)
    times = steady_times(net, sim_jobs, arb, steady)
    errs = [
        abs(j.bytes_per_iteration / times[j.id] / measured[j.id] - 1.0)
        for j in sim_jobs
        if measured.get(j.id, 0.0) > 0
    ]
    return math.fsum(errs) / len(errs) if errs else 0.0


@dataclass
class _Fit:
    """The model of the trials at one point of the phases (see the module docstring)."""

    net: Network
    jobs: Sequence[Job]
    trials: Sequence[Trial]
    steady: Steady
    rounds: int
    runs: int = 0
    seen: dict[tuple[Phases, ...], tuple[float, list[Job]]] = field(default_factory=dict)

    def jobs_at(self, point: tuple[Phases, ...], rounds: int) -> list[Job]:
        """The jobs with these phases, each keeping its mean alone, calibrated to the
        reference trial in *rounds* runs (from the jobs calibrated at the first point:
        the phases change a job's slowdown, hence its calibration, far less than that
        first calibration changes the estimate)."""
        shaped = [_with_phases(self.net, j, p) for j, p in zip(self.jobs, point, strict=True)]
        ref, measured = self.trials[0]
        self.runs += rounds
        return calibrate(self.net, shaped, measured, ref, self.steady, rounds)

    def start(self, point: tuple[Phases, ...], rounds: int) -> None:
        """Calibrate the jobs at the first point in *rounds* runs: later points start
        from there."""
        self.jobs = self.jobs_at(point, rounds)

    def error(self, point: tuple[Phases, ...]) -> float:
        """The error over the trials but the reference (cached per point)."""
        hit = self.seen.get(point)
        if hit is None:
            jobs = self.jobs_at(point, self.rounds)
            errs = [trial_error(self.net, jobs, t, self.steady) for t in self.trials[1:]]
            self.runs += len(errs)
            hit = (math.fsum(errs) / len(errs), jobs)
            self.seen[point] = hit
        return hit[0]

    def held_out(self, point: tuple[Phases, ...], trial: Trial) -> float:
        """The error on *trial*, not fitted on, with the jobs of *point*."""
        self.error(point)
        self.runs += 1
        return trial_error(self.net, self.seen[point][1], trial, self.steady)


def learn(
    net: Network,
    jobs: Sequence[Job],
    trials: Sequence[Trial],
    *,
    known: Collection[str] = (),
    steady: Steady = FIT_STEADY,
    settle: int = 3,
    rounds: int = 1,
    duties: Sequence[float] = DUTY_GRID,
    periods_s: Sequence[float] = PERIOD_GRID_S,
    sweeps: int = 2,
    min_gain: float = 0.001,
    budget_s: float = math.inf,
    hold_out: bool = True,
) -> Learnt:
    """Fit the phases of the jobs not in *known* to the means the *trials* measured (see
    the module docstring).

    Args:
        net: the fabric and its routes.
        jobs: the estimated jobs (:func:`~ibqos.sim.estimate.estimate_jobs`: each with a
            pattern, a rate while communicating, and its phases, known or assumed).
        trials: the setups tried and what each measured, the reference (the setup the
            jobs were measured under) first; from three on, the last is held out
            (*hold_out*).
        known: ids of the jobs whose phases are known: kept as they are.
        steady: the steady state of the fit's runs.
        settle: :func:`~ibqos.sim.predict.calibrate`'s runs at the phases given (its
            default, as the tuner's prediction calibrates).
        rounds: its runs at each other point, from there.
        duties, periods_s: the grid.
        sweeps: coordinate sweeps at most.
        min_gain: the least fall of the error that moves the fit (a ratio): below it,
            a point ties (the runs' own jitter) and the phases stay.
        budget_s: wall seconds for the search (the biggest jobs are fitted first); when
            they run out, the best point so far is kept (:attr:`Learnt.stopped`).
        hold_out: hold the last of three trials or more out (False: fit on all, no
            held-out figures).

    Raises:
        SimError: fewer than two trials, or a grid value out of range.
    """
    if len(trials) < 2:
        raise SimError(f"learning phases: needs two trials at least, got {len(trials)}")
    if not all(0 < d <= 1 for d in duties) or not all(p > 0 for p in periods_s):
        raise SimError("learning phases: duties in (0, 1] and periods above 0")
    start = time.perf_counter()
    fit_on, held = (trials[:-1], trials[-1]) if hold_out and len(trials) >= 3 else (trials, None)
    model = _Fit(net, jobs, fit_on, steady, rounds)
    model.start(tuple(Phases(j.duty, j.period_s) for j in jobs), settle)
    first = tuple(Phases(j.duty, j.period_s) for j in model.jobs)
    # the biggest jobs first: they weigh most in S, and come first if the budget runs out
    free = sorted(
        (i for i, j in enumerate(jobs) if j.id not in known), key=lambda i: -len(jobs[i].nodes)
    )
    # no buffers: scaling every period changes no mean, so one period is the unit
    held_period = free[0] if free and len(free) == len(jobs) and not steady.buffer_packets else -1
    point, best = first, model.error(first)
    stopped = False
    for _ in range(sweeps):
        moved = False
        for i in free:
            for axis, values in (("duty", duties), ("period_s", periods_s)):
                if axis == "period_s" and i == held_period:
                    continue
                base = point
                for v in values:
                    if time.perf_counter() - start > budget_s:
                        stopped = True
                        break
                    cand = list(base)
                    cand[i] = replace(base[i], **{axis: v})
                    err = model.error(tuple(cand))
                    if err < best - min_gain:
                        point, best, moved = tuple(cand), err, True
        if not moved or stopped:
            break
    fitted = model.seen[point][1]
    # a job the fit left where it started learnt nothing: the trials did not tell
    phases = {
        jobs[i].id: Phases(fitted[i].duty, fitted[i].period_s) for i in free if point[i] != first[i]
    }
    before, after = model.error(first), best
    held_before = held_after = None
    if held is not None:
        held_before = model.held_out(first, held)
        held_after = held_before if point == first else model.held_out(point, held)
    out = Learnt(
        phases,
        before,
        after,
        len(fit_on),
        held_before,
        held_after,
        model.runs,
        time.perf_counter() - start,
        stopped,
    )
    log.debug("learnt phases: %s (%d runs)", out.status_line(), out.runs)
    return out


def record(
    store: ProfileStore,
    jobs: Sequence[Job],
    learnt: Learnt,
    classes: Mapping[str, Class],
    *,
    strict: bool = False,
) -> int:
    """Write the phases *learnt* of each of *jobs* (as its source gave it: name, user,
    hosts, the pattern it declares if any) into its application's profile
    (:func:`ibqos.classify.prior.learn_phases`); *classes*: each job's class now, for a
    profile made new.  Returns how many profiles were updated.

    Raises:
        ProfileError: with *strict*, a profile that cannot be read or written.
    """
    done = 0
    for job in jobs:
        got = learnt.phases.get(job.id)
        if got is None:
            continue
        cls = classes.get(job.id, "low")
        if learn_phases(store, job, got.duty, got.period_s, learnt.trials, cls, strict=strict):
            done += 1
    return done


def known_phases(jobs: Sequence[Job], priors: Priors | None) -> set[str]:
    """Ids of the jobs whose matching profile records phases that were not learnt from
    trials (``model.phase_trials`` unset: declared or characterized): :func:`learn`'s
    *known*.  Phases learnt before are refined, not kept."""
    out: set[str] = set()
    if priors is None:
        return out
    for job in jobs:
        model = priors.phases(job)
        if model is not None and model.phase_trials is None:
            out.add(job.id)
    return out


def _with_phases(net: Network, job: Job, phases: Phases) -> Job:
    """*job* with *phases*, keeping the mean it injects alone (rate times duty): the burst
    rate scaled by the duty's change, capped at its slowest host link (a capped job
    communicates longer)."""
    if (job.duty, job.period_s) == (phases.duty, phases.period_s):
        return job
    link = min(float(net.capacity[net.router.port_index[net.hosts[h]]]) for h in job.nodes)
    mean = job.rate_bytes_per_s * job.duty
    rate, duty = mean / phases.duty, phases.duty
    if rate > link:
        rate, duty = link, min(mean / link, 1.0)
    return replace(job, rate_bytes_per_s=rate, duty=duty, period_s=phases.period_s)
