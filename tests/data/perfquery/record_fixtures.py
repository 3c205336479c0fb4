"""Re-record the perfquery fixtures in this directory from a real lab (ibsim + OpenSM).

Run from the repository root:  .venv/bin/python tests/data/perfquery/record_fixtures.py

Each case directory holds what one real perfquery run printed: ``argv.json`` (the command,
with the lab's LIDs), ``stdout.txt``, ``stderr.txt``, ``returncode.txt``, and
``expected.json``: the counter blocks as a plain regex reads them (header fields and
``Name:....value`` lines), which the unit tests compare with ibqos's parser.  stderr lines
start with ``ibwarn: [pid]``; the pids differ from run to run.
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
JOBS = """jobs:
  - {id: "1", nodes: "cn[0001-0006]", pattern: all-to-all,
     rate_bytes_per_s: 2.0e9, duty: 0.5, period_s: 0.1}
"""
HEADER = re.compile(r"^# (Port (?:extended )?counters): Lid (\d+) port (\d+) \((.*)\)$")
HOLD_SLOT = (
    "import ctypes, time; lib = ctypes.CDLL('libibumad.so.3'); lib.umad_init(); "
    "print(lib.umad_open_port(b'ibsim0', 1), flush=True); time.sleep(3)"
)
FIELD = re.compile(r"^([A-Za-z0-9_]+):\.*(0x[0-9a-fA-F]+|[0-9]+)$")


def naive_blocks(stdout: str) -> list[dict[str, object]]:
    blocks: list[dict[str, object]] = []
    for line in stdout.splitlines():
        if m := HEADER.match(line):
            blocks.append(
                {"title": m[1], "lid": int(m[2]), "port": int(m[3]), "caps": m[4], "fields": {}}
            )
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
    root = Path(tempfile.mkdtemp(prefix="ibqos-record-"))
    jobs = root / "jobs.yaml"
    jobs.write_text(JOBS)
    topo = build_xgft(parse_xgft("2;4,2;1,2"))
    try:
        with Lab.create(
            "rec", topo, root=root / "labs", jobs=jobs, opensm_options={"sweep_interval": "0"}
        ) as lab:
            lab.start()
            lab.tick(1.0)
            levels = lab.topo.switch_levels()
            leaf = next(s for s in lab.topo.switches() if levels[s.id] == 1)
            spine = next(s for s in lab.topo.switches() if levels[s.id] == 2)
            leaf_lid = lab.topo.lids[Port(leaf.id, 0)]
            spine_lid = lab.topo.lids[Port(spine.id, 0)]
            leaf_ports = ",".join(str(p.num) for p in lab.topo.ports(leaf.id))
            spine_ports = ",".join(str(p.num) for p in lab.topo.ports(spine.id))
            ca_port = next(lab.topo.ports(lab.topo.cas()[0].id))
            ca_lid = lab.topo.lids[ca_port]
            cases = {
                "switch-x-ports": ["perfquery", "-x", str(leaf_lid), leaf_ports],
                "switch-ports": ["perfquery", str(leaf_lid), leaf_ports],
                "switch-x-loop-all": ["perfquery", "-x", "-l", str(spine_lid), "255"],
                "switch-x-one-port": ["perfquery", "-x", str(spine_lid), "2"],
                "spine-x-ports": ["perfquery", "-x", str(spine_lid), spine_ports],
                "spine-ports": ["perfquery", str(spine_lid), spine_ports],
                "ca-x": ["perfquery", "-x", str(ca_lid), "1"],
                "ca": ["perfquery", str(ca_lid), "1"],
                "switch-x-bad-port": ["perfquery", "-x", str(spine_lid), "1,40,2"],
                "bad-lid": ["perfquery", "-x", "999", "1"],
                "ca-x-all-ports": ["perfquery", "-x", "-l", str(ca_lid), "255"],
            }
            for name, argv in cases.items():
                save(name, argv, lab.run(argv, timeout=60))
            # ibsim serves at most 10 clients (OpenSM is one): fill the other slots with
            # processes that open the simulated umad port and wait, then run perfquery.
            holders = [
                subprocess.Popen(
                    [sys.executable, "-c", HOLD_SLOT],
                    env=lab.env(),
                    cwd=lab.paths.run,
                    stdout=subprocess.PIPE,
                    text=True,
                )
                for _ in range(9)
            ]
            for proc in holders:
                assert proc.stdout is not None and proc.stdout.readline()  # connected
            argv = ["perfquery", "-x", str(ca_lid), "1"]
            save("ibsim-full", argv, lab.run(argv, timeout=60))
            for proc in holders:
                proc.communicate(timeout=60)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
