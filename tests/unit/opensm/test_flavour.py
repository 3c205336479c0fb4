"""NVIDIA's OpenSM 5.x beside upstream OpenSM 3.3.23: its opensm.conf passes the checker,
the flavour is told from the version OpenSM logs or from opensm.conf's keys, and on NVIDIA's
OpenSM the switch tables go to ``qos_sw2sw_*`` as well as to ``qos_swe_*``.

The NVIDIA files are public ones, recorded in ``tests/data/opensm/nvidia/`` (README there).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ibqos.config.lanes import LaneConfig
from ibqos.config.models import OpenSMConfig
from ibqos.opensm.check import check_conf, check_file
from ibqos.opensm.conf import BEGIN_MARK, END_MARK, find_block, parse_conf, split_lines
from ibqos.opensm.flavour import (
    NVIDIA_QOS_KEYS,
    BannerWatch,
    Detected,
    detect_flavour,
    log_version,
    managed_types,
    resolve_flavour,
    version_flavour,
)
from ibqos.opensm.render import render_checked
from ibqos.plan.planner import JobState, plan
from tests.support.paths import TESTS

NVIDIA = TESTS / "data" / "opensm" / "nvidia"
FULL = NVIDIA / "opensm-full.conf"  # what NVIDIA's OpenSM 5.21 writes for --create-config
HANDWRITTEN = NVIDIA / "handwritten.conf"  # a short conf NVIDIA's OpenSM 5.21 ran with
STDOUT = NVIDIA / "handwritten-stdout.txt"  # what it printed when it started
STAMP = "Jun 26 10:00:00 123456 [7F3A2B1C0700] 0x02 -> "
SW2SW = tuple(f"qos_sw2sw_{f}" for f in ("sl2vl", "vlarb_high", "vlarb_low", "high_limit"))
LANES = LaneConfig(data_vls=8, vlarb_low_cap=8, vlarb_high_cap=8, reserved_sls=(0,))


# -- the checker ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", [FULL, HANDWRITTEN], ids=["create-config", "handwritten"])
def test_nvidia_confs_pass_check_opensm(path: Path) -> None:
    assert check_file(path) == []
    assert check_conf(path.read_text(), "c", flavour="nvidia") == []


def test_nvidia_only_keys_are_warnings_for_upstream_opensm() -> None:
    findings = check_conf(FULL.read_text(), "c", flavour="upstream")
    assert findings and all(f.severity == "warning" for f in findings), findings
    assert {f.message.split()[0] for f in findings} == NVIDIA_QOS_KEYS
    assert all("upstream OpenSM logs 'Unrecognized token'" in f.message for f in findings)


def test_an_option_no_opensm_knows_is_a_warning_not_an_error() -> None:
    """OpenSM 3.3.23 logs 'Unrecognized token' for it, skips the line and applies the rest
    of the file (osm_subn_parse_conf_file), so ibqos may still write its block."""
    (finding,) = check_conf("qos TRUE\nqos_sw2sw_sl2lv 0\n", "c", flavour="nvidia")
    assert (finding.line, finding.severity) == (2, "warning")
    assert "unknown option 'qos_sw2sw_sl2lv'" in finding.message


def test_nvidia_values_are_checked_like_the_others() -> None:
    (finding,) = check_conf("qos TRUE\nqos_sw2sw_sl2vl 0,1,2\n", "c")
    assert finding.severity == "error"
    assert finding.message.startswith("qos_sw2sw_sl2vl: 3 VLs given, 16 needed")


# -- telling the flavour --------------------------------------------------------------------


def test_the_version_banner_tells_the_flavour() -> None:
    assert version_flavour("OpenSM 3.3.23\n") == Detected("upstream", "'OpenSM 3.3.23'")
    nvidia = version_flavour("x\nOpenSM 5.24.0.MLNX20250722.185f9e32\n", " in log")
    assert nvidia == Detected("nvidia", "'OpenSM 5.24.0.MLNX20250722.185f9e32' in log")
    assert version_flavour("OpenSM 4.9.0\n") == Detected("nvidia", "'OpenSM 4.9.0'")
    # the last banner counts: OpenSM appends to its log, an upgrade shows last
    assert version_flavour("OpenSM 3.3.23\n...\nOpenSM 5.21.12.MLNX20250617.f74e01b8\n")
    assert version_flavour("OpenSM 5.21.12.MLNX1\nOpenSM 3.3.23\n").flavour == "upstream"
    assert version_flavour("opensm.conf: no version here\n") is None


def test_the_keys_of_opensm_conf_tell_the_flavour() -> None:
    full = detect_flavour(parse_conf(FULL.read_text()))
    assert full.flavour == "nvidia" and "qos_config_vl_enabled" in full.reason
    handwritten = parse_conf(HANDWRITTEN.read_text())
    assert detect_flavour(handwritten).flavour == "upstream"  # no NVIDIA-only key in it
    started = detect_flavour(handwritten, STDOUT.read_text(), " on stdout")
    assert started == Detected("nvidia", "'OpenSM 5.21.12.MLNX20250617.f74e01b8' on stdout")
    # a banner wins over the keys
    assert detect_flavour(parse_conf(FULL.read_text()), "OpenSM 3.3.23").flavour == "upstream"


def test_the_log_is_read_for_the_last_banner(tmp_path: Path) -> None:
    log = tmp_path / "opensm.log"
    assert log_version(log) is None  # no log
    log.write_text(f"{STAMP}OpenSM 3.3.23\n" + f"{STAMP}SUBNET UP\n" * 10)
    assert log_version(log) == "OpenSM 3.3.23"
    # a long log: the banner is near its start, beyond the last MiB
    log.write_text(f"{STAMP}OpenSM 5.21.12.MLNX20250617.f74e01b8\n" + "y" * (1 << 21) + "\n")
    assert log_version(log) == "OpenSM 5.21.12.MLNX20250617.f74e01b8"
    found = resolve_flavour("auto", {}, log)
    assert found.flavour == "nvidia" and found.reason.endswith(f" in {log}")
    assert resolve_flavour("upstream", {}, log) == Detected("upstream", "opensm.flavour")
    assert resolve_flavour("nvidia", {}, None) == Detected("nvidia", "opensm.flavour")
    assert resolve_flavour("auto", {}, tmp_path / "none").flavour == "upstream"


def test_managed_types() -> None:
    assert managed_types(("ca", "swe"), "nvidia") == ("ca", "swe", "sw2sw")
    assert managed_types(("ca", "swe"), "upstream") == ("ca", "swe")
    assert managed_types(("ca",), "nvidia") == ("ca",)  # no switch tables, none on sw2sw
    assert managed_types(("ca", "sw2sw"), "upstream") == ("ca",)
    assert managed_types(("sw2sw", "swe"), "nvidia") == ("sw2sw", "swe")


# -- rendering for NVIDIA's OpenSM ----------------------------------------------------------


def _site(tmp_path: Path, conf_text: str, log_text: str | None = None, **kw) -> OpenSMConfig:
    conf = tmp_path / "opensm.conf"
    conf.write_text(conf_text)
    log = tmp_path / "opensm.log"
    if log_text is not None:
        log.write_text(log_text)
    return OpenSMConfig(conf=conf, policy_file=tmp_path / "qos-policy.conf", log=log, **kw)


def _render(cfg: OpenSMConfig):
    decided = plan([JobState("1", expected="high")], LANES, None, 0).plan
    return decided, render_checked(cfg, LANES, decided, [("1", (0x10, 0x11), "app")])


def test_the_created_config_keeps_the_admins_lines_and_gets_sw2sw_keys(tmp_path: Path) -> None:
    admin = FULL.read_text()
    cfg = _site(tmp_path, admin)
    decided, rendered = _render(cfg)
    assert rendered.flavour is not None and rendered.flavour.flavour == "nvidia"
    assert rendered.warnings == ()
    out = rendered.files[cfg.conf]
    lines = split_lines(out)
    block = find_block(lines, BEGIN_MARK, END_MARK, "c")
    assert block is not None
    inside = parse_conf("".join(lines[block[0] : block[1] + 1]))
    tables = decided.tables
    assert tables is not None
    sl2vl = ",".join(map(str, tables.sl_to_vl))
    assert inside["qos_sw2sw_sl2vl"] == inside["qos_swe_sl2vl"] == sl2vl
    for key in SW2SW:
        assert inside[key] == inside[key.replace("sw2sw", "swe")], key
    # every other line of the admin's file is still there, in order
    managed = set(inside)
    kept = [ln for ln in split_lines(admin) if ln.split(" ", 1)[0] not in managed]
    outside = lines[: block[0]] + lines[block[1] + 1 :]
    assert outside == kept
    assert "qos_sw2sw_max_vls 0\n" in outside and "qos_config_vl_enabled FALSE\n" in outside
    assert check_conf(out, "c", flavour="nvidia", data_vls=8) == []


def test_a_handwritten_conf_gets_sw2sw_keys_when_the_log_says_nvidia(tmp_path: Path) -> None:
    cfg = _site(tmp_path, HANDWRITTEN.read_text(), f"{STAMP}{STDOUT.read_text()}")
    out = _render(cfg)[1].files[cfg.conf]
    assert all(key in parse_conf(out) for key in SW2SW)
    assert "routing_engine minhop\n" in out and "qos_sl2vl           0,0,0" in out


def test_upstream_opensm_gets_no_sw2sw_keys(tmp_path: Path) -> None:
    cfg = _site(tmp_path, HANDWRITTEN.read_text(), f"{STAMP}OpenSM 3.3.23\n", port_types=("swe",))
    rendered = _render(cfg)[1]
    assert rendered.flavour == Detected("upstream", f"'OpenSM 3.3.23' in {cfg.log}")
    assert "sw2sw" not in rendered.files[cfg.conf] and "qos_swe_sl2vl" in rendered.files[cfg.conf]
    # listed by hand for an upstream OpenSM: not written, and said
    listed = _site(tmp_path, "qos TRUE\n", None, port_types=("swe", "sw2sw"), flavour="upstream")
    rendered = _render(listed)[1]
    assert "sw2sw" not in rendered.files[listed.conf]
    (warning,) = rendered.warnings
    assert warning.severity == "warning" and "lists sw2sw" in warning.message
    assert "upstream (opensm.flavour)" in warning.message


def test_opensm_flavour_overrides_the_detection(tmp_path: Path) -> None:
    cfg = _site(tmp_path, "qos TRUE\n", f"{STAMP}OpenSM 3.3.23\n", flavour="nvidia")
    assert all(key in parse_conf(_render(cfg)[1].files[cfg.conf]) for key in SW2SW)


# -- the flavour kept across rotations ------------------------------------------------------


def test_an_nvidia_opensm_keeps_its_sw2sw_keys_across_a_rotation(tmp_path: Path) -> None:
    """The banner is logged once per start: a rotated log holds none, and the flavour
    found before is kept (opensm.conf has no NVIDIA-only key to tell it otherwise)."""
    cfg = _site(tmp_path, HANDWRITTEN.read_text(), f"{STAMP}{STDOUT.read_text()}")
    first = _render(cfg)[1]
    assert first.flavour is not None and first.flavour.flavour == "nvidia"
    for rotate in ("rename", "copytruncate"):
        if rotate == "rename":
            cfg.log.rename(tmp_path / "opensm.log.1")
            cfg.log.write_text(f"{STAMP}SUBNET UP\n")
        else:
            cfg.log.write_text("")  # truncated in place
        after = _render(cfg)[1]
        assert after.flavour == first.flavour, rotate
        assert all(key in parse_conf(after.files[cfg.conf]) for key in SW2SW), rotate
    cfg.log.unlink()  # gone: kept too
    assert _render(cfg)[1].flavour == first.flavour


def test_the_banner_is_looked_for_once_per_opensm_start(tmp_path: Path) -> None:
    log = tmp_path / "opensm.log"
    watch = BannerWatch(log)
    assert watch.version() is None  # no log yet
    log.write_text(f"{STAMP}OpenSM 3.3.23\n" + f"{STAMP}SUBNET UP\n" * 10)
    assert watch.version(100) == "OpenSM 3.3.23"
    with log.open("a") as fh:  # a restart appends its banner to the same log
        fh.write(f"{STAMP}OpenSM 5.21.12.MLNX20250617.f74e01b8\n{STAMP}SUBN")
        fh.flush()
        assert watch.version(101) == "OpenSM 5.21.12.MLNX20250617.f74e01b8"
        fh.write("ET UP\n" + f"{STAMP}SUBNET UP\n" * 3)
    assert watch.version(101) == "OpenSM 5.21.12.MLNX20250617.f74e01b8"
    # rewritten in place by a start with -e (erase_log_file), longer than before: told by
    # its bytes, read whole
    log.write_text(f"{STAMP}OpenSM 3.3.23\n" + "x" * 5000 + "\n")
    assert watch.version(101) == "OpenSM 3.3.23"
    # a banner cut in the middle is read once whole
    with log.open("a") as fh:
        fh.write(f"{STAMP}OpenSM 5.2")
        fh.flush()
        assert watch.version(102) == "OpenSM 3.3.23"
        fh.write("1.12.MLNX20250617.f74e01b8\n")
    assert watch.version(102) == "OpenSM 5.21.12.MLNX20250617.f74e01b8"
