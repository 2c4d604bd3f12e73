#!/usr/bin/env bash
# Overhead of the reference gateway in bounded mode: p50 latency through the
# gateway minus p50 calling the fake provider directly, at ~1,000 req/s.
#
#   bash bench/gateway/run.sh            # 3 rounds of 20 s on each path
#   ROUNDS=1 DURATION=10s bash bench/gateway/run.sh
#   IDLE=halt bash bench/gateway/run.sh  # with the CPUs' idle states left on
#
# Needs wrk (apt-get install wrk) and taskset. Builds the release binary first. Direct,
# gateway and relay runs alternate, so that noise from other work on the machine falls
# on all alike. Prints one line per run and a summary; nothing here
# asserts: the figures go into BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")/../.."

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-20s}
CONNECTIONS=${CONNECTIONS:-10}
export PACE_MS=${PACE_MS:-10}
# Worker threads of each server ("" for one per core). The machine has few
# cores and wrk needs one: oversubscribing them measures the scheduler.
PROVIDER_THREADS=${PROVIDER_THREADS:-1}
GATEWAY_THREADS=${GATEWAY_THREADS:-1}
# PIN=1 (default): the gateway (and the relay) on their own core, wrk and
# the provider on another, as a gateway runs in production: not sharing its
# core with its caller and its provider. PIN=0 lets the scheduler place all.
PIN=${PIN:-1}
if [ "$PIN" = 1 ] && command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ]; then
  last=$(( $(nproc) - 1 ))
  on_sut=(taskset -c "$last")
  on_rest=(taskset -c "0-$(( last - 1 ))")
else
  on_sut=()
  on_rest=()
fi
# IDLE=poll (default): hold the CPUs out of their idle (halt) state for the
# whole benchmark through the kernel's PM QoS interface, as latency
# benchmarks such as cyclictest do, so the figures measure the processes
# and not the time a halted virtual CPU takes to wake (on this VM that wake
# costs 80-130 us, and an extra hop adds two of them: a bare TCP relay then
# adds 165-254 us). It applies to the direct, gateway and relay paths
# alike, and ends with the script. IDLE=halt leaves the idle states on.
IDLE=${IDLE:-poll}
case "$IDLE" in poll | halt) ;; *) echo "IDLE is poll or halt, not '$IDLE'" >&2; exit 2 ;; esac
if [ "$IDLE" = poll ]; then
  if { exec 3>/dev/cpu_dma_latency; } 2>/dev/null && printf '0' >&3; then
    echo "CPU idle: held at polling (PM QoS cpu_dma_latency 0) while this runs" >&2
  else
    echo "CPU idle: /dev/cpu_dma_latency is not writable here; idle states stay on" >&2
    IDLE=halt
  fi
else
  echo "CPU idle: idle states left on (IDLE=halt)" >&2
fi
OUT=${OUT:-target/bench-gateway/$IDLE}
mkdir -p "$OUT"

command -v wrk >/dev/null || { echo "wrk not found (apt-get install wrk)" >&2; exit 2; }
# The container image's build (deploy/image/build.sh: the gnu target,
# statically linked), as bench/side-by-side.sh: a machine that has run
# .ci/run builds only the relay here. NO_BUILD=1 uses what is built.
TRIPLE=x86_64-unknown-linux-gnu
[ -n "${NO_BUILD:-}" ] || {
  export RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static --cfg getrandom_backend=\"linux_getrandom\""
  cargo build --release --target "$TRIPLE" --bin rehearse >&2
  cargo build --release --target "$TRIPLE" -p reference-gateway --example tcp_relay >&2
  unset RUSTFLAGS
}
BIN=${BIN:-target/$TRIPLE/release/rehearse}
RELAY=${RELAY:-target/$TRIPLE/release/examples/tcp_relay}

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

# Start a server in the background (its pid kept for the cleanup), then
# wait for its stdout to show its base URL and put that in $url.
start() {
  local log=$1; shift
  # 3>&-: the servers do not inherit the PM QoS request, so it ends with
  # this script even if they outlive it.
  "$@" >"$log" 2>"$log.err" 3>&- &
  pids+=($!)
  url=
  for _ in $(seq 100); do
    url=$(grep -o 'http://127\.0\.0\.1:[0-9]*' "$log" | head -1 || true)
    [ -n "$url" ] && return 0
    sleep 0.1
  done
  echo "server did not start: $*" >&2; cat "$log.err" >&2; exit 3
}

start "$OUT/provider.log" "${on_rest[@]}" "$BIN" provider --config bench/gateway/provider.toml --listen 127.0.0.1:0 \
  ${PROVIDER_THREADS:+--threads "$PROVIDER_THREADS"}
