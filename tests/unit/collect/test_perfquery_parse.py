"""perfquery output parsing (recorded real outputs and broken ones) and the perfquery
backend driven through a fake ``perfquery`` that replays those recordings."""

from __future__ import annotations

import json
import logging
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from ibqos.collect.diags import last_message
from ibqos.collect.perfquery import PerfqueryBackend
from ibqos.collect.perfquery_parse import parse_perfquery
from ibqos.collect.sweep import SWEEP_DTYPES, VL_WAIT_COLUMNS, sweep_dtypes
from ibqos.errors import CollectError, MadError, StopRequested
from ibqos.fabric.targets import Target
from ibqos.tools import waiter
from tests.support.paths import TESTS

DATA = TESTS / "data" / "perfquery"
CASES = sorted(p.name for p in DATA.iterdir() if (p / "expected.json").exists())


def case(name: str) -> dict[str, object]:
    d = DATA / name
    return {
        "argv": json.loads((d / "argv.json").read_text()),
        "stdout": (d / "stdout.txt").read_text(),
        "stderr": (d / "stderr.txt").read_text(),
        "rc": int((d / "returncode.txt").read_text()),
        "expected": json.loads((d / "expected.json").read_text()),
    }


# -- the parser ---------------------------------------------------------------------
@pytest.mark.parametrize("name", CASES)
def test_recorded_outputs_parse_as_recorded(name):
    c = case(name)
    blocks, iberror = parse_perfquery(c["stdout"], name)
    want = c["expected"]["blocks"]
    assert [(b.lid, b.port) for b in blocks] == [(w["lid"], w["port"]) for w in want]
    for b, w in zip(blocks, want, strict=True):
        assert b.extended == (w["title"] == "Port extended counters")
        assert b.fields == w["fields"]
        assert f"CapMask: 0x{b.cap_mask:04X}" in w["caps"]
        assert (b.cap_mask2 is not None) == b.extended
    assert bool(iberror) == ("iberror" in c["stdout"])
    assert not iberror or c["rc"] != 0


def test_recorded_switch_values():
    blocks, _ = parse_perfquery(case("switch-x-ports")["stdout"])
    assert [b.port for b in blocks] == [1, 2, 3, 4, 5, 6, 7]
    assert all(b.cap_mask == 0x1300 and b.cap_mask2 == 0 for b in blocks)
    basic, _ = parse_perfquery(case("ca")["stdout"])
    assert basic[0].cap_mask == 0x1200 and basic[0].fields["PortXmitWait"] == 0
    assert basic[0].fields["CounterSelect"] == 0  # hex values parse too


def test_partial_output_keeps_complete_blocks():
    blocks, iberror = parse_perfquery(case("switch-x-bad-port")["stdout"])
    assert [b.port for b in blocks] == [1]
    assert iberror == "perfquery: iberror: failed: perfextquery"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("bad-lid", "ibwarn: [15652] mad_rpc: _do_madrpc failed; dport (Lid 999)"),
        ("switch-x-bad-port", "perfquery: iberror: failed: perfextquery"),
        ("ca-x-all-ports", "perfquery: iberror: failed: AllPortSelect not supported"),
        ("ibsim-full", "sim_init: connect failed: Success"),
    ],
)
def test_last_message_prefers_stderr(name, message):
    c = case(name)
    got = last_message(c["stdout"], c["stderr"])
    if name == "bad-lid":
        assert got.startswith("ibwarn: [") and got.endswith("_do_madrpc failed; dport (Lid 999)")
    else:
        assert got.endswith(message)


def test_last_message_without_any():
    assert last_message("", "") == "no message"


