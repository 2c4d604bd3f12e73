#!/usr/bin/env bash
# Load generator benchmarks (issues 3 and 17). Loopback only. Rerun with:
#   bash bench/loadgen/run.sh                 # side, records, rate80, hold
#   PARTS="side" RUNS=7 bash bench/loadgen/run.sh
#   PARTS="callgrind" BEFORE=/path/to/old/rehearse bash bench/loadgen/run.sh
#   EXTRA_REQUEST='headers = { "x-trace" = "{request_id}/{attempt}", "x-app" = "{tenant}" }' \
#     PARTS="side" bash bench/loadgen/run.sh  # lines added to [load.request]: the
#                                             # placeholders' cost on the send path
# Figures go to stdout (and $OUT/*.tsv); copy them into BENCHMARKS.md,
# section "loadgen".
#
# Layout on this 2-core machine: the target on core 0, the load generator
# (or oha) on core 1, each pinned with taskset; with RT=1 (the default
# where the OS allows it) each also runs at real-time priority (chrt -f 1),
# the target and both generators alike, so that the neighbours' compilers
# and tests on a shared machine do not take the cores in the middle of a
# run (RT=0: normal priority, as a user would run them). The target is a bare hyper
# server (loadgen/examples/bare_target.rs: one thread, one fixed OpenAI
# answer), as in issue 17; TARGET=provider uses the fake provider at zero
# latency instead (it records and draws every call, and near 40,000/s on
# one core it, not the load generator, is what gives out).
#
# Parts (PARTS, space separated):
#   side     RUNS alternating runs each of `rehearse load` and oha at RATE
#            for DURATION: send lag, latency, CPU, RSS; medians and the
#            latency p99 ratio. oha: -q RATE --latency-correction (issue
#            17's command, oha's default 50 connections), the same body.
#            rehearse per caller (a person opens a connection whenever
#            none is idle, up to the callers' bound: the rate x the
#            expected time at the target x 4 + 256, that time being
#            EXPECTED, else wrk's mean latency when RATE is a share of
#            the capacity, else none: the patience bound), with
#            max_connections = CAP (50, as oha's) unless CAP=0, and with
#            a pool of POOL unless POOL=0.
#   records  RUNS alternating runs of `rehearse load` with and without
#            --no-records at RATE: the CPU the records cost.
#   rate80   RUNS runs of `rehearse load` (and with max_connections = CAP)
#            and of oha at RATE80 (80,000/s).
#   hold     10,000 requests held 20 s by the fake provider: the load
#            generator's RSS per outstanding request.
#   callgrind  instructions per request (valgrind --tool=callgrind) at
#            CG_RATE for 4 s and for 8 s: the difference over the extra
#            requests, so start-up and the end's histogram log cancel out;
#            of BIN, and of BEFORE when given.
#   wrk      the target's closed-loop ceiling (wrk -t1 -c64), if wrk exists.
#   long     1,000/s for 10 minutes: RSS every 30 s.
# oha is installed with cargo (version OHA_VERSION) when missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -n "${NO_BUILD:-}" ] || {
  cargo build --release --quiet --bin rehearse
  cargo build --release --quiet -p loadgen --example bare_target
}
BIN=${BIN:-target/release/rehearse}
BARE=${BARE:-target/release/examples/bare_target}
HERE=bench/loadgen
OUT=${OUT:-target/bench-loadgen}
PORT=${PORT:-18281}
RATE=${RATE:-50000}
RATE80=${RATE80:-80000}
RUNS=${RUNS:-5}
CAP=${CAP:-50}
POOL=${POOL:-50}
DURATION=${DURATION:-10}
CG_RATE=${CG_RATE:-1000}
TARGET=${TARGET:-bare}
OHA_VERSION=${OHA_VERSION:-1.16.0}
RT=${RT:-1}
CHRT=
if [ "$RT" = 1 ]; then
  if chrt -f 1 true 2>/dev/null; then CHRT="chrt -f 1"; else echo "no real-time priority here: RT=0" >&2; fi
