"""OpenSM's files: render opensm.conf QoS keys and qos-policy.conf, check them, apply them
safely, and verify that OpenSM serves them.

- :mod:`ibqos.opensm.conf`: the QoS keys ibqos owns in the admin's opensm.conf;
- :mod:`ibqos.opensm.flavour`: which OpenSM reads them (upstream 3.3.x or NVIDIA's 5.x,
  whose switch-to-switch ports have keys of their own);
- :mod:`ibqos.opensm.policy`: ibqos's block of qos-policy.conf (a port-group per job, a
  qos-level per SL, match rules), and a parser that mirrors OpenSM's;
- :mod:`ibqos.opensm.check`: the checker both files pass before anything is written
  (``ibqos check-opensm FILE...``);
- :mod:`ibqos.opensm.apply`: the one path that writes them (lock, backup, atomic write,
  signal, log check, rollback, hold), with :mod:`~ibqos.opensm.outcome` (how an apply
  ended), :mod:`~ibqos.opensm.signallers` (how OpenSM is signalled and whether it runs),
  :mod:`~ibqos.opensm.pidcheck`, :mod:`~ibqos.opensm.osmlog` (what its log says),
  :mod:`~ibqos.opensm.budget` (the reload budget), :mod:`~ibqos.opensm.hold` and
  :mod:`~ibqos.opensm.writers` (another writer of the files);
- :mod:`ibqos.opensm.verify`: SA queries that show OpenSM serves what was written;
- :mod:`ibqos.opensm.observe`: observe mode, which keeps what would be written beside the
  state instead.

conf, policy and check only render and check text; apply alone writes OpenSM's files and
signals OpenSM.
"""

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ibqos.errors import RenderError
    from ibqos.opensm.apply import Applier, make_signaller, read_file
    from ibqos.opensm.check import Finding, check_conf, check_file, check_policy, detect_kind
    from ibqos.opensm.conf import (
        PORT_TYPES,
        managed_keys,
        managed_values,
        parse_conf,
        render_conf,
        routing_engine,
    )
    from ibqos.opensm.observe import Observer, file_diffs
    from ibqos.opensm.outcome import ApplyOutcome, ApplyResult
    from ibqos.opensm.policy import Policy, PolicyJob, job_sls, parse_policy, render_policy
    from ibqos.opensm.signallers import Signaller
    from ibqos.opensm.verify import Expected, PathCheck, check_until, expected_after
else:
    from ibqos.lazy import attach

    __getattr__, __dir__ = attach(
        __name__,
        {
            "ibqos.errors": ("RenderError",),
            ".apply": ("Applier", "make_signaller", "read_file"),
            ".check": ("Finding", "check_conf", "check_file", "check_policy", "detect_kind"),
            ".conf": (
                "PORT_TYPES",
                "managed_keys",
                "managed_values",
                "parse_conf",
                "render_conf",
                "routing_engine",
            ),
            ".observe": ("Observer", "file_diffs"),
            ".outcome": ("ApplyOutcome", "ApplyResult"),
            ".policy": ("Policy", "PolicyJob", "job_sls", "parse_policy", "render_policy"),
            ".signallers": ("Signaller",),
            ".verify": ("Expected", "PathCheck", "check_until", "expected_after"),
        },
    )

__all__ = [
    "PORT_TYPES",
    "Applier",
    "ApplyOutcome",
    "ApplyResult",
    "Expected",
    "Finding",
    "Observer",
    "PathCheck",
    "Policy",
    "PolicyJob",
    "RenderError",
    "Signaller",
    "check_conf",
    "check_file",
    "check_policy",
    "check_until",
    "detect_kind",
    "expected_after",
    "file_diffs",
    "job_sls",
    "make_signaller",
    "managed_keys",
    "managed_values",
    "parse_conf",
    "parse_policy",
    "read_file",
    "render_conf",
    "render_policy",
    "routing_engine",
]
