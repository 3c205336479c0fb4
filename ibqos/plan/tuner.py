"""Tuning by observation: try the shortlisted setups on the fabric, keep the best measured.

The favour-light law is where every round starts and what ties go to.  A **round** tries
the law, then each shortlisted setup (best predicted first), one at a time, each for a
*trial*: ``trial_sweeps`` counter sweeps under it, leaving out the sweep the reload falls
in (OpenSM's heavy sweep and the switch reprogramming are inside it).  Then it keeps the
setup of least score, leaving the law only for a gain above ``margin``.

**The score** of a setup *c* over the jobs *j* it was tried with::

    score(c) = sum_j nodes_j * best_j / rate_j(c)  /  sum_j nodes_j

where ``rate_j(c)`` is job *j*'s injected bytes per second under *c* (the mean over the
trial's sweeps of its hosts' transmit counters) and ``best_j`` the most it injected under
any setup tried.  A job moves the same bytes per
iteration whatever the setup, so ``best_j / rate_j(c)`` is its slowdown under *c* relative to
its best: 1.0 = as fast as it went under any setup.  Weighting by nodes makes the score the
node-time lost, as contention is weighed in ``docs/simulate-evaluation.md``; a job on
many nodes that slows down wastes more of the machine than a small one.  A score of 1.0
means every job at its best; the least score wins.

That is the ``node-time`` objective, the default.  With ``tuning.objective: worst-job``
the score is the worst job's instead: ``max_j best_j / rate_j(c)``, so a setup wins by
sparing the job it slows most, whatever the nodes (a site protecting small jobs from big
ones).  The margin, the noise, the drift and the prediction's slack apply to either score.

**The margin comes from the noise.**  Each sweep of a trial gives a score of its own (the
same formula on that sweep's rates); their standard error is how well the trial measured
its setup.  A setup beats an earlier tried one (the law first, then the best predicted)
only by more than ``max(margin, margin_sigmas * sqrt(se_a**2 + se_b**2) / score_b)``:
the configured margin is the floor, and lumpy counters widen it.  In the order tried,
each setup takes over from the one kept so far only when it beats it by more than that:
the law stays unless a setup is better by more than the counters can blur.

**The prediction spares trials.**  A shortlisted setup predicted worse than the best
predicted one by more than ``predicted_slack`` (a fraction of its score) is not tried: a
trial costs the jobs real time, and the law, always tried, covers a prediction that is off.

**Safety.**  A trial that drops any job below ``floor`` of its best so far (the first
sample under the trial already counts) ends at once and the round goes on without it.
Every switch is a reload of OpenSM: tuning spends at most ``max_reloads_per_hour`` of them
in any hour, and starts a trial only with room for its revert too (the next trial's
switch, the round's choice, or the fall back to the best setup measured so far when the
budget runs out), and only while OpenSM's own reload budget has room for both.

**Rounds.**  A round starts when the running jobs have been the same for ``settle_s``;
once settled, a new one starts when a job's class changes (during a round, classes move
with the trials' setups and are not a reason) or when the kept setup's score drifts by
more than ``drift``.  A job that starts or ends ends the round and brings back the law:
the planner does so itself, since a setup places a fixed set of SLs, and the reload that
brings the new SL to OpenSM carries it, so it is not tuning's reload.

**Refinement.**  After a round decides, :meth:`Tuner.extend` may queue more setups (the
driver's, :mod:`ibqos.plan.tuning`), tried as a round's: in the order tried, one takes over
from the kept setup only by beating it by the margin.

Observe mode never trials: it only keeps the prediction's ranking, for metrics and status.
Everything here is pure: the caller passes the time, the samples and the setups.  Units:
bytes per second, seconds.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ibqos.config.tuning import Objective, TuningConfig
from ibqos.plan.setups import LAW, Setup

__all__ = ["Sample", "Tuner", "TuningStatus", "combine", "score", "score_errors"]

log = logging.getLogger(__name__)

#: seconds in the window of ``max_reloads_per_hour``
HOUR_S = 3600.0
#: samples a switch may take to show in force before the round gives up on it (OpenSM
#: held the files, the reload budget ran out): then the trial counts as not taken
TAKE_SAMPLES = 4


@dataclass(frozen=True)
class Sample:
    """What one fresh counter sweep shows the tuner.

    Attributes:
        now_s: the sweep's time (seconds, the caller's clock).
        rates: per job, the bytes per second its hosts injected over the sweep's interval
            (NaN: not known).
        nodes: per job, its hosts.
        in_force: the setup OpenSM served over the interval (its name).
        reloaded: OpenSM reloaded within the interval: the sample is left out of trials.
        mix: the running jobs; a job that starts or ends ends the round.
        classes: each job's class in the plan.  A change starts a new round once
            settled, but not during a round: a trial's own setup moves the jobs'
            intensities, and so their classes.
        room: OpenSM's own reload budget (``opensm.reload_budget``) has room for a switch
            and its revert; without it no trial starts.
    """

    now_s: float
    rates: Mapping[str, float]
    nodes: Mapping[str, int]
    in_force: str
    reloaded: bool
    mix: frozenset[str]
    classes: frozenset[tuple[str, str]] = frozenset()
    room: bool = True


def _common_jobs(
    means: Mapping[str, Mapping[str, float]], nodes: Mapping[str, int]
) -> tuple[set[str], dict[str, float], float]:
    """The jobs measured under every setup that sent something under one; each one's best
    mean (bytes/s) over the setups; and their nodes in all (the scores' weight)."""
    jobs = set.intersection(*(set(m) for m in means.values()))
    jobs = {j for j in jobs if all(math.isfinite(m[j]) for m in means.values())}
    best = {j: max(m[j] for m in means.values()) for j in jobs}
    jobs = {j for j in jobs if best[j] > 0}
    return jobs, best, math.fsum(nodes.get(j, 1) for j in jobs)


def combine(
    slowdowns: Mapping[str, float], nodes: Mapping[str, int], objective: Objective = "node-time"
) -> float:
    """One score from each job's slowdown (*slowdowns*: job -> ``best / rate``, 1.0 at its
    best): their node-weighted mean (``node-time``) or their largest (``worst-job``); 1.0
    with no job.

    Raises:
        ValueError: an unknown objective.
    """
    if not slowdowns:
        return 1.0
    if objective == "worst-job":
        return max(slowdowns.values())
    if objective != "node-time":
        raise ValueError(f"objective {objective!r}: expected node-time or worst-job")
    weight = math.fsum(nodes.get(j, 1) for j in slowdowns)
    return math.fsum(nodes.get(j, 1) * s for j, s in slowdowns.items()) / weight


def _slowdowns(
    rates: Mapping[str, float], best: Mapping[str, float], jobs: set[str]
) -> dict[str, float]:
    # a job that sent nothing under a setup was stopped by it: count it as 1000x slower
    return {j: best[j] / max(rates[j], best[j] * 1e-3) for j in jobs}


def score(
    means: Mapping[str, Mapping[str, float]],
    nodes: Mapping[str, int],
    objective: Objective = "node-time",
) -> dict[str, float]:
    """Each setup's score (module docstring) under *objective* from *means*: setup -> job
    -> bytes/s.

    Jobs not measured under every setup, or that injected nothing under any, are left out:
    they would weigh setups by what was not seen.
    """
    if not means:
        return {}
    jobs, best, _ = _common_jobs(means, nodes)
    return {name: combine(_slowdowns(m, best, jobs), nodes, objective) for name, m in means.items()}


@dataclass
class _Trial:
    setup: Setup
    samples: list[Mapping[str, float]] = field(default_factory=list)
    waited: int = 0  # samples seen while it was not in force yet

    def mean(self) -> dict[str, float]:
        return _mean(self.samples)


def _mean(samples: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Per job in every one of *samples*, its mean rate over them."""
    jobs = set.intersection(*(set(s) for s in samples)) if samples else set()
    return {j: math.fsum(s[j] for s in samples) / len(samples) for j in jobs}


def score_errors(
    done: Mapping[str, tuple[Mapping[str, float], ...]],
    means: Mapping[str, Mapping[str, float]],
    nodes: Mapping[str, int],
    objective: Objective = "node-time",
) -> dict[str, float]:
    """Each setup's standard error of its score (module docstring) under *objective*: the
    spread of the scores its trial's sweeps give one by one (*done*: setup -> each sweep's
    rates, bytes/s), each against the jobs' best means (*means*, as :func:`score` takes
    them), over the square root of the sweeps.  0 for a trial of one sweep or no jobs.
    """
    if not means:
        return {}
    jobs, best, _ = _common_jobs(means, nodes)
    out = {}
    for name, samples in done.items():
        per = [
            combine(_slowdowns(s, best, jobs), nodes, objective)
            for s in samples
            if jobs and all(j in s for j in jobs)
        ]
        out[name] = statistics.stdev(per) / math.sqrt(len(per)) if len(per) >= 2 else 0.0
    return out


@dataclass(frozen=True)
class TuningStatus:
    """What the tuner is doing, for status, metrics and logs.

    Attributes:
        state: ``off``, ``predicting`` (observe mode: ranking only), ``settling`` (the mix
            changed; waiting ``settle_s``), ``waiting`` (for a ranking, or for jobs),
            ``trial``, ``budget`` (a round waits for room in ``max_reloads_per_hour`` or
            OpenSM's reload budget) or ``settled``.
        wanted: the setup the tuner asks the planner for.
        trial: the setup on trial, if any.
        rounds: rounds started.
        reloads: OpenSM reloads tuning caused, in all.
        reloads_last_hour: those within the last hour.
        predicted: setup -> predicted score (lower is better), as the prediction gave it.
        measured: setup -> measured score of the last round (lower is better).
        decision: the last round's outcome, one line.
        refinements: refinements (:meth:`Tuner.extend`) since the last round started.
        prediction_error: the prediction's error before and after fitting the jobs'
            phases to the trials (``before``, ``after``, ``trials``), when fitted.
    """

    state: str
    wanted: str
    trial: str | None
    rounds: int
    reloads: int
    reloads_last_hour: int
    predicted: Mapping[str, float]
    measured: Mapping[str, float]
    decision: str
    refinements: int = 0
    prediction_error: Mapping[str, float] | None = None


class Tuner:
    """Rounds of trials on one fabric (module docstring).

    Args:
        cfg: the ``tuning`` section.
        enforce: the agent may reload OpenSM; False: observe mode, rank only.
    """

    def __init__(self, cfg: TuningConfig, *, enforce: bool) -> None:
        self.cfg = cfg
        self.enforce = enforce and cfg.enabled
        self.wanted: Setup | None = None  # None: the law
        self.state = "off" if not cfg.enabled else ("settling" if enforce else "predicting")
        self.rounds = 0
        self.reloads = 0
        self._reload_times: deque[float] = deque()
        self._mix: frozenset[str] | None = None
        self._classes: frozenset[tuple[str, str]] = frozenset()
        self._mix_since = -math.inf
        self._queue: list[Setup] = []
        # a trial's setup is in force and the room for leaving it is kept in the budget
        self._reserved = False
        self._room = True  # OpenSM's reload budget has room (the last sample's word)
        self._last_classes: frozenset[tuple[str, str]] = frozenset()
        self._trial: _Trial | None = None
        self._done: dict[str, dict[str, float]] = {}  # setup -> job -> mean bytes/s
        self._sweeps: dict[str, tuple[Mapping[str, float], ...]] = {}  # each sweep's rates
        self._setups: dict[str, Setup] = {}
        self._nodes: dict[str, int] = {}
        self._kept: dict[str, float] | None = None  # the kept setup's means, for drift
        self._drift: deque[Mapping[str, float]] = deque(maxlen=cfg.trial_sweeps)
        self.predicted: dict[str, float] = {}
        self.measured: dict[str, float] = {}
        self.decision = ""
        self.decided = 0  # decisions made (a round's or a refinement's)
        self.refinements = 0
        self._base: str | None = None  # refining: the kept setup the extra ones challenge
        self._extra: list[str] = []

    # -- what the agent reads --------------------------------------------------------------

    def status(self, now_s: float) -> TuningStatus:
        """What the tuner is doing now (*now_s*: the caller's clock)."""
        trial = None if self._trial is None else self._trial.setup.name
        return TuningStatus(
            *(self.state, self._wanted_name, trial, self.rounds, self.reloads),
            *(self._recent(now_s), dict(self.predicted), dict(self.measured), self.decision),
            self.refinements,
        )

    @property
    def kept(self) -> Setup | None:
        """The setup the last decision kept, once settled on it (None otherwise)."""
        name = self._wanted_name
        return self._setups.get(name) if self.state == "settled" else None

    def observations(self) -> list[tuple[Setup, dict[str, float]]]:
        """Each setup measured this round and its jobs' mean rates (bytes/s), the kept one
        first, then in the order tried."""
        kept = self._wanted_name
        names = sorted(self._done, key=lambda n: n != kept)  # stable: the order tried
        return [(self._setups[n], dict(self._done[n])) for n in names if n in self._setups]

    def extend(self, setups: Sequence[Setup], now_s: float) -> bool:
        """Try *setups* after the round decided (refinement, module docstring), from the
        next sample on; each takes over only by beating the kept setup by the margin.
        False (nothing queued) unless settled on a measured setup in enforce mode, with
        room now for a switch and its revert."""
        kept, new = self._wanted_name, [s for s in setups if s.name not in self._setups]
        full = self._recent(now_s) + 2 > self.cfg.max_reloads_per_hour
        if self.state != "settled" or kept not in self._done or not new or full or not self._room:
            return False
        self._setups.update({s.name: s for s in new})
        self._base, self._extra = kept, [s.name for s in new]
        self._queue = list(new)
        self.refinements += 1
        self.state = "trial"  # the next sample starts the first
        log.info("tuning: refinement %d tries %s", self.refinements, ", ".join(self._extra))
        return True

    # -- one sample ------------------------------------------------------------------------

    def step(
        self,
        sample: Sample,
        pool: Sequence[Setup],
        ranking: Sequence[str] | None,
        predicted: Mapping[str, float] | None = None,
    ) -> Setup | None:
        """Take one fresh sweep's *sample*; return the setup the plan should follow now
        (None: the favour-light law).

        Args:
            sample: the sweep.
            pool: the setups generated for the current mix, the law first.
            ranking: the pool's names, best predicted first; None while the prediction
                of the current mix is not ready (a round waits for it).
            predicted: setup -> predicted score, for status and metrics.
        """
        if predicted is not None:
            self.predicted = dict(predicted)
        if not self.cfg.enabled:
            return None
        if sample.mix != self._mix:
            self._new_mix(sample)
            return self.wanted
        if not self.enforce:
            self.state = "predicting"
            return None
        before = self._wanted_name
        self._step(sample, pool, ranking)
        if self._wanted_name != before:  # one reload, however many moves led there
            self.reloads += 1
            self._reload_times.append(sample.now_s)
        return self.wanted

    def _step(self, sample: Sample, pool: Sequence[Setup], ranking: Sequence[str] | None) -> None:
        self._nodes = dict(sample.nodes)
        self._room = sample.room
        self._last_classes = sample.classes
        if self._trial is not None:
            self._trial_sample(sample)
        elif self.state == "settled":
            self._watch(sample)
        if self._trial is None and self.state in ("budget", "trial"):
            self._next(sample.now_s)  # the round goes on when the hour has room
        elif self._trial is None and self.state in ("settling", "waiting"):
            self._maybe_start(sample, pool, ranking)

    def _new_mix(self, sample: Sample) -> None:
        """A job started or ended: end any round, back to the law, settle."""
        if self._trial is not None:
            log.info("tuning: the mix changed, trial of %s ended", self._trial.setup.name)
        self._mix = sample.mix
        self._classes = sample.classes
        self._mix_since = sample.now_s
        self._trial = None
        self._queue = []
        self._reserved = False
        self._done = {}
        self._sweeps = {}
        self._kept = None
        self._drift.clear()
        self.measured = {}
        self.predicted = {}
        self._base, self._extra = None, []
        # back to the law: not a reload of tuning's, since the reload that brings the
        # mix's new SLs or classes to OpenSM carries it
        self.wanted = None
        self.state = "settling" if self.enforce else ("predicting" if self.cfg.enabled else "off")

    def _maybe_start(
        self, sample: Sample, pool: Sequence[Setup], ranking: Sequence[str] | None
    ) -> None:
        if sample.now_s - self._mix_since < self.cfg.settle_s:
            self.state = "settling"
            return
        if ranking is None or not pool or not sample.mix:
            self.state = "waiting"  # for the prediction, or for jobs
            return
        self._setups = {s.name: s for s in pool}
        self._classes = sample.classes  # the classes the round's pool was made for
        law = pool[0]
        others = [self._setups[n] for n in ranking if n in self._setups and n != law.name]
        skipped = self._unlikely(others)
        others = [s for s in others if s.name not in skipped]
        self._queue = [law, *others[: self.cfg.shortlist]]
        self._done = {}
        self._sweeps = {}
        self.measured = {}
        self._base, self._extra = None, []
        self.refinements = 0
        self.rounds += 1
        log.info(
            "tuning: round %d tries %s%s",
            self.rounds,
            ", ".join(s.name for s in self._queue),
            f" (predicted too slow: {', '.join(skipped)})" if skipped else "",
        )
        self._next(sample.now_s)

    def _unlikely(self, setups: Sequence[Setup]) -> list[str]:
        """Names of *setups* predicted worse than the best by over ``predicted_slack``."""
        pred = {n: v for n, v in self.predicted.items() if math.isfinite(v)}
        if not pred:
            return []
        best = min(pred.values())
        limit = best * (1.0 + self.cfg.predicted_slack)
        return [s.name for s in setups if pred.get(s.name, best) > limit]

    def _next(self, now_s: float) -> None:
        """Start the next trial of the round, or decide when none is left."""
        while self._queue:
            setup = self._queue[0]
            switch = setup.name != self._wanted_name
            full = self._recent(now_s) + 2 > self.cfg.max_reloads_per_hour
            if switch and (full or not self._room):
                if self._reserved:  # no room for the switch and its revert: wait on the
                    self._fall_back(now_s)  # best setup so far, with the room kept for it
                self.state = "budget"
                return
            self._queue.pop(0)
            self._reserved = self._reserved or switch
            self.wanted = None if setup.name == LAW else setup
            self._trial = _Trial(setup)
            self.state = "trial"
            log.info("tuning: trial of %s", setup.name)
            return
        self._decide(now_s)

    def _trial_sample(self, sample: Sample) -> None:
        trial = self._trial
        assert trial is not None
        if sample.in_force != trial.setup.name or sample.reloaded:
            trial.waited += 1
            if trial.waited > TAKE_SAMPLES + self.cfg.trial_sweeps:
                log.warning("tuning: %s did not come into force; trial ended", trial.setup.name)
                self._trial = None
                self._next(sample.now_s)
            return
        rates = {j: r for j, r in sample.rates.items() if math.isfinite(r)}
        trial.samples.append(rates)
        low = self._below_floor(rates)
        if low:
            log.warning(
                "tuning: %s drops %s below %.0f %% of its best; trial ended",
                trial.setup.name,
                low,
                self.cfg.floor * 100,
            )
            self.measured[trial.setup.name] = math.inf
            self._trial = None
            self._fall_back(sample.now_s)  # reverted at once, before anything else
            self._next(sample.now_s)
            return
        if len(trial.samples) >= self.cfg.trial_sweeps:
            self._done[trial.setup.name] = trial.mean()
            self._sweeps[trial.setup.name] = tuple(trial.samples)
            self.measured = {**self.measured, **score(self._done, self._nodes, self.cfg.objective)}
            log.info(
                "tuning: trial of %s done, score %.3f",
                trial.setup.name,
                self.measured[trial.setup.name],
            )
            self._trial = None
            self._next(sample.now_s)

    def _below_floor(self, rates: Mapping[str, float]) -> str:
        """The first job whose rate is below the floor of its best so far, or ""."""
        for job, rate in sorted(rates.items()):
            best = max((m[job] for m in self._done.values() if job in m), default=0.0)
            if best > 0 and rate < self.cfg.floor * best:
                return f"job {job}"
        return ""

    @property
    def _wanted_name(self) -> str:
        return LAW if self.wanted is None else self.wanted.name

    def _fall_back(self, now_s: float) -> None:
        """Back to the best setup measured so far (the law when none): every trial's revert."""
        scores = score(self._done, self._nodes, self.cfg.objective)
        best = min(scores, key=lambda n: (scores[n], n != LAW), default=LAW)
        if self._base is not None:  # refining: the kept setup unless beaten by the margin
            best = self._chain(scores)[0]
        self.wanted = None if best == LAW else self._setups[best]
        self._reserved = False

    def _decide(self, now_s: float) -> None:
        scores = score(self._done, self._nodes, self.cfg.objective)
        self.measured = {**self.measured, **scores}
        choice = LAW
        if scores:
            choice, order, errors = self._chain(scores)
            best = min(order, key=lambda n: (scores[n], order.index(n)))
            note = ""
            if best != choice:
                gain = scores[choice] / scores[best] - 1.0
                note = (
                    f" ({best} {gain:.1%} better, within margin"
                    f" {self._margin(choice, best, scores, errors):.1%})"
                )
            self.decision = (
                f"kept {choice}: " + ", ".join(f"{n} {scores[n]:.3f}" for n in order) + note
            )
        else:
            self.decision = f"kept {LAW}: no trial finished"
        log.info("tuning: %s", self.decision)
        # a switch here spends the room the last trial kept for its revert
        self.wanted = None if choice == LAW else self._setups[choice]
        self._reserved = False
        self._kept = self._done.get(choice)
        self._base, self._extra = None, []
        self.decided += 1
        # the classes under the kept setup: later changes are the jobs', not the trials'
        self._classes = self._last_classes
        self._drift.clear()
        self.state = "settled"

    def _chain(self, scores: Mapping[str, float]) -> tuple[str, list[str], dict[str, float]]:
        """The setup kept of those measured (*scores*), in the order tried (refining: the
        kept one, then the extra ones), each later one taking over only when it beats the
        one kept so far beyond the noise; that order; the scores' standard errors."""
        errors = score_errors(self._sweeps, self._done, self._nodes, self.cfg.objective)
        order = list(scores)  # tried order: the law first, then the best predicted
        if self._base is not None and self._base in scores:
            order = [self._base, *(n for n in self._extra if n in scores)]
        choice = order[0]
        for name in order[1:]:
            if scores[choice] / scores[name] - 1.0 > self._margin(choice, name, scores, errors):
                choice = name
        return choice, order, errors

    def _margin(
        self,
        kept: str,
        other: str,
        scores: Mapping[str, float],
        errors: Mapping[str, float],
    ) -> float:
        """The least gain (a fraction of *other*'s score) by which *other* beats *kept*:
        ``margin``, or ``margin_sigmas`` standard errors of the difference when wider."""
        spread = math.hypot(errors.get(kept, 0.0), errors.get(other, 0.0)) / scores[other]
        return max(self.cfg.margin, self.cfg.margin_sigmas * spread)

    def _watch(self, sample: Sample) -> None:
        """Under the kept setup: a score that drifts by more than ``drift`` starts a round."""
        name = self._wanted_name
        if sample.classes != self._classes:
            log.info("tuning: the jobs' classes changed; a new round once they hold")
            self._classes = sample.classes
            self._mix_since = sample.now_s
            self.state = "settling"
            return
        if self._kept is None or sample.reloaded or sample.in_force != name:
            return
        self._drift.append({j: r for j, r in sample.rates.items() if math.isfinite(r)})
        if len(self._drift) < self.cfg.trial_sweeps:
            return
        now = _mean(list(self._drift))
        jobs = [j for j in self._kept if j in now and self._kept[j] > 0]
        if not jobs:
            return
        slow = combine(_slowdowns(now, self._kept, set(jobs)), self._nodes, self.cfg.objective)
        if abs(slow - 1.0) > self.cfg.drift:
            log.info("tuning: %s drifted to %.3f of its score; new round", name, slow)
            self._mix_since = -math.inf  # the mix is the same: no need to settle again
            self.state = "waiting"

    # -- reloads ---------------------------------------------------------------------------

    def _recent(self, now_s: float) -> int:
        while self._reload_times and now_s - self._reload_times[0] >= HOUR_S:
            self._reload_times.popleft()
        return len(self._reload_times)
