"""Errors raised by ibqos.

Every error names the input it is about (a file, a key path, a lab, a node) so that
the CLI can print one line that tells an admin what to fix.  The core raises these;
only :mod:`ibqos.cli` turns them into messages and exit codes.
"""

from __future__ import annotations


class IbqosError(Exception):
    """Root of all errors ibqos reports to users.

    Attributes:
        category: short word printed by the CLI before the message ("config", "lab", ...).
    """

    category = "error"

    def __str__(self) -> str:
        msg = super().__str__()
        cause = self.__cause__
        # an OSError's own text repeats the file name; its strerror is what adds news
        text = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(cause or "")
        if text and text not in msg:
            msg = f"{msg}: {text}"
        return " ".join(msg.split())  # one line, whatever the cause printed


class ConfigError(IbqosError):
    """An ibqos configuration file is missing, unreadable or invalid."""

    category = "config"


class TopologyError(IbqosError):
    """A topology (XGFT spec or ibnetdiscover file) cannot be parsed or used."""

    category = "topology"


class JobsError(IbqosError):
    """A job file is invalid or names hosts the fabric does not have."""

    category = "jobs"


class LabError(IbqosError):
    """The simulated fabric (ibsim + OpenSM) could not be started, reached or stopped."""

    category = "lab"


class CollectError(IbqosError):
    """A counter backend cannot work at all: no MAD device, no perfquery, bad recording."""

    category = "collect"


class MadError(IbqosError):
    """A MAD reply is truncated, garbled or for another attribute."""

    category = "mad"


class PlanError(IbqosError):
    """The lane configuration cannot be planned on this fabric (bad or conflicting values)."""

    category = "plan"


class RenderError(IbqosError):
    """An OpenSM file cannot be rendered, or a rendered one fails ibqos's own checker: bad
    values from the plan, or an admin's file whose ibqos block is damaged or whose own part
    does not parse.  Nothing is written."""

    category = "render"


class TraceError(IbqosError):
    """A communication trace (ibqos CSV, OTF2) or a recorded history cannot be read."""

    category = "trace"


class ProfileError(IbqosError):
    """A job profile file is invalid, or the profile store cannot be read or written."""

    category = "profile"
