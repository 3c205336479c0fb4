#!/usr/bin/env bash
# Set up a fresh Debian machine for ibqos, idempotently:
#  - Debian packages: OpenSM, ibsim, infiniband-diags, libibumad (the lab's real parts),
#    Prometheus (its server and promtool check the exporter, dashboards and rules);
#    Slurm (slurmctld, slurmd, slurm-client) and munge: the Slurm tests start a real
#    one-host cluster.  Never slurm-wlm-emulator: it switches the slurmctld/slurmd
#    alternatives to a front-end build that cannot start here;
#  - systemd: systemd-analyze verifies and scores ibqos.service (no systemd runs here);
#  - python3-venv: Debian's python3 makes no virtual environment without it (.venv here;
#    the packaging test makes one as the README's install section does);
#  - a virtual environment .venv with ibqos installed editable, plus the dev tools;
#  - the fluid solver compiled once into numba's cache (below).
# apt-get runs only when a package is missing; pip only when pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(opensm ibsim-utils infiniband-diags libibumad3 util-linux prometheus
  slurmctld slurmd slurm-client munge systemd python3-venv)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PY" -m venv .venv
fi
stamp=.venv/.stamp-$(sha256sum pyproject.toml | cut -c1-16)
if [ ! -f "$stamp" ]; then
  echo "setup: installing ibqos into .venv"
  .venv/bin/pip install --quiet --upgrade pip
  .venv/bin/pip install --quiet -e '.[dev]'
  rm -f .venv/.stamp-*
  touch "$stamp"
fi

# numba compiles the fluid solver (ibqos.sim) on first use, about 10 s, and caches the
# machine code beside its modules (ibqos/sim/__pycache__/*.nbi, *.nbc) for every later
# process; a tiny simulation compiles it now, so that the first lab with fluid contention
# (make demo) or the first what-if does not pay it.  Run every time: numba recompiles
# only what changed since (the cache is keyed by the source files), else it takes ~2 s.
echo "setup: the fluid solver in numba's cache"
.venv/bin/ibqos simulate --xgft "2;8,4;1,2" --jobs examples/demo-jobs.yaml \
  --iterations 1 --policy ibqos >/dev/null