GOOD = case("switch-x-ports")["stdout"]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("hello world\n", "line 1: cannot parse"),
        ("PortXmitData:....................12\n", "counter before any header"),
        (GOOD.replace("PortRcvData:", "PortRcvDta:", 1), "lacks PortRcvData"),
        (GOOD.replace("PortXmitData:....................", "PortXmitData:...x", 1), "cannot parse"),
        (
            GOOD.replace(
                "PortSelect:......................2", "PortSelect:......................9"
            ),
            "has PortSelect 9",
        ),
        (GOOD + "PortXmitData:....................1\n", "repeated"),
        (
            "# Port extended counters: Lid 3 port 1 (CapMask: 0x1300 CapMask2: 0x0000000)\n"
            "PortSelect:......................1\n"
            "PortXmitData:....................18446744073709551616\n",
            "out of range",
        ),
        ("perfquery: iberror: failed: perfextquery\n" + GOOD, "after the error line"),
        (GOOD[:-5], "truncated"),
        ("# Port extended counters: Lid x port 1 (CapMask: 0x1300)\n", "cannot parse"),
        ("\x00\x01garbage\n", "cannot parse"),
    ],
)
def test_broken_output_is_rejected(text, match):
    with pytest.raises(MadError, match=match):
        parse_perfquery(text, "pq")


