"""Intensity classes and the thresholds that sort intensities into them (``classify``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, get_args

Class = Literal["low", "moderate", "high"]


#: Intensity classes, lightest first; the index is the class's rank.
CLASSES: tuple[Class, ...] = get_args(Class)


def as_class(value: object) -> Class:
    """*value* as a class name.

    Raises:
        ValueError: it is not one of :data:`CLASSES`.
    """
    for cls in CLASSES:
        if value == cls:
            return cls
    raise ValueError(f"class {value!r} is not one of {', '.join(CLASSES)}")


@dataclass(frozen=True)
class Thresholds:
    """How intensities become classes.

    The bounds are fractions of the bandwidth available to the job at its busiest shared
    level (``util``, 1.0 = all of it).  The defaults follow the method (docs/design.md §1):

    - ``moderate = 0.1``: below a tenth of what it can reach, a job is one of the light,
      bursty jobs the method groups on shared lanes and favours with weight.  Ten of them
      together still fit on the links they share, and the queueing one adds for others is
      small (an M/M/1 queue at load 0.1 waits about 0.1 of a packet time).
    - ``high = 0.4``: two such jobs on the same uplinks load them to 80 %, where queueing
      delay is several packet times (4 at M/M/1 load 0.8) and congestion spreads; they need
      lanes of their own.  It is below 0.5 (two jobs filling a link) because the average
      over a subtree's uplinks understates the busiest link under static routing, and the
      average over a cycle understates the bursts.
    - ``hysteresis = 0.2``: 20 % either side of a bound (up past 0.12 and 0.48, down
      under 0.08 and 0.32); the two bands stay apart, and it is wider than the
      cycle-to-cycle noise left after smoothing.
    - ``tau_s = 60``: a minute, several sweep cycles and longer than the compute/communicate
      iterations of typical jobs, so the class follows the job's phase mix, not its bursts;
      a lasting change shows after about one ``tau_s`` (63 % of a step).

    Holding a class change for a minimum time is the planner's (``LaneConfig.min_hold_s``,
    read from :attr:`JobClass.since_s`): the class here follows the smoothed intensity.

    Attributes:
        moderate: lowest intensity of class ``moderate`` (fraction, > 0).
        high: lowest intensity of class ``high`` (fraction, > ``moderate``).
        hysteresis: fractional margin around each bound: to move up into a class the
            smoothed intensity must exceed ``bound * (1 + hysteresis)``; to move down out of
            one it must fall below ``bound * (1 - hysteresis)``.  In [0, 1).
        tau_s: EWMA time constant, seconds (0 = no smoothing).

    Raises:
        ValueError: the values are out of range or out of order.
    """

    moderate: float = 0.1
    high: float = 0.4
    hysteresis: float = 0.2
    tau_s: float = 60.0

    def __post_init__(self) -> None:
        for name in ("moderate", "high", "hysteresis", "tau_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{name}: expected a finite number >= 0, got {value!r}")
        if not 0 < self.moderate < self.high:
            raise ValueError(
                f"moderate, high: expected 0 < moderate < high,"
                f" got {self.moderate!r}, {self.high!r}"
            )
        if not self.hysteresis < 1:
            raise ValueError(f"hysteresis: expected a fraction < 1, got {self.hysteresis!r}")

    @property
    def bounds(self) -> tuple[float, ...]:
        """Lower bound of each class above ``low``, in :data:`CLASSES` order."""
        return (self.moderate, self.high)
