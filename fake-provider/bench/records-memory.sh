#!/usr/bin/env bash
# The fake provider's peak memory after CALLS zero-latency calls (default
# one million): `rehearse provider` on one core, wrk on the other, then
# VmHWM from /proc/PID/status. A memory check, not a test: rerun with
#   bash fake-provider/bench/records-memory.sh [BINARY]
# BINARY defaults to target/release/rehearse (built here); pass an older
# build to compare. Needs wrk (apt-get install wrk).
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v wrk >/dev/null || { echo "wrk is needed: apt-get install wrk" >&2; exit 2; }
BIN=${1:-}
if [ -z "$BIN" ]; then
  cargo build --release --quiet -p rehearse </dev/null
  BIN=target/release/rehearse
fi
PORT=${PORT:-18182}
CALLS=${CALLS:-1000000}
THREADS=1
WORK=$(mktemp -d)
export CALLS THREADS
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

cleanup() { [ -n "${PID:-}" ] && kill "$PID" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

# An older build has no --records flag; a newer one writes into $WORK.
EXTRA=()
if "$BIN" provider --help | grep -q -- --records; then
  EXTRA=(--records "$WORK/provider.jsonl")
fi
taskset -c 0 "$BIN" provider --config fake-provider/bench/zero.toml --listen "127.0.0.1:$PORT" \
  --threads 1 "${EXTRA[@]}" >"$WORK/banner" &
PID=$!
for _ in $(seq 100); do
  curl -s -o /dev/null "http://127.0.0.1:$PORT/_fake/stats" && break
  sleep 0.05
done
grep -E 'VmHWM|VmRSS' /proc/$PID/status | sed 's/^/at start: /'
# wrk waits out its -d even after every thread stopped: watch the count
# instead and end wrk once CALLS calls are in.
START=$(date +%s.%N)
taskset -c 1 wrk -t$THREADS -c64 -d600s -s fake-provider/bench/count.lua \
  "http://127.0.0.1:$PORT/v1/chat/completions" >/dev/null &
WRK=$!
received() { curl -s "http://127.0.0.1:$PORT/_fake/stats" | grep -o '"received":[0-9]*' | cut -d: -f2; }
while [ "$(received)" -lt "$CALLS" ]; do sleep 0.5; done
END=$(date +%s.%N)
kill "$WRK" 2>/dev/null || true
wait "$WRK" 2>/dev/null || true
echo "$CALLS calls in $(echo "$END - $START" | bc) s"
sleep 1
echo "calls received: $(received)"
grep -E 'VmHWM|VmRSS' /proc/$PID/status | sed 's/^/after:    /'
if [ -f "$WORK/provider.jsonl" ]; then
  echo "records file: $(wc -l <"$WORK/provider.jsonl") lines, $(du -h "$WORK/provider.jsonl" | cut -f1)"
fi
