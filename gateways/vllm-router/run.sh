#!/usr/bin/env bash
# vllm-router (PyPI vllm-router 0.1.17: a Rust router inside a Python
# wheel, the one teams put in front of vLLM workers) as a rehearsal's
# [gateway] command: run.sh HOST:PORT WORKER_URL... The fake providers
# play the workers: they answer /health as vLLM does, and their timeline
# can slow them down or take them away.
#
# VLLM_ROUTER_DIR: where `pip install --target DIR vllm-router==0.1.17`
# put it (default: target/vllm-router under the repository, where
# .ci/run puts it). The router's own settings come after `--`, else the
# shedding configuration below.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${VLLM_ROUTER_DIR:-$here/../../target/vllm-router}
if [ ! -f "$dir/vllm_router/launch_router.py" ]; then
  echo "run.sh: no vllm-router in $dir; install it with" >&2
  echo "  python3 -m pip install --target $dir vllm-router==0.1.17" >&2
  exit 2
fi
listen=${1:?usage: run.sh HOST:PORT WORKER_URL... [-- ROUTER_FLAGS...]}
shift
workers=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do
  workers+=("$1")
  shift
done
[ "${1:-}" = "--" ] && shift
if [ $# -eq 0 ]; then
  # At most 8 calls to the workers at once (what two workers of 4 serve),
  # 16 waiting behind them for at most 2 s: a full queue is refused at once
  # (429), a wait past 2 s ends in 408. Its retries and circuit breaker stay
  # at their defaults. A rehearsal at time scale N (REHEARSE_TIME_SCALE)
  # divides the wait by N, in the whole seconds the router takes (at least 1).
  wait_s=$(awk -v s="${REHEARSE_TIME_SCALE:-1}" 'BEGIN { w = int(2 / s + 0.5); print (w < 1 ? 1 : w) }')
  set -- --max-concurrent-requests 8 --queue-size 16 --queue-timeout-secs "$wait_s"
fi
export PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}"
exec python3 -m vllm_router.launch_router --host "${listen%:*}" --port "${listen##*:}" \
  --worker-urls "${workers[@]}" --log-level warning "$@"
