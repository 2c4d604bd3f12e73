#!/usr/bin/env bash
# Runs one fuzz target for a while: fuzz/run.sh TARGET SECONDS
#
# With cargo-afl installed (`cargo install cargo-afl`), AFL++ runs
# coverage-guided from corpus/TARGET; its findings go to
# target/afl-out/TARGET (crashes in default/crashes/). Without it, the
# random driver of `cargo test` runs for SECONDS instead.
# Prints the executions and crashes; exits 1 if anything crashed.
set -euo pipefail
cd "$(dirname "$0")"
target=${1:?usage: fuzz/run.sh TARGET SECONDS}
secs=${2:-60}
[ -d "corpus/$target" ] || { echo "no target $target (see corpus/)" >&2; exit 2; }

if cargo afl --version >/dev/null 2>&1; then
  # Instrumented builds live apart from the workspace's own target folder.
  export CARGO_TARGET_DIR=../target/afl
  cargo afl build --release --bin afl -q </dev/null
  out=../target/afl-out/$target
  rm -rf "$out"; mkdir -p "$(dirname "$out")"
  REHEARSE_FUZZ_TARGET=$target AFL_NO_UI=1 AFL_SKIP_CPUFREQ=1 \
    AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_AFFINITY=1 \
    cargo afl fuzz -i "corpus/$target" -o "$out" -V "$secs" \
    "$CARGO_TARGET_DIR/release/afl" </dev/null >"$out.log" 2>&1 || true
  stats=$out/default/fuzzer_stats
  [ -f "$stats" ] || { tail -20 "$out.log"; exit 1; }
  execs=$(awk -F' *: *' '$1=="execs_done"{print $2}' "$stats")
  crashes=$(awk -F' *: *' '$1=="saved_crashes"{print $2}' "$stats")
  hangs=$(awk -F' *: *' '$1=="saved_hangs"{print $2}' "$stats")
  paths=$(awk -F' *: *' '$1=="corpus_count"{print $2}' "$stats")
  echo "$target: afl ${secs}s, $execs execs, $paths paths, $crashes crashes, $hangs hangs ($out)"
  [ "$crashes" = 0 ]
else
  echo "$target: cargo-afl not installed; random driver for ${secs}s"
  REHEARSE_FUZZ_SECONDS=$secs cargo test -p rehearse-fuzz --release --test targets -- --exact "$target"
fi
