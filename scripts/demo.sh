#!/usr/bin/env bash
# The demo (`make demo`): what ibqos does, watched on a simulated fabric.
#
# It brings a lab up (real ibsim + OpenSM, ftree routing, QoS on) with a mixed job
# workload (examples/demo-jobs.yaml: one heavy all-to-all across the leaves, a moderate
# stencil, light jobs; more jobs than lanes), shows the fabric and its counters, what the
# agent would write (a dry run), then runs the agent (`ibqos run`) for a few minutes while
# jobs start, end and turn heavy. Every round prints what happened, the agent's log, what
# it measured and decided (`ibqos status`) and what OpenSM programmed into a spine switch
# (read back with smpquery) and what a real Prometheus scraped from the agent's metrics
# endpoint (the queries of the shipped Grafana dashboards), and how fast each job iterates.
# The lab runs fluid contention (`--contention fluid`, docs/lab.md): the jobs share links
# the way the lanes programmed on the switches say (read back from the fabric through the
# SA), so ibqos's plans change the jobs' progress; the lab serves each job's iterations per
# second on its own metrics endpoint. Once the mix holds still, the agent tunes: it tries
# the favour-light law and two other setups on the fabric, a few sweeps each, and keeps the
# one the jobs' own counters show them progressing best under (docs/tuning.md); the last
# rounds show its trials, its scores and the jobs' progress before and after. Everything is
# taken down at the end, on error and on Ctrl-C.
# About 3 minutes; IBQOS_DEMO_ROUND_S (default 12) sets the seconds between two rounds.
set -euo pipefail
cd "$(dirname "$0")/.."
IBQOS=$PWD/.venv/bin/ibqos
PY=$PWD/.venv/bin/python
export IBQOS_LAB_ROOT
IBQOS_LAB_ROOT=$(mktemp -d /tmp/ibqos-demo.XXXXXX)
NAME=demo
LAB=$IBQOS_LAB_ROOT/$NAME
ROUND_S=${IBQOS_DEMO_ROUND_S:-12} # seconds between two rounds
T0=$SECONDS
runner_pid="" # `ibqos lab run ... ibqos run` (the agent's parent)
agent_pid=""  # the agent itself
prom_pid=""   # Prometheus, scraping the agent
PROM_URL=""

