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

The banner is looked for once per OpenSM start (:class:`BannerWatch`): the whole log when it
is a new file, was truncated, or OpenSM's pid changed, else only what it gained since the last
look; the flavour it told is kept while no newer banner turns up.  A rotated log holds no
banner (OpenSM logs it only when it starts), and reading it alone would take an NVIDIA
OpenSM for upstream and drop its ``qos_sw2sw_*`` keys.
"""

from __future__ import annotations

import logging
import os
import re
import threading
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
    "BannerWatch",
    "Detected",
    "Flavour",
    "banner_watch",
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


def resolve_flavour(
    setting: str, conf: Mapping[str, str], log_path: Path | None, pid: int | None = None
) -> Detected:
    """The flavour for the ``opensm.flavour`` *setting*: itself unless "auto", else
    :func:`detect_flavour` with the version banner of OpenSM's log at *log_path*, as its
    :class:`BannerWatch` keeps it (*pid*: OpenSM's, None: not known)."""
    if setting in FLAVOURS:
        return Detected("nvidia" if setting == "nvidia" else "upstream", "opensm.flavour")
    version = banner_watch(log_path).version(pid) if log_path is not None else None
    return detect_flavour(conf, version, f" in {log_path}")


@dataclass(frozen=True)
class _Looked:
    """How the log was when last looked at: its file, the bytes looked at (up to the end
    of a line) and the :data:`_TAIL` bytes before that, OpenSM's pid, the banner found."""

    key: tuple[int, int]
    scanned: int
    tail: bytes
    pid: int | None
    version: str | None


#: bytes before the part of the log looked at, kept to tell a log rewritten in place
_TAIL = 64


class BannerWatch:
    """OpenSM's last version banner in its log at *path*, looked for once per OpenSM start
    and kept across rotations (the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._looked: _Looked | None = None
        self._lock = threading.Lock()

    def version(self, pid: int | None = None) -> str | None:
        """The last banner OpenSM logged (``OpenSM 3.3.23``); None: none seen yet.

        Args:
            pid: OpenSM's pid now (None: not known); a new one has the whole log read.
        """
        with self._lock:
            before = self._looked
            kept = before.version if before is not None else None
            try:
                fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            except OSError as err:
                log.debug("OpenSM log %s: %s", self.path, err.strerror or err)
                return kept
            try:
                st = os.fstat(fd)
                key, size = (st.st_dev, st.st_ino), st.st_size
                start = 0
                if (
                    before is not None
                    and before.key == key
                    and size >= before.scanned
                    and _tail(fd, before.scanned) == before.tail
                    and (pid is None or before.pid is None or pid == before.pid)
                ):
                    start = before.scanned  # the same log, grown: only what is new
                found, scanned = _last_banner(fd, start, size)
                version = found or kept
                if found and found != kept:
                    log.info("OpenSM's log %s: %s", self.path, found)
                known = pid if pid is not None else (before.pid if before is not None else None)
                self._looked = _Looked(key, scanned, _tail(fd, scanned), known, version)
            except OSError as err:
                log.debug("OpenSM log %s: %s", self.path, err.strerror or err)
                return kept
            finally:
                os.close(fd)
            return version


def _tail(fd: int, end: int) -> bytes:
    return os.pread(fd, min(_TAIL, end), max(0, end - _TAIL))


def _last_banner(fd: int, start: int, end: int) -> tuple[str | None, int]:
    """The last banner in bytes [*start*, *end*) of the file (its last MiB, else its first),
    and where the last whole line there ends (the next look starts there)."""
    tail_from = max(start, end - _LOG_WINDOW)
    text = os.pread(fd, end - tail_from, tail_from)
    newline = text.rfind(b"\n")
    scanned = tail_from + newline + 1 if newline >= 0 else tail_from
    m = list(_VERSION.finditer(text[: scanned - tail_from].decode(errors="replace")))
    if not m and tail_from > start:
        head = os.pread(fd, min(_LOG_WINDOW, tail_from - start), start)
        m = list(_VERSION.finditer(head.decode(errors="replace")))
    return (m[-1].group(0) if m else None), scanned


_watches: dict[Path, BannerWatch] = {}
_watches_lock = threading.Lock()


def banner_watch(path: Path) -> BannerWatch:
    """The :class:`BannerWatch` of the log at *path* (one per path, for the process's life)."""
    with _watches_lock:
        return _watches.setdefault(path, BannerWatch(path))


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
