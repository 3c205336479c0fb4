"""The reload budget: how often ibqos may make OpenSM re-read its files.

Every signal costs OpenSM a heavy sweep (every switch's tables recomputed and re-sent), so
the signals ibqos sends are rationed by a token bucket (``opensm.reload_budget``): it
holds at most ``burst`` tokens, gains ``per_minute`` a minute, and each signal (an apply's,
its rollback's, a repeated one after a signal was cut short) takes one.  An apply starts
only when the bucket holds :data:`APPLY_COST` tokens, enough for the apply and its
rollback, so a rollback is never short of one.  Whatever goes wrong, OpenSM sees at most
``burst`` reloads at once and ``per_minute`` a minute after that.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

from ibqos.errors import ReloadDeferred

log = logging.getLogger(__name__)

#: tokens an apply needs before it starts: its own signal and a rollback's
APPLY_COST = 2


class ReloadBudget:
    """A token bucket of OpenSM reloads.

    Args:
        burst: tokens it holds at most (and at the start).
        per_minute: tokens it gains a minute.
        clock: monotonic seconds (tests pass their own).
    """

    def __init__(
        self, burst: int, per_minute: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.burst = burst
        self.per_minute = per_minute
        self.clock = clock
        self._tokens = float(burst)
        self._at = clock()

    def tokens(self) -> float:
        """Tokens held now."""
        now = self.clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._at) * self.rate)
        self._at = now
        return self._tokens

    @property
    def rate(self) -> float:
        """Tokens gained a second."""
        return self.per_minute / 60.0

    def wait_s(self, need: float = APPLY_COST) -> float:
        """Seconds until the bucket holds *need* tokens (0: it does now)."""
        short = need - self.tokens()
        return 0.0 if short <= 0 else short / self.rate

    def take(self) -> None:
        """Take a token for a signal about to be sent (never below 0: an apply only
        starts with enough for itself and its rollback)."""
        self._tokens = max(0.0, self.tokens() - 1.0)

    def carry(self, other: ReloadBudget) -> None:
        """Start from what *other* (the budget of a config that was replaced) holds, so a
        config reload neither refills nor empties the bucket."""
        self._tokens = min(float(self.burst), other.tokens())
        self._at = self.clock()

    def check(self) -> None:
        """Return if the bucket holds enough for an apply and its rollback.

        Raises:
            ReloadDeferred: it does not; says when it will.
        """
        wait_s = self.wait_s()
        if wait_s > 0:
            raise ReloadDeferred(
                f"reload budget spent: next reload in {math.ceil(wait_s)} s"
                f" (opensm.reload_budget: burst {self.burst}, {self.per_minute:g} a minute);"
                " nothing written",
                retry_in_s=wait_s,
            )
