"""OpenSM's files: render opensm.conf QoS keys and qos-policy.conf, and check them.

- :mod:`ibqos.opensm.conf`: the QoS keys ibqos owns in the admin's opensm.conf;
- :mod:`ibqos.opensm.policy`: ibqos's block of qos-policy.conf (a port-group per job, a
  qos-level per SL, match rules), and a parser that mirrors OpenSM's;
- :mod:`ibqos.opensm.check`: the checker both files pass before anything is written
  (``ibqos check-opensm FILE...``).

Nothing here writes files or signals OpenSM: these modules render and check text.
"""

from ibqos.opensm.check import Finding, check_conf, check_file, check_policy
from ibqos.opensm.conf import PORT_TYPES, RenderError, managed_values, parse_conf, render_conf
from ibqos.opensm.policy import PolicyJob, parse_policy, render_policy

__all__ = [
    "PORT_TYPES",
    "Finding",
    "PolicyJob",
    "RenderError",
    "check_conf",
    "check_file",
    "check_policy",
    "managed_values",
    "parse_conf",
    "parse_policy",
    "render_conf",
    "render_policy",
]
