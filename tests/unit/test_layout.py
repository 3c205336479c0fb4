"""The package's house rules, read from its source (the layers and import circles are
import-linter's, in ``make lint``): module size, logger names, where error classes live,
and one way to run a tool."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from tests.support.paths import ROOT

PACKAGE = ROOT / "ibqos"
MODULES = sorted(PACKAGE.rglob("*.py"))
MAX_LINES = 600

#: Direct subprocess calls allowed outside ibqos/tools.py, and why.
SUBPROCESS_ALLOWED = {
    # the lab supervisor forks and detaches; capturing its output would wait for it to end
    ("lab/manage.py", "run"),
    # ``ibqos lab run`` hands the terminal to the user's command
    ("cli/lab.py", "call"),
    # long-running children (OpenSM, ibsim, slurmctld), ended by pid
    ("lab/procs.py", "Popen"),
}


def _rel(path: Path) -> str:
    return path.relative_to(PACKAGE).as_posix()


def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), str(path))


def test_the_package_has_modules() -> None:
    assert len(MODULES) > 50 and (PACKAGE / "errors.py") in MODULES


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_no_module_is_a_giant(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{_rel(path)}: {lines} lines; split it along its seams"


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_loggers_are_named_by_module(path: Path) -> None:
    """``log = logging.getLogger(__name__)`` at module level, and no other getLogger."""
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "getLogger":
            assert [ast.unparse(a) for a in node.args] == ["__name__"], (
                f"{_rel(path)}:{node.lineno}: {ast.unparse(node)}"
            )
    module_level = [
        ast.unparse(n)
        for n in _tree(path).body
        if isinstance(n, ast.Assign) and "getLogger" in ast.unparse(n.value)
    ]
    assert module_level in ([], ["log = logging.getLogger(__name__)"]), module_level


#: Exception classes allowed outside ibqos/errors.py: control flow that never leaves its
#: package, and is turned there into a result (never reported as such).
CONTROL_FLOW = {
    "ibqos.jobs.checks.Invalid",  # a job-file check's problems, turned into pydantic's
    "ibqos.opensm.policy.reader.Stop",  # the parse stops here, as OpenSM's does
}


def test_error_classes_live_in_errors() -> None:
    """Every exception class is defined in ibqos/errors.py, but for internal control flow."""
    found = set()
    for path in MODULES:
        name = ".".join(("ibqos", *path.relative_to(PACKAGE).with_suffix("").parts))
        name = name.removesuffix(".__init__")
        if name in ("ibqos.errors", "ibqos.__main__"):
            continue
        module = importlib.import_module(name)
        found |= {
            f"{name}.{attr}"
            for attr, obj in vars(module).items()
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == name
        }
    assert found == CONTROL_FLOW, "error classes belong in ibqos/errors.py"


@pytest.mark.parametrize("path", MODULES, ids=_rel)
def test_tools_run_through_one_runner(path: Path) -> None:
    """One-shot tool runs go through :func:`ibqos.tools.run_tool` (timeouts, output
    capture, errors that name the tool)."""
    if _rel(path) == "tools.py":
        return
    calls = {
        (_rel(path), n.func.attr)
        for n in ast.walk(_tree(path))
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id == "subprocess"
    }
    assert calls <= SUBPROCESS_ALLOWED, sorted(calls - SUBPROCESS_ALLOWED)


@pytest.mark.parametrize(
    "init", sorted(PACKAGE.rglob("__init__.py")), ids=lambda p: _rel(p.parent) or "ibqos"
)
def test_faces_do_not_hide_their_modules(init: Path) -> None:
    """A face that imports a function named like one of its submodules replaces the module
    by the function as the package's attribute (``import ibqos.x.y as m`` then gets the
    function)."""
    package = ".".join(("ibqos", *init.parent.relative_to(PACKAGE).parts))
    face = importlib.import_module(package)
    for sub in init.parent.iterdir():
        name = sub.stem if sub.suffix == ".py" else sub.name
        if name.startswith("_") or not (sub.suffix == ".py" or (sub / "__init__.py").exists()):
            continue
        found = getattr(face, name, None)
        assert found is None or inspect.ismodule(found), f"{package}.{name} is a {found!r}"


def test_unit_tests_mirror_the_package() -> None:
    """``tests/unit/<package>/`` for each package's tests: a folder there names a package
    of ibqos, and only the top-level modules' tests sit in ``tests/unit`` itself."""
    unit = ROOT / "tests" / "unit"
    for folder in sorted(p for p in unit.iterdir() if p.is_dir() and p.name != "__pycache__"):
        assert (PACKAGE / folder.name / "__init__.py").exists(), f"tests/unit/{folder.name}/"
    top_level = {p.stem for p in PACKAGE.glob("*.py")}
    for test in sorted(unit.glob("test_*.py")):
        assert test.stem.removeprefix("test_") in top_level | {"layout", "schemas"}, test.name
