#!/usr/bin/env bash
# Fake-provider benchmarks (issue 2). Loopback only. Rerun with:
#   bash bench/provider/run.sh
# Needs wrk (apt-get install wrk). Results go to stdout; copy the figures
# into BENCHMARKS.md.
#
# 1. Throughput: the provider on ONE core (taskset -c 0, one worker thread),
#    wrk on the other core, 64 keep-alive connections, zero latency.
# 2. Holding 10,000 delayed calls (12 s each, started over 5 s): provider RSS per call, and
#    observed latency minus scripted latency (p50/p99), from a client that
#    opens its connections first and times each request from its send.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v wrk >/dev/null || { echo "wrk is needed: apt-get install wrk" >&2; exit 2; }
cargo build --release --quiet --bin rehearse --example hold -p fake-provider -p rehearse
BIN=target/release/rehearse
HOLD=target/release/examples/hold
PORT=${PORT:-18181}
DURATION=${DURATION:-10s}
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

cleanup() { [ -n "${PID:-}" ] && kill "$PID" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT

start() {
  taskset -c 0 "$BIN" provider --config "$1" --listen "127.0.0.1:$PORT" --threads 1 >/dev/null &
  PID=$!
  for _ in $(seq 100); do
    curl -s -o /dev/null "http://127.0.0.1:$PORT/_fake/stats" && return 0
    sleep 0.05
  done
  echo "provider did not start" >&2; exit 1
}

echo "== throughput: zero latency, provider on one core, wrk -t1 -c64 -d$DURATION"
start bench/provider/zero.toml
taskset -c 1 wrk -t1 -c64 -d2s -s bench/provider/post.lua "http://127.0.0.1:$PORT/v1/chat/completions" >/dev/null
taskset -c 1 wrk -t1 -c64 -d"$DURATION" --latency -s bench/provider/post.lua "http://127.0.0.1:$PORT/v1/chat/completions"
cleanup; PID=

N=${N:-10000}
echo "== holding $N calls of 12 s each (provider on one core)"
start bench/provider/delayed.toml
taskset -c 1 "$HOLD" "http://127.0.0.1:$PORT" "$PID" "$N" 12000
