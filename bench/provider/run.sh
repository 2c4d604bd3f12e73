#!/usr/bin/env bash
# Fake-provider benchmarks (issues 2 and 29). Loopback only. Rerun with:
#   bash bench/provider/run.sh                       # throughput, hold
#   PARTS="callgrind switches" BEFORE=/path/to/old/rehearse bash bench/provider/run.sh
# Results go to stdout (and $OUT); copy the figures into BENCHMARKS.md.
#
# Parts (PARTS, space separated):
#   throughput  the provider on ONE core (taskset -c 0, one worker thread),
#            wrk on the other core, 64 keep-alive connections, zero
#            latency, records written to a file. Needs wrk.
#   hold     10,000 delayed calls (12 s each, started over 5 s): provider
#            RSS per call, and observed latency minus scripted latency
#            (p50/p99), from a client that opens its connections first and
#            times each request from its send.
#   callgrind  instructions per call of the provider (valgrind
#            --tool=callgrind, one worker thread, records to a file), all
#            its threads counted: `rehearse load` (not under valgrind)
#            sends CG_RATE/s for 4 s and for 8 s, and the difference over
#            the extra calls (counted by the provider itself) cancels
#            start-up and shutdown. Of BIN, and of BEFORE when given.
#            Counts instructions, so a busy machine does not change it.
#   switches context switches per call of the provider at SW_RATE/s for
#            SW_SECONDS (its threads' voluntary and involuntary switches
#            from /proc/PID/task/*/status, before and after; the record
#            writer's thread apart), of BIN and of BEFORE when given. Also
#            immune to a busy machine: it counts, it does not time.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -n "${NO_BUILD:-}" ] || cargo build --release --quiet --bin rehearse --example hold -p fake-provider -p rehearse
BIN=${BIN:-target/release/rehearse}
HOLD=target/release/examples/hold
HERE=bench/provider
OUT=${OUT:-target/bench-provider}
PORT=${PORT:-18181}
DURATION=${DURATION:-10s}
CG_RATE=${CG_RATE:-250}
SW_RATE=${SW_RATE:-5000}
SW_SECONDS=${SW_SECONDS:-4}
PARTS=" ${PARTS:-throughput hold} "
want() { [[ "$PARTS" == *" $1 "* ]]; }
mkdir -p "$OUT"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
URL="http://127.0.0.1:$PORT"

PID=
cleanup() { if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi; PID=; }
trap cleanup EXIT

# Waits for the provider at $URL (up to `tries` × 0.1 s).
await_provider() {
  for _ in $(seq "${1:-100}"); do
    curl -s -o /dev/null "$URL/_fake/stats" && return 0
    sleep 0.1
  done
  echo "provider did not start" >&2; exit 1
}

start() {
  taskset -c 0 "$BIN" provider --config "$1" --listen "127.0.0.1:$PORT" --threads 1 \
    --records "$OUT/provider.jsonl" >/dev/null 2>>"$OUT/provider.log" &
  PID=$!
  await_provider
}

