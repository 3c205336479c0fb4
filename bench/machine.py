"""What a benchmark's numbers were measured on: the machine, and a hash of the ibqos
sources they measure."""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

import ibqos


def code_hash(files: Sequence[str]) -> str:
    """A short hash of *files* (paths inside the ibqos package), to tell runs (and mid-run
    edits) apart."""
    root = Path(ibqos.__file__).parent
    digest = hashlib.sha256()
    for name in files:
        digest.update((root / name).read_bytes())
    return digest.hexdigest()[:12]


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("" if it says none or cannot be read)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return ""
    for line in lines:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return ""


def machine() -> str:
    """What the numbers were measured on, in one line: CPUs, Python, numpy and pandas."""
    return (
        f"{os.cpu_count()} CPUs ({cpu_model() or '?'}), Python {platform.python_version()},"
        f" numpy {np.__version__}, pandas {pd.__version__}"
    )


def machine_info(packages: Sequence[str]) -> dict[str, str]:
    """What the numbers were measured on, field by field: CPUs, the installed version of
    each Debian package of *packages* ("?" if none), the Unix datagram queue length and
    Python."""
    info = {"nproc": str(os.cpu_count()), "cpu": cpu_model()}
    for pkg in packages:
        out = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Version}", pkg],
            capture_output=True,
            text=True,
            check=False,
        )
        info[pkg] = out.stdout.strip() or "?"
    info["max_dgram_qlen"] = Path("/proc/sys/net/unix/max_dgram_qlen").read_text().strip()
    info["python"] = sys.version.split()[0]
    return info
