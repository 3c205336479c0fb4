"""ibqos install: units, environment file, config and scripts where an admin expects them,
an admin's files kept, and the installed units clean for systemd-analyze."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ibqos import __version__
from ibqos.deploy.install import plan, sandbox_problem
from ibqos.errors import InstallError
from tests.support.paths import ROOT
from tests.support.systemdunit import install_force

IBQOS = Path(sys.executable).parent / "ibqos"
#: this checkout may live where the unit's sandbox hides it (a clone under /tmp)
FORCE = install_force(IBQOS, ROOT)
DEBIAN_UNIT = "opensm@0x0002c903000a0b0c.service"


def ibqos(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(IBQOS), *args], capture_output=True, text=True, check=False)


def analyze(*args: str) -> subprocess.CompletedProcess[str]:
    """systemd-analyze, which works on unit files without a running systemd."""
    return subprocess.run(["systemd-analyze", *args], capture_output=True, text=True, check=False)


def test_install_puts_everything_in_place_and_keeps_the_admins_files(tmp_path: Path) -> None:
    prefix = tmp_path / "root"
    out = ibqos("install", "--prefix", str(prefix), "--opensm-unit", DEBIAN_UNIT, *FORCE)
    assert out.returncode == 0, out.stderr
    unit = prefix / "etc/systemd/system/ibqos.service"
    exec_start = re.search(r"^ExecStart=(\S+)", unit.read_text(), re.M)
    assert exec_start is not None and exec_start.group(1) == str(IBQOS)  # this ibqos
    drop_in = (prefix / "etc/systemd/system/ibqos.service.d/opensm.conf").read_text()
    assert f"\nAfter={DEBIAN_UNIT}\nBindsTo={DEBIAN_UNIT}\n" in drop_in
    assert "IBQOS_CONFIG=/etc/ibqos/ibqos.yaml" in (prefix / "etc/default/ibqos").read_text()
    config = prefix / "etc/ibqos/ibqos.yaml"
    assert config.read_text() == (ROOT / "opensm_conf/ibqos.yaml").read_text()
    for script in ("ibqos-taskprolog", "ibqos-prolog", "ibqos-slurmctld"):  # docs/slurm.md
        assert (prefix / "usr/local/libexec/ibqos" / script).stat().st_mode & 0o777 == 0o755
    share = prefix / "usr/local/share/ibqos"
    assert (share / "dashboards/ibqos-lanes.json").is_file()
    for example in (ROOT / "examples").iterdir():
        assert (share / "examples" / example.name).read_bytes() == example.read_bytes()
    # the shipped READMEs' links lead to shipped files (systemd/README.md -> docs/deploy.md)
    for doc in (share / "systemd/README.md", share / "docs/deploy.md"):
        for link in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", doc.read_text()):
            assert (doc.parent / link).exists(), f"{doc}: {link}"
    assert (share / "systemd/ibqos.service").read_text() == (
        ROOT / "systemd/ibqos.service"
    ).read_text()
    assert "systemctl enable --now ibqos.service" in out.stdout

    # the installed unit and its drop-in are clean for systemd (no PID 1 needed)
    verify = analyze("verify", str(unit))
    assert verify.returncode == 0 and verify.stdout + verify.stderr == "", verify.stderr
    security = analyze("security", "--offline=true", "--threshold=20", str(unit))
    assert security.returncode == 0, security.stdout[-600:]  # exposure 2.0 at most
    assert "Overall exposure level for ibqos.service: 1.8 OK" in security.stdout

    # an admin edits the config; a reinstall keeps it and puts the shipped one beside it
    config.write_text(config.read_text().replace("mode: observe", "mode: enforce"))
    again = ibqos("install", "--prefix", str(prefix), *FORCE)
    assert again.returncode == 0, again.stderr
    assert "mode: enforce" in config.read_text()
    assert (config.parent / "ibqos.yaml.new").read_text() == (
        ROOT / "opensm_conf/ibqos.yaml"
    ).read_text()
    assert f"kept {config} (yours); the shipped one is ibqos.yaml.new" in again.stdout
    assert DEBIAN_UNIT in (prefix / "etc/systemd/system/ibqos.service.d/opensm.conf").read_text()
    assert f"unchanged {unit}" in again.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--opensm-unit", "opensm; rm -rf /"], "--opensm-unit 'opensm; rm -rf /': expected a"),
        (["--bin", "rel/ibqos"], "--bin rel/ibqos: must be an absolute path"),
        (["--unit-dir", "/lib/systemd/system"], "--unit-dir /lib/systemd/system: must be relative"),
    ],
)
def test_bad_options_are_one_line_and_write_nothing(
    tmp_path: Path, args: list[str], message: str
) -> None:
    out = ibqos("install", "--prefix", str(tmp_path / "root"), *args)
    assert out.returncode == 1 and out.stderr.startswith(f"ibqos: install: {message}"), out.stderr
    assert out.stderr.count("\n") == 1 and not (tmp_path / "root").exists()


def test_dry_run_lists_and_writes_nothing(tmp_path: Path) -> None:
    out = ibqos("install", "--prefix", str(tmp_path / "root"), "--dry-run", *FORCE)
    assert out.returncode == 0 and not (tmp_path / "root").exists()
    assert (
        f"would install {tmp_path}/root/etc/systemd/system/ibqos.service (mode 644)" in out.stdout
    )


def test_packagers_choose_the_unit_directory(tmp_path: Path) -> None:
    steps = plan(tmp_path, unit_dir=Path("usr/lib/systemd/system"), bin_path=Path("/usr/bin/ibqos"))
    assert steps[0].target == tmp_path / "usr/lib/systemd/system/ibqos.service"
    assert "ExecStart=/usr/bin/ibqos $IBQOS_OPTIONS run" in steps[0].text
    with pytest.raises(InstallError):
        plan(tmp_path, bin_path=Path("/opt/my ibqos/bin/ibqos"))


@pytest.mark.parametrize(
    ("exe", "hidden"),
    [
        (
            "/home/admin/venv/bin/ibqos",
            "/home, hidden from the service by the unit's ProtectHome=yes",
        ),
        ("/root/ibqos/bin/ibqos", "/root, hidden from the service by the unit's ProtectHome=yes"),
        ("/tmp/ibqos/bin/ibqos", "/tmp, hidden from the service by the unit's PrivateTmp=yes"),
        ("/var/tmp/v/bin/ibqos", "/var/tmp, hidden from the service by the unit's PrivateTmp=yes"),
    ],
)
def test_an_executable_the_units_sandbox_hides_is_refused(
    tmp_path: Path, exe: str, hidden: str
) -> None:
    out = ibqos("install", "--prefix", str(tmp_path / "root"), "--bin", exe)
    assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith(f"ibqos: install: {exe} is under {hidden}: it could not start")
    assert "--force" in out.stderr and not (tmp_path / "root").exists()
    forced = ibqos("install", "--prefix", str(tmp_path / "root"), "--bin", exe, "--force")
    assert forced.returncode == 0, forced.stderr
    assert forced.stderr.startswith(f"warning: {exe} is under {hidden}")
    unit = (tmp_path / "root/etc/systemd/system/ibqos.service").read_text()
    assert f"ExecStart={exe} $IBQOS_OPTIONS run" in unit


def test_the_sandbox_hides_a_scripts_interpreter_too(tmp_path: Path) -> None:
    script = tmp_path / "ibqos"
    script.write_text("#!/home/admin/venv/bin/python3\nimport ibqos.cli\n")
    unit = f"[Service]\nExecStart={script} run\nProtectHome=yes\n"
    assert sandbox_problem(unit) == (
        f"{script} needs /home/admin/venv/bin/python3, which is under /home, hidden from the"
        " service by the unit's ProtectHome=yes: it could not start (status 203/EXEC)"
    )
    # the last setting wins, as in systemd: a drop-in's read-only leaves it visible
    assert sandbox_problem(unit + "ProtectHome=read-only\n") is None
    assert (
        sandbox_problem("[Service]\nExecStart=/opt/ibqos/bin/ibqos run\nPrivateTmp=yes\n") is None
    )


def test_the_changelog_names_this_version() -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    first = re.search(r"^## \[?(\d+\.\d+\.\d+\S*?)\]? ", changelog, re.M)
    assert first is not None and first.group(1) == __version__
