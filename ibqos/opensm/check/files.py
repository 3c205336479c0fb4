"""``ibqos check-opensm FILE...``: each file checked as the kind of file it is."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from ibqos.opensm.check.findings import Finding
from ibqos.opensm.check.opensm_conf import check_conf
from ibqos.opensm.check.qos_policy import check_policy
from ibqos.opensm.conf import parse_conf
from ibqos.opensm.partitions import DEFAULT_PARTITIONS_FILE, Partitions

__all__ = [
    "Kind",
    "check_file",
    "detect_kind",
    "partitions_file",
]

Kind = Literal["conf", "policy"]
_SECTION_LINE = re.compile(
    r"^\s*(port-groups|qos-levels|qos-match-rules|qos-ulps|qos-setup)\b", re.M
)


def detect_kind(path: Path | str, text: str) -> Kind:
    """ "policy" for a qos-policy.conf, "conf" for an opensm.conf: by name, else by content
    (a line starting with a policy section keyword)."""
    name = Path(path).name.lower()
    if "policy" in name:
        return "policy"
    if name.startswith("opensm"):
        return "conf"
    return "policy" if _SECTION_LINE.search(text) else "conf"


def partitions_file(paths: Iterable[Path | str]) -> Path:
    """The partition file OpenSM reads: the ``partition_config_file`` of the first
    opensm.conf among *paths* that sets it, else OpenSM's default path."""
    for path in paths:
        try:
            text = Path(path).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if detect_kind(path, text) == "conf":
            value = parse_conf(text).get("partition_config_file", "(null)")
            if value not in ("", "(null)"):
                return Path(value)
    return DEFAULT_PARTITIONS_FILE


def check_file(
    path: Path | str,
    *,
    kind: Kind | None = None,
    data_vls: int | None = None,
    vlarb_low_cap: int | None = None,
    vlarb_high_cap: int | None = None,
    partitions: Partitions | None = None,
) -> list[Finding]:
    """Check one file for ``ibqos check-opensm``; its kind from *kind* or
    :func:`detect_kind`.  An unreadable file is one error finding (no exception)."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        return [Finding(source, None, f"cannot read: {err.strerror or err}")]
    if (kind or detect_kind(path, text)) == "policy":
        return check_policy(text, source, partitions=partitions)
    return check_conf(
        text,
        source,
        data_vls=data_vls,
        vlarb_low_cap=vlarb_low_cap,
        vlarb_high_cap=vlarb_high_cap,
    )
