"""Host names in NodeDescriptions: the link between a scheduler's nodes and fabric ports.

Kept apart from :mod:`ibqos.attribute.jobmap` so the configuration can check a pattern without
importing the fabric model.

A NodeDescription the adapter's firmware set (nobody ran ``rdma-ndd`` or wrote
``/sys/class/infiniband/*/node_desc`` on that host) names no host: ``MT4129 ConnectX7
Mellanox Technologies`` would otherwise make a host ``MT4129`` of every such adapter.
:func:`is_vendor_default` recognises them; they give no host name, whatever the pattern.
"""

from __future__ import annotations

import re

from ibqos.errors import ConfigError

DEFAULT_HOST_PATTERN = r"^(\S+)"
"""Host name = the first word of a CA's NodeDescription (``cn0001 mlx5_0`` -> ``cn0001``)."""

#: NodeDescriptions set by firmware, not by a host: any description holding the vendor
#: words "Mellanox Technologies" (``MT4129 ConnectX7 Mellanox Technologies``, ``MT23108
#: InfiniHost Mellanox Technologies``, a switch's ``Quantum Mellanox Technologies``), a SHARP
#: aggregation node (``Mellanox Technologies Aggregation Node``), or a device name alone
#: (``MT4129 ConnectX7``, ``ConnectX7``).  A host's own description starts with its name
#: (``cn001 mlx5_0``) and holds none of these.
_VENDOR_DEFAULT = re.compile(
    r"\bMellanox\s+Technologies\b|\bAggregation\s+Node\b"
    r"|^\s*(?:MT\d{4,5}\s+)?(?:ConnectX|BlueField|InfiniHost|Connect-IB)(?:-?\d+\w*)?\s*$",
    re.IGNORECASE,
)

LAB_SM_HOSTNAME = "opensm01"
"""The host ``ibqos lab`` runs OpenSM on: a CA of the fabric that runs no jobs."""


def is_vendor_default(desc: str) -> bool:
    """True if a NodeDescription is one the adapter's firmware set, naming no host."""
    return _VENDOR_DEFAULT.search(desc) is not None


class HostMatcher:
    """Finds the host name in a CA's NodeDescription.

    Args:
        pattern: a regular expression with exactly one capturing group, the host name.
            It is searched for anywhere in the description (anchor it with ``^``).  Examples:
            ``^(\\S+)`` (the default, first word), ``^node-(\\S+)`` (``node-cn01 HCA-1`` ->
            ``cn01``).

    Raises:
        ConfigError: the pattern is not a valid regular expression or has not exactly one
            group; the message names the pattern.
    """

    def __init__(self, pattern: str = DEFAULT_HOST_PATTERN) -> None:
        try:
            self._regex = re.compile(pattern)
        except re.error as err:
            raise ConfigError(f"host pattern '{pattern}': invalid regular expression") from err
        if self._regex.groups != 1:
            raise ConfigError(
                f"host pattern '{pattern}': expected exactly one group (...) around the host "
                f"name, got {self._regex.groups}"
            )
        self.pattern = pattern

    def __repr__(self) -> str:
        return f"HostMatcher({self.pattern!r})"

    def hostname(self, desc: str) -> str | None:
        """The host name in a NodeDescription, or None if the pattern does not match or
        the description is a vendor default (:func:`is_vendor_default`)."""
        if is_vendor_default(desc):
            return None
        m = self._regex.search(desc)
        return (m.group(1) or None) if m else None
