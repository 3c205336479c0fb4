"""What a lab's OpenSM is, from its log since it was started: master, standby, sweeping."""

from __future__ import annotations

from pathlib import Path

from ibqos.lab.opensm import OpenSM, OpenSMFiles

STAMP = "Dec 07 20:12:48 753573 [B92376C0] 0x80 -> "


def osm_with_log(tmp_path: Path, *lines: str) -> OpenSM:
    files = OpenSMFiles(tmp_path)
    files.log.write_text("".join(f"{STAMP}{line}\n" for line in lines))
    return OpenSM(files, {}, tmp_path)


def test_the_role_follows_the_last_state_line_and_the_sweep_after_it(tmp_path: Path) -> None:
    osm = osm_with_log(tmp_path)
    assert osm.role() is None
    with osm.files.log.open("a") as fh:
        fh.write(f"{STAMP}Entering DISCOVERING state\n{STAMP}Entering STANDBY state\n")
    assert osm.role() == "standby"
    with osm.files.log.open("a") as fh:
        fh.write(f"{STAMP}Entering DISCOVERING state\n{STAMP}Entering MASTER state\n")
    assert osm.role() == "sweeping"  # master, its first heavy sweep not ended
    with osm.files.log.open("a") as fh:
        fh.write(f"{STAMP}SUBNET UP\n")
    assert osm.role() == "master"
    with osm.files.log.open("a") as fh:
        fh.write(f"{STAMP}Entering NOTACTIVE state\n")
    assert osm.role() == "not active"


def test_only_the_lines_since_the_last_start_count(tmp_path: Path) -> None:
    osm = osm_with_log(tmp_path, "Entering MASTER state", "SUBNET UP")
    osm._log_from = osm._log_end()  # as spawn() notes it
    assert osm.role() is None
    with osm.files.log.open("a") as fh:
        fh.write(f"{STAMP}Entering DISCOVERING state\n{STAMP}Entering STANDBY state\n")
    assert osm.role() == "standby"
