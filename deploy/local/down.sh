#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Stops keel's local stack (`make down`): exactly the processes whose PID files make up wrote
# in run/ (SIGTERM, then SIGKILL after a bounded wait), the NF containers of the agent (label
# com.keel.worker), the private Open vSwitch's bridges (keel-nic-*, keel-tor*) with the veths
# that were their ports and the keel* network namespaces those veths led into, and the
# chain-buffer tmpfs if make up mounted it, and net.core.rmem_default if make up raised it. A dockerd make up did not start is left running,
# and so is everything else.
#
# Works after a crash (stale PID files, OVS killed, half-started stack) and when nothing runs;
# running it twice is harmless. Redis' data and users (run/redis/), the gateway's password and
# the Redis logins (run/secrets/) are kept for the next make up. Must run as root.
#
# usage: deploy/local/down.sh
set -euo pipefail

PROG=down.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

usage() { sed -n '/^# Stops/,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

case ${1:-} in
  "") ;;
  -h|--help) usage; exit 0 ;;
  *) usage >&2; exit 2 ;;
esac
[ "$(id -u)" -eq 0 ] || die "must run as root; try sudo make down"

# stop NAME SECONDS: SIGTERM to NAME's process, SIGKILL if it is still there after SECONDS;
# removes the PID file. Sets KILLED=1 if SIGKILL was needed.
stop() {
  local name=$1 limit=$2 pid deadline
  KILLED=0
  if ! pid=$(alive "$name"); then
    [ ! -f "$RUN/$name.pid" ] || say "  $name: not running (stale PID file removed)"
    rm -f "$RUN/$name.pid"
    return 0
  fi
  kill -TERM "$pid" 2>/dev/null || true
  deadline=$((SECONDS + limit))
  while ours "$name" "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
  if ours "$name" "$pid"; then
    kill -KILL "$pid" 2>/dev/null || true
    KILLED=1
    deadline=$((SECONDS + 5))
    while ours "$name" "$pid" && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
    say "  $name: killed (pid $pid did not stop within $limit s of SIGTERM)"
  else
    say "  $name: stopped (pid $pid)"
  fi
  rm -f "$RUN/$name.pid"
}

# ovs_names: the keel* interfaces of the private OVS (bridges' own interfaces and ports),
# read from its database file, so this also works when OVS is not running.
ovs_names() {
  [ -s "$RUN/ovs/conf.db" ] || return 0
  ovsdb-tool query "$RUN/ovs/conf.db" \
    '["Open_vSwitch",{"op":"select","table":"Interface","where":[],"columns":["name"]}]' 2>/dev/null |
    python3 -c 'import json, sys
for row in json.load(sys.stdin)[0]["rows"]:
    if row["name"].startswith("keel"):
        print(row["name"])'
}

say "stopping keel's local stack"

# Prometheus first: it only reads the others.
stop prometheus 10
# The ingress and the ToR's controller, then the agent, so that nothing re-creates rules,
# containers or veths behind our back.
stop keel-ingress 10
stop keel-torctl 10
stop keel-agent 10
if docker_answers; then
  ids=$(docker -H "unix://$DOCKER_SOCK" ps -aq --filter label=com.keel.worker)
  if [ -n "$ids" ]; then
    docker -H "unix://$DOCKER_SOCK" rm -f $ids > /dev/null
    say "  NF containers: removed $(wc -w <<< "$ids")"
  fi
fi

stop keel-coopsched 10
if [ "$KILLED" = 1 ] && [ "$(cat /proc/sys/kernel/sched_rt_runtime_us)" = -1 ]; then
  echo 950000 > /proc/sys/kernel/sched_rt_runtime_us
  say "  kernel.sched_rt_runtime_us back to 950000 (keel-coopsched was killed before it could)"
fi
stop keel-gateway 10
stop keel-place 10

# Open vSwitch: note its interfaces, stop it, then remove what is left of them. A veth port
# whose other end is in a keel* netns takes that netns with it.
names=$(ovs_names || true)
stop ovs-vswitchd 10
stop ovsdb-server 10
netns=()
for name in $names; do
  info=$(ip -o -d link show dev "$name" 2>/dev/null) || continue
  if [[ $info =~ link-netns\ (keel[^ ]*) ]]; then netns+=("${BASH_REMATCH[1]}"); fi
  ip link del "$name" 2>/dev/null && say "  link $name: removed" || true
done
# keelsrc and keelsink are the stack's own (up.sh makes them) even when their veth went first.
for ns in "${netns[@]}" keelsrc keelsink; do
  [ -e "/var/run/netns/$ns" ] || continue
  ip netns del "$ns" 2>/dev/null && say "  netns $ns: removed" || true
done
rm -f "$RUN/ovs/conf.db" "$RUN/ovs/.conf.db.~lock~"

stop redis 10
if alive dockerd > /dev/null; then
  stop dockerd 30
else
  rm -f "$RUN/dockerd.pid"
fi

# The NIC parts' pinned XDP maps and links (keel-agent pins them per instance of the worker
# "local"): their instances went with the containers and veths.
if [ -d /sys/fs/bpf/keel/local ]; then
  rm -rf /sys/fs/bpf/keel/local && say "  XDP pins /sys/fs/bpf/keel/local: removed"
fi

if [ -f "$RUN/pktbuf.mounted" ]; then
  if mountpoint -q "$PKTBUF"; then
    umount "$PKTBUF" || die "cannot unmount $PKTBUF (still in use: fuser -vm $PKTBUF)"
    say "  chain buffers: unmounted $PKTBUF"
  fi
  rm -f "$RUN/pktbuf.mounted"
fi
if [ -f "$RUN/ip_local_reserved_ports" ]; then
  sysctl -qw net.ipv4.ip_local_reserved_ports="$(cat "$RUN/ip_local_reserved_ports")" &&
    say "  net.ipv4.ip_local_reserved_ports: '$(cat "$RUN/ip_local_reserved_ports")' again"
  rm -f "$RUN/ip_local_reserved_ports"
fi
if [ -f "$RUN/rmem_default" ]; then
  sysctl -qw net.core.rmem_default="$(cat "$RUN/rmem_default")" &&
    say "  net.core.rmem_default: $(cat "$RUN/rmem_default") again"
  rm -f "$RUN/rmem_default"
fi
say "keel's local stack is down"
