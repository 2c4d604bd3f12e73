#!/usr/bin/env bash
# The LiteLLM proxy's router (PyPI `litellm[proxy]`) in front of two fake
# providers, as a rehearsal's [gateway] command:
#   run.sh {provider_url:primary} {provider_url:secondary} {listen}
#
# LITELLM: the `litellm` program (default: target/litellm-venv/bin/litellm
# under the repository, else `litellm` on PATH). Install with
#   python3 -m venv target/litellm-venv
#   target/litellm-venv/bin/pip install 'litellm[proxy]'
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
usage="usage: run.sh PRIMARY_URL SECONDARY_URL HOST:PORT"
primary=${1:?$usage}
secondary=${2:?$usage}
listen=${3:?$usage}
litellm=${LITELLM:-$here/../../target/litellm-venv/bin/litellm}
[ -x "$litellm" ] || litellm=$(command -v litellm) || {
  echo "run.sh: no litellm; see the comment at the top of $0" >&2
  exit 2
}
export REHEARSE_PRIMARY_API_BASE="$primary/v1"
export REHEARSE_SECONDARY_API_BASE="$secondary/v1"
# The model cost map is read from the package, not fetched at start.
export LITELLM_LOCAL_MODEL_COST_MAP=True
export LITELLM_TELEMETRY=False
# LiteLLM refuses to start without a master key (and with a weak one);
# the scenario's [load.request] api_key is this one.
export LITELLM_MASTER_KEY=${LITELLM_MASTER_KEY:-sk-rehearse-4f1c9a7e2b6d8053a1e9c7b5d3f20486}
exec "$litellm" --config "$here/config.yaml" --host "${listen%:*}" --port "${listen##*:}" --num_workers 1