@pytest.mark.parametrize("name", ["switch-x-ports", "switch-ports"])
@pytest.mark.parametrize("mid_line", [False, True])
def test_every_truncation_is_caught_or_complete(name, mid_line):
    """Cut the output after every line (or in the middle of it): the result is either the
    complete blocks before the cut, or an error; never a block with counters missing."""
    out = case(name)["stdout"]
    lines = out.splitlines(keepends=True)
    full, _ = parse_perfquery(out)
    for n in range(len(lines) + 1):
        text = "".join(lines[:n])
        if mid_line and n < len(lines):
            text += lines[n][: len(lines[n]) // 2]
        try:
            blocks, _ = parse_perfquery(text)
        except MadError:
            continue
        assert blocks == full[: len(blocks)]
        assert all(len(b.fields) == len(full[0].fields) for b in blocks)


def test_empty_output_has_no_blocks():
    assert parse_perfquery("") == ([], "")


@pytest.mark.parametrize("name", ["switch-x-ports", "ca"])
def test_blank_lines_are_accepted(name):
    """A trailing blank line (a wrapper's echo, a saved file) or blank lines between the
    blocks change nothing."""
    out = case(name)["stdout"]
    want = parse_perfquery(out)
    assert want[0]
    assert parse_perfquery(out + "\n") == want
    assert parse_perfquery(out + "\n  \n") == want
    spaced = out.replace("\n# Port", "\n\n# Port")
    assert spaced != out or len(want[0]) == 1
    assert parse_perfquery(spaced) == want
    failed = "perfquery: iberror: failed: perfextquery\n"
    assert parse_perfquery(out + failed + "\n") == (want[0], failed.strip())


# -- the backend, with a fake perfquery ---------------------------------------------
FAKE = """#!{python}
import json, os, sys, time
args = " ".join(sys.argv[1:])
with open(os.environ["FAKE_PQ_LOG"], "a") as log:
    log.write(args + "\\n")
with open(os.environ["FAKE_PQ_CASES"]) as f:
    case = json.load(f).get(args)
if case is None:
    print("perfquery: iberror: failed: no fake case for " + args)
    sys.exit(255)
time.sleep(case.get("sleep", 0))
sys.stdout.write(case.get("stdout", ""))
sys.stderr.write(case.get("stderr", ""))
sys.exit(case.get("rc", 0))
"""


class Fake:
    def __init__(self, tmp_path: Path) -> None:
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        self.exe = self.bin / "perfquery"
        self.exe.write_text(FAKE.format(python=sys.executable))
        self.exe.chmod(self.exe.stat().st_mode | stat.S_IXUSR)
        self.cases_file = tmp_path / "cases.json"
        self.log = tmp_path / "calls.log"
        self.cases: dict[str, dict[str, object]] = {}
        for name in CASES:
            if name == "ibsim-full":  # the same command as ca-x, failing
                continue
            c = case(name)
            args = " ".join(c["argv"][1:])
            self.cases[args] = {"stdout": c["stdout"], "stderr": c["stderr"], "rc": c["rc"]}

    def env(self) -> dict[str, str]:
        self.cases_file.write_text(json.dumps(self.cases))
        return dict(
            os.environ,
            PATH=f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
            FAKE_PQ_CASES=str(self.cases_file),
            FAKE_PQ_LOG=str(self.log),
        )

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def fake(tmp_path):
    return Fake(tmp_path)


LEAF = 0x0C42A10300010001
SPINE = 0x0C42A10300020001
CA = 0x0C42A10301000000


def leaf_targets():
    return [Target(LEAF, "sw-L1-0001", p, 3, 1, "down", True) for p in range(1, 8)]


def spine_targets(ports=(1, 2)):
    return [Target(SPINE, "sw-L2-0001", p, 4, 2, "down", True) for p in ports]


CA_TARGET = Target(CA, "cn0001 mlx5_0", 1, 2, 0, "host", False)


def expected_counters(name: str) -> dict[int, dict[str, int]]:
    return {b["port"]: b["fields"] for b in case(name)["expected"]["blocks"]}


def test_per_switch_sweep_reads_recorded_values(fake):
    targets = [*leaf_targets(), CA_TARGET, *spine_targets()]
    with PerfqueryBackend(workers=3, env=fake.env()) as backend:
        sweep = backend.sweep(targets)
    assert sorted(fake.calls()) == sorted(
        ["-x 3 1,2,3,4,5,6,7", "3 1,2,3,4,5,6,7", "-x 2 1", "2 1", "-x 4 1,2", "4 1,2"]
    )
    t = sweep.table
    assert t.dtypes.astype(str).to_dict() == SWEEP_DTYPES
    assert list(t["error"]) == [""] * len(targets)
    for rows, ext, basic in (
        (range(7), "switch-x-ports", "switch-ports"),
        ([7], "ca-x", "ca"),
        ([8, 9], "spine-x-ports", "spine-ports"),
    ):
        xf, bf = expected_counters(ext), expected_counters(basic)
        for i in rows:
            port = targets[i].port
            assert t["xmit_bytes"].iat[i] == 4 * xf[port]["PortXmitData"]
            assert t["rcv_bytes"].iat[i] == 4 * xf[port]["PortRcvData"]
            assert t["xmit_pkts"].iat[i] == xf[port]["PortXmitPkts"]
            assert t["rcv_pkts"].iat[i] == xf[port]["PortRcvPkts"]
            assert t["xmit_wait"].iat[i] == bf[port]["PortXmitWait"]
    assert (t["counter_bits"] == 64).all()
    assert t["time_s"].between(sweep.started_s, sweep.started_s + sweep.duration_s + 1).all()
    assert sweep.stats == {"sent": 6, "answered": 6, "failed": 0, "timeouts": 0, "mads": 26}
    assert sweep.backend == "perfquery" and sweep.failed == 0
    assert sweep.cpu_s > 0  # the fake perfquery processes are Python: they use CPU


def test_per_port_mode_runs_one_process_per_target(fake):
    lines = case("spine-x-ports")["stdout"].splitlines(keepends=True)
    second = next(i for i, line in enumerate(lines) if i and line.startswith("#"))
    fake.cases["-x 4 1"] = {"stdout": "".join(lines[:second])}
    fake.cases["-x 4 2"] = {"stdout": case("switch-x-one-port")["stdout"]}
    backend = PerfqueryBackend(per_switch=False, xmit_wait=False, env=fake.env())
    sweep = backend.sweep(spine_targets())
    backend.close()
    assert sorted(fake.calls()) == ["-x 4 1", "-x 4 2"]
    assert sweep.table["xmit_wait"].isna().all()
    assert list(sweep.table["error"]) == ["", ""]


def renumber(stdout: str, old: int, new: int) -> str:
    """A recorded block of port *old*, as if it were port *new*."""
    return stdout.replace(f"port {old} (", f"port {new} (").replace(
        f"PortSelect:......................{old}\n", f"PortSelect:......................{new}\n"
    )


def test_failing_port_fails_only_its_row_and_the_rest_is_retried(fake, caplog):
    # perfquery printed port 1, then gave up on the next one (recorded: -x 4 1,40,2)
    fake.cases["-x 4 1,40,41"] = {"stdout": case("switch-x-bad-port")["stdout"], "rc": 255}
    fake.cases["-x 4 41"] = {"stdout": renumber(case("switch-x-one-port")["stdout"], 2, 41)}
    fake.cases["4 1,41"] = {"stdout": renumber(case("spine-ports")["stdout"], 2, 41)}
    targets = spine_targets((1, 40, 41))
    with (
        caplog.at_level(logging.DEBUG, "ibqos.collect.perfquery"),
        PerfqueryBackend(env=fake.env()) as backend,
    ):
        sweep = backend.sweep(targets)
    assert fake.calls() == ["-x 4 1,40,41", "-x 4 41", "4 1,41"]
    errors = list(sweep.table["error"])
    assert errors == [
        "",
        "lid 4 port 40: perfquery exited 255: perfquery: iberror: failed: perfextquery",
        "",
    ]
    want = 4 * expected_counters("switch-x-one-port")[2]["PortXmitData"]
    assert sweep.table["xmit_bytes"].iat[2] == want
    assert sweep.stats["failed"] == 1 and sweep.stats["sent"] == 3
    # per process at debug level only: the collection loop sums a sweep up in one line
    failed = [
        r for r in caplog.records if "perfquery -x 4 1,40,41: perfquery exited 255" in r.message
    ]
    assert [r.levelno for r in failed] == [logging.DEBUG]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert all(r.name == "ibqos.collect.perfquery" for r in caplog.records)


def test_no_retry_when_nothing_was_printed(fake):
    fake.cases["-x 4 1,2"] = {"stdout": case("bad-lid")["stdout"], "rc": 255}
    with PerfqueryBackend(env=fake.env()) as backend:
        sweep = backend.sweep(spine_targets())
    assert fake.calls() == ["-x 4 1,2"]
    assert sweep.failed == 2


def test_unreachable_lid_and_full_simulator_are_reported(fake):
    fake.cases["-x 5 1"] = {
        "stdout": case("ibsim-full")["stdout"],
        "stderr": case("ibsim-full")["stderr"],
        "rc": 255,
    }
    targets = [
        Target(1, "ghost", 1, 999, 0, "host", False),
        Target(2, "busy", 1, 5, 0, "host", False),
        CA_TARGET,
    ]
    with PerfqueryBackend(env=fake.env()) as backend:
        sweep = backend.sweep(targets)
    errors = list(sweep.table["error"])
    assert errors[0].startswith("lid 999 port 1: perfquery exited 255: ibwarn: [")
    assert errors[0].endswith("_do_madrpc failed; dport (Lid 999)")
    assert errors[1].startswith("lid 5 port 1: perfquery exited 255: ibpanic: [")
    assert errors[1].endswith("sim_init: connect failed: Success")
    assert errors[2] == ""
    assert all("\n" not in e for e in errors)
    assert sweep.table["xmit_bytes"].iloc[:2].isna().all()
    assert list(sweep.table["counter_bits"]) == [0, 0, 64]
    assert sweep.failed == 2
    assert sweep.stats["sent"] == 4  # no PortCounters query for the two that failed


def test_timeout_and_garbage(fake):
    fake.cases["-x 6 1"] = {"sleep": 30}
    fake.cases["-x 7 1"] = {"stdout": "Segmentation fault\n"}
    targets = [Target(6, "slow", 1, 6, 0, "host", False), Target(7, "odd", 1, 7, 0, "host", False)]
    with PerfqueryBackend(timeout_s=0.5, env=fake.env()) as backend:
        sweep = backend.sweep(targets)
    errors = list(sweep.table["error"])
    assert errors[0] == "lid 6 port 1: perfquery timed out after 0.5 s"
    assert errors[1].startswith("lid 7 port 1: unreadable perfquery output: ")
    assert "cannot parse: 'Segmentation fault'" in errors[1]
    assert sweep.stats["timeouts"] == 1 and sweep.stats["failed"] == 2
    assert sweep.duration_s < 10


def test_port_counters_failure_loses_only_xmit_wait(fake, caplog):
    fake.cases["2 1"] = {"stdout": "perfquery: iberror: failed: perfquery\n", "rc": 255}
    with (
        caplog.at_level(logging.WARNING, "ibqos.collect"),
        PerfqueryBackend(env=fake.env()) as backend,
    ):
        sweep = backend.sweep([CA_TARGET])
    assert sweep.table["error"].iat[0] == ""  # the data counters stand: rates go on
    assert sweep.table["xmit_bytes"].iat[0] > 0
    assert sweep.table["xmit_wait"].isna().iat[0]
    assert (
        "XmitWait (PortCounters) of 1 ports not read, their data counters stand (first: "
        "lid 2 port 1: PortCounters: perfquery exited 255: perfquery: iberror: failed: perfquery)"
        in caplog.text
    )


def test_no_device_at_all_stops_the_backend(fake):
    # what perfquery printed on this machine, which has no HCA
    fake.cases["-x 2 1"] = {
        "stdout": "perfquery: iberror: failed: Failed to open '(null)' port '0'\n",
        "stderr": "ibwarn: [21215] mad_rpc_open_port: can't open UMAD port ((null):0)\n",
        "rc": 255,
    }
    with PerfqueryBackend(env=fake.env()) as backend, pytest.raises(CollectError) as err:
        backend.sweep([CA_TARGET])
    assert "can't open UMAD port" in str(err.value) or "Failed to open" in str(err.value)


def test_xmit_wait_missing_without_capability(fake):
    basic = case("ca")["stdout"].replace("CapMask: 0x1200", "CapMask: 0x0200")
    fake.cases["2 1"] = {"stdout": basic}
    with PerfqueryBackend(env=fake.env()) as backend:
        sweep = backend.sweep([CA_TARGET])
    assert sweep.table["error"].iat[0] == ""
    assert sweep.table["xmit_wait"].isna().iat[0]


def test_data_counter_saturates_at_u64_max(fake):
    out = case("ca-x")["stdout"]
    value = next(line for line in out.splitlines() if line.startswith("PortXmitData:"))
    fake.cases["-x 2 1"] = {
        "stdout": out.replace(value, "PortXmitData:...................." + str(2**64 - 1))
    }
    with PerfqueryBackend(xmit_wait=False, env=fake.env()) as backend:
        sweep = backend.sweep([CA_TARGET])
    assert sweep.table["xmit_bytes"].iat[0] == 2**64 - 1


def test_empty_target_list(fake):
    with PerfqueryBackend(env=fake.env()) as backend:
        sweep = backend.sweep([])
    assert len(sweep.table) == 0 and sweep.stats["sent"] == 0
    assert sweep.table.dtypes.astype(str).to_dict() == SWEEP_DTYPES


def test_missing_binary_is_a_collect_error(tmp_path, fake):
    with pytest.raises(CollectError, match="perfquery not found on PATH"):
        PerfqueryBackend(env={"PATH": str(tmp_path / "nowhere")})
    backend = PerfqueryBackend(env=fake.env())
    fake.exe.unlink()  # removed after the backend found it
    with pytest.raises(CollectError, match=r"cannot run .*perfquery"):
        backend.sweep([CA_TARGET])
    backend.close()


@pytest.mark.parametrize(
    ("kwargs", "match"), [({"workers": 0}, "workers"), ({"timeout_s": 0}, "timeout")]
)
def test_bad_arguments(fake, kwargs, match):
    with pytest.raises(ValueError, match=match):
        PerfqueryBackend(env=fake.env(), **kwargs)


def test_table_is_in_target_order_with_duplicates(fake):
    targets = [*reversed(spine_targets()), spine_targets()[0]]
    with PerfqueryBackend(env=fake.env()) as backend:
        sweep = backend.sweep(targets)
    assert list(sweep.table["port"]) == [2, 1, 1]
    assert list(sweep.table["error"]) == ["", "", ""]
    assert sorted(fake.calls()) == ["-x 4 1,2", "4 1,2"]  # each port read once
    one = sweep.table["xmit_bytes"]
    assert one.iat[1] == one.iat[2] != one.iat[0]


# -- PortVLXmitWaitCounters (--vlxmitcounters) ----------------------------------------
VL_DATA = DATA.parent / "perfquery-vl"
VL_CASES = sorted(p.name for p in VL_DATA.iterdir() if (p / "expected.json").exists())


def vl_case(name: str) -> dict[str, object]:
    d = VL_DATA / name
    return {
        "argv": json.loads((d / "argv.json").read_text()),
        "stdout": (d / "stdout.txt").read_text(),
        "stderr": (d / "stderr.txt").read_text(),
        "rc": int((d / "returncode.txt").read_text()),
        "expected": json.loads((d / "expected.json").read_text()),
    }


def vl_output(lid: int, port: int) -> str:
    """The recorded block of lid 3 port 2 (VL 3 = 77, VL 7 = 65535) as another port's."""
    out = vl_case("vl-switch-port")["stdout"]
    return out.replace("Lid 3 port 2\n", f"Lid {lid} port {port}\n").replace(
        "PortSelect:......................2\n", f"PortSelect:......................{port}\n"
    )


def vl_unsupported(lid: int) -> dict[str, object]:
    """What a PMA without the attribute makes perfquery print: the recorded status 0x1c
    failure with the status a real PMA gives, 0xc (ibsim implements it everywhere)."""
    bad = vl_case("vl-switch-bad-port")
    stderr = bad["stderr"].replace("status 0x1c;", "status 0xc;").replace("Lid 3)", f"Lid {lid})")
    assert "MAD completed with error status 0xc; dport" in stderr
    return {"stdout": bad["stdout"], "stderr": stderr, "rc": bad["rc"]}


def vl_no_reply() -> dict[str, object]:
    c = vl_case("vl-no-reply")
    return {"stdout": c["stdout"], "stderr": c["stderr"], "rc": c["rc"]}


@pytest.mark.parametrize("name", VL_CASES)
def test_recorded_vl_outputs_parse_as_recorded(name):
    c = vl_case(name)
    blocks, iberror = parse_perfquery(c["stdout"], name)
    want = c["expected"]["blocks"]
    assert [(b.lid, b.port) for b in blocks] == [(w["lid"], w["port"]) for w in want]
    for b, w in zip(blocks, want, strict=True):
        assert b.vl_xmit_wait and not b.extended
        assert b.cap_mask == 0 and b.cap_mask2 is None  # this header has no masks
        assert b.fields == w["fields"]
    assert bool(iberror) == (c["rc"] != 0)
    if iberror:
        assert iberror == "perfquery: iberror: failed: cannot query PortVLXmitWaitCounters"


def test_recorded_vl_values():
    (block,) = parse_perfquery(vl_case("vl-switch-port")["stdout"])[0]
    values = [block.fields[f"PortVLXmitWait{vl}"] for vl in range(16)]
    assert values == [0, 0, 0, 77, 0, 0, 0, 65535, 0, 0, 0, 0, 0, 0, 0, 0]
    # a port list reads only its first port for this attribute (perfquery.c common_func)
    c = vl_case("vl-switch-port-list")
    assert c["argv"][-1] == "1,2,3" and c["rc"] == 0
    assert [b.port for b in parse_perfquery(c["stdout"])[0]] == [1]


def test_recorded_vl_failures_say_why_on_stderr():
    assert last_message("", vl_case("vl-switch-bad-port")["stderr"]).endswith(
        "mad_rpc: MAD completed with error status 0x1c; dport (Lid 3)"
    )
    assert last_message("", vl_case("vl-no-reply")["stderr"]).endswith(
        "mad_rpc: _do_madrpc failed; dport (Lid 3)"
    )


VL_GOOD = vl_case("vl-switch-port")["stdout"]


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (VL_GOOD.replace("PortVLXmitWait15:", "PortVLXmitWait16:"), "lacks PortVLXmitWait15"),
        (VL_GOOD.replace("Lid 3 port 2", "Lid 3 port 5"), "has PortSelect 2"),
        (
            VL_GOOD.replace("# PortVLXmitWaitCounters counters", "# PortVLXmitWait counters"),
            "line 1",
        ),
        (VL_GOOD[:-3], "truncated"),
    ],
)
def test_broken_vl_output_is_rejected(text, match):
    with pytest.raises(MadError, match=match):
        parse_perfquery(text, "pq")


