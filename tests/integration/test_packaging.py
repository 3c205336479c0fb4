"""A release as an admin gets it: sdist and wheel built from a copy of the tree, the wheel
installed into a fresh virtual environment, the README's install commands run against it,
and the installed units checked by systemd-analyze.

The new environment takes ibqos's dependencies from the development one (a .pth line), so
the test needs no network; ``pip check`` confirms that they satisfy what the wheel asks.
"""

from __future__ import annotations

import posixpath
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

from ibqos import __version__

ROOT = Path(__file__).parents[2]
SHIPPED = (
    "systemd",
    "opensm_conf",
    "dashboards",
    "contrib",
    "docs",
    "examples",
    "characterize",
    "schemas",
    "ibqos",
)
TOP_FILES = ("pyproject.toml", "MANIFEST.in", "README.md", "CHANGELOG.md", "LICENSE")
OPENSM_UNIT = "opensm@0x0002c90300a1b2c3.service"


def run(*argv: str | Path, **kw: object) -> subprocess.CompletedProcess[str]:
    out = subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False, **kw)
    assert out.returncode == 0, f"{argv}: {out.stdout[-1500:]}{out.stderr[-1500:]}"
    return out


def build(tmp_path: Path) -> tuple[Path, Path]:
    """sdist and wheel (built from the sdist, as ``python -m build`` does)."""
    src = tmp_path / "src"
    junk = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for name in SHIPPED:
        shutil.copytree(ROOT / name, src / name, ignore=junk)
    for name in TOP_FILES:
        shutil.copy2(ROOT / name, src / name)
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "build", "--no-isolation", "--outdir", dist, src)
    (sdist,) = dist.glob("ibqos-*.tar.gz")
    (wheel,) = dist.glob("ibqos-*.whl")
    return sdist, wheel


def characterize_files() -> list[str]:
    """The files of characterize/, relative to it (POSIX paths)."""
    top = ROOT / "characterize"
    return sorted(p.relative_to(top).as_posix() for p in top.rglob("*") if p.is_file())


