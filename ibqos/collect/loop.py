"""The collection loop: sweep, rates, optional recording, and a fresh look at the topology
every so often, so ports that vanish or appear are noticed between sweeps.

``ibqos collect`` and the agent drive it.  Each sweep is logged in one line: at info when
every port answered, else a warning with how many ports were reached and the first few
that were not (the backends log each port's failure at debug level only).  Its
:attr:`Sweep.coverage` (the share of ports that answered with a usable sample) is on
:attr:`Collector.last`; :attr:`Collector.covered` says whether it reaches
``collect.min_coverage``, below which the agent keeps the plan in force.

A re-read of the topology that fails (ibnetdiscover timed out, or found no fat tree) keeps
the last topology; that is logged once, until a re-read works again, and the next try is
``refresh_s`` after the failed one ended, so a hung discovery never runs back to back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from ibqos.collect.backends import make_backend
from ibqos.collect.per_sl import SlRateTracker
from ibqos.collect.rates import RateTracker
from ibqos.collect.replay import SweepRecorder
from ibqos.collect.sweep import Sweep
from ibqos.config.models import CollectConfig
from ibqos.errors import IbqosError, RecordingExhausted
from ibqos.fabric.diff import diff_fabrics
from ibqos.fabric.model import Fabric
from ibqos.fabric.targets import Target

log = logging.getLogger(__name__)

#: ports named in a sweep's summary line when some did not answer
_EXAMPLES = 3


def _where(tg: Target) -> str:
    return f"{tg.node_desc or f'0x{tg.node_guid:016x}'} port {tg.port}"


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
        self.tracker = RateTracker(cfg.rate_margin)
        self.sl_tracker = SlRateTracker()
        self.backend = make_backend(cfg)
        self.last: Sweep | None = None
        #: per-SL rates of the last sweep (``ibqos.collect.per_sl``); None when no port
        #: has per-SL data counters
        self.sl_rates: pd.DataFrame | None = None
        self._seen_s = time.monotonic()
        self._refresh_failing = False

    def close(self) -> None:
        """Release the backend."""
        self.backend.close()

    def __enter__(self) -> Collector:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def covered(self) -> bool:
        """The last sweep read at least ``collect.min_coverage`` of its ports with usable
        rates (False before the first sweep)."""
        return self.last is not None and self.last.coverage >= self.cfg.min_coverage

    def step(self) -> pd.DataFrame:
        """One sweep; returns its rates table (NaN rates for ports read the first time,
        and for ports that failed or whose sample was dropped as implausible), and
        sets :attr:`sl_rates`."""
        self._maybe_rediscover()
        sweep = self.backend.sweep(self.targets)
        if self.recorder is not None:
            self.recorder.record(sweep)
        rates = self.tracker.update(sweep)
        self.sl_rates = self.sl_tracker.update(sweep.per_sl)
        sweep.invalid = self.tracker.last_invalid
        self.last = sweep
        self._report(sweep)
        return rates

    def _report(self, sweep: Sweep) -> None:
        """One line for the sweep: info if every port was read usably, else a warning."""
        n, failed = len(sweep.targets), sweep.failed
        if not failed and not sweep.invalid:
            log.info(
                "sweep: %d ports in %.3f s (%s), %d failed", n, sweep.duration_s, sweep.backend, 0
            )
            return
        errors = sweep.table["error"].tolist()
        bad = [i for i, err in enumerate(errors) if err][:_EXAMPLES]
        examples = ", ".join(f"{_where(sweep.targets[i])} ({errors[i]})" for i in bad)
        dropped = f"; {sweep.invalid} sample(s) dropped as implausible" if sweep.invalid else ""
        below = "" if self.covered else f", below collect.min_coverage {self.cfg.min_coverage:g}"
        log.warning(
            "sweep reached %d of %d ports in %.3f s (%s); %d did not answer%s%s%s "
            "(coverage %.2f%s)",
            n - failed,
            n,
            sweep.duration_s,
            sweep.backend,
            failed,
            ", e.g. " if examples else "",
            examples,
            dropped,
            sweep.coverage,
            below,
        )

    def _maybe_rediscover(self) -> None:
        if self.discover is None or time.monotonic() - self._seen_s < self.refresh_s:
            return
        if self.fabric is None:
            return
        try:
            new = self.discover()
        except IbqosError as err:  # keep sweeping the ports we know
            if self._refresh_failing:
                log.debug("topology not re-read again: %s", err)
            else:
                log.warning(
                    "topology not re-read, keeping the last one (%d ports) until a re-read "
                    "works (tried every %g s): %s",
                    len(self.targets),
                    self.refresh_s,
                    err,
                )
            self._refresh_failing = True
            return
        finally:
            # counted from the end of the try: a discovery that hangs until its timeout
            # is not started again at once
            self._seen_s = time.monotonic()
        if self._refresh_failing:
            log.info("topology read again")
            self._refresh_failing = False
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