def vl_calls(fake: Fake) -> list[str]:
    return [c for c in fake.calls() if "--vlxmitcounters" in c]


def vl_values(table, row: int) -> list[object]:
    return [table[c].iat[row] for c in VL_WAIT_COLUMNS]


@pytest.mark.parametrize("per_switch", [True, False])
def test_vl_counters_one_process_per_port_until_a_node_says_no(fake, per_switch):
    for port in range(1, 8):
        fake.cases[f"-e --vlxmitcounters 3 {port}"] = {"stdout": vl_output(3, port)}
    fake.cases["-e --vlxmitcounters 2 1"] = {"stdout": vl_case("vl-ca")["stdout"]}
    for port in (1, 2):
        fake.cases[f"-e --vlxmitcounters 4 {port}"] = vl_unsupported(4)
    targets = [*leaf_targets(), CA_TARGET, *spine_targets()]
    if not per_switch:
        targets = [CA_TARGET, *spine_targets()]
        lines = case("spine-x-ports")["stdout"].splitlines(keepends=True)
        start = [i for i, line in enumerate(lines) if line.startswith("#")]
        for port in (1, 2):
            block = lines[start[port - 1] : [*start, len(lines)][port]]
            fake.cases[f"-x 4 {port}"] = {"stdout": "".join(block)}
    backend = PerfqueryBackend(
        workers=3, per_switch=per_switch, xmit_wait=False, vl_xmit_wait=True, env=fake.env()
    )
    with backend:
        s = backend.sweep(targets)
        first = sorted(vl_calls(fake))
        fake.log.unlink()
        again = backend.sweep(targets)
    t = s.table
    assert t.dtypes.astype(str).to_dict() == sweep_dtypes(vl_wait=True)
    assert (t["error"] == "").all() and t["xmit_bytes"].notna().all()
    spine_rows = [i for i, tg in enumerate(targets) if tg.lid == 4]
    assert t.loc[spine_rows, list(VL_WAIT_COLUMNS)].isna().all().all()  # 0xc: missing
    ca_row = targets.index(CA_TARGET)
    assert vl_values(t, ca_row) == [0] * 16
    prefix = "-e --vlxmitcounters "
    if per_switch:
        for i in range(7):
            assert vl_values(t, i) == [0, 0, 0, 77, 0, 0, 0, 65535, *[0] * 8]
        # one process per port of the leaf and the CA; the spine's first port said no, so
        # its second is not asked
        leaf = [f"{prefix}3 {p}" for p in range(1, 8)]
        assert first == sorted([prefix + "2 1", *leaf, prefix + "4 1"])
        assert sorted(vl_calls(fake)) == sorted([prefix + "2 1", *leaf])
        assert s.stats["sent"] == 3 + 9 and s.stats["failed"] == 1
        assert s.stats["mads"] == (1 + 7) + (1 + 1) + (1 + 2) + 2 * 9
    else:
        # one group per port: both spine ports are asked in the first sweep
        assert first == [prefix + "2 1", prefix + "4 1", prefix + "4 2"]
        assert vl_calls(fake) == [prefix + "2 1"]  # and the spine not again
    assert again.table.loc[spine_rows, list(VL_WAIT_COLUMNS)].isna().all().all()
    assert vl_values(again.table, ca_row) == [0] * 16


