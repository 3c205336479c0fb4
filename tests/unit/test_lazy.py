"""The packages' public names, imported when first read (ibqos.lazy): each is the name its
``TYPE_CHECKING`` import says, no module hides one, and a package costs nothing until read."""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import ibqos

PACKAGES = sorted(
    m.name
    for m in pkgutil.iter_modules(ibqos.__path__, "ibqos.")
    if m.ispkg and "attach(" in (Path(ibqos.__path__[0]) / m.name[6:] / "__init__.py").read_text()
)


def _typing_imports(package: ModuleType) -> dict[str, str]:
    """name -> module, from the ``if TYPE_CHECKING:`` imports of *package*'s __init__."""
    assert package.__file__ is not None
    tree = ast.parse(Path(package.__file__).read_text())
    block = next(
        n
        for n in tree.body
        if isinstance(n, ast.If) and isinstance(n.test, ast.Name) and n.test.id == "TYPE_CHECKING"
    )
    return {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.module is not None
        for alias in node.names
    }


def test_the_lazy_packages_are_found() -> None:
    assert {"ibqos.agent", "ibqos.config", "ibqos.fabric", "ibqos.sim"} <= set(PACKAGES)


@pytest.mark.parametrize("name", PACKAGES)
def test_each_name_is_its_modules(name: str) -> None:
    package = importlib.import_module(name)
    where = _typing_imports(package)
    assert sorted(where) == sorted(package.__all__)
    for attr, module in where.items():
        assert getattr(package, attr) is getattr(importlib.import_module(module), attr), attr
    assert set(package.__all__) <= set(dir(package))
    with pytest.raises(AttributeError, match="has no attribute 'nothing_of_that_name'"):
        _ = package.nothing_of_that_name


@pytest.mark.parametrize("name", PACKAGES)
def test_no_module_hides_a_name(name: str) -> None:
    """A submodule named as an exported name would replace it on the package once imported."""
    package = importlib.import_module(name)
    modules = {m.name for m in pkgutil.iter_modules(package.__path__)}
    assert not modules & set(package.__all__)


def test_a_module_does_not_import_its_package_siblings() -> None:
    """``ibqos.agent.lock`` runs the lock's module, not the daemon's (nor pandas)."""
    code = (
        "import json, sys\n"
        "from ibqos.agent import AgentLock\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('ibqos.', 'pandas')))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    modules = json.loads(done.stdout)
    assert "ibqos.agent.lock" in modules
    assert "ibqos.agent.daemon" not in modules and "pandas" not in modules
