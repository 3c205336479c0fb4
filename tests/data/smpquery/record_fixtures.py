"""Record real ``smpquery portinfo`` outputs from a fresh lab into this directory.

Run from the project root: ``.venv/bin/python tests/data/smpquery/record_fixtures.py``.
It starts its own lab (XGFT ``2;4,2;1,2``, OpenSM with ``sweep_interval 0``) in a
temporary directory, runs each case from the OpenSM host, writes
``<case>/{argv.json,stdout.txt,stderr.txt,returncode.txt}`` and removes the lab.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from ibqos.fabric.topology import Port
from ibqos.fabric.xgft import build_xgft, parse_xgft
from ibqos.lab.lab import Lab

HERE = Path(__file__).resolve().parent


def cases(lab: Lab) -> dict[str, list[str]]:
    topo = lab.topo
    levels = topo.switch_levels()
    leaves = sorted(s for s, lvl in levels.items() if lvl == 1)
    spine = min(s for s, lvl in levels.items() if lvl == 2)
    cas = sorted(c.id for c in topo.cas() if c.id != lab.sm_node)
    # a leaf with a port nothing is plugged into (the SM host uses one leaf's last port)
    gap = next(
        (s, n)
        for s in leaves
        for n in range(1, topo.nodes[s].nports + 1)
        if topo.peer(Port(s, n)) is None
    )

    def lid(node: str, num: int = 0) -> str:
        return str(topo.lids[Port(node, num)])

    up = next(p.num for p in topo.ports(leaves[0]) if topo.peer(p).node in levels)
    return {
        "ca-sm": ["smpquery", "portinfo", lid(lab.sm_node, 1), "1"],
        "ca": ["smpquery", "portinfo", lid(cas[0], 1), "1"],
        "leaf-down": ["smpquery", "portinfo", lid(leaves[0]), "1"],
        "leaf-up": ["smpquery", "portinfo", lid(leaves[0]), str(up)],
        "spine": ["smpquery", "portinfo", lid(spine), "1"],
        "switch-port0": ["smpquery", "portinfo", lid(leaves[0]), "0"],
        "switch-port-down": ["smpquery", "portinfo", lid(gap[0]), str(gap[1])],
        "bad-port": ["smpquery", "portinfo", lid(leaves[0]), "40"],
        "bad-lid": ["smpquery", "portinfo", "999", "1"],
    }


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="ibqos-smpquery-") as tmp:
        topo = build_xgft(parse_xgft("2;4,2;1,2"))
        with Lab.create("rec", topo, root=Path(tmp), opensm_options={"sweep_interval": "0"}) as lab:
            lab.start()
            for name, argv in cases(lab).items():
                result = lab.run(argv, timeout=30)
                out = HERE / name
                out.mkdir(exist_ok=True)
                (out / "argv.json").write_text(json.dumps(argv) + "\n")
                (out / "stdout.txt").write_text(result.stdout)
                (out / "stderr.txt").write_text(result.stderr)
                (out / "returncode.txt").write_text(f"{result.returncode}\n")
                print(f"{name}: {' '.join(argv)} -> {result.returncode}")


if __name__ == "__main__":
    main()
