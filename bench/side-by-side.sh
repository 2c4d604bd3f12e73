#!/usr/bin/env bash
# Issue 29's side by side, in one run, each part's runs alternating. Run it
# on a quiet machine (2 cores: the target on core 0, the client on core 1,
# each pinned with taskset, at normal priority unless RT=1):
#   bash bench/side-by-side.sh
#   RUNS=5 DURATION=10 PARTS="targets load" bash bench/side-by-side.sh
# Figures go to stdout and $OUT/*.tsv; copy them into BENCHMARKS.md's top
# table (section "Issue 29").
#
# Parts (PARTS, space separated):
#   targets   the fake provider (`rehearse provider`, zero latency, one
#             worker thread, every call's record written to a file) against
#             loadgen's bare hyper target (loadgen/examples/bare_target.rs:
#             one thread, one fixed answer, nothing recorded), VidaiMock
#             0.3.1 when installed (`cargo install vidaimock --version 0.3.1
#             --locked`; `-w 1 --latency 0 --mode benchmark`, a Rust mock of
#             many providers' APIs) and fakellm 0.3.5 from PyPI when
#             installed (`pip install fakellm==0.3.5`; uvicorn, one
#             worker): RUNS rounds of `wrk -t1 -c32 -dDURATION`
#             (a small chat POST, bench/provider/post.lua) against each in
#             turn; req/s, medians, ratios to the bare target. Also the
#             provider with its records dropped before they are encoded
#             (`unrecorded`: --records-max-bytes 1KiB), which parts what
#             the records cost from what the rest of a call costs. Needs wrk.
#   load      `rehearse load` and oha at RATE (75%: of the bare target's
#             keep-alive capacity, measured first with wrk; a number is a
#             rate per second, as the 50,000/s of earlier runs) against the bare
#             target, alternating, at normal priority: bench/loadgen/run.sh's
#             part side (RT=0, CAP=0: the uncapped generator, as shipped;
#             CAP=50 adds runs capped at oha's 50 connections): send lag,
#             latency p99, CPU and RSS, medians and ratios to oha.
#   provider  the same against the fake provider (TARGET=provider) at
#             PROVIDER_RATE (75%: of the provider's keep-alive capacity on
#             this machine, measured first with wrk), the callers with a
#             connection each and sharing a pool of POOL (50, as oha's):
#             issue 46's "valid in 5 of 5 runs in either model, nothing
#             lost, latency p99 at most oha's".
#   slow      `rehearse load` at SLOW_RATE (20,000/s) for DURATION against
#             the fake provider serving about half of it (a ceiling of
#             SLOW_RATE/200 calls of 10 ms each, a FIFO queue behind),
#             SLOW_PATIENCE (500 ms) of patience: the target's backlog grows
#             and callers time out, while the generator keeps its schedule
#             (send lag) and its connections within its bound (summary.json's
#             connection_bound and notes). RUNS runs.
# oha is installed with cargo (bench/loadgen/run.sh) when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
# The binaries of the container image's build (deploy/image/build.sh: the
# gnu target, statically linked), so that a machine that has run .ci/run
# builds only the bare target here.
TRIPLE=x86_64-unknown-linux-gnu
[ -n "${NO_BUILD:-}" ] || {
  export RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static --cfg getrandom_backend=\"linux_getrandom\""
  cargo build --release --quiet --target "$TRIPLE" --bin rehearse
  cargo build --release --quiet --target "$TRIPLE" -p loadgen --example bare_target
  unset RUSTFLAGS
}
BIN=${BIN:-target/$TRIPLE/release/rehearse}
BARE=${BARE:-target/$TRIPLE/release/examples/bare_target}
OUT=${OUT:-target/bench-side-by-side}
PORT=${PORT:-18481}
RUNS=${RUNS:-5}
DURATION=${DURATION:-10}
RATE=${RATE:-75%}
PROVIDER_RATE=${PROVIDER_RATE:-75%}
SLOW_RATE=${SLOW_RATE:-20000}
SLOW_PATIENCE=${SLOW_PATIENCE:-500ms}
RT=${RT:-0}
CHRT=
if [ "$RT" = 1 ]; then
  if chrt -f 1 true 2>/dev/null; then CHRT="chrt -f 1"; else echo "no real-time priority here: RT=0" >&2; fi