def test_a_failed_vl_read_leaves_the_row_alone(fake, caplog):
    for port in (1, 2):
        fake.cases[f"-e --vlxmitcounters 4 {port}"] = {"stdout": vl_output(4, port)}
    with PerfqueryBackend(vl_xmit_wait=True, env=fake.env()) as backend:
        backend.sweep(spine_targets())  # the spine answers: it has them
        fake.cases["-e --vlxmitcounters 4 2"] = vl_no_reply()
        fake.env()
        with caplog.at_level(logging.WARNING, "ibqos.collect"):
            s = backend.sweep(spine_targets())
    t = s.table
    assert t["error"].tolist() == ["", ""]
    assert t["xmit_bytes"].notna().all() and t["xmit_wait"].notna().all()
    assert vl_values(t, 0)[3] == 77 and t.loc[1, list(VL_WAIT_COLUMNS)].isna().all()
    assert (
        "PortVLXmitWaitCounters of 1 ports not read, their per-VL columns are empty "
        "(first: lid 4 port 2: perfquery exited 255: ibwarn: ["
    ) in caplog.text
    assert s.failed == 0 and s.stats["failed"] == 1


def test_an_unanswered_vl_probe_is_tried_again_later(fake, caplog):
    from ibqos.collect.perfquery import REPROBE_SWEEPS

    fake.cases["-e --vlxmitcounters 2 1"] = vl_no_reply()
    with PerfqueryBackend(xmit_wait=False, vl_xmit_wait=True, env=fake.env()) as backend:
        with caplog.at_level(logging.INFO, "ibqos.collect"):
            s = backend.sweep([CA_TARGET])
        assert s.table["error"].iat[0] == "" and s.table["xmit_bytes"].notna().iat[0]
        assert s.table.loc[0, list(VL_WAIT_COLUMNS)].isna().all()
        assert "no PortVLXmitWaitCounters" in caplog.text
        assert "asked again in 10 sweeps" in caplog.text
        for _ in range(REPROBE_SWEEPS - 1):
            backend.sweep([CA_TARGET])
        assert len(vl_calls(fake)) == 1
        fake.cases["-e --vlxmitcounters 2 1"] = {"stdout": vl_case("vl-ca")["stdout"]}
        fake.env()
        s = backend.sweep([CA_TARGET])
    assert len(vl_calls(fake)) == 2
    assert vl_values(s.table, 0) == [0] * 16


