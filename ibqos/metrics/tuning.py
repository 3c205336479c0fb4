"""Metrics of tuning (:mod:`ibqos.plan.tuner`): its state, the setup it wants, the trial
under way, every candidate's predicted and measured score, and the reloads it spent.

Served from the tuner's status at scrape time, so a setup that left the pool leaves the
metrics with it (bounded labels: at most ``tuning.candidates`` setups).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from ibqos.plan.tuner import TuningStatus

__all__ = ["STATES", "TuningCollector"]

#: the tuner's states (:attr:`ibqos.plan.tuner.TuningStatus.state`)
STATES = ("off", "predicting", "settling", "waiting", "trial", "budget", "settled")


class TuningCollector(Collector):
    """Yields the tuning families from :attr:`status` (None: no tuner, nothing yielded)."""

    def __init__(self) -> None:
        self.status: Callable[[], TuningStatus | None] = lambda: None
        #: the prediction's mean relative error of the jobs' means over the trials, before
        #: and after fitting the jobs' phases to them (:class:`ibqos.sim.learn.Learnt`),
        #: set by whoever fits them; None: nothing fitted yet
        self.prediction_error: Callable[[], tuple[float, float] | None] = lambda: None

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        st = self.status()
        if st is None:
            return
        state = GaugeMetricFamily(
            "ibqos_tuning_state",
            "1 for the state tuning is in: off, predicting (observe mode), settling (the mix"
            " changed), waiting (for the prediction or jobs), trial, budget (waiting for room"
            " in tuning.max_reloads_per_hour or OpenSM's reload budget), settled.",
            labels=["state"],
        )
        for name in STATES:
            state.add_metric([name], float(st.state == name))
        yield state
        wanted = GaugeMetricFamily(
            "ibqos_tuning_setup_info",
            "The setup tuning asks the plan to follow (always 1); favour-light is the law.",
            labels=["setup"],
        )
        wanted.add_metric([st.wanted], 1.0)
        yield wanted
        trial = GaugeMetricFamily(
            "ibqos_tuning_trial_info",
            "The setup on trial now (always 1); absent between trials.",
            labels=["setup"],
        )
        if st.trial is not None:
            trial.add_metric([st.trial], 1.0)
        yield trial
        scores = GaugeMetricFamily(
            "ibqos_tuning_score",
            "Each candidate setup's score: node-weighted mean slowdown of the jobs relative"
            " to their best under any setup (1 = every job at its best; lower is better),"
            " as predicted by the fluid model or measured in trials; +Inf: a trial ended at"
            " the floor.",
            labels=["setup", "source"],
        )
        for source, values in (("predicted", st.predicted), ("measured", st.measured)):
            for name, value in sorted(values.items()):
                scores.add_metric([name, source], value if not math.isnan(value) else math.nan)
        yield scores
        yield CounterMetricFamily(
            "ibqos_tuning_rounds", "Rounds of trials tuning started.", value=st.rounds
        )
        yield CounterMetricFamily(
            "ibqos_tuning_reloads",
            "OpenSM reloads tuning caused (trials, reverts, choices).",
            value=st.reloads,
        )
        yield GaugeMetricFamily(
            "ibqos_tuning_reloads_last_hour",
            "OpenSM reloads tuning caused in the last hour (at most tuning.max_reloads_per_hour).",
            value=st.reloads_last_hour,
        )
        errors = self.prediction_error()
        if errors is not None:
            family = GaugeMetricFamily(
                "ibqos_tuning_prediction_error_ratio",
                "Mean relative error of the predicted per-job mean injection over the setups"
                " tried, with the jobs' phases assumed (before) and fitted to the trials (after).",
                labels=["when"],
            )
            for when, value in zip(("before", "after"), errors, strict=True):
                family.add_metric([when], value)
            yield family
