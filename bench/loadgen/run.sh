#!/usr/bin/env bash
# Loadgen benchmarks (issue 3). Loopback only. Rerun with:
#   bash bench/loadgen/run.sh            # throughput, oha/wrk, outstanding
#   LONG=1 bash bench/loadgen/run.sh     # + 10 minutes at 1,000/s, RSS samples
# Needs wrk (apt-get install wrk); oha is used if on PATH (cargo install oha).
# Figures go to stdout; copy them into BENCHMARKS.md, section "loadgen".
#
# Layout on this 2-core machine: the fake provider on core 0 (one worker
# thread), the load generator (or oha, or wrk) on core 1.
#
# 1. Open-loop throughput: `rehearse load` at RATES requests/s for DURATION
#    against the provider at zero latency: achieved send rate, send lag
#    p50/p99/max (actual - intended send time), latency from intended send.
# 2. The same rates with oha (open loop, -q, --latency-correction), and wrk
#    (closed loop, its maximum with 64 connections) for the ratios.
# 3. 10,000 outstanding slow requests (20 s each): loadgen RSS per request.
# 4. (LONG=1) 1,000 requests/s for 10 minutes: loadgen RSS every 30 s.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v wrk >/dev/null || { echo "wrk is needed: apt-get install wrk" >&2; exit 2; }
[ -n "${NO_BUILD:-}" ] || cargo build --release --quiet --bin rehearse
BIN=target/release/rehearse
HERE=bench/loadgen
OUT=${OUT:-target/bench-loadgen}
PORT=${PORT:-18281}
RATES=${RATES:-"5000 10000 20000 30000"}
DURATION=${DURATION:-10}
mkdir -p "$OUT"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

cleanup() { [ -n "${PID:-}" ] && kill "$PID" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT

start() {
  taskset -c 0 "$BIN" provider --config "$1" --listen "127.0.0.1:$PORT" --threads 1 >/dev/null 2>>"$OUT/provider.log" &
  PID=$!
  for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$PORT/_fake/stats" && return 0
    sleep 0.05
  done
  echo "provider did not start" >&2; exit 1
}

# A scenario: name, seconds, rate per second, patience, extra [load] line.
scenario() {
  cat > "$OUT/$1.toml" <<TOML
[load]
${5:-}
send_lag_p99_max = "1ms"
patience = { fixed = "${4:-30s}" }
[[load.phases]]
duration = "${2}s"
rate = $3
[load.request]
prompt_tokens = { fixed = 16 }
max_tokens = { fixed = 16 }
TOML
}

# PARTS selects what runs: wrk, rate (loadgen and oha per rate), hold, long.
PARTS=" ${PARTS:-wrk rate hold${LONG:+ long}} "
want() { [[ "$PARTS" == *" $1 "* ]]; }

URL="http://127.0.0.1:$PORT"
if want wrk; then
start "$HERE/zero.toml"
echo "== wrk (closed loop, -t1 -c64, ${DURATION}s): the target's ceiling from one core"
taskset -c 1 wrk -t1 -c64 -d2s -s "$HERE/post.lua" "$URL/v1/chat/completions" >/dev/null
taskset -c 1 wrk -t1 -c64 -d"${DURATION}s" --latency -s "$HERE/post.lua" "$URL/v1/chat/completions" \
  | grep -E "Requests/sec|50%|99%"
cleanup; PID=
fi

if want rate; then
start "$HERE/zero.toml"
for RATE in $RATES; do
  echo "== rehearse load: $RATE/s open loop for ${DURATION}s on one core"
  scenario "rate$RATE" "$DURATION" "$RATE"
  /usr/bin/time -f "   cpu %P  max rss %M KB" taskset -c 1 "$BIN" load "$OUT/rate$RATE.toml" \
    --target "$URL" --out "$OUT/rate$RATE" --no-progress > "$OUT/rate$RATE.txt" || true
  python3 "$HERE/summary.py" "$OUT/rate$RATE/summary.json" "$DURATION"
  echo "== rehearse load: $RATE/s with max_connections = 1000 (as oha -c 1000)"
  scenario "cap$RATE" "$DURATION" "$RATE" 30s "max_connections = 1000"
  /usr/bin/time -f "   cpu %P  max rss %M KB" taskset -c 1 "$BIN" load "$OUT/cap$RATE.toml" \
    --target "$URL" --out "$OUT/cap$RATE" --no-progress > "$OUT/cap$RATE.txt" || true
  python3 "$HERE/summary.py" "$OUT/cap$RATE/summary.json" "$DURATION"
  if command -v oha >/dev/null; then
    echo "== oha: $RATE/s (-q, --latency-correction) for ${DURATION}s on one core"
    BODY=$(sed -n "s/^wrk.body = '\(.*\)'$/\1/p" "$HERE/post.lua")
    /usr/bin/time -f "   cpu %P  max rss %M KB" taskset -c 1 oha -z "${DURATION}s" -q "$RATE" \
      --latency-correction -c 1000 --no-tui --output-format json -m POST -T application/json \
      -H "authorization: Bearer rehearse" -d "$BODY" "$URL/v1/chat/completions" > "$OUT/oha$RATE.json" || true
    python3 - "$OUT/oha$RATE.json" "$DURATION" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
d = float(sys.argv[2])
n = sum(s.get("statusCodeDistribution", {}).values())
lp = s.get("latencyPercentiles", {})
print(f"oha: ok/s {n / d:.0f}  success rate {s['summary']['successRate']:.3f}  "
      f"latency p50 {lp.get('p50', 0) * 1000:.2f} ms  p99 {lp.get('p99', 0) * 1000:.2f} ms")
PY
  fi
done
cleanup; PID=
fi

if want hold; then
N=${N:-10000}
echo "== $N outstanding requests of 20 s each (loadgen on one core)"
start "$HERE/slow.toml"
RATE_HOLD=2000
scenario hold "$((N / RATE_HOLD))" "$RATE_HOLD" 60s
taskset -c 1 "$BIN" load "$OUT/hold.toml" --target "$URL" --out "$OUT/hold" --no-progress > "$OUT/hold.txt" &
LPID=$!
sleep 0.3
BASE=$(awk '/VmRSS/ {print $2}' "/proc/$LPID/status")
sleep "$((N / RATE_HOLD + 2))"
PEAK=$(awk '/VmRSS/ {print $2}' "/proc/$LPID/status")
OUTSTANDING=$(curl -s "$URL/_fake/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["in_flight"])')
echo "   provider in flight $OUTSTANDING; loadgen RSS $BASE KB at start, $PEAK KB holding them:" \
  "$(( (PEAK - BASE) * 1024 / (OUTSTANDING > 0 ? OUTSTANDING : 1) )) bytes per outstanding request"
wait "$LPID" || true
python3 "$HERE/summary.py" "$OUT/hold/summary.json" "$((N / RATE_HOLD))"
cleanup; PID=
fi

if want long; then
  echo "== 1,000/s for 10 minutes: loadgen RSS every 30 s"
  start "$HERE/zero.toml"
  scenario long 600 1000
  taskset -c 1 "$BIN" load "$OUT/long.toml" --target "$URL" --out "$OUT/long" --no-progress > "$OUT/long.txt" &
  LPID=$!
  for i in $(seq 20); do
    sleep 30
    echo "   t=$((i * 30))s rss $(awk '/VmRSS/ {print $2}' "/proc/$LPID/status" 2>/dev/null || echo -) KB"
  done
  wait "$LPID" || true
  python3 "$HERE/summary.py" "$OUT/long/summary.json" 600
  cleanup; PID=
fi
