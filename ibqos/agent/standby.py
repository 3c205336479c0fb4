"""Beside a standby OpenSM the agent stands by; when its OpenSM becomes master, it takes over.

On a fabric with two subnet-manager hosts, each runs OpenSM and an agent beside it
(docs/deploy.md, "Two subnet manager hosts").  Only the master OpenSM programs the fabric
and answers the SA, so only the agent beside it may write, signal and hand out SLs.
:class:`SmGate` reads the state of its OpenSM every cycle
(:class:`ibqos.opensm.smstate.SmStateReader`: SMInfo, else OpenSM's log; cached, bounded)
and tells the cycle what to do:

- **stand by** while that state is known and is not MASTER (STANDBY, DISCOVERING,
  NOTACTIVE, or another SM is the master): the cycle still sweeps, decides and saves its
  state, but writes nothing, signals nothing (no wait for a sweep a standby never makes,
  no rollback), and hands out no SL: what is in force is emptied, and ``job-sl`` answers
  ``PENDING`` (the jobs' tasks start on the default SL, as the master's SA gives them
  whatever its own files say);
- **take over** once it is MASTER again: after the new master's first heavy sweep
  (``SUBNET UP`` after its ``Entering MASTER state`` in the log), the cycle applies the
  plan as usual: files that differ from the plan are written and OpenSM is signalled,
  and the verifier checks every job (none is in force); files that already match are
  checked through the SA all the same (:meth:`SmGate.confirm`).  No SL is handed out
  until one of the two has passed; a failed check is tried again at the next cycle;
- **as before** while the state cannot be read (no ``sminfo`` answer and nothing in the
  log, OpenSM not running): OpenSM down is the apply path's to report.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from ibqos.metrics import Counters
from ibqos.opensm.outcome import ApplyOutcome, ApplyResult
from ibqos.opensm.smstate import SmReading, SmState, SmStateReader

log = logging.getLogger(__name__)


class SmGate:
    """Whether a cycle stands by beside a non-master OpenSM, and the takeover after it.

    Args:
        reader: reads the state of the agent's OpenSM.
        counters: where the state (``sm_state``) and the takeovers are counted.

    Attributes:
        reading: the last reading (None before the first).
        standing_by: the last cycle stood by.
        unconfirmed: SLs were withdrawn while standing by, and no apply or SA check has
            confirmed the plan since: nothing is published in force until one does.
    """

    def __init__(self, reader: SmStateReader, counters: Counters) -> None:
        self.reader = reader
        self.counters = counters
        self.reading: SmReading | None = None
        self.standing_by = False
        self.unconfirmed = False
        self._told = ""  # the last confirmation problem logged (each once)

    def stand_by(self) -> bool:
        """Read the state (cached, bounded); True when this cycle must stand by."""
        previous, reading = self.reading, self.reader.read()
        self.reading = reading
        self.counters.sm_state = None if reading.state is None else int(reading.state)
        waiting = (
            self.unconfirmed
            and reading.state is SmState.MASTER
            and self.reader.swept() is False  # its first heavy sweep has not ended yet
        )
        if reading.standby or waiting:
            if not self.standing_by:
                self._enter(reading, waiting)
            elif previous is not None and reading.state is not previous.state:
                log.info("OpenSM beside this agent: %s; still standing by", reading.describe())
            self.standing_by = self.unconfirmed = True
            return True
        if self.standing_by:
            self.standing_by = False
            if reading.state is SmState.MASTER:
                self.counters.sm_takeovers += 1
                log.warning(
                    "OpenSM beside this agent is the master now (%s): taking over; its jobs"
                    " get their SLs once the SA serves them",
                    reading.describe(),
                )
            else:
                log.warning(
                    "OpenSM's state cannot be read now (%s): acting as beside a master;"
                    " no SL is handed out until the SA serves the plan",
                    reading.describe(),
                )
        return False

    def _enter(self, reading: SmReading, waiting: bool) -> None:
        if waiting:
            log.info("OpenSM is the master; waiting for its first heavy sweep to take over")
            return
        log.warning(
            "OpenSM beside this agent is not the master (%s): standing by: nothing is"
            " written or signalled and no SL handed out until it is",
            reading.describe(),
        )

    def confirm(self, result: ApplyResult, verify: Callable[[], Sequence[str]] | None) -> bool:
        """After an apply that succeeded: may its plan be published in force?

        Yes unless SLs were withdrawn while standing by and this apply checked nothing
        through the SA: files already as planned (then they are checked here, every job
        a new one) are the new master's, which the SA need not serve yet.

        Args:
            result: the apply's result (``ok``).
            verify: the cycle's verifier (None: ``opensm.verify`` is off, and the apply
                path's trust holds here too).
        """
        if not self.unconfirmed:
            return True
        if result.outcome is ApplyOutcome.UNCHANGED and verify is not None:
            problems = list(verify())
            if problems:
                if problems[0] != self._told:
                    log.warning(
                        "taking over: the SA does not serve the plan yet (%s); its SLs are"
                        " not handed out, checked again next cycle",
                        "; ".join(problems[:3]),
                    )
                self._told = problems[0]
                return False
        self.unconfirmed = False
        self._told = ""
        log.info("took over: the SA serves the plan; its jobs' SLs are handed out")
        return True
