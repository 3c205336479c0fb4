"""Re-record the ``perfquery --vlxmitcounters`` fixtures in this directory from a real lab.

Run from the repository root:  .venv/bin/python tests/data/perfquery-vl/record_fixtures.py

Same layout as ``tests/data/perfquery`` (``argv.json``, ``stdout.txt``, ``stderr.txt``,
``returncode.txt``, ``expected.json``).  ibsim's PortVLXmitWaitCounters only change through
PerformanceSet, so the leaf's port 2 is given known values first; the last case makes ibsim
drop every PortVLXmitWaitCounters MAD to the leaf (its ``Error`` command), as a PMA that
never answers would.  stderr lines start with ``ibwarn: [pid]``; the pids differ from run to
run.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ibqos.fabric.topology import Port
from ibqos.fabric.xgft import build_xgft, parse_xgft
from ibqos.lab.lab import Lab

HERE = Path(__file__).resolve().parent
HEADER = re.compile(r"^# (PortVLXmitWaitCounters counters): Lid (\d+) port (\d+)$")
FIELD = re.compile(r"^([A-Za-z0-9_]+):\.*(0x[0-9a-fA-F]+|[0-9]+)$")
#: what the leaf's port 2 is given before the reads: VL 3 some ticks, VL 7 saturated
VALUES = {3: 77, 7: 65535}


def naive_blocks(stdout: str) -> list[dict[str, object]]:
    blocks: list[dict[str, object]] = []
    for line in stdout.splitlines():
        if m := HEADER.match(line):
            blocks.append({"title": m[1], "lid": int(m[2]), "port": int(m[3]), "fields": {}})
        elif (m := FIELD.match(line)) and blocks:
            fields = blocks[-1]["fields"]
            assert isinstance(fields, dict)
            fields[m[1]] = int(m[2], 0)
    return blocks


def save(name: str, argv: list[str], proc: subprocess.CompletedProcess[str]) -> None:
    case = HERE / name
    case.mkdir(exist_ok=True)
    (case / "argv.json").write_text(json.dumps(argv) + "\n")
    (case / "stdout.txt").write_text(proc.stdout)
    (case / "stderr.txt").write_text(proc.stderr)
    (case / "returncode.txt").write_text(f"{proc.returncode}\n")
    expected = {"returncode": proc.returncode, "blocks": naive_blocks(proc.stdout)}
    (case / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
    print(f"{name}: exit {proc.returncode}, {len(expected['blocks'])} blocks", file=sys.stderr)


def main() -> None:
    root = Path(tempfile.mkdtemp(prefix="ibqos-record-vl-"))
    topo = build_xgft(parse_xgft("2;4,2;1,2"))
    try:
        with Lab.create(
            "recvl", topo, root=root / "labs", opensm_options={"sweep_interval": "0"}
        ) as lab:
            lab.start()
            assert lab.ibsim is not None
            levels = lab.topo.switch_levels()
            leaf = next(s for s in lab.topo.switches() if levels[s.id] == 1)
            leaf_lid = str(lab.topo.lids[Port(leaf.id, 0)])
            ca_port = next(iter(lab.topo.ports(lab.topo.cas()[0].id)))
            ca_lid = str(lab.topo.lids[ca_port])
            field = "PortVLXmitWaitCounters.PortVLXmitWaitCounters"
            errors = lab.ibsim.command(
                [f'PerformanceSet "{leaf.id}"[2] {field}{vl}={v}' for vl, v in VALUES.items()]
            )
            assert not errors, errors
            vl = ["perfquery", "-e", "--vlxmitcounters"]
            cases = {
                "vl-switch-port": [*vl, leaf_lid, "2"],
                # perfquery reads only the first port of a list for this attribute
                "vl-switch-port-list": [*vl, leaf_lid, "1,2,3"],
                "vl-ca": [*vl, ca_lid, "1"],
                "vl-switch-bad-port": [*vl, leaf_lid, "40"],
            }
            for name, argv in cases.items():
                save(name, argv, lab.run(argv, timeout=60))
            errors = lab.ibsim.command([f'Error "{leaf.id}"[0] 100 0x1c'])
            assert not errors, errors
            argv = [*vl, leaf_lid, "2"]
            save("vl-no-reply", argv, lab.run(argv, timeout=60))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