received() { curl -s "$URL/_fake/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["received"])'; }

# A `rehearse load` scenario at zero latency's pace: name, seconds, rate.
scenario() {
  cat > "$OUT/$1.toml" <<TOML
[load]
patience = { fixed = "5s" }
send_lag_p99_max = "50ms"
[[load.phases]]
duration = "${2}s"
rate = $3
[load.request]
prompt_tokens = { fixed = 16 }
max_tokens = { fixed = 16 }
TOML
}

# Drives the provider with `rehearse load` (BIN, on core 1): scenario name.
drive() {
  taskset -c 1 target/release/rehearse load "$OUT/$1.toml" --target "$URL" --out "$OUT/$1" \
    --no-progress --no-records > "$OUT/$1.txt" 2>&1 || true
}

if want throughput; then
  command -v wrk >/dev/null || { echo "wrk is needed: apt-get install wrk" >&2; exit 2; }
  echo "== throughput: zero latency, provider on one core, wrk -t1 -c64 -d$DURATION"
  start "$HERE/zero.toml"
  taskset -c 1 wrk -t1 -c64 -d2s -s "$HERE/post.lua" "$URL/v1/chat/completions" >/dev/null
  taskset -c 1 wrk -t1 -c64 -d"$DURATION" --latency -s "$HERE/post.lua" "$URL/v1/chat/completions"
  cleanup
fi

if want hold; then
  N=${N:-10000}
  echo "== holding $N calls of 12 s each (provider on one core)"
  start "$HERE/delayed.toml"
  taskset -c 1 "$HOLD" "$URL" "$PID" "$N" 12000
  cleanup
fi

if want callgrind; then
  command -v valgrind >/dev/null || { echo "valgrind is needed: apt-get install valgrind" >&2; exit 2; }
  echo "== instructions per call (callgrind, $CG_RATE/s, the 8 s run minus the 4 s run, records on)"
  for bin in "$BIN" ${BEFORE:-}; do
    declare -A collected=() calls=()
    tag=$(basename "$bin")
    for d in 4 8; do
      scenario "cg$d" "$d" "$CG_RATE"
      rm -f "$OUT/cg-provider.jsonl"*
      rm -f "$OUT/cg-$tag-$d.out"*
      taskset -c 0 valgrind --tool=callgrind --separate-threads=yes --callgrind-out-file="$OUT/cg-$tag-$d.out" "$bin" provider \
        --config "$HERE/zero.toml" --listen "127.0.0.1:$PORT" --threads 1 --records "$OUT/cg-provider.jsonl" \
        > /dev/null 2> "$OUT/cg-$tag-$d.err" &
      PID=$!
      await_provider 600
      drive "cg$d"
      calls[$d]=$(received)
      cleanup
      collected[$d]=$(grep -o 'Collected : [0-9]*' "$OUT/cg-$tag-$d.err" | awk '{s += $3} END {print s}')
      echo "   $bin, ${d} s: ${calls[$d]} calls, $(wc -l < "$OUT/cg-provider.jsonl") records," \
        "${collected[$d]} instructions"
    done
    echo "   $bin: $(( (collected[8] - collected[4]) / (calls[8] - calls[4]) )) instructions per call"
    # Where the records' part goes, per call of the 8 s run: the push on
    # the serving thread (inclusive), and the record writer's thread (the
    # one whose file names its functions) in all.
    for f in "$OUT/cg-$tag-8.out"-*; do
      total=$(awk '/^(summary|totals):/ {print $2; exit}' "$f")
      if grep -q 'records::Writer' "$f"; then
        echo "     record writer thread: $(( total / calls[8] )) a call"
      elif grep -q 'RecordFile::push_named' "$f"; then
        push=$(callgrind_annotate --inclusive=yes "$f" 2>/dev/null \
          | awk '/fake_provider::records::RecordFile::push_named( |$)/ && !done {gsub(",", "", $1); print $1; done = 1}')
        echo "     serving thread: $(( total / calls[8] )) a call, of which the records' push $(( ${push:-0} / calls[8] ))"
      fi
    done
    unset collected calls
  done
  # The floor: loadgen's bare hyper target (one thread, one fixed answer,
  # nothing recorded) under the same load; its calls from the load's
  # summary.json.
  BARE=target/release/examples/bare_target
  [ -n "${NO_BUILD:-}" ] || cargo build --release --quiet -p loadgen --example bare_target
  declare -A collected=() calls=()
  for d in 4 8; do
    taskset -c 0 valgrind --tool=callgrind --callgrind-out-file="$OUT/cg-bare-$d.out" "$BARE" "127.0.0.1:$PORT" \
      > /dev/null 2> "$OUT/cg-bare-$d.err" &
    PID=$!
    await_provider 600
    drive "cg$d"
    cleanup
    calls[$d]=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["attempts"])' "$OUT/cg$d/summary.json")
    collected[$d]=$(grep -o 'Collected : [0-9]*' "$OUT/cg-bare-$d.err" | awk '{s += $3} END {print s}')
  done
  echo "   $BARE: $(( (collected[8] - collected[4]) / (calls[8] - calls[4]) )) instructions per call"
  unset collected calls
fi

if want switches; then
  echo "== context switches per call ($SW_RATE/s for ${SW_SECONDS}s, records on)"
  # Every thread's switches: TID COMM VOLUNTARY NONVOLUNTARY.
  switches() {
    for t in /proc/"$1"/task/*; do
      printf '%s %s %s %s\n' "${t##*/}" "$(tr ' ' _ < "$t/comm")" \
        "$(awk '/^voluntary_ctxt_switches/ {print $2}' "$t/status")" \
        "$(awk '/^nonvoluntary_ctxt_switches/ {print $2}' "$t/status")"
    done
  }
  scenario sw "$SW_SECONDS" "$SW_RATE"
  for bin in "$BIN" ${BEFORE:-}; do
    taskset -c 0 "$bin" provider --config "$HERE/zero.toml" --listen "127.0.0.1:$PORT" --threads 1 \
      --records "$OUT/sw-provider.jsonl" >/dev/null 2>>"$OUT/provider.log" &
    PID=$!
    await_provider
    sleep 0.5
    switches "$PID" > "$OUT/sw-before.txt"
    c0=$(received)
    drive sw
    c1=$(received)
    switches "$PID" > "$OUT/sw-after.txt"
    cleanup
    python3 - "$OUT/sw-before.txt" "$OUT/sw-after.txt" "$((c1 - c0))" "$bin" <<'PY'
import sys
def read(path):
    return {l.split()[0]: l.split()[1:] for l in open(path)}
before, after, calls, bin_ = read(sys.argv[1]), read(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows = {}
for tid, (comm, vol, inv) in after.items():
    b = before.get(tid, [comm, "0", "0"])
    rows.setdefault(comm, [0, 0])
    rows[comm][0] += int(vol) - int(b[1])
    rows[comm][1] += int(inv) - int(b[2])
total = sum(v + i for v, i in rows.values())
print(f"   {bin_}: {calls} calls, {total} context switches in all: {total / calls:.3f} a call")
for comm, (v, i) in sorted(rows.items()):
    print(f"     {comm}: {v} voluntary, {i} involuntary: {(v + i) / calls:.3f} a call")
PY
  done
fi
