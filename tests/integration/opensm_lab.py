"""OpenSM in a lab as the policy tests watch it: SIGHUP and the heavy sweep it forces, the
PathRecord SLs the SA serves, the ERR lines of its log."""

from __future__ import annotations

import os
import re
import signal
import time

from ibqos.fabric.model import Fabric, FabricPort

SWEEP_TIMEOUT_S = 30.0
JOB_HOSTS = {"A": ("cn0001", "cn0005"), "B": ("cn0002", "cn0006")}  # across both leaves


def host_ports(fabric: Fabric) -> dict[str, FabricPort]:
    """The CA ports of *fabric* by host name."""
    return {fp.node_desc.split()[0]: fp for fp in fabric.ports.values() if not fp.is_switch}


def sighup(lab) -> tuple[list[str], list[str], float]:
    """SIGHUP the lab's OpenSM and wait for the heavy sweep it forces (the next
    ``SUBNET UP``).  Returns the log lines and stdout lines written meanwhile, and the
    seconds from the signal to the end of the sweep."""
    files = lab.paths.opensm
    log = files.log.read_text(errors="replace")
    out_offset = files.stdout.stat().st_size
    pid = int(files.pid.read_text())
    assert lab.opensm is not None and lab.opensm.proc.pid == pid  # ours, and only ours
    t0 = time.monotonic()
    os.kill(pid, signal.SIGHUP)
    while True:
        text = files.log.read_text(errors="replace")
        if text.count("SUBNET UP") > log.count("SUBNET UP"):
            seconds = time.monotonic() - t0
            break
        assert time.monotonic() - t0 < SWEEP_TIMEOUT_S, "no heavy sweep after SIGHUP"
        time.sleep(0.02)
    with files.stdout.open("rb") as fh:
        fh.seek(out_offset)
        stdout = fh.read().decode(errors="replace")
    return text[len(log) :].splitlines(), stdout.splitlines(), seconds


def path_sl(lab, src: FabricPort, dst: FabricPort) -> int:
    """The SL of the PathRecord the SA answers from *src* to *dst* (docs/design.md §6.5)."""
    out = lab.run(["saquery", "PR", "--slid", str(src.lid), "--dlid", str(dst.lid)], check=True)
    m = re.search(r"^\s*sl\.+(0x[0-9a-fA-F]+)\s*$", out.stdout, re.M)
    assert m is not None, out.stdout
    return int(m.group(1), 16)


def errors(lines: list[str]) -> list[str]:
    return [line for line in lines if " ERR " in line]
