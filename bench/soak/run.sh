#!/usr/bin/env bash
# Soak benchmarks: does what the harness holds stay flat however long a
# rehearsal runs (issue "Records streamed end to end")? Loopback only,
# bounded in time, stops by itself. Rerun with:
#   bash bench/soak/run.sh                      # soaks of 2 and 10 min, provider, report
#   SOAKS="120 600 1800" bash bench/soak/run.sh  # adds the 30-minute soak
#   QUICK=1 bash bench/soak/run.sh              # 20 s and 40 s soaks, 100,000 calls,
#                                               # report on 100,000 requests: checks the script
#   PARTS="soak" / "provider" / "report"        # one part only
# Prints a table (and writes it to $OUT/results.txt); appends nothing to
# BENCHMARKS.md: copy the figures into its section "Streamed records (soak)".
#
# 1. soak: `rehearse run bench/soak/soak.toml` (1,000 requests/s, bounded
#    reference gateway, 50 ms provider, no overload) for each duration in
#    SOAKS (seconds, set with --set). Measured: the peak resident memory of
#    the `rehearse run` process alone (its in-process provider and load
#    generator, not the gateway it spawns), as VmHWM from /proc/PID/status
#    sampled every 100 ms until it exits. /usr/bin/time's figure is printed
#    beside it but is not the harness's alone: wait4 reports the largest of
#    the process and every descendant it reaped, and `rehearse run` reaps
#    the gateway (`/usr/bin/time bash -c 'python3 ...; true'` reports
#    python's memory, not bash's). The gateway's own peak is from rss.jsonl.
# 2. provider: `rehearse provider` (zero latency, bench/soak/provider.toml)
#    after CALLS calls (1,000,000) from wrk, VmHWM and VmRSS from /proc.
# 3. report: `rehearse report` on a synthetic run directory of REQUESTS
#    people (3,600,000: an hour at 1,000/s) written by
#    harness/examples/synthetic_run.rs: wall time and peak memory.
set -euo pipefail
cd "$(dirname "$0")/../.."
HERE=bench/soak
OUT=${OUT:-target/bench-soak}
PORT=${PORT:-18391}
if [ -n "${QUICK:-}" ]; then
  SOAKS=${SOAKS:-"20 40"}; CALLS=${CALLS:-100000}; REQUESTS=${REQUESTS:-100000}
else
  SOAKS=${SOAKS:-"120 600"}; CALLS=${CALLS:-1000000}; REQUESTS=${REQUESTS:-3600000}
fi
PARTS=" ${PARTS:-soak provider report} "
want() { [[ "$PARTS" == *" $1 "* ]]; }
command -v wrk >/dev/null || { echo "wrk is needed: apt-get install wrk" >&2; exit 2; }
command -v curl >/dev/null || { echo "curl is needed" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "/usr/bin/time is needed: apt-get install time" >&2; exit 2; }
if [ -z "${NO_BUILD:-}" ]; then
  cargo build --release --quiet --bin rehearse
  cargo build --release --quiet -p harness --example synthetic_run
fi
TARGET=${CARGO_TARGET_DIR:-target}
BIN=$TARGET/release/rehearse
SYNTH=$TARGET/release/examples/synthetic_run
mkdir -p "$OUT"
RESULTS=$OUT/results.txt
: > "$RESULTS"

# What this script started and has not waited for yet, ended by PID when
# it exits (jobs already waited for are not in `jobs -p`).
cleanup() {
  local p
  for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT

mb() { awk -v kb="$1" 'BEGIN { printf "%.1f", kb / 1024 }'; }
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
row() { printf '%-34s %-22s %-16s %s\n' "$@" | tee -a "$RESULTS"; }

# Follows PID until it is gone: every 100 ms its VmHWM and VmRSS (kB), every
# 10 s a line "seconds,rss_kb,hwm_kb" to $2 (and the last sample, marked
# "end"); prints the last VmHWM seen.
# Read with the shell's own `read`: no process is started per sample.
# Past $3 seconds it sends PID one SIGTERM (rehearse then writes a partial
# report and ends the gateway), so a stuck run cannot hold the script.
follow() {
  local pid=$1 csv=$2 limit=$3 hwm=0 rss=0 start=$SECONDS logged=-10 stopped= k v _
  echo "seconds,rss_kb,hwm_kb" > "$csv"
  while [ -e "/proc/$pid" ]; do
    while read -r k v _; do
      case $k in VmHWM:) hwm=$v ;; VmRSS:) rss=$v ;; esac
    done < "/proc/$pid/status" 2>/dev/null || true
    if (( SECONDS - start >= logged + 10 )); then
      logged=$((SECONDS - start))
      echo "$logged,$rss,$hwm" >> "$csv"
    fi
    if [ -z "$stopped" ] && (( SECONDS - start >= limit )); then
      echo "   still running after ${limit}s: SIGTERM to $pid" >&2
      kill -TERM "$pid" 2>/dev/null || true
      stopped=1
    fi
    sleep 0.1
  done
  echo "end $((SECONDS - start)),$rss,$hwm" >> "$csv"
  echo "$hwm"
}

