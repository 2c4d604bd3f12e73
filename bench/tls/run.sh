#!/usr/bin/env bash
# TLS against plain HTTP for the load generator (issue 14, item 0).
# Loopback only; every process stops by itself. Rerun with:
#   bash bench/tls/run.sh                 # 2,000/s for 10 s, both targets
#   RATE=4000 DURATION=10 bash bench/tls/run.sh
# Figures go to stdout; copy them into BENCHMARKS.md, section "TLS".
#
# Layout on this 2-core machine: the fake provider (one worker thread) and
# two relays in front of it (test-support's tls_relay example, one worker
# thread each: one terminating TLS with a certificate of a private CA made
# at start, one plain TCP, the same path without the TLS) on core 0; the
# load generator on core 1. Each run goes through a relay, so the only
# difference between the two is TLS.
#
# Targets: the provider at zero latency (few connections, kept alive: the
# cost of TLS per request), and at 1 s per call (about RATE connections
# open at once: a handshake and a session each).
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${NO_BUILD:-}" ]; then
  cargo build --release --quiet --bin rehearse
  cargo build --release --quiet -p test-support --example tls_relay
fi
BIN=${BIN:-target/release/rehearse}
RELAY=${RELAY:-target/release/examples/tls_relay}
HERE=bench/tls
OUT=${OUT:-target/bench-tls}
PORT=${PORT:-18391}
RATE=${RATE:-2000}
DURATION=${DURATION:-10}
# Each helper process lives at most this long, whatever happens here.
LIFE=$((4 * DURATION + 30))
mkdir -p "$OUT"
: > "$OUT/relay.log"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  PIDS=()
}
trap cleanup EXIT

wait_port() {
  for _ in $(seq 100); do
    (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "nothing listens on $1" >&2; exit 1
}

# Starts the provider with config $1, and both relays in front of it.
start() {
  taskset -c 0 timeout "$LIFE" "$BIN" provider --config "$1" --listen "127.0.0.1:$PORT" \
    --threads 1 >/dev/null 2>>"$OUT/provider.log" &
  PIDS+=($!)
  wait_port "$PORT"
  taskset -c 0 "$RELAY" --upstream "127.0.0.1:$PORT" --listen "127.0.0.1:$((PORT + 1))" \
    --ca-out "$OUT/ca.pem" --for "$LIFE" 2>>"$OUT/relay.log" &
  PIDS+=($!)
  taskset -c 0 "$RELAY" --plain --upstream "127.0.0.1:$PORT" --listen "127.0.0.1:$((PORT + 2))" \
    --for "$LIFE" 2>>"$OUT/relay.log" &
  PIDS+=($!)
  wait_port "$((PORT + 1))"
  wait_port "$((PORT + 2))"
}

cat > "$OUT/load.toml" <<TOML
[load]
send_lag_p99_max = "1ms"
patience = { fixed = "30s" }
[[load.phases]]
duration = "${DURATION}s"
rate = $RATE
[load.request]
prompt_tokens = { fixed = 16 }
max_tokens = { fixed = 16 }
TOML

# One run: name, then the target and TLS flags.
load() {
  local name=$1; shift
  /usr/bin/time -o "$OUT/$name.time" -f "cpu %P  max rss %M KB" \
    taskset -c 1 timeout "$LIFE" "$BIN" load "$OUT/load.toml" --out "$OUT/$name" --no-progress \
    "$@" > "$OUT/$name.txt" 2>"$OUT/$name.err" || true
  python3 - "$OUT/$name/summary.json" "$DURATION" "$name" "$(tail -n1 "$OUT/$name.time")" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
d = float(sys.argv[2])
ok = next(o for o in s["outcomes"] if o["outcome"] == "ok")
bad = sum(o["first_attempts"] + o["retries"] for o in s["outcomes"] if o["outcome"] != "ok")
lag = s["send_lag"]
print(f"{sys.argv[3]:<14} sent/s {s['attempts'] / d:.0f}  ok {ok['first_attempts']}  not ok {bad}  "
      f"send lag p50 {lag['p50_us']} us  p99 {lag['p99_us']} us  max {lag['max_us']} us  "
      f"latency p50 {ok['latency']['p50_us'] / 1000:.2f} ms  p99 {ok['latency']['p99_us'] / 1000:.2f} ms  "
      f"{sys.argv[4]}  valid {s['valid']}")
PY
  # The send lag of the first second (when a slow target's connections are
  # opened) apart from the rest.
  python3 - "$OUT/$name/client.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
t0 = min(r["intended_us"] for r in rows)
first, rest = [], []
for r in rows:
    (first if r["intended_us"] - t0 < 1_000_000 else rest).append(r["sent_us"] - r["intended_us"])
p99 = lambda v: sorted(v)[min(len(v) - 1, int(0.99 * len(v)))] if v else 0
print(f"   lag by second: first second p99 {p99(first)} us, after it p99 {p99(rest)} us")
PY
}

for TARGET in zero second; do
  echo "== $RATE/s for ${DURATION}s, provider $TARGET.toml, loadgen on core 1"
  start "$HERE/$TARGET.toml"
  load "$TARGET-plain" --target "http://127.0.0.1:$((PORT + 2))"
  load "$TARGET-tls" --target "https://localhost:$((PORT + 1))" --ca-file "$OUT/ca.pem"
  cleanup
  # Connections each relay accepted: one handshake each on the TLS one
  # (and one for the load generator's probe).
  grep "connections accepted" "$OUT/relay.log" | tail -2 | sed 's/^/   /'
done
