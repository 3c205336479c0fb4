#!/usr/bin/env bash
# The demo: bring a lab fabric up (real ibsim + OpenSM, ftree routing, QoS on), run the
# example job mix for a few ticks, show OpenSM's state and a few ports' counters moving
# (read through real PMA MADs with perfquery), add a job on the fly, print the model's
# ground truth per job and fat-tree level, and take everything down again.
set -euo pipefail
cd "$(dirname "$0")/.."
IBQOS=.venv/bin/ibqos
export IBQOS_LAB_ROOT
IBQOS_LAB_ROOT=$(mktemp -d /tmp/ibqos-demo.XXXXXX)
NAME=demo
cleanup() {
  if [ -d "$IBQOS_LAB_ROOT/$NAME" ]; then "$IBQOS" lab down "$NAME" || true; fi
  rm -rf "$IBQOS_LAB_ROOT"
}
trap cleanup EXIT

say() { printf '\n== %s\n' "$*"; }

say "lab up: XGFT 2;8,4;1,2 (4 leaf switches x 8 hosts, 2 spines), 4x EDR, jobs from examples/lab-jobs.yaml"
"$IBQOS" lab up --name "$NAME" --xgft "2;8,4;1,2" --jobs examples/lab-jobs.yaml --tick 1
"$IBQOS" lab status "$NAME"

say "OpenSM, asked through the fabric (sminfo) and its log"
"$IBQOS" lab run "$NAME" -- sminfo
grep -E "MASTER|SUBNET UP|ftree" "$IBQOS_LAB_ROOT/$NAME/opensm/opensm.log" | tail -3

# LIDs from the discovered fabric: host cn0001 and the first leaf switch.
disc="$IBQOS_LAB_ROOT/$NAME/ibnetdiscover.txt"
host_lid=$(awk '/"cn0001 mlx5_0"/ && /^Ca/ {getline; for (i=1;i<=NF;i++) if ($i=="lid") {print $(i+1); exit}}' "$disc")
leaf_lid=$(awk '/"sw-L1-0001"/ && /^Switch/ {for (i=1;i<=NF;i++) if ($i=="lid") {print $(i+1); exit}}' "$disc")
uplink=9   # leaf ports 1-8 go to hosts, 9-10 up to the spines

read_xmit() { "$IBQOS" lab run "$NAME" --host "$3" -- perfquery -x "$1" "$2" | awk -F'[.:]+' '/^PortXmitData/ {print $2}'; }
say "counters moving (PortXmitData, 64-bit, read with perfquery -x; bytes = 4 x words)"
printf '%-28s %20s %20s\n' "read (2 s apart)" "cn0001 port 1" "sw-L1-0001 port $uplink"
prev_h=$(read_xmit "$host_lid" 1 cn0001); prev_l=$(read_xmit "$leaf_lid" "$uplink" sw-L1-0001)
for i in 1 2 3; do
  sleep 2
  h=$(read_xmit "$host_lid" 1 cn0001); l=$(read_xmit "$leaf_lid" "$uplink" sw-L1-0001)
  awk -v t="read $i" -v h="$h" -v ph="$prev_h" -v l="$l" -v pl="$prev_l" 'BEGIN {
    printf "%-28s %11s (+%5.2f GB) %11s (+%5.2f GB)\n", t, h, (h - ph) * 4 / 1e9, l, (l - pl) * 4 / 1e9 }'
  prev_h=$h; prev_l=$l
done

say "add a job while the lab runs (all-to-all over all four leaf switches)"
"$IBQOS" lab job add "$NAME" --id 2001 --app cg --nodes "cn[0005-0008,0013-0016,0029-0032]" \
  --pattern all-to-all --rate 3e9 --duty 0.5 --period 0.05
sleep 2.5

say "ground truth kept by the traffic model: GB/s per job and fat-tree level (last tick)"
.venv/bin/python - "$IBQOS_LAB_ROOT/$NAME/truth.json" <<'PY'
import json, sys
truth = json.load(open(sys.argv[1]))
print(f"{'job':>6} " + " ".join(f"{'level ' + str(l):>9}" for l in range(truth["levels"])))
for jid, job in sorted(truth["jobs"].items()):
    rates = " ".join(f"{r / 1e9:9.2f}" for r in job["level_bytes_per_s"])
    print(f"{jid:>6} {rates}{'' if job['running'] else '  (ended)'}")
print(f"model time {truth['time_s']:.1f} s, {truth['ticks']} ticks, "
      f"{truth['lines_last_tick']} PerformanceSet lines in the last tick")
PY

say "every port at once: ibqos collect (native collector: PerfMgt Gets through libibumad, many in flight)"
"$IBQOS" lab run "$NAME" -- ibqos collect --once --interval 1 --format csv \
  >"$IBQOS_LAB_ROOT/ports.csv" 2>/dev/null
.venv/bin/python - "$IBQOS_LAB_ROOT/ports.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
busy = sorted(rows, key=lambda r: -float(r["xmit_bytes_per_s"] or 0))[:8]
print(f"{len(rows)} ports read; the busiest:")
print(f"{'node':<16} {'port':>4} {'level':>5} {'role':<5} {'xmit GB/s':>10} {'rcv GB/s':>10}")
for r in busy:
    x, y = float(r["xmit_bytes_per_s"]) / 1e9, float(r["rcv_bytes_per_s"]) / 1e9
    print(f"{r['node_desc']:<16} {r['port']:>4} {r['level']:>5} {r['role']:<5} {x:10.2f} {y:10.2f}")
PY

say "one decision cycle: ibqos plan (per-level traffic, class, SL, VL per job; the lanes and their weights)"
"$IBQOS" lab run "$NAME" -- ibqos plan --interval 2 2>/dev/null

say "lab down"
"$IBQOS" lab down "$NAME"