stop_agent() {
  # The agent writes its own pid (sh's $$, then exec); SIGTERM ends it after its cycle.
  if [ -z "$runner_pid" ]; then return 0; fi
  local i rc=0
  for i in $(seq 50); do # the pid file comes as soon as the runner has started sh
    if [ -s "$LAB/agent.pid" ] || ! kill -0 "$runner_pid" 2>/dev/null; then break; fi
    sleep 0.1
  done
  if [ -z "$agent_pid" ] && [ -s "$LAB/agent.pid" ]; then agent_pid=$(cat "$LAB/agent.pid"); fi
  if [ -n "$agent_pid" ] && kill -0 "$agent_pid" 2>/dev/null; then
    kill -TERM "$agent_pid"
    for i in $(seq 300); do kill -0 "$agent_pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$agent_pid" 2>/dev/null; then kill -KILL "$agent_pid" || true; fi
  fi
  wait "$runner_pid" || rc=$?
  runner_pid=""
  return "$rc"
}
stop_prometheus() {
  if [ -z "$prom_pid" ]; then return 0; fi
  kill -TERM "$prom_pid" 2>/dev/null || true
  wait "$prom_pid" 2>/dev/null || true
  prom_pid=""
}
cleanup() {
  trap - INT TERM
  stop_agent || true
  stop_prometheus
  if [ -d "$LAB" ]; then "$IBQOS" lab down "$NAME" || true; fi
  rm -rf "$IBQOS_LAB_ROOT"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

say() { printf '\n== %s\n' "$*"; }
note() { printf '   %s\n' "$@"; }

# -- the lab -------------------------------------------------------------------------
say "lab up: XGFT 2;8,4;1,2 (4 leaf switches x 8 hosts, 2 spines), 4x EDR, jobs from examples/demo-jobs.yaml"
"$IBQOS" lab up --name "$NAME" --xgft "2;8,4;1,2" --jobs examples/demo-jobs.yaml --tick 0.25 \
  --contention fluid
"$IBQOS" lab status "$NAME" | grep -E "^lab|pid [0-9]|jobs:|contention"
LAB_METRICS=$("$IBQOS" lab status "$NAME" --format json | "$PY" -c 'import json, sys; print(json.load(sys.stdin)["metrics_url"])')
note "fluid contention: each job computes, then sends its iteration's bytes at up to its rate;" \
  "jobs share the links as the lanes read back from the switches say (OpenSM's defaults for" \
  "now: every job on SL 0, one lane). Iterations per second per job: $LAB_METRICS"

say "OpenSM, asked through the fabric (sminfo) and its log"
"$IBQOS" lab run "$NAME" -- sminfo
grep -E "MASTER|SUBNET UP|ftree" "$LAB/opensm/opensm.log" | tail -3

# LIDs from the discovered fabric.
disc=$LAB/ibnetdiscover.txt
host_lid() { awk -v h="\"$1 mlx5_0\"" '$0 ~ h && /^Ca/ {getline; for (i=1;i<=NF;i++) if ($i=="lid") {print $(i+1); exit}}' "$disc"; }
switch_lid() { awk -v s="\"$1\"" '/^Switch/ && $0 ~ s {for (i=1;i<=NF;i++) if ($i=="lid") {print $(i+1); exit}}' "$disc"; }
host_lid_cn0001=$(host_lid cn0001)
leaf_lid=$(switch_lid sw-L1-0001)
spine_lid=$(switch_lid sw-L2-0001)
spine_port=1 # a spine's port 1 goes down to leaf sw-L1-0001
uplink=9     # leaf ports 1-8 go to hosts, 9-10 up to the spines

read_xmit() { "$IBQOS" lab run "$NAME" --host "$3" -- perfquery -x "$1" "$2" | awk -F'[.:]+' '/^PortXmitData/ {print $2}'; }
now() { date +%s.%N; }
say "counters moving (PortXmitData, 64-bit, read with perfquery -x; bytes = 4 x words)"
printf '%-8s %38s %38s\n' "" "cn0001 port 1 (host, job 3001)" "sw-L1-0001 port $uplink (uplink to a spine)"
prev_t=$(now)
prev_h=$(read_xmit "$host_lid_cn0001" 1 cn0001)
prev_l=$(read_xmit "$leaf_lid" "$uplink" sw-L1-0001)
for i in 1 2; do
  sleep 1.5
  t=$(now)
  h=$(read_xmit "$host_lid_cn0001" 1 cn0001)
  l=$(read_xmit "$leaf_lid" "$uplink" sw-L1-0001)
  awk -v i="$i" -v t="$t" -v pt="$prev_t" -v h="$h" -v ph="$prev_h" -v l="$l" -v pl="$prev_l" 'BEGIN {
    d = t - pt; gh = (h - ph) * 4 / 1e9; gl = (l - pl) * 4 / 1e9
    printf "read %d   %13s +%5.2f GB = %5.2f GB/s %13s +%5.2f GB = %5.2f GB/s\n", i, h, gh, gh / d, l, gl, gl / d }'
  prev_t=$t
  prev_h=$h
  prev_l=$l
done
note "a 4x EDR link carries 12.5 GB/s each way; the model counts what the jobs send through it."

say "ground truth kept by the traffic model: GB/s per job injected (level 0) and across the spines (level 1)"
"$PY" - "$LAB/truth.json" <<'PY'
import json, sys
truth = json.load(open(sys.argv[1]))
print(f"{'job':>6} " + " ".join(f"{'level ' + str(l):>9}" for l in range(truth["levels"])))
for jid, job in sorted(truth["jobs"].items()):
    rates = " ".join(f"{r / 1e9:9.2f}" for r in job["level_bytes_per_s"])
    print(f"{jid:>6} {rates}{'' if job['running'] else '  (ended)'}")
PY
note "a leaf's two uplinks carry 25 GB/s: job 3001 alone fills 64 % of those of leaves 1 and 2."

say "every port at once: ibqos collect (native collector: PerfMgt Gets through libibumad, many in flight)"
"$IBQOS" lab run "$NAME" -- ibqos collect --once --interval 1 --format csv \
  >"$LAB/ports.csv" 2>/dev/null
"$PY" - "$LAB/ports.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
busy = sorted(rows, key=lambda r: -float(r["xmit_bytes_per_s"] or 0))[:5]
print(f"{len(rows)} ports read; the busiest:")
print(f"{'node':<16} {'port':>4} {'level':>5} {'role':<5} {'xmit GB/s':>10} {'rcv GB/s':>10}")
for r in busy:
    x, y = float(r["xmit_bytes_per_s"]) / 1e9, float(r["rcv_bytes_per_s"]) / 1e9
    print(f"{r['node_desc']:<16} {r['port']:>4} {r['level']:>5} {r['role']:<5} {x:10.2f} {y:10.2f}")
