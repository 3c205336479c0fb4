"""Re-record the forwarding-table fixtures in this directory from a real lab (ibsim + OpenSM).

Run from the repository root:  .venv/bin/python tests/data/lfts/record_fixtures.py

For an XGFT ``2;4,2;1,2`` lab it keeps OpenSM's ``opensm-lfts.dump``, the fabric as
``ibnetdiscover`` found it (with LIDs), and per switch what ``ibroute -n LID`` printed
(``ibroute-n/<LID>.txt``), plus one ``ibroute LID`` with destination names
(``ibroute-names.txt``) and a failed run (``ibroute-bad-lid/``: a LID that is no switch).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from ibqos.fabric.topology import Port
from ibqos.fabric.xgft import build_xgft, parse_xgft
from ibqos.lab.lab import Lab

HERE = Path(__file__).resolve().parent


def main() -> int:
    root = Path(tempfile.mkdtemp(prefix="ibqos-lfts-"))
    lab = Lab.create("lfts", build_xgft(parse_xgft("2;4,2;1,2")), root=root)
    try:
        lab.start()
        out = HERE / "lab-xgft-2_4.2_1.2"
        (out / "ibroute-n").mkdir(parents=True, exist_ok=True)
        shutil.copy(lab.paths.opensm.lfts_dump, out / "opensm-lfts.dump")
        shutil.copy(lab.paths.discovered, out / "ibnetdiscover.txt")
        lids = sorted(lab.topo.lids[Port(s.id, 0)] for s in lab.topo.switches())
        for lid in lids:
            done = lab.run(["ibroute", "-n", str(lid)], check=True)
            (out / "ibroute-n" / f"{lid}.txt").write_text(done.stdout)
        done = lab.run(["ibroute", str(lids[0])], check=True)
        (out / "ibroute-names.txt").write_text(done.stdout)
        bad = out / "ibroute-bad-lid"
        bad.mkdir(exist_ok=True)
        ca = lab.topo.lids[next(iter(lab.topo.ports(lab.topo.cas()[0].id)))]
        done = lab.run(["ibroute", "-n", str(ca)], check=False)
        (bad / "argv.txt").write_text(f"ibroute -n {ca}\n")
        (bad / "stdout.txt").write_text(done.stdout)
        (bad / "stderr.txt").write_text(done.stderr)
        (bad / "returncode.txt").write_text(f"{done.returncode}\n")
    finally:
        lab.destroy()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
