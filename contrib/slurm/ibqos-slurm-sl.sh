# ibqos: what ibqos-prolog and ibqos-taskprolog share: their settings, and how they ask the
# agent for a job's SL.  Sourced by them (bash), never run on its own.
#
# Settings, from the file IBQOS_SLURM_ENV names (default /etc/default/ibqos-slurm) if it
# exists:
#   IBQOS_SL_SERVER=host:port  the agent's agent.sl_listen, over TCP with bash's /dev/tcp:
#                              for compute nodes without ibqos (no Python start per ask);
#   otherwise                  'ibqos job-sl' on this host (IBQOS_BIN, default ibqos),
#                              through IBQOS_SOCKET or the config's agent.socket.
#   IBQOS_SL_TIMEOUT           seconds to wait for the answer (default 3).
#   IBQOS_PROLOG_SL_TIMEOUT    the same for the Prolog (default IBQOS_SL_TIMEOUT).
#   IBQOS_SL_DIR               where the Prolog leaves each job's answer for the node's
#                              tasks (default /run/ibqos-slurm; root's, mode 0755).
#   IBQOS_TEXTFILE_DIR         node_exporter textfile directory for the miss counter.

settings=${IBQOS_SLURM_ENV:-/etc/default/ibqos-slurm}
# shellcheck disable=SC1090
[ -r "$settings" ] && . "$settings"
server=${IBQOS_SL_SERVER:-}
wait_s=${IBQOS_SL_TIMEOUT:-3}
[[ $wait_s =~ ^[0-9]+(\.[0-9]+)?$ ]] || wait_s=3
prolog_wait_s=${IBQOS_PROLOG_SL_TIMEOUT:-$wait_s}
[[ $prolog_wait_s =~ ^[0-9]+(\.[0-9]+)?$ ]] || prolog_wait_s=$wait_s
ibqos=${IBQOS_BIN:-ibqos}
sl_dir=${IBQOS_SL_DIR:-/run/ibqos-slurm}
job=${SLURM_JOB_ID:-}
PATH=$PATH:/usr/local/bin:/usr/bin:/bin

# ibqos_in_hostlist NODE LIST: NODE is one of the hosts of the Slurm host list LIST (names
# and prefix[ranges]suffix items, comma-separated, as Slurm writes them; a padded range,
# cn[0001-0016], names hosts of its width only)
ibqos_in_hostlist() {
  local node=$1 rest=$2 pre ranges post num r lo hi re='^([^],[]*)(\[([^]]*)\])?([^],[]*)(,(.*))?$'
  local -a parts
  while [ -n "$rest" ]; do
    [[ $rest =~ $re ]] || return 1
    pre=${BASH_REMATCH[1]} ranges=${BASH_REMATCH[3]} post=${BASH_REMATCH[4]}
    if [ -z "${BASH_REMATCH[2]}" ]; then
      rest=${BASH_REMATCH[6]}
      [ "$node" = "$pre$post" ] && return 0
      continue
    fi
    rest=${BASH_REMATCH[6]}
    [[ $node == "$pre"* && $node == *"$post" ]] || continue
    num=${node#"$pre"}
    num=${num%"$post"}
    [[ $num =~ ^[0-9]+$ ]] || continue
    IFS=, read -r -a parts <<<"$ranges"
    for r in "${parts[@]}"; do
      lo=${r%%-*} hi=${r##*-}
      [[ $lo =~ ^[0-9]+$ && $hi =~ ^[0-9]+$ ]] || continue
      if [[ $lo == 0?* ]]; then
        (( ${#num} == ${#lo} )) || continue
      elif [[ $num == 0?* ]]; then
        continue
      fi
      (( 10#$num >= 10#$lo && 10#$num <= 10#$hi )) && return 0
    done
  done
  return 1
}

# A task of a heterogeneous job has the leader's id (component 0) in SLURM_JOB_ID on every
# node (Slurm 17.11 to 22.05 at least); each component is a job of its own in squeue, with
# its own id, which the Prolog has in SLURM_JOB_ID.  So a task takes the id of the
# component whose nodes hold its node (SLURM_JOB_ID_HET_GROUP_<n>,
# SLURM_JOB_NODELIST_HET_GROUP_<n>); with two components on one node, the first one's.
case "${SLURM_SCRIPT_CONTEXT:-}" in
  prolog_slurmd | epilog_slurmd) ;;
  *)
    if [[ ${SLURM_HET_SIZE:-} =~ ^[0-9]+$ && -n ${SLURMD_NODENAME:-} ]]; then
      for (( het = 0; het < SLURM_HET_SIZE; het++ )); do
        het_nodes=SLURM_JOB_NODELIST_HET_GROUP_$het
        het_job=SLURM_JOB_ID_HET_GROUP_$het
        if ibqos_in_hostlist "$SLURMD_NODENAME" "${!het_nodes:-}"; then
          job=${!het_job:-$job}
          break
        fi
      done
    fi
    ;;
esac

# ibqos_less SECONDS: SECONDS less 0.2 s (at least 0), what the agent is told to wait, so
# that its answer (a miss too) reaches us before our own bound kills the question
ibqos_less() {
  local int=${1%%.*} frac=000 ms
  case "$1" in
    *.*) frac=${1#*.}000 ;;
  esac
  ms=$(( 10#${int:-0} * 1000 + 10#${frac:0:3} - 200 ))
  (( ms < 0 )) && ms=0
  printf '%d.%03d' $(( ms / 1000 )) $(( ms % 1000 ))
}

# ibqos_ask SECONDS: ask the agent for $job's SL, waiting at most SECONDS.  Sets sl and
# returns 0, or sets why (one line) and returns 1.
ibqos_ask() {
  local bound=$1 reply whole
  sl= why=
  if [ -n "$server" ]; then
    # connect, ask and read inside 'timeout': /dev/tcp has no connect timeout of its own
    reply=$(timeout "$bound" bash -c '
      exec 3<>"/dev/tcp/${0%:*}/${0##*:}" || exit 1
      printf "SL %s %s\n" "$1" "$2" >&3
      IFS= read -r line <&3 && printf "%s" "$line"' "$server" "$job" "$(ibqos_less "$bound")" \
      2>/dev/null)
    case "$reply" in
      "OK "*) sl=${reply#OK } ;;
      "") why="no answer from $server within ${bound} s"; return 1 ;;
      *) why=$reply; return 1 ;;
    esac
  else
    # ibqos's own start (its Python imports, docs/slurm.md) is not part of the answer's bound
    whole=${bound%.*}
    if ! reply=$(timeout $(( ${whole:-0} + 5 )) "$ibqos" job-sl --timeout "$bound" \
      ${IBQOS_SOCKET:+--socket "$IBQOS_SOCKET"} "$job" 2>&1); then
      why=${reply:-no answer within ${bound} s}
      return 1
    fi
    sl=$reply
  fi
  case "$sl" in
    [0-9] | 1[0-5]) return 0 ;;
  esac
  why="not an SL: $sl"
  return 1
}
