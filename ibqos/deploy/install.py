"""``ibqos install``: put the units, the config and the scripts where an admin expects them.

Everything goes under a root (``--prefix``, default ``/``; a package build passes its
staging directory), at the places systemd and the docs name:

================================================  ==========================================
``etc/systemd/system/ibqos.service``               the unit (``--unit-dir`` for packagers:
                                                   ``usr/lib/systemd/system``); replaced
``etc/systemd/system/ibqos.service.d/opensm.conf``  the OpenSM unit it is bound to
``etc/default/ibqos``                              the unit's environment file
``etc/ibqos/ibqos.yaml``                           the configuration (the commented example)
``usr/local/libexec/ibqos/``                       the Slurm scripts (docs/slurm.md)
``usr/local/share/ibqos/``                         pristine copies: units, example config,
                                                   dashboards, contrib, examples, the
                                                   characterization workflow, schemas, docs
================================================  ==========================================

The unit's sandbox hides ``/home``, ``/root`` and ``/run/user`` (``ProtectHome=yes``) and
gives it a ``/tmp`` and ``/var/tmp`` of its own (``PrivateTmp=yes``): an ibqos installed
there (a virtual environment in a home directory) cannot be started by it (status
203/EXEC).  :func:`plan` refuses such an ``ExecStart`` unless forced (a site whose drop-in
relaxes the sandbox); :func:`sandbox_problem` says why.

An admin's files are never overwritten: an existing config, environment file or drop-in
is kept and the shipped version is written beside it as ``<name>.new`` (the drop-in is
replaced only when ``--opensm-unit`` names the unit again).  ``ExecStart`` is pointed at
the ibqos executable this command belongs to, so a virtual environment anywhere works.

The files come from the installed package's ``<prefix>/share/ibqos/`` (the wheel's data
files, ``[tool.setuptools.data-files]`` in pyproject.toml) or, in an editable install,
from the source tree.
"""

from __future__ import annotations

import os
import re
import shutil
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from ibqos.errors import InstallError
from ibqos.fsio import atomic_write

UNIT = "ibqos.service"
DROP_IN = "opensm.conf"
UNIT_DIR = Path("etc/systemd/system")
SHARE = Path("usr/local/share/ibqos")
LIBEXEC = Path("usr/local/libexec/ibqos")
#: what goes under SHARE: (directory, files), as the wheel's data files carry them; of
#: docs/ the text only (the shipped READMEs link to deploy.md, which links to the others)
SHARED = (
    ("systemd", "*"),
    ("opensm_conf", "*"),
    ("dashboards", "*"),
    ("contrib", "*"),
    ("examples", "*"),
    ("characterize", "*"),
    ("schemas", "*"),
    ("docs", "*.md"),
)
#: what ``--opensm-unit`` accepts: a service name, template instances included
_UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.\\@-]+\.service$")
_EXEC_START = re.compile(r"^(ExecStart=)(\S+)", re.M)
_OPENSM = re.compile(r"^(After|BindsTo)=\S+$", re.M)
_TRUE = ("yes", "true", "on", "1")
#: directory -> (the unit's setting, values that hide it from ExecStart)
_HIDDEN = {
    Path("/home"): ("ProtectHome", (*_TRUE, "tmpfs")),
    Path("/root"): ("ProtectHome", (*_TRUE, "tmpfs")),
    Path("/run/user"): ("ProtectHome", (*_TRUE, "tmpfs")),
    Path("/tmp"): ("PrivateTmp", _TRUE),  # noqa: S108 - a path the unit hides, not a temp file
    Path("/var/tmp"): ("PrivateTmp", _TRUE),  # noqa: S108 - the same
}


@dataclass(frozen=True)
class Step:
    """One file to install.

    Attributes:
        target: where it goes (under the prefix).
        text: its content.
        mode: its permissions.
        keep: an admin's file: if the target exists with other content, the new one is
            written as ``<target>.new`` instead.
    """

    target: Path
    text: str
    mode: int = 0o644
    keep: bool = False


def data_root() -> Path:
    """Where the shipped files are: the source tree, or the environment's ``share/ibqos``.

    Raises:
        InstallError: neither has them (an install without its data files).
    """
    installed = Path(sysconfig.get_path("data")) / "share" / "ibqos"
    tree = Path(__file__).resolve().parents[2]
    # a source checkout first: an editable install's share/ibqos is a copy from install time
    for root in (tree, installed):
        if (root / "systemd" / UNIT).is_file():
            return root
    raise InstallError(
        f"the shipped files (systemd/{UNIT}, ...) are neither in {installed} nor in a"
        " source tree: reinstall ibqos from its wheel or source"
    )


def default_bin() -> Path:
    """The ibqos executable of this installation (its environment's scripts directory)."""
    scripts = Path(sysconfig.get_path("scripts")) / "ibqos"
    if scripts.is_file():
        return scripts.absolute()
    found = shutil.which("ibqos")
    if found is None:
        raise InstallError("cannot find the ibqos executable: give --bin PATH")
    return Path(found).absolute()