def test_a_vl_process_timeout_decides_nothing(fake):
    fake.cases["-e --vlxmitcounters 2 1"] = {"sleep": 30}
    with PerfqueryBackend(xmit_wait=False, vl_xmit_wait=True, timeout_s=0.5, env=fake.env()) as b:
        s = b.sweep([CA_TARGET])
        assert s.table["error"].iat[0] == "" and s.stats["timeouts"] == 1
        assert s.table.loc[0, list(VL_WAIT_COLUMNS)].isna().all()
        fake.cases["-e --vlxmitcounters 2 1"] = {"stdout": vl_case("vl-ca")["stdout"]}
        fake.env()
        s = b.sweep([CA_TARGET])  # still unknown, so probed again at once
    assert vl_values(s.table, 0) == [0] * 16


def test_vl_off_by_default(fake):
    with PerfqueryBackend(env=fake.env()) as backend:
        s = backend.sweep([CA_TARGET])
    assert list(s.table.columns) == list(SWEEP_DTYPES) and vl_calls(fake) == []


# -- bounds: the sweep's time limit and the tool runner's waiter -------------------------


def test_a_sweep_ends_at_its_time_limit(fake):
    fake.cases["-x 6 1"] = {"sleep": 30}
    fake.cases["-x 7 1"] = {"stdout": case("ca-x")["stdout"]}
    targets = [Target(6, "slow", 1, 6, 0, "host", False), Target(7, "late", 1, 7, 0, "host", False)]
    # one worker: the hung process takes what is left of the sweep, the next is not run
    with PerfqueryBackend(workers=1, sweep_timeout_s=1.0, env=fake.env()) as backend:
        sweep = backend.sweep(targets)
    assert sweep.table["error"].tolist() == [
        "lid 6 port 1: perfquery cut at the sweep's time limit (1 s)",
        "lid 7 port 1: not read: the sweep's time limit passed",
    ]
    assert fake.calls() == ["-x 6 1"]
    assert sweep.duration_s < 5
    assert sweep.stats["timeouts"] == 1 and sweep.stats["sent"] == 1


def test_a_stop_from_the_waiter_ends_the_sweep_at_once(fake):
    fake.cases["-x 6 1"] = {"sleep": 30}
    started = time.monotonic()

    def stop() -> None:
        raise StopRequested

    with (
        waiter(stop),
        PerfqueryBackend(workers=1, env=fake.env()) as backend,
        pytest.raises(StopRequested),
    ):
        backend.sweep([Target(6, "slow", 1, 6, 0, "host", False)])
    assert time.monotonic() - started < 5  # not the process's 10 s, nor its 30 s sleep
