#!/usr/bin/env bash
# The Portkey AI gateway (npm @portkey-ai/gateway) as a rehearsal's
# [gateway] command: run.sh {listen}. Portkey has no upstream of its own:
# each request names it (x-portkey-provider, x-portkey-custom-host), which
# the scenario's [load.request] headers send.
#
# PORTKEY_DIR: where `npm install @portkey-ai/gateway@1.15.2` was run
# (default: target/portkey under the repository, where .ci/run puts it).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${PORTKEY_DIR:-$here/../../target/portkey}
server=$dir/node_modules/@portkey-ai/gateway/build/start-server.js
if [ ! -f "$server" ]; then
  echo "run.sh: no Portkey at $server; install it with" >&2
  echo "  npm install --prefix $dir @portkey-ai/gateway@1.15.2" >&2
  exit 2
fi
listen=${1:?usage: run.sh HOST:PORT}
port=${listen##*:}
# start-server.js reads --port=N only (`--port N` leaves it on 8787);
# --headless: no UI or log stream; NODE_ENV=production: no console.clear.
export NODE_ENV=production
exec node --require "$here/loopback.cjs" "$server" "--port=$port" --headless