def sandbox_problem(unit_text: str) -> str | None:
    """Why the unit *unit_text* cannot run its ``ExecStart`` executable (None: it can).

    The executable, where its symbolic links lead, and the interpreter of its ``#!`` line
    (a virtual environment's Python) must all be visible inside the unit's sandbox.
    """
    start = _EXEC_START.search(unit_text)
    if start is None:
        return None
    exe = Path(start.group(2))
    settings: dict[str, str] = {}
    for key, value in re.findall(r"^(ProtectHome|PrivateTmp)=(\S*)\s*$", unit_text, re.M):
        settings[key] = value.lower()  # the last one wins, as in systemd
    looked = [exe, exe.resolve()]
    try:
        with exe.open("rb") as script:
            first = script.readline(512)
    except OSError:
        first = b""
    if first.startswith(b"#!") and first[2:].split():
        looked.append(Path(os.fsdecode(first[2:].split()[0])))
    for path in dict.fromkeys(looked):
        for top, (key, hiding) in _HIDDEN.items():
            if path.is_relative_to(top) and settings.get(key) in hiding:
                subject = f"{exe} is" if path == exe else f"{exe} needs {path}, which is"
                return (
                    f"{subject} under {top}, hidden from the service by the unit's"
                    f" {key}={settings[key]}: it could not start (status 203/EXEC)"
                )
    return None


def plan(
    prefix: Path,
    *,
    unit_dir: Path = UNIT_DIR,
    opensm_unit: str | None = None,
    bin_path: Path | None = None,
    force: bool = False,
) -> list[Step]:
    """The files to install under *prefix*, nothing written yet.

    Args:
        prefix: the root of the installation (``/`` on the host itself).
        unit_dir: where units go, relative to *prefix*.
        opensm_unit: the site's OpenSM unit (None: the shipped ``opensm.service``, and an
            existing drop-in is kept).
        bin_path: the ibqos executable ExecStart runs (None: :func:`default_bin`).
        force: install even when the unit's sandbox hides the executable
            (:func:`sandbox_problem`).

    Raises:
        InstallError: a bad option, the shipped files are missing, or the unit could not
            start the executable (not forced).
    """
    root = data_root()
    exe = bin_path if bin_path is not None else default_bin()
    if not exe.is_absolute() or any(c.isspace() for c in str(exe)):
        raise InstallError(f"--bin {exe}: must be an absolute path without spaces")
    if opensm_unit is not None and not _UNIT_NAME.match(opensm_unit):
        raise InstallError(
            f"--opensm-unit {opensm_unit!r}: expected a service unit name such as"
            " opensm.service or opensm@0x0002c90300a1b2c3.service"
        )
    if unit_dir.is_absolute():
        raise InstallError(f"--unit-dir {unit_dir}: must be relative to --prefix")
    units = prefix / unit_dir
    unit = _EXEC_START.sub(lambda m: m.group(1) + str(exe), (root / "systemd" / UNIT).read_text())
    hidden = sandbox_problem(unit)
    if hidden is not None and not force:
        raise InstallError(
            f"{hidden}; install ibqos elsewhere (python3 -m venv /opt/ibqos), or give --force"
            " with a drop-in that relaxes the sandbox"
        )
    drop_in = (root / "systemd" / f"{UNIT}.d" / DROP_IN).read_text()
    if opensm_unit is not None:
        drop_in = _OPENSM.sub(lambda m: f"{m.group(1)}={opensm_unit}", drop_in)
    steps = [
        Step(units / UNIT, unit),
        Step(units / f"{UNIT}.d" / DROP_IN, drop_in, keep=opensm_unit is None),
        Step(prefix / "etc/default/ibqos", (root / "systemd/ibqos.default").read_text(), keep=True),
        Step(
            prefix / "etc/ibqos/ibqos.yaml",
            (root / "opensm_conf/ibqos.yaml").read_text(),
            keep=True,
        ),
    ]
    for script in sorted((root / "contrib" / "slurm").iterdir()):
        if script.is_file():
            steps.append(Step(prefix / LIBEXEC / script.name, script.read_text(), 0o755))
    for name, pattern in SHARED:
        for src in sorted((root / name).rglob(pattern)):
            if src.is_file() and "__pycache__" not in src.parts:
                mode = 0o755 if src.stat().st_mode & 0o111 else 0o644
                target = prefix / SHARE / src.relative_to(root)
                steps.append(Step(target, src.read_text(), mode))
    return steps


def install(steps: list[Step]) -> list[str]:
    """Write *steps*; return one line per file saying what happened.

    Raises:
        InstallError: a file cannot be written (those before it stay installed; running
            the command again finishes the job).
    """
    done = []
    for step in steps:
        target = step.target
        try:
            current = target.read_text() if target.exists() else None
            if step.keep and current is not None:  # an admin's file: content, mode, owner
                if current != step.text:
                    new = target.with_name(target.name + ".new")
                    _write(new, step)
                    done.append(f"kept {target} (yours); the shipped one is {new.name}")
                else:
                    done.append(f"unchanged {target}")
                continue
            if current == step.text and target.stat().st_mode & 0o777 == step.mode:
                done.append(f"unchanged {target}")
                continue
            _write(target, step)
            done.append(f"installed {target}")
        except OSError as err:
            raise InstallError(f"{err.filename or target}: {err.strerror}") from err
    return done


def _write(path: Path, step: Step) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, step.text, step.mode)