# The child process of PID (waits up to 5 s for it to appear).
child_of() {
  local c
  for _ in $(seq 100); do
    c=$(cat /proc/"$1"/task/*/children 2>/dev/null | awk '{print $1}')
    [ -n "$c" ] && { echo "$c"; return 0; }
    sleep 0.05
  done
  return 1
}

# The largest value of a JSON-lines field, or "-".
max_field() {
  [ -s "$1" ] || { echo "-"; return; }
  python3 - "$1" "$2" <<'PY'
import json, sys
best = 0
with open(sys.argv[1]) as f:
    for line in f:
        try:
            best = max(best, json.loads(line)[sys.argv[2]])
        except (ValueError, KeyError):
            pass
print(best)
PY
}

# A field of a JSON file, or "-".
field() {
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d.get(sys.argv[2], "-"))' "$1" "$2" 2>/dev/null || echo "-"
}

TABLE_HEAD="part                               figure                 target           notes"

soak() {
  local secs=$1 dir=$OUT/soak-${1}s
  rm -rf "$dir"
  echo "== soak: rehearse run, 1,000/s for ${secs}s (load average $(loadavg))" >&2
  /usr/bin/time -v -o "$dir.time" "$BIN" run "$HERE/soak.toml" --out "$dir" --no-progress \
    --provider-listen 127.0.0.1:0 \
    --set "load.phases=[{ name = \"steady\", duration = \"${secs}s\", rate = 1000 }]" \
    > "$dir.out" 2> "$dir.err" &
  local tpid=$! rpid
  rpid=$(child_of "$tpid") || { echo "rehearse run did not start" >&2; return 1; }
  # The run ends by itself after its schedule, the drain and the judging;
  # 5 minutes more and it is stopped.
  local hwm rc=0
  hwm=$(follow "$rpid" "$dir.rss.csv" $((secs + 300)))
  wait "$tpid" || rc=$?
  local time_kb elapsed people gw backlog
  time_kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$dir.time")
  elapsed=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$dir.time")
  people=$(field "$dir/summary.json" people)
  backlog=$(field "$dir/summary.json" records_backlog_max)
  gw=$(max_field "$dir/rss.jsonl" rss_bytes)
  [ "$gw" = "-" ] || gw=$(awk -v b="$gw" 'BEGIN { printf "%.1f", b / 1048576 }')
  SOAK_HWM[$secs]=$hwm
  row "soak ${secs}s: rehearse run VmHWM" "$(mb "$hwm") MB" "< 150 MB" \
    "exit $rc, $people people, wall $elapsed; /usr/bin/time $(mb "$time_kb") MB; gateway peak $gw MB; writer backlog max $backlog; load avg after $(loadavg)"
}

provider() {
  local dir=$OUT/provider url=http://127.0.0.1:$PORT
  mkdir -p "$dir"
  echo "== provider alone: $CALLS calls from wrk (load average $(loadavg))" >&2
  "$BIN" provider --config "$HERE/provider.toml" --listen "127.0.0.1:$PORT" \
    > "$dir/out" 2> "$dir/err" &
  local pid=$!
  for _ in $(seq 100); do
    curl -sf -o /dev/null "$url/_fake/stats" && break
    sleep 0.05
  done
  local base received=0 rounds=0
  base=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
  # Bounded: at most 120 rounds of 5 s.
  while (( received < CALLS && rounds < 120 )); do
    wrk -t1 -c64 -d5s -s "$HERE/post.lua" "$url/v1/chat/completions" > "$dir/wrk.$rounds.txt"
    received=$(curl -sf "$url/_fake/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["received"])')
    rounds=$((rounds + 1))
  done
  sleep 1
  local hwm rss
  hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status")
  rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
  kill -TERM "$pid"
  wait "$pid" || true
  row "provider after $received calls" "VmHWM $(mb "$hwm") MB" "< 64 MB" \
    "VmRSS $(mb "$rss") MB now, $(mb "$base") MB at start; load avg $(loadavg)"
}

report() {
  local dir=$OUT/synthetic-$REQUESTS
  echo "== report: synthetic run directory of $REQUESTS requests (load average $(loadavg))" >&2
  rm -rf "$dir"
  "$SYNTH" "$dir" --requests "$REQUESTS" --rate 1000 >&2
  local size
  size=$(du -sh "$dir" | cut -f1)
  /usr/bin/time -v -o "$dir.time" "$BIN" report "$dir" > "$dir.out" 2> "$dir.err" &
  local tpid=$! rpid
  rpid=$(child_of "$tpid") || { echo "rehearse report did not start" >&2; return 1; }
  local hwm rc=0
  hwm=$(follow "$rpid" "$dir.rss.csv" 1800)
  wait "$tpid" || rc=$?
  local time_kb elapsed
  time_kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$dir.time")
  elapsed=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$dir.time")
  row "report on $REQUESTS requests" "$(mb "$time_kb") MB, $elapsed" "< 300 MB, < 60 s" \
    "exit $rc, VmHWM $(mb "$hwm") MB, $size on disk, load avg after $(loadavg)"
}

declare -A SOAK_HWM=()
echo "$(date -u '+%F %T UTC'), $(nproc) cores, load average $(loadavg)" | tee -a "$RESULTS"
echo "$TABLE_HEAD" | tee -a "$RESULTS"
if want soak; then
  for s in $SOAKS; do soak "$s"; done
  set -- $SOAKS
  first=$1; last=${!#}
  if [ "$first" != "$last" ] && [ -n "${SOAK_HWM[$first]:-}" ] && [ -n "${SOAK_HWM[$last]:-}" ]; then
    row "soak ${last}s / ${first}s VmHWM" \
      "$(awk -v a="${SOAK_HWM[$last]}" -v b="${SOAK_HWM[$first]}" 'BEGIN { printf "%.2fx", a / b }')" \
      "<= 1.2x" "the longest soak's peak over the shortest's"
  fi
fi
want provider && provider
want report && report
echo "figures: $RESULTS; run directories and samples: $OUT" >&2
