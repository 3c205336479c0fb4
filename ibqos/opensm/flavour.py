"""Which OpenSM runs: the upstream one (linux-rdma/opensm 3.3.x) or NVIDIA's (5.x).

Both read the same opensm.conf syntax and the same ``qos_<type>_*`` keys, but NVIDIA's
OpenSM (MLNX_OFED, DOCA, UFM) knows more options, among them a sixth QoS port type:
``qos_sw2sw_*`` for switch external ports whose peer is a switch.  In a fat tree those
are the uplinks where jobs contend, so on NVIDIA's OpenSM ibqos writes its tables to
``qos_sw2sw_*`` as well as to ``qos_swe_*`` (:func:`managed_types`); upstream OpenSM has
no such keys (it logs ``Unrecognized token`` and skips them), so they are never written
there.

The flavour is told, in this order, by:

1. OpenSM's version banner, ``OpenSM 3.3.23`` or ``OpenSM 5.24.0.MLNX20250722.185f9e32``
   (``OSM_VERSION``), which OpenSM writes to its log when it starts and prints for
   ``opensm --version``: ``MLNX`` in it, or a major version of 4 or more, is NVIDIA's;
2. the keys of opensm.conf: a key only NVIDIA's OpenSM knows (:data:`NVIDIA_MARKERS`,
   present in every file its ``--create-config`` writes) means NVIDIA's;
3. otherwise upstream, the safe guess: its keys are a subset of NVIDIA's.

``opensm.flavour`` in ibqos.yaml overrides the detection.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

log = logging.getLogger(__name__)

__all__ = [
    "FLAVOURS",
    "NVIDIA_MARKERS",
    "NVIDIA_QOS_KEYS",
    "UPSTREAM_QOS_KEYS",
    "Detected",
    "Flavour",
    "detect_flavour",
    "log_version",
    "managed_types",
    "resolve_flavour",
    "version_flavour",
]

Flavour = Literal["upstream", "nvidia"]
FLAVOURS: tuple[Flavour, ...] = ("upstream", "nvidia")
_FIELDS = ("max_vls", "high_limit", "vlarb_high", "vlarb_low", "sl2vl")
#: the ``qos*`` options of upstream OpenSM 3.3.23 (``opt_tbl`` in osm_subnet.c)
UPSTREAM_QOS_KEYS = frozenset(
    ["qos", "qos_policy_file"]
    + [f"qos{t}_{f}" for t in ("", "_ca", "_sw0", "_swe", "_rtr") for f in _FIELDS]
)
#: the ``qos*`` options NVIDIA's OpenSM 5.x adds (its ``--create-config`` template)
NVIDIA_QOS_KEYS = frozenset(["qos_config_vl_enabled"] + [f"qos_sw2sw_{f}" for f in _FIELDS])
#: options only NVIDIA's OpenSM knows, each written by its ``--create-config``: one in
#: opensm.conf tells the flavour
NVIDIA_MARKERS = NVIDIA_QOS_KEYS | frozenset(
    [
        "enhanced_qos_policy_file",
        "enhanced_qos_vport0_unlimit_default_rl",
        "max_op_vls_ca",
        "max_op_vls_sw",
        "max_op_vls_rtr",
    ]
)
#: OSM_VERSION as OpenSM prints and logs it
_VERSION = re.compile(r"\bOpenSM (\d+)\.(\d+)\.(\d+)([.\w-]*)")
#: bytes of the log read from its end, then from its start (the banner is logged once per
#: start, and OpenSM appends to its log by default)
_LOG_WINDOW = 1 << 20


@dataclass(frozen=True)
class Detected:
    """The OpenSM flavour, and how it was told (for messages and logs)."""

    flavour: Flavour
    reason: str

    def __str__(self) -> str:
        return f"{self.flavour} ({self.reason})"


def version_flavour(text: str, where: str = "") -> Detected | None:
    """The flavour from the last OpenSM version banner in *text* (a log, or the output of
    ``opensm --version``; *where* says which, for the reason); None without one."""
    matches = list(_VERSION.finditer(text))
    if not matches:
        return None
    m = matches[-1]
    nvidia = int(m.group(1)) >= 4 or "MLNX" in m.group(4).upper()
    return Detected("nvidia" if nvidia else "upstream", f"{m.group(0)!r}{where}")


def log_version(path: Path) -> str | None:
    """The last OpenSM version banner in the log at *path*: its last MiB, else its first;
    None when the log cannot be read or has none."""
    try:
        with path.open("rb") as fh:
            size = fh.seek(0, 2)
            fh.seek(max(0, size - _LOG_WINDOW))
            tail = fh.read().decode(errors="replace")
            m = list(_VERSION.finditer(tail))
            if not m and size > _LOG_WINDOW:
                fh.seek(0)
                m = list(_VERSION.finditer(fh.read(_LOG_WINDOW).decode(errors="replace")))
    except OSError as err:
        log.debug("OpenSM log %s: %s", path, err.strerror or err)
        return None
    return m[-1].group(0) if m else None


def detect_flavour(
    conf: Mapping[str, str], version_text: str | None = None, where: str = ""
) -> Detected:
    """The flavour of the OpenSM that reads *conf* (parsed opensm.conf), from
    *version_text* (found *where*) when it holds a version banner, else from the keys of
    *conf*."""
    if version_text:
        found = version_flavour(version_text, where)
        if found is not None:
            return found
    marker = next((key for key in conf if key in NVIDIA_MARKERS), None)
    if marker is not None:
        return Detected("nvidia", f"opensm.conf sets {marker}, an option of NVIDIA's OpenSM")
    return Detected("upstream", "no OpenSM version found, no NVIDIA-only option in opensm.conf")


def resolve_flavour(setting: str, conf: Mapping[str, str], log_path: Path | None) -> Detected:
    """The flavour for the ``opensm.flavour`` *setting*: itself unless "auto", else
    :func:`detect_flavour` with the version banner of OpenSM's log at *log_path*."""
    if setting in FLAVOURS:
        return Detected("nvidia" if setting == "nvidia" else "upstream", "opensm.flavour")
    version = log_version(log_path) if log_path is not None else None
    return detect_flavour(conf, version, f" in {log_path}")


def managed_types(port_types: Iterable[str], flavour: Flavour) -> tuple[str, ...]:
    """The port types whose ``qos_<type>_*`` keys ibqos writes, from ``opensm.port_types``.

    On NVIDIA's OpenSM, managing ``swe`` manages ``sw2sw`` too: the switch-to-switch ports
    are switch external ports that NVIDIA's OpenSM configures from their own keys, and a
    plan that left them to the admin's (or OpenSM's default) tables would not reach the
    links jobs share.  Upstream OpenSM has no ``sw2sw`` keys: that type is dropped.
    """
    types = list(dict.fromkeys(port_types))
    if flavour == "nvidia" and "swe" in types and "sw2sw" not in types:
        types.append("sw2sw")
    if flavour == "upstream":
        types = [t for t in types if t != "sw2sw"]
    return tuple(types)
