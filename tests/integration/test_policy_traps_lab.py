"""What the real OpenSM does with each qos-policy.conf trap, next to what ibqos's checker says.

One lab, one job on SL 3 in ibqos's block; each case adds a trap to the admin's part, sends
SIGHUP and reads the ``ERR`` lines of the heavy sweep and the job's PathRecord SL:

- *dropped*: OpenSM dropped the whole policy (the job's paths fall back to SL 0); the
  checker must call it an error;
- *kept*: OpenSM kept the policy (the job keeps SL 3), perhaps logging an ``ERR`` line for
  the rule; the checker must not call it an error.

The verdicts (OpenSM 3.3.23, Debian 12) are noted beside each case; they are what
``ibqos.opensm.check.qos_policy`` documents.
"""

from __future__ import annotations

import os
import re
import signal
import time

from ibqos.fsio import atomic_write
from ibqos.lab.fabric import fabric_from_lab
from ibqos.lab.opensm import MINIMAL_POLICY
from ibqos.opensm.check import check_policy
from ibqos.opensm.partitions import Partitions, parse_partitions
from ibqos.opensm.policy import PolicyJob, render_policy
from tests.integration.labcheck import QUIET
from tests.integration.opensm_lab import (
    JOB_HOSTS,
    SWEEP_TIMEOUT_S,
    errors,
    host_ports,
    path_sl,
    sighup,
)

JOB_SL = 3


def rule(*lines: str) -> str:
    body = "".join(f"    {line}\n" for line in lines)
    return f"qos-match-rules\n  qos-match-rule\n{body}  end-qos-match-rule\nend-qos-match-rules\n"


def ulps(*lines: str) -> str:
    return "qos-ulps\n" + "".join(f"  {line}\n" for line in lines) + "end-qos-ulps\n"


def group(*lines: str) -> str:
    body = "".join(f"    {line}\n" for line in lines)
    return f"port-groups\n  port-group\n    name: g\n{body}  end-port-group\nend-port-groups\n"


#: (case, partitions.conf or None for none, the admin's addition, OpenSM's verdict, the ERR
#: codes it logs, the worst severity of the checker's findings)
CASES = [
    # a pkey no partition has, in a match rule: AC14 for it, the rule is kept (and can match
    # only requests carrying that pkey, which no path has)
    (
        "pkey in a match rule",
        None,
        rule("pkey: 0x0123", "qos-level-name: DEFAULT"),
        "kept",
        ["AC14"],
        "warning",
    ),
    # the same through the simplified policy: 'any, pkey' becomes a match rule, same AC14
    ("any, pkey in qos-ulps", None, ulps("any, pkey 0x0123 : 4"), "kept", ["AC14"], "warning"),
    # the default partition exists in every subnet: no AC14
    (
        "default pkey in a match rule",
        None,
        rule("pkey: 0x7fff", "qos-level-name: DEFAULT"),
        "kept",
        [],
        None,
    ),
    # IPoIB pkeys are checked while parsing: a syntax error, the whole policy is dropped
    (
        "ipoib pkey without partition",
        None,
        ulps("ipoib, pkey 0x0123 : 4"),
        "dropped",
        ["AC05", "AC03"],
        "error",
    ),
    # without partitions.conf every port is a full member of the default partition
    ("ipoib default, no partitions.conf", None, ulps("ipoib : 4"), "kept", [], None),
    # a partitions.conf that leaves the default partition alone: only the SM port is a full
    # member of it, so 'ipoib :' fails the two-full-members test
    (
        "ipoib default, partitions.conf without Default",
        "P1=0x0123 : ALL=full ;\n",
        ulps("ipoib : 4"),
        "dropped",
        ["AC05", "AC03"],
        "error",
    ),
    (
        "ipoib pkey, partition with full members",
        "P1=0x0123 : ALL=full ;\n",
        ulps("ipoib, pkey 0x0123 : 4"),
        "kept",
        [],
        None,
    ),
    # (Default stays full for the CA ports, or they would share no partition and have no path)
    (
        "ipoib pkey, partition with one full member",
        "Default=0x7fff : ALL=full ;\nP1=0x0123 : SELF=full ;\n",
        ulps("ipoib, pkey 0x0123 : 4"),
        "dropped",
        ["AC05", "AC03"],
        "error",
    ),
    # a port-group's unknown partition or pkey is silently empty
    ("unknown partition in a port-group", None, group("partition: nosuch"), "kept", [], "warning"),
    ("unknown pkey in a port-group", None, group("pkey: 0x0123"), "kept", [], "warning"),
    # a byte order mark is three bytes of text before the first section: a syntax error
    ("byte order mark", None, "\ufeff", "dropped", ["AC05", "AC03"], "error"),
    # one string value of 10 KiB or more overruns the parser's buffer (unbounded strcat):
    # OpenSM died in the heavy sweep that parsed it
    (
        "a use: text of 12 KiB",
        None,
        rule("use: " + "x" * 12 * 1024, "qos-level-name: DEFAULT"),
        "died",
        [],
        "error",
    ),
]