def readme_install_block() -> list[str]:
    """The commands of the README's install section, one per line, comments dropped."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Install", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    lines = [line.split("  #", 1)[0].strip() for line in block.group(1).splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def admin_edits(config: Path, host: Path) -> None:
    """What the admin does in the editor: point the config at this host's OpenSM files,
    job file and directories (here under *host*, made as a host has them), so that
    ``check-config``, which looks at all of them, passes."""
    osm = host / "opensm"
    osm.mkdir(parents=True)
    (osm / "opensm.conf").write_text("log_max_size 0\n")
    (osm / "opensm.log").write_text("")
    (host / "jobs.yaml").write_text("jobs: []\n")
    text = config.read_text()
    for old, new in (
        ("conf: /etc/opensm/opensm.conf", f"conf: {osm}/opensm.conf"),
        ("policy_file: /etc/opensm/qos-policy.conf", f"policy_file: {osm}/qos-policy.conf"),
        ("log: /var/log/opensm.log", f"log: {osm}/opensm.log"),
        ("path: /etc/ibqos/jobs.yaml", f"path: {host}/jobs.yaml"),
        ("state_dir: /var/lib/ibqos", f"state_dir: {host}/state"),
        ("socket: /run/ibqos/ibqos.sock", f"socket: {host}/ibqos.sock"),
        ("listen: 127.0.0.1:9683", "listen: 127.0.0.1:0"),  # 9683 may be another's here
    ):
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    config.write_text(text)


def test_wheel_installs_the_command_and_its_files(tmp_path: Path) -> None:
    sdist, wheel = build(tmp_path)
    assert wheel.name == f"ibqos-{__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        meta = zf.read(f"ibqos-{__version__}.dist-info/METADATA").decode()
        entry = zf.read(f"ibqos-{__version__}.dist-info/entry_points.txt").decode()
        data_dir = f"ibqos-{__version__}.data/data/share/ibqos"
        prolog = zf.getinfo(f"{data_dir}/contrib/slurm/ibqos-taskprolog")
    for data in (
        "systemd/ibqos.service",
        "systemd/ibqos.service.d/opensm.conf",
        "systemd/ibqos.default",
        "opensm_conf/ibqos.yaml",
        "dashboards/ibqos-lanes.json",
        "contrib/slurm/ibqos-slurmctld",
        "examples/lab-jobs.yaml",
        "docs/deploy.md",
        "schemas/ibqos.schema.json",
        "schemas/jobs.schema.json",
        "schemas/profile.schema.json",
    ):
        assert f"{data_dir}/{data}" in names, data
    # the characterization workflow, whole: README, example traces and profiles
    examples = characterize_files()
    assert {"README.md", "traces/stencil-trace.csv", "profiles/stencil-n8.yaml"} <= set(examples)
    for name in examples:
        assert f"{data_dir}/characterize/{name}" in names, name
    readme = f"{data_dir}/characterize/README.md"
    for link in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", zipfile.Path(wheel, readme).read_text()):
        assert posixpath.normpath(f"{data_dir}/characterize/{link}") in names, link
    assert (prolog.external_attr >> 16) & 0o111, "the Slurm scripts stay executable"
    assert f"\nVersion: {__version__}\n" in meta and "License-Expression: MIT" in meta
    assert "Requires-Dist: cysystemd>=1.5" in meta
    # the agent's install needs neither: they are the extra characterize
    assert "Provides-Extra: characterize" in meta
    for lib in ("matplotlib>=3.8", "otf2>=3.0"):
        assert f'Requires-Dist: {lib}; extra == "characterize"' in meta
        assert f"Requires-Dist: {lib}\n" not in meta
    assert "ibqos = ibqos.cli:main" in entry
    with tarfile.open(sdist) as tar:
        top = f"ibqos-{__version__}"
        assert {f"{top}/CHANGELOG.md", f"{top}/LICENSE", f"{top}/systemd/ibqos.service"} <= set(
            tar.getnames()
        )
        assert {f"{top}/characterize/{name}" for name in examples} <= set(tar.getnames())
        assert f"{top}/schemas/ibqos.schema.json" in tar.getnames()

    # a fresh environment, as README's install section makes one
    commands = readme_install_block()
    venv, prefix = tmp_path / "opt-ibqos", tmp_path / "root"
    # scripts/setup.sh installs these packages too, so this machine has them
    assert commands[0].startswith("apt-get install -y python3-venv")
    assert commands[1] == "python3 -m venv /opt/ibqos"
    run(sys.executable, "-m", "venv", venv)
    site = Path(
        run(
            venv / "bin/python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"
        ).stdout.strip()
    )
    (site / "ibqos-test-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    # the README runs it in the checkout's top directory: "." is the project there
    assert commands[2] == "/opt/ibqos/bin/pip install ."
    assert (ROOT / "pyproject.toml").is_file()
    run(venv / "bin/pip", "install", "--no-deps", "--no-index", wheel)
    run(venv / "bin/pip", "check")
    exe = venv / "bin/ibqos"
    assert run(exe, "--version").stdout.strip() == f"ibqos, version {__version__}"
    code = "import ibqos.deploy.install as i; print(i.data_root())"
    where = run(venv / "bin/python", "-c", code, cwd=tmp_path)  # not the tree's ibqos/
    assert where.stdout.strip() == str(venv / "share/ibqos")  # the wheel's, not the tree's

    # the config is edited after `ibqos install` made it and before the first start
    edit = commands.index("editor /etc/ibqos/ibqos.yaml")
    assert commands[edit - 1].startswith("/opt/ibqos/bin/ibqos install ")
    assert edit < commands.index("systemctl enable --now ibqos")
    for line in commands[3:]:
        if line.startswith("editor "):
            admin_edits(prefix / "etc/ibqos/ibqos.yaml", tmp_path / "host")
            continue
        if not line.startswith("/opt/ibqos/bin/ibqos "):
            assert line.startswith("systemctl "), line  # no systemd here: verified below
            continue
        line = line.replace("--prefix / ", f"--prefix {prefix} ").replace(
            " /etc/", f" {prefix}/etc/"
        )
        if " install " in line:  # this venv is under /tmp, which the unit's PrivateTmp hides
            line += " --force"
        run(*line.replace("/opt/ibqos", str(venv)).split())

    unit = prefix / "etc/systemd/system/ibqos.service"
    assert f"ExecStart={exe} $IBQOS_OPTIONS run" in unit.read_text()
    drop_in = (prefix / "etc/systemd/system/ibqos.service.d/opensm.conf").read_text()
    assert f"BindsTo={OPENSM_UNIT}" in drop_in
    verify = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, check=False
    )
    assert verify.returncode == 0 and not verify.stdout + verify.stderr, verify.stderr
    for script in ("ibqos-taskprolog", "ibqos-slurmctld"):
        assert (prefix / "usr/local/libexec/ibqos" / script).stat().st_mode & 0o111
    assert (prefix / "usr/local/share/ibqos/dashboards/ibqos-agent.json").is_file()
    assert (prefix / "usr/local/share/ibqos/examples/demo-jobs.yaml").is_file()
    assert (prefix / "usr/local/share/ibqos/docs/deploy.md").is_file()