fi
PARTS=" ${PARTS:-side records rate80 hold} "
want() { [[ "$PARTS" == *" $1 "* ]]; }
mkdir -p "$OUT"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
URL="http://127.0.0.1:$PORT"
BODY=$(sed -n "s/^wrk.body = '\(.*\)'$/\1/p" "$HERE/post.lua")

if want side || want rate80; then
  if [ "$(oha --version 2>/dev/null)" != "oha $OHA_VERSION" ]; then
    echo "installing oha $OHA_VERSION with cargo" >&2
    cargo install --quiet --locked oha --version "$OHA_VERSION"
  fi
fi

PID=
cleanup() { if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi; PID=; }
trap cleanup EXIT

# The target on core 0: the bare hyper server, or the fake provider with
# the given config.
start() {
  if [ "$TARGET" = bare ] && [ "${1:-}" != provider ]; then
    $CHRT taskset -c 0 "$BARE" "127.0.0.1:$PORT" >/dev/null 2>>"$OUT/target.log" &
  else
    $CHRT taskset -c 0 "$BIN" provider --config "${2:-$HERE/zero.toml}" --listen "127.0.0.1:$PORT" \
      --threads 1 >/dev/null 2>>"$OUT/target.log" &
  fi
  PID=$!
  for _ in $(seq 100); do
    curl -s -o /dev/null -X POST -d '{}' "$URL/v1/chat/completions" && return 0
    sleep 0.05
  done
  echo "the target did not start" >&2; exit 1
}

# A scenario: name, seconds, rate per second, patience, extra [load] line.
scenario() {
  cat > "$OUT/$1.toml" <<TOML
[load]
${5:-}
send_lag_p99_max = "1ms"
patience = { fixed = "${4:-2s}" }
[[load.phases]]
duration = "${2}s"
rate = $3
[load.request]
prompt_tokens = { fixed = 16 }
max_tokens = { fixed = 16 }
${EXTRA_REQUEST:-}
${EXTRA_TABLES:-}
TOML
}

load1() { awk '{print $1}' /proc/loadavg; }

# One `rehearse load` run: part, label, rate, extra flags. Appends a row to
# $OUT/<part>.tsv: label, load average, cpu%, user s, sys s, max RSS KB,
# and the summary's figures.
rehearse_run() {
  local part=$1 label=$2 rate=$3; shift 3
  scenario "$part-$label" "$DURATION" "$rate" 2s "${EXTRA_LOAD:-}"
  local la; la=$(load1)
  /usr/bin/time -o "$OUT/time.txt" -f "%P %U %S %M" $CHRT taskset -c 1 "$BIN" load "$OUT/$part-$label.toml" \
    --target "$URL" --out "$OUT/$part-$label" --no-progress "$@" > "$OUT/$part-$label.txt" || true
  python3 "$HERE/summary.py" "$OUT/$part-$label/summary.json" "$DURATION" \
    --row "$label" "$la" "$(tail -1 "$OUT/time.txt")" >> "$OUT/$part.tsv"
  tail -1 "$OUT/$part.tsv"
  rm -f "$OUT/$part-$label/client.jsonl"
}

# One oha run: part, label, rate. Appends a row like rehearse_run's.
oha_run() {
  local part=$1 label=$2 rate=$3
  local la; la=$(load1)
  /usr/bin/time -o "$OUT/time.txt" -f "%P %U %S %M" $CHRT taskset -c 1 oha -z "${DURATION}s" -q "$rate" \
    --latency-correction --no-tui --output-format json -m POST -T application/json \
    -H "authorization: Bearer rehearse" -d "$BODY" "$URL/v1/chat/completions" > "$OUT/$part-$label.json" || true
  python3 "$HERE/summary.py" "$OUT/$part-$label.json" "$DURATION" --oha \
    --row "$label" "$la" "$(tail -1 "$OUT/time.txt")" >> "$OUT/$part.tsv"
  tail -1 "$OUT/$part.tsv"
}