fi
PARTS=" ${PARTS:-targets load provider slow} "
want() { [[ "$PARTS" == *" $1 "* ]]; }
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
URL="http://127.0.0.1:$PORT"

PID=
cleanup() { if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi; PID=; }
trap cleanup EXIT

# Waits until the target at $URL answers a chat POST.
await_target() {
  for _ in $(seq 200); do
    curl -s -o /dev/null -X POST -H 'content-type: application/json' \
      -d '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}' \
      "$URL/v1/chat/completions" && return 0
    sleep 0.05
  done
  echo "the target did not start" >&2; exit 1
}

# Starts one target on core 0: bare, provider, unrecorded, vidaimock or fakellm.
start_target() {
  case $1 in
    bare) $CHRT taskset -c 0 "$BARE" "127.0.0.1:$PORT" >/dev/null 2>>"$OUT/target.log" & ;;
    provider|unrecorded)
      # unrecorded: the same provider with its records capped at 1 KiB.
      # Past the first two, every record is dropped before it is encoded,
      # so nothing is encoded or written. Not a way to run it: the measure
      # of what the records cost, and of what the rest of a call costs.
      local cap=()
      [ "$1" = unrecorded ] && cap=(--records-max-bytes 1KiB)
      rm -f "$OUT/$1.jsonl"*
      $CHRT taskset -c 0 "$BIN" provider --config bench/provider/zero.toml --listen "127.0.0.1:$PORT" \
        --threads 1 --records "$OUT/$1.jsonl" "${cap[@]}" >/dev/null 2>>"$OUT/target.log" & ;;
    vidaimock)
      $CHRT taskset -c 0 vidaimock --host 127.0.0.1 --port "$PORT" -w 1 --latency 0 --mode benchmark \
        >/dev/null 2>>"$OUT/target.log" & ;;
    fakellm)
      mkdir -p "$OUT/fakellm"
      (cd "$OUT/fakellm" && { [ -f fakellm.yaml ] || fakellm init >/dev/null; } \
        && exec $CHRT taskset -c 0 fakellm serve --port "$PORT" --config fakellm.yaml) \
        >/dev/null 2>>"$OUT/target.log" & ;;
  esac
  PID=$!
  await_target
}

if want targets; then
  command -v wrk >/dev/null || { echo "wrk is needed for part targets: apt-get install wrk" >&2; exit 2; }
  kinds="bare provider unrecorded"
  if [ "$(vidaimock --version 2>/dev/null)" = "vidaimock 0.3.1" ]; then
    kinds="$kinds vidaimock"
  else
    echo "VidaiMock 0.3.1 is not installed (cargo install vidaimock --version 0.3.1 --locked): left out" >&2
  fi
  if [ "$(fakellm --version 2>/dev/null)" = "fakellm, version 0.3.5" ]; then
    kinds="$kinds fakellm"
  else
    echo "fakellm 0.3.5 is not installed (pip install fakellm==0.3.5): left out" >&2
  fi
  echo "== targets: wrk -t1 -c32 -d${DURATION}s against each on core 0, $RUNS rounds (${CHRT:-normal priority})"
  rm -f "$OUT/targets.tsv"
  for i in $(seq "$RUNS"); do
    for kind in $kinds; do
      start_target "$kind"
      taskset -c 1 wrk -t1 -c32 -d1s -s bench/provider/post.lua "$URL/v1/chat/completions" >/dev/null
      load1=$(awk '{print $1}' /proc/loadavg)
      rps=$(taskset -c 1 wrk -t1 -c32 -d"${DURATION}s" -s bench/provider/post.lua "$URL/v1/chat/completions" \
        | awk '/^Requests\/sec:/ {print $2}')
      extra=
      if [ "$kind" = provider ] || [ "$kind" = unrecorded ]; then
        extra="records $(curl -s "$URL/_fake/stats" | python3 -c 'import json,sys; s=json.load(sys.stdin); print(s["records_written"], "dropped", s["records_dropped"])')"
      fi
      cleanup
      printf '%s\t%s\t%s\t%s\n' "$kind" "$i" "${rps:-0}" "$load1" >> "$OUT/targets.tsv"
      echo "   round $i: $kind ${rps:-?} req/s (load average $load1) $extra"
    done
  done
  python3 - "$OUT/targets.tsv" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
by = {}
for kind, _, rps, _ in rows:
    by.setdefault(kind, []).append(float(rps))