PY

# -- a job profile from the offline characterization (characterize/README.md) ----------
say "a job profile, made offline: ibqos characterize on the example trace of a stencil code"
note "characterize/traces/stencil-trace.csv: 8 ranks of a 2-D halo exchange; with 4 ranks per" \
  "node it is a 2-node job. Per placement on this fabric, its traffic per level and its class:"
"$IBQOS" characterize trace characterize/traces/stencil-trace.csv --xgft "2;8,4;1,2" \
  --ranks-per-node 4 --placement contiguous --placement F1 | sed -n '1,/^$/p' | head -4
# the agent reads (and learns into) a copy: the checkout's example profiles stay as shipped
mkdir -p "$LAB/profiles"
cp characterize/profiles/*.yaml "$LAB/profiles/"
"$IBQOS" characterize profiles --profiles "$LAB/profiles"
note "the agent gets profiles.dir = these: a new job named stencil on 2 nodes starts in the" \
  "profile's class (low) instead of the default for a job with no history (moderate)."

# -- the agent's config: the lab's, with short time constants so changes show quickly ---
CFG=$LAB/agent.yaml
"$PY" - "$LAB/ibqos.yaml" "$CFG" "$LAB/profiles" <<'PY'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
doc |= {
    "profiles": {"dir": sys.argv[3]},  # characterize/profiles, copied
    "collect": {"interval_s": 5},  # a sweep every 5 s (default 10)
    "classify": {"tau_s": 10},  # intensity smoothed over ~10 s (default 60)
    "lanes": {"min_hold_s": 10, "min_interval_s": 0},  # class changes held 10 s (60/300)
    # a round of trials once the mix held 10 s (30); 2 sweeps per trial (3); the law and
    # the next 2 setups (3)
    # (the lab's own tuning keys, lft_dump: OpenSM's routes for the prediction, stay)
    # the lab's counters come in lumps: a gain must clear 3 % and two standard errors;
    # the demo shows trials, so the prediction spares none (predicted_slack 10)
    "tuning": doc.get("tuning", {})
    | {
        "settle_s": 10,
        "trial_sweeps": 2,
        "shortlist": 2,
        "margin": 0.03,
        "margin_sigmas": 2,
        "predicted_slack": 10,
    },
    "metrics": {"listen": "127.0.0.1:0", "fabric": "demo"},  # any free port, in the log
}
# 6 reloads a minute (2): the demo's plan changes and trials come seconds apart
doc["opensm"]["reload_budget"] = {"burst": 6, "per_minute": 6}
open(sys.argv[2], "w").write(yaml.safe_dump(doc, sort_keys=False))
PY

say "dry run: what the agent would write into OpenSM's files (ibqos run --dry-run --once); nothing is written"
note "config: the lab's ibqos.yaml plus collect.interval_s 5, classify.tau_s 10, lanes.min_hold_s 10," \
  "min_interval_s 0 (defaults 10, 60, 60, 300: real fabrics want calm lanes; the demo wants to show changes)," \
  "tuning.settle_s 10, trial_sweeps 2, shortlist 2, margin 0.03, margin_sigmas 2, predicted_slack 10" \
  "(defaults 30, 3, 3, 0, 0, 0.05),"  \
  "opensm.reload_budget 6 a minute (2)"
if ! "$IBQOS" lab run "$NAME" -- "$IBQOS" run --config "$CFG" --dry-run --once \
  >"$LAB/dry-run.txt" 2>"$LAB/dry-run.log"; then
  cat "$LAB/dry-run.log" >&2
  exit 1
fi
# The policy diff names every port of every job: show the first job's blocks, count the rest.
"$PY" - "$LAB/dry-run.txt" <<'PY'
import sys
out, seen, block, guids = [], {}, None, 0
for line in open(sys.argv[1]).read().splitlines():
    body = line[1:].strip() if line.startswith("+") else None
    if body in ("port-group", "qos-level", "qos-match-rule"):
        block = body
        seen[block] = seen.get(block, 0) + 1
    first = block is None or seen[block] == 1
    if first and body is not None and body.startswith("port-guid:"):
        guids += 1
        if guids <= 2:
            out.append(line)
        continue
    if guids > 2:
        out.append(f"+    ... {guids - 2} more port-guid lines: one per port of the job")
    guids = 0
    if first:
        out.append(line)
    if block is not None and body == f"end-{block}":
        if seen[block] == 2:
            out.append(f"+  ... the same {block} block for every other job")
        block = None
print("\n".join(out))
PY
note "SL2VL (qos_*_sl2vl: the VL of SL 0..15) and VLArb weights (qos_*_vlarb_low: VL:weight) go" \
  "into opensm.conf; the policy puts each job's ports in a port-group and its paths on its SL."

# -- the agent, round by round --------------------------------------------------------
# One Python helper per round: the agent's new log lines, then a check of what the
# switch says against the plan in force, and a few facts worth a look.
show_log() {
  "$PY" - "$LAB/agent.log" "$LAB/agent.log.seen" <<'PY'
import sys
from pathlib import Path
log, seen_file = Path(sys.argv[1]), Path(sys.argv[2])
lines = log.read_text().splitlines()
seen = int(seen_file.read_text()) if seen_file.exists() else 0
seen_file.write_text(str(len(lines)))
new = lines[seen:]
sweeps = sum("ibqos.collect.loop: sweep:" in line for line in new)
print(f"agent log since the last round ({sweeps} sweep line{'s' if sweeps != 1 else ''} left out):")
for line in new:
    if "ibqos.collect.loop: sweep:" in line or "umad2sim" in line:
        continue
    print("   " + line.replace("INFO ibqos.", ""))
PY
}

show_switch() {
  "$IBQOS" lab run "$NAME" -- sh -c \
    "smpquery sl2vl $spine_lid $spine_port && echo ==== && smpquery vlarb $spine_lid $spine_port" \
    >"$LAB/switch.txt"
  echo "what OpenSM programmed, read back from spine sw-L2-0001 (LID $spine_lid), port $spine_port (to leaf sw-L1-0001):"
  "$PY" - "$LAB/switch.txt" "$LAB/agent/state.json" "$@" <<'PY'
import json, re, sys
from pathlib import Path
text, state = Path(sys.argv[1]).read_text(), json.loads(Path(sys.argv[2]).read_text())
sl2vl_out, vlarb_out = text.split("====\n")
head = next(l for l in sl2vl_out.splitlines() if "SL:" in l)
row = next(l for l in sl2vl_out.splitlines() if l.startswith("ports: in  2,"))
print(f"   $ smpquery sl2vl\n   {head}\n   {row}")
sl2vl = [int(x) for x in row.split(":", 2)[2].split("|") if x.strip()]
low = [l for l in vlarb_out.splitlines() if l.startswith(("VL", "WEIGHT"))][:2]
print("   $ smpquery vlarb   (low-priority table)\n   " + "\n   ".join(low))
vls, weights = ([int(x, 16) for x in re.findall(r"0x[0-9A-Fa-f]+", r)] for r in low)
vlarb: dict[int, int] = {}
for vl, w in zip(vls, weights):
    if w:
        vlarb[vl] = vlarb.get(vl, 0) + w
plan = state["plan"]
tables = plan["tables"]
want_vlarb: dict[int, int] = {}
for vl, w in tables["vlarb_low"]:
    if w:
        want_vlarb[vl] = want_vlarb.get(vl, 0) + w
per_vl = "  ".join(f"VL{vl} {w}" for vl, w in sorted(vlarb.items()))
print(f"   = weight per VL (64-byte credits per round): {per_vl}")
if sl2vl == tables["sl2vl"] and vlarb == want_vlarb:
    print("   = the plan in force, exactly (SL2VL and VLArb)")
else:
    print("   ! differs from the plan in force (an apply under way?)")

jobs = plan["jobs"]
lanes = {lane["vl"]: lane for lane in plan["lanes"]}
weight = {vl: lane["weight"] for vl, lane in lanes.items()}
look = []
for vl, lane in sorted(lanes.items()):
    if len(lane["jobs"]) > 1:
        look.append(f"VL{vl} is shared by jobs {', '.join(lane['jobs'])} (SLs {','.join(map(str, lane['sls']))})")
light = [weight[j["vl"]] for j in jobs if j["class"] == "low"]
tuning = state.get("tuning") or {}
setup = tuning.get("wanted", "favour-light")
if setup != "favour-light":  # tuning tries or keeps another setup: not the law's weights
    what = "tries" if tuning.get("state") == "trial" else "keeps"
    look.append(f"tuning {what} setup {setup}: lanes and weights as it says, not the law's")
    light = []
for j in jobs:
    if j["class"] == "high" and light:
        alone = lanes[j["vl"]]["jobs"] == [j["id"]]
        least = weight[j["vl"]] < min(light)
        look.append(
            f"high job {j['id']} ({j['name']}): {'alone' if alone else 'NOT alone'} on VL{j['vl']}, "
            f"weight {weight[j['vl']]}, {'less than' if least else 'NOT less than'} "
            f"any light job's lane ({min(light)}-{max(light)})"
        )
held = [f"{j['id']} {j['class']}->{j['measured_class']}" for j in jobs if j["class"] != j["measured_class"]]
if held:
    look.append(f"measured class differs, change held: {', '.join(held)}")
for arg in sys.argv[3:]:
    what, jid = arg.split("=")
    if what == "ended":
        policy = Path(sys.argv[2]).parents[1] / "opensm" / "qos-policy.conf"
        gone = jid not in state["job_sl"] and f"ibqos_job_{jid}" not in policy.read_text()
        look.append(f"job {jid} ended: {'its SL is free again and its port-group is out of the policy' if gone else 'STILL PLANNED'}")
print("look:")
for line in look:
    print("   - " + line)
PY
}

# PathRecord between two hosts as the SA serves it, polled until it carries the job's SL.
# Time counts from the change of the job file (when the scheduler started the job).
show_path() { # job src dst
  local src dst
  src=$(host_lid "$2")
  dst=$(host_lid "$3")
  echo "PathRecord $2 (LID $src) -> $3 (LID $dst), from the SA (saquery PR --slid $src --dlid $dst):"
  "$IBQOS" lab run "$NAME" -- "$PY" - "$1" "$src" "$dst" "$LAB/jobs.yaml" "$LAB/agent/state.json" <<'PY'
import json, os, re, signal, subprocess, sys, time
signal.signal(signal.SIGINT, signal.SIG_DFL)
job, src, dst, jobs_file, state_file = sys.argv[1:]
t0 = os.stat(jobs_file).st_mtime
sl = served = None
while time.time() - t0 < 15:
    try:
        sl = json.load(open(state_file))["job_sl"].get(job)
    except (OSError, ValueError):
        pass
    out = subprocess.run(["saquery", "PR", "--slid", src, "--dlid", dst],
                         capture_output=True, text=True).stdout
    m = re.search(r"^\s*sl\.+0x([0-9a-fA-F]+)", out, re.M)
    served = None if m is None else int(m.group(1), 16)
    if sl is not None and served == sl:
        break
    time.sleep(0.1)
elapsed = time.time() - t0
for line in out.splitlines():
    if re.match(r"^\s*(slid|dlid|sl|mtu)\.", line):
        print("   " + line.strip())
if sl is not None and served == sl:
    print(f"   = job {job}'s SL {sl}, served {elapsed:.1f} s after the job file changed")
else:
    print(f"   ! job {job}: planned SL {sl}, the SA serves SL {served} after {elapsed:.1f} s")
PY
}

ROUNDS=9
round_no=0
round_start=0
round() { # headline, then what to look for
  round_no=$((round_no + 1))
  round_start=$SECONDS
  printf '\n'
  printf '%.0s-' $(seq 90)
  printf '\nround %d/%d, demo time %d s: %s\n' "$round_no" "$ROUNDS" $((SECONDS - T0)) "$1"
  shift
  note "$@"
}
settle() { # sleep until the round is ROUND_S old (or $1 seconds)
  local left=$((${1:-$ROUND_S} - (SECONDS - round_start)))
  if [ "$left" -gt 0 ]; then sleep "$left"; fi
}
wait_plan() { # timeout_s condition: wait until a Python condition on the plan (jobs, plan,
  # tuning: the state file's) holds
  "$PY" - "$LAB/agent/state.json" "$@" <<'PY'
import json, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C: end quietly, the trap cleans up
path, timeout, cond = sys.argv[1], float(sys.argv[2]), sys.argv[3]
t0 = time.monotonic()
while True:
    try:
        state = json.load(open(path))
        plan, tuning = state["plan"], state.get("tuning") or {}
        if eval(cond, {"jobs": {j["id"]: j for j in plan["jobs"]}, "plan": plan, "tuning": tuning}):
            break
    except (OSError, ValueError, KeyError, TypeError):
        pass
    if time.monotonic() - t0 > timeout:
        print(f"   (not there after {timeout:.0f} s; this is the state now)")
        break
    time.sleep(0.5)
PY
}
start_prometheus() { # a real Prometheus scraping the agent every second, with ibqos's rules
  local target prom=$IBQOS_LAB_ROOT/prometheus port
  target=$(sed -n 's|.*metrics on http://\([^/]*\)/metrics.*|\1|p' "$LAB/agent.log" | head -1)
  port=$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  mkdir -p "$prom"
  cp dashboards/ibqos.rules.yml "$prom/"
  cat >"$prom/prometheus.yml" <<YML
global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [ibqos.rules.yml]
scrape_configs:
  - job_name: ibqos
    static_configs: [{targets: ["$target"]}]
YML
  promtool check config "$prom/prometheus.yml" >/dev/null
  prometheus --config.file="$prom/prometheus.yml" --web.listen-address="127.0.0.1:$port" \
    --storage.tsdb.path="$prom/data" --storage.tsdb.retention.time=1h >"$prom/log" 2>&1 &
  prom_pid=$!
  PROM_URL=http://127.0.0.1:$port
  note "Prometheus (pid $prom_pid) on $PROM_URL scrapes the agent's metrics on http://$target/metrics"
}

show_prometheus() { # what the Lanes and Jobs dashboards show now, queried from Prometheus
  [ -n "$PROM_URL" ] || return 0
  "$PY" - "$PROM_URL" <<'PY'
import json, sys, urllib.parse, urllib.request
url = sys.argv[1]
def query(expr):
    q = urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query?{q}", timeout=5) as resp:
            return json.load(resp)["data"]["result"]
    except OSError:
        return []
def by(expr, label):
    return {int(e["metric"][label]): float(e["value"][1]) for e in query(expr)}
util = by('ibqos_lane_utilization_ratio{level="1"}', "vl")
weight = by("ibqos:lane_weight_share:ratio", "vl")
jobs = by("ibqos_lane_jobs", "vl")
if not weight:
    print("Prometheus: no scrape yet (its first scrape comes ~5 s after it starts)")
    sys.exit()
print("Prometheus (as the Lanes dashboard shows it): per VL, jobs, weight share, leaf-uplink utilization")
for vl in sorted(weight):
    bar = "#" * round(util.get(vl, 0.0) * 50)
    print(f"   VL {vl}: {int(jobs.get(vl, 0))} jobs, weight {weight[vl]:5.1%}, uplinks {util.get(vl, 0.0):6.1%} {bar}")
level = by("ibqos:level_utilization:ratio", "level")
classes = {e["metric"]["class"]: int(float(e["value"][1])) for e in query("ibqos:job_count_by_class:sum")}
changes = query("ibqos_plan_changes_total")
print(f"   leaf uplinks {level.get(1, 0.0):.1%} busy; jobs by class {classes};"
      f" plan changes so far {int(float(changes[0]['value'][1])) if changes else 0}")
state = [e["metric"]["state"] for e in query("ibqos_tuning_state == 1")]
if state:
    setup = [e["metric"]["setup"] for e in query("ibqos_tuning_setup_info")]
    trial = [e["metric"]["setup"] for e in query("ibqos_tuning_trial_info")]
    scores = {
        (e["metric"]["setup"], e["metric"]["source"]): float(e["value"][1])
        for e in query("ibqos_tuning_score")
    }
    reloads = query("ibqos_tuning_reloads_total")
    hour = query("ibqos_tuning_reloads_last_hour")
    print(f"   ibqos_tuning_state {state[0]}; ibqos_tuning_setup_info {setup[0] if setup else '-'};"
          f" ibqos_tuning_trial_info {trial[0] if trial else '-'}; ibqos_tuning_reloads_total"
          f" {int(float(reloads[0]['value'][1])) if reloads else 0}"
          f" ({int(float(hour[0]['value'][1])) if hour else 0} in the last hour)")
    measured = {n: v for (n, src), v in sorted(scores.items()) if src == "measured"}
    if measured:
        print("   ibqos_tuning_score{source=measured}: "
              + ", ".join(f"{n} {v:.3f}" for n, v in measured.items()))
PY
}

# How fast each job iterates, from the lab's metrics endpoint, next to its uncontended rate
# (1/period_s: what it does with the fabric to itself) and to what it did before ibqos ran.
show_progress() { # [save|save-tuning]: keep this as the "before ibqos" or "before tuning" column
  "$PY" - "$LAB_METRICS" "$LAB/jobs.yaml" "$LAB/progress.before.json" "${1:-}" \
    "$LAB/progress.tuning.json" <<'PY'
import json, sys, urllib.request
from pathlib import Path
import yaml
url, jobs_file, before_file, save = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]
tuning_file = Path(sys.argv[5])
rate, vl = {}, {}
with urllib.request.urlopen(url, timeout=5) as resp:
    for line in resp.read().decode().splitlines():
        if line.startswith(("ibqos_lab_job_iterations_per_second{", "ibqos_lab_job_vl{")):
            name, value = line.rsplit(" ", 1)
            jid = name.split('job_id="', 1)[1].split('"', 1)[0]
            (rate if "per_second" in name else vl)[jid] = float(value)
jobs = {str(j["id"]): j for j in yaml.safe_load(open(jobs_file))["jobs"]}
share = {j: rate[j] * jobs[j]["period_s"] for j in rate if j in jobs}
def load(path):
    return json.loads(path.read_text()) if path.exists() else {}
if save == "save":
    before_file.write_text(json.dumps(share))
if save == "save-tuning":
    tuning_file.write_text(json.dumps(share))
columns = [(n, b) for n, b in (("before ibqos", load(before_file)), ("before tuning", load(tuning_file))) if b]
print("jobs' progress (lab metrics: iterations per second over the last 10 s of lab time;")
print("  % = of the job's rate with the fabric to itself, 1/period_s; VL = the job's lane as")
print("  the lab last read it back from the switches, which may lag a fresh plan by 2-3 s):")
print(f"   {'job':<5} {'app':<9} {'VL':>2} {'it/s':>6} {'now':>5}" + "".join(f"  {n:>13}" for n, _ in columns))
for jid in sorted(share):
    line = f"   {jid:<5} {jobs[jid].get('name', ''):<9} {int(vl.get(jid, 0)):>2} {rate[jid]:6.1f} {share[jid]:5.0%}"
    for _, before in columns:
        was = before.get(jid)
        if was is None:
            line += f"  {'(new job)':>13}"
            continue
        diff = (share[jid] - was) * 100
        line += f"  {was:5.0%} ({diff:+3.0f})" if abs(diff) >= 2 else f"  {was:13.0%}"
    print(line)
PY
}

report() { # the agent's view: log, status, switch, Prometheus, the jobs' progress
  show_log
  echo "ibqos status (from the agent's state directory):"
  "$IBQOS" status --config "$CFG" | sed 's/^/   /'
  show_switch "$@"
  show_prometheus
  show_progress
}

say "before ibqos: how fast the jobs iterate with OpenSM's default QoS (every job on one lane)"
show_progress save
note "jobs whose bursts cross the uplinks 3001 fills are slowed: they queue behind its traffic" \
  "in the one lane (3001's own links are the busiest: it is slowed most)."

say "the agent: ibqos run, attached to the lab; its log goes to $LAB/agent.log"
note "every 5 s it sweeps all port counters and works out each job's traffic across the spines;" \
  "intensity = that traffic / the uplink capacity of the job's leaves, smoothed; class low" \
  "(< 10 %), moderate, or high (>= 40 %; +-20 % hysteresis). Each job gets an SL of its own" \
  "while SLs last; SLs are grouped onto the 8 VLs (light jobs share), the lightest lanes get" \
  "the most VLArb weight; ibqos rewrites opensm.conf and qos-policy.conf and signals OpenSM," \
  "which programs every port's SL2VL and VLArb tables and serves each job's SL in PathRecords."
"$IBQOS" lab run "$NAME" -- sh -c 'echo $$ >"$1"; exec "$2" run --config "$3"' \
  sh "$LAB/agent.pid" "$IBQOS" "$CFG" 2>"$LAB/agent.log" &
runner_pid=$!

round "the agent starts: 9 jobs running, 8 VLs" \
  "it plans at once, before it has measured anything: every job gets an SL, in the class" \
  "expected of a job with no history (moderate). 9 job SLs and SL 0 (the default level of" \
  "unmanaged traffic) on 8 VLs: some must share. The first measurement comes 5 s later" \
  "(the dry run above measured first; the daemon plans first, so running jobs get SLs at once)."
settle 9
agent_pid=$(cat "$LAB/agent.pid")
start_prometheus
report

round "nothing new: the measurements take over" \
  "a measured class replaces the planned one after it has held for 10 s: 3001 (all-to-all across" \
  "leaves 1 and 2) turns high, 3002 stays moderate, the rest turn low. Lanes are regrouped and" \
  "reweighted: the light jobs share lanes, the heavy lane gets the least weight." \
  "Progress: the jobs whose bursts cross the uplinks 3001 fills (lammps 3002, wrf 3005) run at" \
  "full speed on their own lanes; 3001 loses a little: it catches up while they compute."
settle 5
wait_plan 40 'all(j["class"] == j["measured_class"] for j in jobs.values()) and jobs["3001"]["class"] == "high"'
report

round "job 3010 (stencil, the profiled application, on cn0025 + cn0026) starts: 10 jobs now" \
  "a start is planned at once, between sweeps: the job gets a free SL, and the SA serves it on" \
  "the job's paths within a second or two, before its MPI ranks ask for them. Its expected" \
  "class comes from its profile (stencil-n2.yaml: low), not the default (moderate)."
"$IBQOS" lab job add "$NAME" --id 3010 --app stencil --user heidi --nodes "cn[0025-0026]" \
  --pattern ring --rate 2.0e9 --duty 0.5 --period 0.1
show_path 3010 cn0025 cn0026
settle
report

round "job 3003 (namd) turns heavy: 0.2 -> 12 GB/s per node (a new phase; its entry in the job file changes)" \
  "it shares a lane with other light jobs. Its intensity now rises sweep by sweep (smoothed" \
  "over ~10 s): past 12 % it measures moderate, past 48 % high; a class must hold 10 s before" \
  "the lanes move, so a short burst does not move them."
"$PY" - "$LAB/jobs.yaml" <<'PY'
import os, sys, yaml
path = sys.argv[1]
doc = yaml.safe_load(open(path))
for job in doc["jobs"]:
    if job["id"] == "3003":
        job.update(rate_bytes_per_s=1.2e10, duty=0.9)
with open(path + ".new", "w") as f:
    yaml.safe_dump(doc, f, sort_keys=False)
os.replace(path + ".new", path)
PY
settle
report

round "nothing new: namd's class change comes through" \
  "3003 is high: its SL leaves the shared lane for a lane of its own with the least weight." \
  "The SL itself does not change (its ranks cached it); only the SL's lane and the weights do." \
  "Progress: lammps (3002) shares leaf 3's uplinks with namd; while namd's lane still had a" \
  "light job's weight lammps slowed down; with namd on the least-weighted lane it recovers" \
  "(rates are averaged over 10 s: it may take until the next round to show)."
settle 5
wait_plan 45 'jobs["3003"]["class"] == "high"'
report

round "job 3004 (gromacs) ends" \
  "its SL is freed and its port-group leaves the policy at once; the lanes are regrouped."
"$IBQOS" lab job remove "$NAME" 3004
settle
report ended=3004

round "the mix holds still: tuning starts a round of trials" \
  "the favour-light law is where tuning starts, not where it must stay: once the mix (jobs and" \
  "classes) has held 10 s, the agent tries setups on the fabric, one at a time: the law, then" \
  "the next ones (other weight ratios, lanes merged; best predicted first when a prediction" \
  "ranks them, else in a fixed order). Each switch is one OpenSM reload; the sweep the reload" \
  "falls in is left out, the next 2 are the trial. A trial's score is the jobs' node-weighted" \
  "slowdown relative to their best under any setup tried (from each job's injected bytes/s)."
show_progress save-tuning >/dev/null # the "before tuning" column
wait_plan 60 'tuning.get("state") == "trial" and tuning.get("trial") != "favour-light"'
report

round "tuning: the trials go on" \
  "each trial stops early if a job drops below half its best (tuning.floor); a round spends at" \
  "most tuning.max_reloads_per_hour reloads (12) and starts a trial only with room for its revert."
wait_plan 60 'tuning.get("state") == "settled" or (tuning.get("trial") not in (None, "favour-light") and len(tuning.get("measured") or {}) >= 2)'
report

round "tuning settles: the agent keeps the setup of least measured score" \
  "it leaves the law only for a gain above tuning.margin (3 %) and two standard errors of" \
  "the trials' sweep scores (margin_sigmas 2); the decision line says the scores. It re-tunes when the mix changes or the kept setup's score drifts by 15 %." \
  "Progress: the last column compares with the jobs' speed under the law, before the round."
wait_plan 60 'tuning.get("state") == "settled"'
sleep 4 # the lab reads back the kept setup; its progress window moves on
report

say "the agent stops (SIGTERM): it finishes its cycle and exits 0; OpenSM keeps the last plan"
rc=0
stop_agent || rc=$?
show_log
echo "agent exit status: $rc"

stop_prometheus

say "lab down"
"$IBQOS" lab down "$NAME"
echo "demo time: $((SECONDS - T0)) s"