# A rate: a number per second as it is, or a share (75%) of the running
# target's keep-alive capacity, measured with wrk (-t1 -c32, 5 s).
rate_of() {
  local rate=$1
  if [[ "$rate" != *% ]]; then echo "$rate"; return; fi
  command -v wrk >/dev/null || { echo "RATE=$rate needs wrk to measure the target: apt-get install wrk" >&2; exit 2; }
  local capacity wrk_out
  wrk_out=$($CHRT taskset -c 1 wrk -t1 -c32 -d5s -s "$HERE/post.lua" "$URL/v1/chat/completions")
  capacity=$(echo "$wrk_out" | awk '/Requests\/sec/ {printf "%d", $2}')
  # The mean latency wrk saw at its 32 connections, in microseconds: the
  # per-caller runs' expected time at the target (time_in_system), unless
  # EXPECTED says. At 75% of the capacity a call waits less than at 100%,
  # so it is an expectation with room.
  echo "$wrk_out" | awk '$1 == "Latency" {v = $2; u = 1;
      if (v ~ /us$/) u = 1; else if (v ~ /ms$/) u = 1000; else if (v ~ /s$/) u = 1000000;
      sub(/[a-z]+$/, "", v); printf "%dus", v * u + 1; exit}' > "$OUT/expected.txt"
  echo "   the target's keep-alive capacity: $capacity req/s (wrk -t1 -c32 -d5s, mean latency $(cat "$OUT/expected.txt")); driving at $rate of it" >&2
  echo $(( capacity * ${rate%\%} / 100 ))
}

