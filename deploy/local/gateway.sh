#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs the local control plane in the foreground: redis-server, keel-place serve and
# keel-gateway on their default loopback ports (dockerd must already be running for normal
# functions). Ctrl-C stops the three by PID. State, secrets and logs go to $KEEL_STATE
# (default /var/lib/keel). Then:
#   cat $KEEL_STATE/secrets/basic-auth-password | faas-cli login -u admin --password-stdin
#   faas-cli deploy -f stack.yml
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
state=${KEEL_STATE:-/var/lib/keel}
mkdir -p "$state"
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null || true; done; wait; }
trap cleanup EXIT INT TERM
redis-server --port 6379 --bind 127.0.0.1 --dir "$state" --save "" --appendonly yes >"$state/redis.log" 2>&1 &
pids="$pids $!"
"$root/.venv/bin/keel-place" serve --listen 127.0.0.1:50062 >"$state/placer.log" 2>&1 &
pids="$pids $!"
sleep 1
cd "$root"
build/bin/keel-gateway --secrets "$state/secrets" --topology deploy/local/topology.yaml "$@" &
pids="$pids $!"
wait
