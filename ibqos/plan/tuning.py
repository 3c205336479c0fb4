"""Tuning as a cycle drives it: candidate setups for the jobs in force, predicted off the
cycle, tried by the observation tuner (:mod:`ibqos.plan.tuner`).  The agent
(:mod:`ibqos.agent.cycle`) and the simulator's ``--policy ibqos`` run the same driver.

Each cycle :class:`TuningDriver` makes the pool of setups for the plan's jobs (the law
first, :func:`ibqos.plan.setups.candidates`).  When the mix (jobs and classes) has stayed
the same for ``tuning.settle_s``, it predicts the pool in a background thread
(:data:`Predictor`; the decision cycle never waits for it) and hands the ranking to the
tuner, which waits for it before a round.  The prediction may bring setups of its own, a
search's beyond the pool (:attr:`Predicted.found`, ``found-1`` ...): they join the pool
before the round, so the tuner may try them.  With no predictor, or one that fails, the
ranking is the pool's own order (the order of :mod:`ibqos.plan.setups`), said in the log.

**Refinement.**  When a round decides on a setup it measured, a :data:`Refiner` (in the
background as the prediction) takes the setups tried and what each measured, the kept one
first, and returns setups near the kept one, predicted better (its model may fit the
jobs to the trials: :attr:`Predicted.error`).  The tuner tries them
(:meth:`ibqos.plan.tuner.Tuner.extend`, named ``refine-1`` ... in the round), and keeps one
only if it measures better than the kept setup by the margin.  That repeats at most
``tuning.refine_rounds`` times a round, and stops when the refiner finds nothing new or
the reload budget has no room; a new round (new jobs, classes, drift) starts afresh.

The thread shares the interpreter with the cycle: a prediction holds the GIL for the
fluid model's Python parts, so a cycle that runs meanwhile may take longer.  It runs once
per stable mix, not every cycle.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from ibqos.config.tuning import TuningConfig
from ibqos.errors import IbqosError
from ibqos.plan.planner import Plan, law_setup
from ibqos.plan.report import Decision
from ibqos.plan.setups import LAW, Setup, candidates
from ibqos.plan.tuner import Sample, Tuner, TuningStatus

log = logging.getLogger(__name__)

__all__ = ["MAX_FOUND", "Observation", "Predicted", "Predictor", "Refiner", "TuningDriver"]

#: most found setups a prediction adds to the pool
MAX_FOUND = 4
#: what a setup may be called: metric-label and log friendly
_NAME = re.compile(r"[a-z0-9+.-]+")


@dataclass(frozen=True)
class Predicted:
    """What the prediction of a pool says.

    Attributes:
        ranking: the pool's setup names, best predicted first.
        scores: setup -> predicted score (lower is better; the tuner's measure).
        text: the prediction as a table, for ``ibqos run --dry-run`` ("" when none).
        found: setups a search found beyond the pool, best first (names ``found-1`` ...,
            in *ranking* and *scores* too): the driver adds them to the pool, at most
            :data:`MAX_FOUND`.
        error: the prediction's mean relative error of the jobs' means over the setups
            tried, before and after fitting the jobs to them (``before``, ``after``,
            ``trials``: :meth:`ibqos.sim.learn.Learnt.doc`); None: nothing fitted.
    """

    ranking: tuple[str, ...]
    scores: Mapping[str, float]
    text: str = ""
    found: tuple[Setup, ...] = ()
    error: Mapping[str, float] | None = None


#: predicts *setups* for the jobs of the decision (plan in force, setups): may take long
Predictor = Callable[[Decision, Plan, Sequence[Setup]], Predicted]
#: a setup tried and each job's mean injected bytes per second under it
Observation = tuple[Setup, Mapping[str, float]]
#: after a decision: (decision, plan in force, kept setup, the setups tried and what they
#: measured, the kept one first) -> setups near the kept one in :attr:`Predicted.found`
Refiner = Callable[[Decision, Plan, Setup, Sequence[Observation]], Predicted]


def _classes(plan: Plan) -> frozenset[tuple[str, str]]:
    return frozenset((j, str(c)) for j, c in plan.job_cls.items())


class TuningDriver:
    """The tuner, its pool and its prediction, as the agent's cycle drives them.

    Args:
        cfg: the ``tuning`` section.
        enforce: the agent may reload OpenSM (enforce mode, not a dry run).
        predictor: predicts a pool (None: no prediction; the pool's order ranks it).
        ratio: the lanes' weight ratio (the law's), so candidates leave out its double.
        background: predict in a thread, the cycle never waiting (the agent); False:
            predict within the cycle that finds the mix stable (the simulator, which
            must be deterministic).
        refiner: after a round decides, finds setups near the kept one (None: none).
    """

    def __init__(
        self,
        cfg: TuningConfig,
        *,
        enforce: bool,
        predictor: Predictor | None = None,
        ratio: float = 2.0,
        background: bool = True,
        refiner: Refiner | None = None,
    ) -> None:
        self.cfg = cfg
        self.tuner = Tuner(cfg, enforce=enforce)
        self.predictor = predictor
        self.ratio = ratio
        self.background = background
        self.pool: list[Setup] = []
        self.predicted: Predicted | None = None
        self._mix: frozenset[tuple[str, str]] | None = None  # the jobs and classes of the pool
        self._jobs: frozenset[str] | None = None  # the jobs of the pool
        self._mix_since = -math.inf
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._result: tuple[frozenset[tuple[str, str]], Predicted] | None = None
        self.refiner = refiner
        self.error: Mapping[str, float] | None = None  # the last fit's, for status
        self._seen = 0  # the tuner's decisions seen
        self._round = 0  # the round the refinements below count in
        self._refines = 0  # refinements started in it
        self._named = 0  # refine-k names given in it
        self._refined: tuple[tuple[object, ...], Predicted] | None = None
        self._refine_thread: threading.Thread | None = None
        self._refine_scores: dict[str, float] = {}  # refine-k -> predicted score

    @property
    def wanted(self) -> Setup | None:
        """The setup the plan should follow (None: the law)."""
        return self.tuner.wanted if self.cfg.enabled else None

    def status(self, now_s: float) -> TuningStatus:
        """The tuner's state now, with the last fit's prediction error."""
        return replace(self.tuner.status(now_s), prediction_error=self.error)

    def prediction_error(self) -> tuple[float, float] | None:
        """The last fit's error before and after (ratios); None: nothing fitted."""
        err = self.error
        return None if err is None else (err["before"], err["after"])

    def after_cycle(
        self,
        decision: Decision,
        *,
        fresh: bool,
        in_force: str,
        reloaded: bool,
        now_s: float,
        room: bool = True,
    ) -> None:
        """Take one cycle's *decision*.

        Args:
            decision: the cycle's decision (its plan, each job's injected rate).
            fresh: its rates come from a sweep of this cycle (only those are samples).
            in_force: the setup OpenSM served over the sweep's interval.
            reloaded: OpenSM reloaded within that interval.
            now_s: the cycle's time (seconds, the decider's clock).
            room: OpenSM's reload budget has room for a trial's switch and its revert.
        """
        if not self.cfg.enabled:
            return
        plan = decision.plan
        mix = _classes(plan)
        jobs = frozenset(plan.job_sl)
        in_round = self.tuner.state in ("trial", "budget")
        if mix != self._mix and (jobs != self._jobs or not in_round):
            # a new pool for new jobs, or for new classes between rounds (during one the
            # trials themselves move classes; the round keeps its pool)
            self._mix, self._jobs, self._mix_since = mix, jobs, now_s
            self.predicted = None
            self.pool = self._pool(plan)
        self._collect(mix)
        self._collect_refined(mix, now_s)
        stable = now_s - self._mix_since >= self.cfg.settle_s
        if stable and self.predicted is None and self._thread is None and len(self.pool) > 1:
            self._predict(decision, plan, mix)
        if not fresh:
            return
        reports = decision.jobs
        sample = Sample(
            now_s,
            {r.id: r.levels[0].bytes_per_s if 0 in r.levels else math.nan for r in reports},
            {r.id: len(r.nodes) for r in reports},
            in_force,
            reloaded,
            jobs,
            mix,
            room,
        )
        pred = self.predicted
        ranking = None if pred is None else pred.ranking
        if len(self.pool) <= 1:
            ranking = tuple(s.name for s in self.pool)  # nothing to predict
        scores = None if pred is None else {**pred.scores, **self._refine_scores}
        self.tuner.step(sample, self.pool, ranking, scores)
        self._maybe_refine(decision, plan, mix)

    def _key(self, mix: frozenset[tuple[str, str]]) -> tuple[object, ...]:
        return (mix, self.tuner.rounds, self.tuner.decided)

    def _maybe_refine(
        self, decision: Decision, plan: Plan, mix: frozenset[tuple[str, str]]
    ) -> None:
        """After a decision on a measured setup, with refinements left, refine from it."""
        tuner = self.tuner
        if tuner.decided == self._seen:
            return
        self._seen = tuner.decided
        if tuner.rounds != self._round:
            self._round, self._refines, self._named = tuner.rounds, 0, 0
            self._refine_scores = {}
        kept, seen = tuner.kept, tuner.observations()
        refiner = self.refiner
        if refiner is None or kept is None or len(seen) < 2 or self._refine_thread is not None:
            return
        if self._refines >= self.cfg.refine_rounds:
            return
        self._refines += 1
        key = self._key(mix)

        def work() -> None:
            try:
                out = refiner(decision, plan, kept, seen)
            except Exception as err:  # a failed refinement must not stop tuning
                log.warning("tuning: refinement failed (%s)", err)
                out = Predicted((), {})
            with self._lock:
                self._refined = (key, out)

        if not self.background:
            work()
            return  # taken at the next cycle's start, as a thread's would be
        self._refine_thread = threading.Thread(target=work, name="ibqos-refine", daemon=True)
        self._refine_thread.start()

    def _collect_refined(self, mix: frozenset[tuple[str, str]], now_s: float) -> None:
        """Take a finished refinement: its setups join the round, or refining stops."""
        with self._lock:
            result, self._refined = self._refined, None
        if result is None:
            return
        self._refine_thread = None
        key, out = result
        if out.error is not None:
            self.error = dict(out.error)
        if key != self._key(mix):
            return  # a new round, or the mix changed: the refinement is stale
        kept = self.tuner.kept
        setups: list[Setup] = []
        for setup in out.found:
            if kept is None or len(setups) == MAX_FOUND:
                break
            if not (_NAME.fullmatch(setup.name) and setup.fits(kept.sls)):
                log.warning("tuning: refined setup %s left out", setup.name)
                continue
            self._named += 1
            name = f"refine-{self._named}"
            setups.append(replace(setup, name=name))
            self._refine_scores[name] = out.scores.get(setup.name, math.nan)
        if not setups or not self.tuner.extend(setups, now_s):
            log.info(
                "tuning: refinement %s; no more this round",
                "found nothing" if not setups else "has no reload room",
            )
            self._refines = self.cfg.refine_rounds

    def _pool(self, plan: Plan) -> list[Setup]:
        if plan.tables is None or not plan.job_sl:
            return []  # the routing engine owns SL2VL, or no jobs: nothing to tune
        try:
            law = law_setup(plan)
        except IbqosError:
            return []
        return candidates(law, self.cfg.candidates, self.ratio)

    def _predict(self, decision: Decision, plan: Plan, mix: frozenset[tuple[str, str]]) -> None:
        pool = list(self.pool)
        predictor = self.predictor
        if predictor is None:
            self.predicted = Predicted(tuple(s.name for s in pool), {})
            return

        def work() -> None:
            try:
                out = predictor(decision, plan, pool)
            except Exception as err:  # a failed prediction must not stop tuning
                log.warning("tuning: prediction failed (%s); trying setups in their order", err)
                out = Predicted(tuple(s.name for s in pool), {})
            with self._lock:
                self._result = (mix, out)

        if not self.background:
            work()
            self._collect(mix)
            return
        self._thread = threading.Thread(target=work, name="ibqos-predict", daemon=True)
        self._thread.start()

    def _collect(self, mix: frozenset[tuple[str, str]]) -> None:
        """Take a finished prediction (a stale one, of an older mix, is dropped)."""
        with self._lock:
            result, self._result = self._result, None
        if result is None:
            return
        self._thread = None
        done_mix, predicted = result
        if done_mix == mix:
            self.predicted = predicted
            self.pool = [*self.pool, *self._found(predicted)]
            best = predicted.ranking[0] if predicted.ranking else LAW
            log.info("tuning: predicted %s best of %d setups", best, len(predicted.ranking))

    def _found(self, predicted: Predicted) -> list[Setup]:
        """The found setups of *predicted* that may join the pool: named as setups are,
        not yet in it, placing the pool's SLs; at most :data:`MAX_FOUND`."""
        names = {s.name for s in self.pool}
        sls = self.pool[0].sls if self.pool else frozenset()
        out: list[Setup] = []
        for setup in predicted.found:
            if len(out) == MAX_FOUND:
                break
            if _NAME.fullmatch(setup.name) and setup.name not in names and setup.fits(sls):
                out.append(setup)
                names.add(setup.name)
            else:
                log.warning("tuning: found setup %s left out of the pool", setup.name)
        return out

    def predict_now(self, decision: Decision) -> Predicted | None:
        """Predict the pool of *decision*'s plan now, in this thread, whatever the mix's
        age (a dry run shows it); None with no predictor or nothing to predict.  What a
        failing prediction raised is logged, and None returned."""
        plan = decision.plan
        pool = self._pool(plan)
        if self.predictor is None or len(pool) < 2:
            return None
        try:
            return self.predictor(decision, plan, pool)
        except Exception as err:  # a dry run shows the plan whatever the prediction does
            log.warning("tuning: prediction failed: %s", err)
            return None

    def wait_prediction(self, timeout_s: float) -> bool:
        """Wait up to *timeout_s* for a prediction running now (a dry run shows it)."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout_s)
        if self._mix is not None:
            self._collect(self._mix)
        return self.predicted is not None