provider=$url
start "$OUT/gateway.log" "${on_sut[@]}" "$BIN" gateway --mode bounded --upstream "$provider" \
  --concurrency 64 --queue 1024 --wait-budget 10s ${GATEWAY_THREADS:+--threads "$GATEWAY_THREADS"}
gateway=$url
# The floor of any extra process hop on this machine: a TCP relay, no logic.
start "$OUT/relay.log" "${on_sut[@]}" "$RELAY" 127.0.0.1:0 "${provider#http://}"
relay=$url
echo "relay $relay (tcp, one thread); pinned: ${on_sut[*]:-no} (servers under test), ${on_rest[*]:-no} (wrk, provider)" >&2
echo "provider $provider (threads: ${PROVIDER_THREADS:-per core}), gateway $gateway (bounded, concurrency 64, threads: ${GATEWAY_THREADS:-per core})" >&2

# p50 in microseconds from wrk's --latency distribution.
p() { awk -v q="$2" '$1 == q { v = $2; if (v ~ /us$/) { sub(/us$/, "", v); print v } else if (v ~ /ms$/) { sub(/ms$/, "", v); print v * 1000 } else if (v ~ /s$/) { sub(/s$/, "", v); print v * 1000000 } }' "$1"; }
rps() { awk '/^Requests\/sec/ { print $2 }' "$1"; }

run() { # name url round
  local f="$OUT/$1-$3.txt"
  "${on_rest[@]}" wrk -t1 -c"$CONNECTIONS" -d"$DURATION" --latency -s bench/gateway/post.lua "$2/v1/chat/completions" >"$f"
  printf '%-8s round %s: %8.0f req/s  p50 %6.0f us  p90 %6.0f us  p99 %6.0f us\n' \
    "$1" "$3" "$(rps "$f")" "$(p "$f" 50%)" "$(p "$f" 90%)" "$(p "$f" 99%)"
}

# Warm both paths (connection pools, page cache) before measuring.
"${on_rest[@]}" wrk -t1 -c"$CONNECTIONS" -d2s -s bench/gateway/post.lua "$provider/v1/chat/completions" >/dev/null
"${on_rest[@]}" wrk -t1 -c"$CONNECTIONS" -d2s -s bench/gateway/post.lua "$gateway/v1/chat/completions" >/dev/null
"${on_rest[@]}" wrk -t1 -c"$CONNECTIONS" -d2s -s bench/gateway/post.lua "$relay/v1/chat/completions" >/dev/null

for r in $(seq "$ROUNDS"); do
  run direct "$provider" "$r"
  run gateway "$gateway" "$r"
  run relay "$relay" "$r"
done | tee "$OUT/summary.txt"

# Added p50 per round (gateway minus direct), and their median.
added() { # name: p50 of that path minus direct, per round, and the median
  awk -v name="$1" '/^direct/ { d[$3] = $7 } $1 == name { g[$3] = $7 }
       END { for (r in d) if (r in g) print g[r] - d[r] }' "$OUT/summary.txt" | sort -n >"$OUT/added-$1.txt"
  local n median
  n=$(wc -l <"$OUT/added-$1.txt")
  median=$(awk -v n="$n" '{ v[NR] = $1 } END { print (n % 2) ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }' "$OUT/added-$1.txt")
  echo "added p50 latency, $2: median over $n rounds ${median} us (rounds: $(tr '\n' ' ' <"$OUT/added-$1.txt"))"
}
added gateway "gateway in bounded mode"
added relay "bare TCP relay (the floor of any extra hop)"

# The same three paths back to back on one connection (no pacing, so no
# process sleeps between requests): the processing cost without the
# machine's idle wake-ups.
for r in $(seq "$ROUNDS"); do
  for t in direct:"$provider" gateway:"$gateway" relay:"$relay"; do
    f="$OUT/b2b-${t%%:*}-$r.txt"
    PACE_MS=0 "${on_rest[@]}" wrk -t1 -c1 -d"$DURATION" --latency -s bench/gateway/post.lua "${t#*:}/v1/chat/completions" >"$f"
    printf 'b2b-%-8s round %s: %8.0f req/s  p50 %6.0f us  p90 %6.0f us  p99 %6.0f us\n' \
      "${t%%:*}" "$r" "$(rps "$f")" "$(p "$f" 50%)" "$(p "$f" 90%)" "$(p "$f" 99%)"
  done
done | tee "$OUT/b2b.txt"
curl -s "$gateway/metrics" | grep -E '^gateway_(shed_total|stale_drops_total|requests_total|in_flight) |^process_resident_memory_bytes' >&2 || true
