"""The collection loop: sweep, rates, optional recording, and a fresh look at the topology
every so often, so ports that vanish or appear are noticed between sweeps.

``ibqos collect`` drives it; the agent will too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from ibqos.collect.backends import make_backend
from ibqos.collect.rates import RateTracker
from ibqos.collect.replay import SweepRecorder
from ibqos.collect.sweep import Sweep
from ibqos.config.models import CollectConfig
from ibqos.errors import IbqosError, RecordingExhausted
from ibqos.fabric.diff import diff_fabrics
from ibqos.fabric.model import Fabric

log = logging.getLogger(__name__)


class Collector:
    """Sweeps a fabric again and again and turns the sweeps into rates.

    Args:
        cfg: the ``collect`` config section.
        fabric: the topology at start; None for a replay of its recorded ports.
        discover: reads the topology again (e.g. runs ibnetdiscover); None: never.
        refresh_s: seconds between two reads of the topology.
        record: also write every sweep into this directory.
    """

    def __init__(
        self,
        cfg: CollectConfig,
        fabric: Fabric | None,
        *,
        discover: Callable[[], Fabric] | None = None,
        refresh_s: float = 300.0,
        record: Path | None = None,
    ) -> None:
        self.cfg = cfg
        self.fabric = fabric
        self.targets = fabric.targets() if fabric is not None else []
        self.discover = discover
        self.refresh_s = refresh_s
        self.recorder = SweepRecorder(record) if record is not None else None
        self.tracker = RateTracker()
        self.backend = make_backend(cfg)
        self.last: Sweep | None = None
        self._seen_s = time.monotonic()

    def close(self) -> None:
        """Release the backend."""
        self.backend.close()

    def __enter__(self) -> Collector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def step(self) -> pd.DataFrame:
        """One sweep; returns its rates table (NaN rates for ports read the first time)."""
        self._maybe_rediscover()
        sweep = self.backend.sweep(self.targets)
        log.info(
            "sweep: %d ports in %.3f s (%s), %d failed",
            len(self.targets),
            sweep.duration_s,
            sweep.backend,
            sweep.failed,
        )
        if self.recorder is not None:
            self.recorder.record(sweep)
        self.last = sweep
        return self.tracker.update(sweep)

    def _maybe_rediscover(self) -> None:
        if self.discover is None or time.monotonic() - self._seen_s < self.refresh_s:
            return
        if self.fabric is None:
            return
        self._seen_s = time.monotonic()
        try:
            new = self.discover()
        except IbqosError as err:  # keep sweeping the ports we know
            log.warning("topology not re-read, keeping the last one: %s", err)
            return
        change = diff_fabrics(self.fabric, new)
        if change:
            log.warning("%s", change)
            self.fabric, self.targets = new, new.targets()

    def run(
        self, tables: int | None, interval_s: float, emit: Callable[[pd.DataFrame], None]
    ) -> None:
        """Sweep every *interval_s* seconds (from sweep start to sweep start) and pass each
        rates table after the first sweep to *emit*; stop after *tables* tables (None:
        never).  A replay goes as fast as it can, since its times come from the recording,
        and ends quietly with the recording."""
        printed = 0
        started = time.monotonic()
        try:
            self.step()
            while tables is None or printed < tables:
                if self.cfg.backend != "replay":
                    time.sleep(max(0.0, interval_s - (time.monotonic() - started)))
                started = time.monotonic()
                emit(self.step())
                printed += 1
        except RecordingExhausted as end:
            log.info("%s", end)
