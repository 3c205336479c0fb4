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
    #: the message lists problems one per line (a config or job file's every problem)
    multiline = False

    def __str__(self) -> str:
        msg = super().__str__()
        cause = self.__cause__
        # an OSError's own text repeats the file name; its strerror is what adds news
        text = cause.strerror if isinstance(cause, OSError) and cause.strerror else str(cause or "")
        if text and text not in msg:
            msg = f"{msg}: {' '.join(text.split())}"
        lines = msg.splitlines() if self.multiline else [msg]
        return "\n".join(" ".join(line.split()) for line in lines)  # whatever the cause printed


class StopRequested(BaseException):
    """The process was asked to stop (SIGTERM) while it waited on something outside it.

    Raised by the waiter a daemon sets (:func:`ibqos.tools.set_waiter`) from inside a wait
    on a tool or on MAD replies, after the tool was ended.  It is not an
    :class:`IbqosError`, and not even an :class:`Exception` (like KeyboardInterrupt): the
    handlers that turn a failed cycle, a failed re-read of the topology or a failed job poll
    into a log line must not swallow it, so it unwinds the whole cycle up to the loop that
    set the waiter, which then stops.  Nothing else raises or catches it.
    """


class ConfigError(IbqosError):
    """An ibqos configuration file is missing, unreadable or invalid."""

    category = "config"
    multiline = True


class TopologyError(IbqosError):
    """A topology (XGFT spec or ibnetdiscover file) cannot be parsed or used."""

    category = "topology"


class FabricChoiceError(TopologyError):
    """A command that takes its fabric as ``--xgft`` or ``--topology`` got neither or both
    (:func:`ibqos.fabric.given.given_fabric`).

    Attributes:
        category: as the command's other input errors say it (``topology``, or
            ``simulate`` for ``ibqos simulate``).
    """

    def __init__(self, message: str, *, category: str = TopologyError.category) -> None:
        super().__init__(message)
        self.category = category


class JobsError(IbqosError):
    """A job file is invalid or names hosts the fabric does not have."""

    category = "jobs"
    multiline = True


class LabError(IbqosError):
    """The simulated fabric (ibsim + OpenSM) could not be started, reached or stopped."""

    category = "lab"


class CollectError(IbqosError):
    """A counter backend cannot work at all: no MAD device, no perfquery, bad recording."""

    category = "collect"


class RecordingExhausted(CollectError):
    """A replay reached the end of its recording: the normal end of a replay."""


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
    multiline = True


class StateError(IbqosError):
    """The state file cannot be read or written."""

    category = "state"


class SimError(IbqosError):
    """A simulation input that cannot be run (names the input and what is wrong)."""

    category = "simulate"


class ApplyError(IbqosError):
    """OpenSM could not be signalled, or its files could not be written or restored.

    Attributes:
        maybe_signalled: the signal's command was cut short (killed, timed out) after it
            started, so OpenSM may have been told to re-read all the same.
    """

    category = "apply"

    def __init__(self, message: str, *, maybe_signalled: bool = False) -> None:
        super().__init__(message)
        self.maybe_signalled = maybe_signalled


class ApplyStopped(ApplyError):
    """Nothing was applied because the daemon is stopping (SIGTERM came before the apply
    began): the end of a cycle, not a failure of it."""


class ApplyWriteError(ApplyError):
    """OpenSM's files, or ibqos's backups of them, could not be written (disk full, a
    directory that is not writable): nothing changed."""


class OpenSMNotRunning(ApplyError):
    """OpenSM is not running, or the pid ibqos would signal is not OpenSM's: nothing was
    written, nothing signalled."""


class ReloadDeferred(ApplyError):
    """The reload budget is spent: nothing written until it refills.

    Attributes:
        retry_in_s: seconds until the budget holds enough for an apply and its rollback.
    """

    def __init__(self, message: str, *, retry_in_s: float) -> None:
        super().__init__(message)
        self.retry_in_s = retry_in_s


class OpenSMHeld(ApplyError):
    """OpenSM rejected its own files as they were before ibqos's change: nothing is
    written or signalled until those files change on disk."""


class SlurmError(IbqosError):
    """Slurm cannot be read: squeue fails, slurmctld is unreachable, or the output is not
    what this release of squeue prints."""

    category = "slurm"


class PortInfoError(IbqosError):
    """PortInfo could not be read: smpquery is missing, failed, or no sampled port answered."""

    category = "portinfo"


class ExporterError(IbqosError):
    """The exporter could not start (address in use, bad certificate)."""

    category = "metrics"


class AgentLockError(IbqosError):
    """Another agent runs on the state directory, or the lock file cannot be used."""

    category = "agent"


class InstallError(IbqosError):
    """The files cannot be found or installed, or an option is unusable."""

    category = "install"


class HandoffError(IbqosError):
    """A job's SL cannot be had: ibqos not running, the job unknown, no answer in time."""

    category = "job-sl"


class ExtraMissing(IbqosError):
    """A library of the ``characterize`` extra is not installed: the agent needs neither
    matplotlib nor otf2, ``ibqos characterize`` does for its plots and OTF2 traces.  The
    message names the library and ``pip install 'ibqos[characterize]'``."""

    category = "characterize"


class PrometheusQueryError(LabError):
    """The Prometheus HTTP API answered ``"status": "error"`` (or not at all).

    Attributes:
        expr: the query (or endpoint) that failed.
        error_type: Prometheus's ``errorType`` ("bad_data", "execution", ...), or "".
        error: Prometheus's error text.
    """

    def __init__(self, expr: str, error_type: str, error: str) -> None:
        super().__init__(f"prometheus: {expr!r}: {error_type + ': ' if error_type else ''}{error}")
        self.expr = expr
        self.error_type = error_type
        self.error = error
