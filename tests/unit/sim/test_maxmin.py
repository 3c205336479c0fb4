"""The fluid solver's compiled kernels (ibqos.sim.maxmin) where numba cannot cache."""

from __future__ import annotations

import os
import subprocess
import sys


def test_the_solver_compiles_without_a_writable_cache() -> None:
    # A read-only install under systemd (ProtectSystem=strict, ProtectHome=yes) leaves
    # numba no place for its cache, and numba then refuses the cached decorator at
    # import ("no locator available").  The locator of NUMBA_CACHE_DIR alone, with no
    # such directory set, stands for that.
    code = (
        "import numpy as np\n"
        "from ibqos.sim.maxmin import fill\n"
        "out = np.empty(2)\n"
        "fill(np.array([2.0, 2.0]), np.ones(2), 1.0, out)\n"
        "print(out.tolist())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env["NUMBA_CACHE_LOCATOR_CLASSES"] = "UserProvidedCacheLocator"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[0.5, 0.5]"