med = {k: statistics.median(v) for k, v in by.items()}
for k, v in by.items():
    print(f"   {k}: median {med[k]:,.0f} req/s over {len(v)} rounds ({', '.join(f'{x:,.0f}' for x in v)})")
# Each as a ratio to the bare target measured in the same run: absolute
# rates differ from machine to machine (the same code served 216,881 req/s
# on one and 80,322 on another), the ratios much less.
for k in med:
    if k != "bare" and med.get("bare"):
        print(f"   {k} / bare target (medians): {med[k] / med['bare']:.2f}x")
for k in ("vidaimock", "fakellm"):
    if med.get(k) and med.get("provider"):
        print(f"   provider / {k} (medians): {med['provider'] / med[k]:.2f}x")
if med.get("unrecorded") and med.get("provider"):
    print(f"   the records' cost: provider / unrecorded (medians): {med['provider'] / med['unrecorded']:.2f}x")
PY
fi

# bench/loadgen/run.sh's part side, at normal priority unless RT=1.
side() {
  RT=$RT PARTS=side CAP=${CAP:-0} POOL=${POOL:-0} RUNS=$RUNS DURATION=$DURATION RATE=${3:-$RATE} NO_BUILD=1 \
    PORT=$PORT BIN=$BIN BARE=$BARE OUT="$OUT/$1" TARGET=$2 bash bench/loadgen/run.sh
}

if want load; then
  echo "== load: rehearse load and oha at $RATE against the bare target"
  side load bare
fi

if want provider; then
  echo "== provider: rehearse load (a connection per caller, and a pool of ${POOL:-50}) and oha at $PROVIDER_RATE against the fake provider (one core each)"
  POOL=${POOL:-50} side provider provider "$PROVIDER_RATE"
fi

if want slow; then
  half=$((SLOW_RATE / 2))
  echo "== slow: rehearse load at $SLOW_RATE/s against the fake provider serving about $half/s, $SLOW_PATIENCE of patience, $RUNS runs"
  cat > "$OUT/half.toml" <<TOML
# About $half calls a second: $((SLOW_RATE / 200)) at a time, 10 ms each, a FIFO queue behind.
seed = 1
completion_tokens = { fixed = 16 }
[latency]
ttft = { fixed = "10ms" }
per_token = { fixed = "0ms" }
[concurrency]
ceiling = $((SLOW_RATE / 200))
TOML
  cat > "$OUT/slow.toml" <<TOML
[load]
patience = { fixed = "$SLOW_PATIENCE" }
[[load.phases]]
duration = "${DURATION}s"
rate = $SLOW_RATE
[load.request]
prompt_tokens = { fixed = 16 }
max_tokens = { fixed = 16 }
TOML
  for i in $(seq "$RUNS"); do
    $CHRT taskset -c 0 "$BIN" provider --config "$OUT/half.toml" --listen "127.0.0.1:$PORT" --threads 1 \
      --records "$OUT/slow-provider.jsonl" >/dev/null 2>>"$OUT/target.log" &
    PID=$!
    await_target
    /usr/bin/time -o "$OUT/slow-time.txt" -f "%P %U %S %M" $CHRT taskset -c 1 "$BIN" load "$OUT/slow.toml" \
      --target "$URL" --out "$OUT/slow-$i" --no-progress > "$OUT/slow-$i.txt" 2>&1 || true
    cleanup
    echo "   run $i: $(python3 bench/loadgen/summary.py "$OUT/slow-$i/summary.json" "$DURATION")"
    python3 - "$OUT/slow-$i/summary.json" "$(cat "$OUT/slow-time.txt" | tail -1)" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
n = {o["outcome"]: o["first_attempts"] + o["retries"] for o in s["outcomes"] if o["first_attempts"] + o["retries"]}
b = s["connection_bound"]
cpu, user, sys_s, rss = sys.argv[2].split()
print(f"     outcomes {n}; connections opened {s['connections_opened']}, at most {b['most_open']} open "
      f"(bound {b['largest']}), waited {b['waited']}, not sent {b['not_sent']}; CPU {cpu} (user {user} s, "
      f"sys {sys_s} s), RSS {int(rss) // 1024} MB")
for note in s.get("notes", []):
    print(f"     note: {note}")
PY
    rm -f "$OUT/slow-$i/client.jsonl" "$OUT/slow-provider.jsonl"*
  done
fi