# RUNS alternating runs of rehearse load, oha, and (unless CAP=0) rehearse
# with max_connections = CAP and (unless POOL=0) with a pool of POOL, at
# a rate: part, rate (a number, or a share of the target's capacity).
side_by_side() {
  local part=$1 rate
  rm -f "$OUT/$part.tsv"; start
  rm -f "$OUT/expected.txt"
  rate=$(rate_of "$2")
  # Per caller, the callers' bound from the expected time at the target
  # (issue 46: the peak's rate x it x 4 + 256), as `rehearse run` takes it
  # from its plan; a fixed rate with no EXPECTED: the patience bound.
  local expected=${EXPECTED:-$(cat "$OUT/expected.txt" 2>/dev/null || true)}
  local per_caller=${expected:+[load.clients]
time_in_system = \"$expected\"}
  for i in $(seq "$RUNS"); do
    EXTRA_TABLES="$per_caller" rehearse_run "$part" "rehearse-$i" "$rate"
    oha_run "$part" "oha-$i" "$rate"
    if [ "$CAP" != 0 ]; then
      EXTRA_LOAD="max_connections = $CAP" rehearse_run "$part" "rehearse-cap$CAP-$i" "$rate"
    fi
    if [ "$POOL" != 0 ]; then
      EXTRA_TABLES="[load.clients]
pool = $POOL" rehearse_run "$part" "rehearse-pool$POOL-$i" "$rate"
    fi
  done
  cleanup
  python3 "$HERE/summary.py" --medians "$OUT/$part.tsv"
}

if want side; then
  echo "== side by side: rehearse load and oha, $RATE/s for ${DURATION}s, $RUNS runs each, alternating${CHRT:+ (real-time priority)}"
  side_by_side side "$RATE"
fi

if want records; then
  echo "== records: rehearse load at $RATE/s with client.jsonl and with --no-records, $RUNS runs each"
  rm -f "$OUT/records.tsv"; start
  for i in $(seq "$RUNS"); do
    rehearse_run records "records-$i" "$RATE"
    rehearse_run records "no-records-$i" "$RATE" --no-records
  done
  cleanup
  python3 "$HERE/summary.py" --medians "$OUT/records.tsv"
fi

if want rate80; then
  echo "== $RATE80/s: rehearse load and oha, $RUNS runs each${CHRT:+ (real-time priority)}"
  side_by_side rate80 "$RATE80"
fi

if want hold; then
  N=${N:-10000}
  RATE_HOLD=2000
  echo "== $N outstanding requests of 20 s each (fake provider: $HERE/slow.toml)"
  start provider "$HERE/slow.toml"
  scenario hold "$((N / RATE_HOLD))" "$RATE_HOLD" 60s
  $CHRT taskset -c 1 "$BIN" load "$OUT/hold.toml" --target "$URL" --out "$OUT/hold" --no-progress > "$OUT/hold.txt" &
  LPID=$!
  sleep 0.3
  BASE=$(awk '/VmRSS/ {print $2}' "/proc/$LPID/status")
  sleep "$((N / RATE_HOLD + 2))"
  PEAK=$(awk '/VmRSS/ {print $2}' "/proc/$LPID/status")
  OUTSTANDING=$(curl -s "$URL/_fake/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["in_flight"])')
  echo "   provider in flight $OUTSTANDING; RSS $BASE KB at start, $PEAK KB holding them:" \
    "$(( (PEAK - BASE) * 1024 / (OUTSTANDING > 0 ? OUTSTANDING : 1) )) bytes per outstanding request"
  wait "$LPID" || true
  python3 "$HERE/summary.py" "$OUT/hold/summary.json" "$((N / RATE_HOLD))"
  rm -f "$OUT/hold/client.jsonl"
  cleanup
fi

if want callgrind; then
  command -v valgrind >/dev/null || { echo "valgrind is needed: apt-get install valgrind" >&2; exit 2; }
  echo "== instructions per request (callgrind, $CG_RATE/s, the 8 s run minus the 4 s run)"
  start
  for bin in "$BIN" ${BEFORE:-}; do
    for d in 4 8; do
      scenario "cg$d" "$d" "$CG_RATE"
      taskset -c 1 valgrind --tool=callgrind --callgrind-out-file="$OUT/cg-$d.out" "$bin" load "$OUT/cg$d.toml" \
        --target "$URL" --out "$OUT/cg$d" --no-progress > /dev/null 2> "$OUT/cg-$d.err" || true
      rm -f "$OUT/cg$d/client.jsonl"
    done
    a=$(grep -o 'Collected : [0-9]*' "$OUT/cg-4.err" | awk '{s += $3} END {print s}')
    b=$(grep -o 'Collected : [0-9]*' "$OUT/cg-8.err" | awk '{s += $3} END {print s}')
    echo "   $bin: $(( (b - a) / (4 * CG_RATE) )) instructions per request ($a and $b in all)"
    python3 "$HERE/summary.py" "$OUT/cg8/summary.json" 8
  done
  cleanup
fi

if want wrk; then
  if command -v wrk >/dev/null; then
    echo "== wrk (closed loop, -t1 -c64, ${DURATION}s): the target's ceiling from one core"
    start
    taskset -c 1 wrk -t1 -c64 -d2s -s "$HERE/post.lua" "$URL/v1/chat/completions" >/dev/null
    taskset -c 1 wrk -t1 -c64 -d"${DURATION}s" --latency -s "$HERE/post.lua" "$URL/v1/chat/completions" \
      | grep -E "Requests/sec|50%|99%"
    cleanup
  else
    echo "wrk is not installed (apt-get install wrk): part wrk skipped" >&2
  fi
fi

if want long; then
  echo "== 1,000/s for 10 minutes: RSS every 30 s"
  start
  scenario long 600 1000
  taskset -c 1 "$BIN" load "$OUT/long.toml" --target "$URL" --out "$OUT/long" --no-progress > "$OUT/long.txt" &
  LPID=$!
  for i in $(seq 20); do
    sleep 30
    echo "   t=$((i * 30))s rss $(awk '/VmRSS/ {print $2}' "/proc/$LPID/status" 2>/dev/null || echo -) KB"
  done
  wait "$LPID" || true
  python3 "$HERE/summary.py" "$OUT/long/summary.json" 600
  cleanup
fi