def test_opensm_verdicts_match_the_checker(make_lab) -> None:
    lab = make_lab("2;4,2;1,2", opensm_options=QUIET)
    hosts = host_ports(fabric_from_lab(lab))
    files = lab.paths.opensm
    partitions_conf = files.dir / "partitions.conf"
    a1, a2 = (hosts[h] for h in JOB_HOSTS["A"])
    job = PolicyJob("A", JOB_SL, (a1.port_guid or 0, a2.port_guid or 0))
    seen = []
    for case, parts, addition, *_ in CASES:
        if parts is None:
            partitions_conf.unlink(missing_ok=True)
            partitions = Partitions.without_file()
        else:
            partitions_conf.write_text(parts)
            partitions = parse_partitions(parts, str(partitions_conf))
        good = render_policy(MINIMAL_POLICY, [job])
        atomic_write(files.policy, good)
        assert errors(sighup(lab)[0]) == [], case  # partitions re-made, the good policy in
        assert path_sl(lab, a1, a2) == JOB_SL, case

        bom = addition == "\ufeff"  # it goes before everything
        text = addition + good if bom else render_policy(MINIMAL_POLICY + addition, [job])
        atomic_write(files.policy, text)
        log, alive = reload(lab)
        if not alive:
            got = "died"
        else:
            got = "kept" if path_sl(lab, a1, a2) == JOB_SL else "dropped"
        logged = [m.group(1) for e in errors(log) if (m := re.search(r"ERR (AC\w\w)", e))]
        findings = check_policy(text, "qos-policy.conf", partitions=partitions)
        worst = min((f.severity for f in findings), default=None)  # "error" < "warning"
        seen.append((case, got, sorted(set(logged)), worst))
        print(case, got, errors(log), [str(f)[:300] for f in findings], sep="\n  ")
        if not alive:
            break  # the last case: nothing is left to reload
    assert seen == [(c, v, sorted(codes), s) for c, _, _, v, codes, s in CASES]


def reload(lab) -> tuple[list[str], bool]:
    """SIGHUP the lab's OpenSM (ours, by the pid we started) and wait for the end of the
    heavy sweep or for OpenSM to exit; the log lines written meanwhile, and whether it
    still runs."""
    files = lab.paths.opensm
    before = files.log.read_text(errors="replace")
    proc = lab.opensm.proc
    assert int(files.pid.read_text()) == proc.pid
    os.kill(proc.pid, signal.SIGHUP)
    deadline = time.monotonic() + SWEEP_TIMEOUT_S
    while True:
        text = files.log.read_text(errors="replace")
        if text.count("SUBNET UP") > before.count("SUBNET UP"):
            return text[len(before) :].splitlines(), True
        if proc.poll() is not None:
            return text[len(before) :].splitlines(), False
        assert time.monotonic() < deadline, "OpenSM neither swept nor exited after SIGHUP"
        time.sleep(0.02)
