#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Starts keel's local single-node stack in the background (`make up`), each part waited for
# until it answers:
#
#   redis-server     127.0.0.1:6379 and unix socket run/redis.sock (AOF in run/redis/), with
#                    ACLs (run/redis/users.acl): no client without a login (see below)
#   dockerd          only if none answers at /var/run/docker.sock
#   ovsdb-server     private Open vSwitch database, run/ovs/db.sock
#   ovs-vswitchd     userspace datapath (bridges use datapath_type=netdev)
#   chain buffers    tmpfs with 2 MB pages on /run/keel/pktbuf (if not mounted yet)
#   keel-place       placer service, 127.0.0.1:50062
#   keel-gateway     OpenFaaS API http://127.0.0.1:8080, gRPC 127.0.0.1:50051
#   keel-coopsched   manages core 1, unix:/run/keel/coopsched.sock (the agent's) and
#                    unix:/run/keel/coopsched-nf.sock (the NF containers')
#   keel-agent       the worker "local", /healthz and /metrics on 127.0.0.1:9101
#   ToR              OVS bridge keel-tor (OpenFlow 1.3, fail-mode secure) with ports to the
#                    traffic source (netns keelsrc), the sink (netns keelsink), the ingress
#                    and the worker's NIC bridge (keel-tor-local)
#   keel-torctl      the ToR's OpenFlow controller, 127.0.0.1:6653, pinned to the ToR's datapath
#                    ID (deploy/lib/tor.sh); gRPC 127.0.0.1:50070, /metrics on 127.0.0.1:9102
#   keel-ingress     new flows from the ToR on keel-ing (AF_PACKET); /metrics on 127.0.0.1:9103
#   prometheus       http://127.0.0.1:9090, scraping all of the above (deploy/local/prometheus.yml),
#                    its data in run/prometheus/ kept 2 hours
#
# Every gRPC call between keel's parts carries the control-plane token, run/secrets/control-token
# (random, mode 0600; keel-place creates it at the first make up, every part gets
# --control-token-file), and is refused without it. Like the basic-auth password beside it, it
# survives make down.
#
# Redis has no default user: keel-gateway logs in as keel-gateway (the keys keel:*), keel-agent
# as keel-agent (NF state keel:state:*, and the NFs' users), each with the password in
# run/secrets/redis-gateway or redis-agent (random, mode 0600, made at the first make up and
# kept; deploy/lib/redis-acl.sh writes run/redis/users.acl from deploy/redis/users.acl.in). Each
# chain instance's NFs log in as keel-nf.<group>, a user keel-agent makes that may touch only
# the instance's state; its login is in run/secrets/nf/<group>/redis. To look into Redis:
#   REDISCLI_AUTH=$(cat run/secrets/redis-gateway) redis-cli --user keel-gateway -s run/redis.sock
#
# and builds the keel/nf-base image if the engine lacks it or keel-nf is newer. Logs and PID files are in run/
# (see deploy/local/lib.sh); `make down` stops what this started. Running it again while the
# stack runs only checks that every part answers. Must run as root.
#
# usage: deploy/local/up.sh [--bin DIR] [--no-smartnic] [--flow-moves]
#   --bin DIR       keel's binaries (default $KEEL_BIN, else build/bin)
#   --no-smartnic   the worker's NIC is a plain NIC in the placer's topology, not an eBPF
#                   SmartNIC (deploy/local/topology.yaml): no NF runs in XDP
#   --flow-moves    the gateway moves live flows between instances (keel-gateway --flow-moves;
#                   also with KEEL_FLOW_MOVES=1, e.g. KEEL_FLOW_MOVES=1 make up). A gateway that
#                   runs already keeps its flags: make down first.
#   KEEL_TOR_OPENFLOW=off  keel-ingress leaves every flow's rule to keel-torctl instead of
#                   writing most of them to the ToR itself (for comparison: bench/flow_setup.py).
#                   An ingress that runs already keeps its flags.
#   KEEL_OVS_MAX_IDLE_MS=N  how long OVS keeps an idle datapath flow (other_config:max-idle;
#                   default here 1000).
#   KEEL_INGRESS_FLAGS="..."  more keel-ingress flags (keel-ingress --help), e.g.
#                   KEEL_INGRESS_FLAGS="--assign-window-us 1000" (a running ingress keeps its flags).
set -euo pipefail

PROG=up.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
BIN=${KEEL_BIN:-$ROOT/build/bin}
VENV=$ROOT/.venv
SMARTNIC=1
FLOW_MOVES=${KEEL_FLOW_MOVES:-0}
TOR_OPENFLOW=${KEEL_TOR_OPENFLOW:-on}

usage() { sed -n '/^# Starts/,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
  case $1 in
    --bin) [ $# -ge 2 ] || die "--bin needs a directory"; BIN=$2; shift 2 ;;
    --no-smartnic) SMARTNIC=0; shift ;;
    --flow-moves) FLOW_MOVES=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done

# unmanaged_cpus: the online CPUs coopsched does not manage, as a list (e.g. 0 or 0,2,3):
# normal functions' containers run there, never on a chain's core.
unmanaged_cpus() {
  local range cpu out=()
  IFS=, read -ra ranges < /sys/devices/system/cpu/online
  for range in "${ranges[@]}"; do
    for ((cpu = ${range%-*}; cpu <= ${range#*-}; cpu++)); do
      [[ ,$MANAGED_CORES, == *,$cpu,* ]] || out+=("$cpu")
    done
  done
  local IFS=,
  printf '%s' "${out[*]}"
}

# listener PID ADDR: true if process PID listens on ADDR (HOST:PORT or a unix socket path).
listener() {
  local pid=$1 addr=$2
  if [[ $addr == /* ]]; then
    ss -Hxlp src "$addr" 2>/dev/null | grep -q "pid=$pid,"
  else
    ss -Hltnp src "$addr" 2>/dev/null | grep -q "pid=$pid,"
  fi
}

# port_free HOST:PORT: fails, naming the holder, if another process listens there; waits (up
# to 65 s) while a closed client connection in TIME-WAIT still holds the port, which would make
# the server's bind fail (deploy/lib/port_free.py says why a bind test, not ss, tells).
port_free() {
  python3 "$ROOT/deploy/lib/port_free.py" "$1" --wait 65 ||
    die "$1 cannot be listened on (above); it is not held by a part make up started"
}

# spawn NAME CMD...: starts CMD in its own session, output to run/NAME.log, writes
# run/NAME.pid and sets PID.
spawn() {
  local name=$1
  shift
  setsid "$@" > "$RUN/$name.log" 2>&1 < /dev/null &
  PID=$!
  echo "$PID" > "$RUN/$name.pid"
}

# await NAME SECONDS CHECK...: waits until CHECK succeeds; fails with NAME's log tail if
# NAME's process exits or SECONDS pass. NAME "" waits for a part the stack did not start.
await() {
  local name=$1 limit=$2 deadline=$((SECONDS + $2))
  shift 2
  until "$@" >/dev/null 2>&1; do
    if [ -n "$name" ] && ! ours "$name" "$PID"; then
      say "  $name exited during start-up"
      logtail "$name"
      die "$name did not start; make down stops what did"
    fi
    if [ $SECONDS -ge $deadline ]; then
      say "  $name: no answer to '$*' within $limit s"
      [ -z "$name" ] || logtail "$name"
      die "${name:-a part of the stack} did not become healthy; make down stops what did start"
    fi
    sleep 0.2
  done
}

# part NAME SECONDS CHECK -- CMD...: starts NAME with CMD unless it runs already, then waits
# until CHECK succeeds. CHECK may use $PID.
part() {
  local name=$1 limit=$2 check=() state=running
  shift 2
  while [ "$1" != -- ]; do check+=("$1"); shift; done
  shift
  if ! PID=$(alive "$name"); then
    rm -f "$RUN/$name.pid"
    spawn "$name" "$@"
    state=started
  fi
  await "$name" "$limit" "${check[@]}"
  say "  $name: $state (pid $PID)"
}

http_ok() { curl -fsS -m 2 -o /dev/null "$1"; }
redis_ok() {
  [ "$(redis_cli -h 127.0.0.1 -p 6379 ping)" = PONG ] && [ "$(redis_cli -s "$RUN/redis.sock" ping)" = PONG ]
}
ovsdb_ok() { ovs-vsctl --timeout=2 show; }
vswitchd_ok() { ovs-appctl --timeout=2 -t ovs-vswitchd version; }
placer_ok() { listener "$PID" 127.0.0.1:50062; }
gateway_ok() { http_ok http://127.0.0.1:8080/healthz && listener "$PID" 127.0.0.1:50051; }
coopsched_ok() { listener "$PID" "$COOPSCHED_SOCK" && listener "$PID" "$COOPSCHED_NF_SOCK"; }
# The agent answers, and has registered with the gateway and read its desired state (so a
# deploy right after make up reaches it).
agent_ok() {
  http_ok http://127.0.0.1:9101/healthz &&
    curl -fsS -m 2 http://127.0.0.1:9101/metrics | grep -qx 'keel_agent_gateway_synced 1'
}

# Before anything starts: root, two cores, every program.
[ "$(id -u)" -eq 0 ] || die "must run as root (mounts, dockerd, SCHED_FIFO); try sudo make up"
[ "$(getconf _NPROCESSORS_ONLN)" -ge 2 ] || die "needs two cores: coopsched manages core $MANAGED_CORES, core 0 runs the rest"
for prog in redis-server redis-cli ovsdb-tool ovsdb-server ovs-vswitchd ovs-vsctl ovs-appctl docker curl ss; do
  command -v "$prog" > /dev/null || die "$prog is not installed: run make deps"
done
[ -f /usr/share/openvswitch/vswitch.ovsschema ] || die "the OVS schema is missing: run make deps (openvswitch-switch)"
[ -x "$VENV/bin/keel-place" ] || die "$VENV/bin/keel-place is missing: run make build"
[ -x "$VENV/bin/keel-torctl" ] || die "$VENV/bin/keel-torctl is missing: run make build"
for prog in keel-gateway keel-coopsched keel-nf keel-ingress; do
  [ -x "$BIN/$prog" ] || die "$BIN/$prog is missing: run make build"
done
[ -x "$BIN/keel-agent" ] || die "$BIN/keel-agent is missing: the worker agent (agent/, issue 10) is not built; make build builds it once agent/ is in the tree"

# Every part of the stack runs on the unmanaged cores (core 0 here) and inherits that from
# this script. A control-plane thread left free to land on the managed core waits there
# behind the attached chains, which poll at SCHED_FIFO, until the kernel's CFS share of that
# core comes round (50 ms a second): make demo's first packet of chains 2 and 3 waited 0.98 s
# that way, for ovs-vswitchd's main thread on core 1 to install its rule. keel-coopsched moves
# NF threads onto the managed cores itself, and NF containers get their cpuset from docker.
command -v taskset > /dev/null || die "taskset is not installed: run make deps (util-linux)"
taskset -pc "$(unmanaged_cpus)" $$ > /dev/null

start=$SECONDS
mkdir -p "$RUN/redis" "$RUN/ovs" "$RUN/secrets"
TOKEN=$RUN/secrets/control-token
cd "$ROOT"
say "starting keel's local stack (logs and PID files in $RUN)"

# The gRPC ports (gateway 50051, placer 50062, torctl 50070) lie in Linux's ephemeral range
# (32768-60999): a connection one part opens (the gateway's to Redis, say) can get one as its
# local port just before the part that listens there starts, which then fails with "Address
# already in use". make up reserves them while the stack runs; make down puts the old list back.
RESERVED=50051,50062,50070
reserved=$(sysctl -n net.ipv4.ip_local_reserved_ports)
if [ ! -f "$RUN/ip_local_reserved_ports" ]; then
  echo "$reserved" > "$RUN/ip_local_reserved_ports"
  sysctl -qw net.ipv4.ip_local_reserved_ports="${reserved:+$reserved,}$RESERVED"
fi

# Redis: functions, chains, placements and NF state. NF containers have no network and use
# the unix socket. Its ACL file: the control plane's users (passwords made once, kept) and the
# NFs' users keel-agent saved there (ACL SAVE), which stay.
if ! alive redis > /dev/null; then
  port_free 127.0.0.1:6379
  acl=$("$ROOT/deploy/lib/redis-acl.sh" "$RUN/secrets")
  (umask 077 && { printf '%s\n' "$acl"; grep '^user keel-nf\.' "$RUN/redis/users.acl" 2>/dev/null || true; } \
    > "$RUN/redis/users.acl.new")
  mv "$RUN/redis/users.acl.new" "$RUN/redis/users.acl"
fi
part redis 20 redis_ok -- redis-server --bind 127.0.0.1 --port 6379 --protected-mode yes \
  --unixsocket "$RUN/redis.sock" --unixsocketperm 770 --dir "$RUN/redis" \
  --aclfile "$RUN/redis/users.acl" --appendonly yes --save "" --daemonize no

# Docker engine: the one that answers, else ours. --cpu-rt-runtime gives the docker cgroup
# the real-time budget (cgroup v1 RT group scheduling) that containers' SCHED_FIFO NF threads
# draw from.
if alive dockerd > /dev/null || ! docker_answers; then
  rt=()
  [ ! -f /sys/fs/cgroup/cpu/cpu.rt_runtime_us ] || rt=(--cpu-rt-runtime=950000)
  command -v dockerd > /dev/null || die "no dockerd answers at $DOCKER_SOCK and dockerd is not installed: run make deps"
  mkdir -p "$RUN/dockerd"
  part dockerd 60 docker_answers -- dockerd -H "unix://$DOCKER_SOCK" --pidfile "$RUN/dockerd/docker.pid" "${rt[@]}"
else
  say "  dockerd: answers at $DOCKER_SOCK (not started by make up, left alone)"
  rt_budget=$(cat /sys/fs/cgroup/cpu/docker/cpu.rt_runtime_us 2>/dev/null || echo unknown)
  [ "$rt_budget" != 0 ] || warn "that dockerd's cgroup has no real-time budget (cpu.rt_runtime_us 0): start it with --cpu-rt-runtime=950000 for SCHED_FIFO in NF containers"
fi

# Open vSwitch, private to the stack: the NIC bridge of the worker (keel-nic-local) and later
# the ToR are bridges here, datapath_type=netdev.
[ -s "$RUN/ovs/conf.db" ] || ovsdb-tool create "$RUN/ovs/conf.db" /usr/share/openvswitch/vswitch.ovsschema
part ovsdb-server 20 ovsdb_ok -- ovsdb-server "$RUN/ovs/conf.db" --remote="punix:$RUN/ovs/db.sock" \
  --pidfile --no-chdir -vconsole:info -vsyslog:off
ovs-vsctl --timeout=5 --no-wait init
# Two VLAN headers matter: an instance's VF port (dot1q-tunnel) keeps the tag an NF pushed
# inside the instance's VLAN.
ovs-vsctl --timeout=5 --no-wait set Open_vSwitch . other_config:vlan-limit=2
# Every new flow gets its own ToR rule, so its own datapath flow; each change of the rule table
# makes OVS's revalidator walk every datapath flow. A flow's datapath entry idles out after 1 s
# instead of 10 s (its rule keeps its own idle timeout): fewer entries for each walk, about half
# the revalidator's CPU at 1000 new flows/s (bench/results/flow_setup.json,
# ovs_max_idle_10s_vs_1s). KEEL_OVS_MAX_IDLE_MS sets another value.
ovs-vsctl --timeout=5 --no-wait set Open_vSwitch . other_config:max-idle="${KEEL_OVS_MAX_IDLE_MS:-1000}"
# The embedded ToR reads its veth ports through AF_PACKET sockets that get the kernel's default
# receive buffer (net.core.rmem_default, 208 KiB: ~90 packets). When something stalls
# ovs-vswitchd's main loop for a moment (a port added for a new chain instance, a busy core 0),
# a full buffer drops packets that no counter shows; make demo lost ~1000 packets per chain in
# one such stall. make up raises the default to 4 MiB while the stack runs (the agent adds a
# port for every new instance) and make down puts the saved value back (run/rmem_default).
if [ "$(sysctl -n net.core.rmem_default)" -lt 4194304 ]; then
  [ -f "$RUN/rmem_default" ] || sysctl -n net.core.rmem_default > "$RUN/rmem_default"
  sysctl -qw net.core.rmem_default=4194304
  say "  net.core.rmem_default: 4194304 (was $(cat "$RUN/rmem_default"); make down puts it back)"
fi
# ovs-vswitchd's main thread polls every port of the userspace datapath on each turn of its
# loop, and for each poll it allocates 32 packet buffers of ~1.7 KB and frees the unused ones,
# packets or not (netdev-linux's recvmmsg path). glibc's malloc takes ~25 % of OVS' CPU on
# that (perf, make demo's traffic). With jemalloc, side by side on the same traffic (20 s,
# three chains at 6 Mbit/s): OVS' CPU 7.7 s against 7.9-8.4 s, p50 latency 10-30 % lower.
# KEEL_OVS_MALLOC=glibc keeps glibc's.
ovs_env=()
if [ "${KEEL_OVS_MALLOC:-jemalloc}" = jemalloc ]; then
  jemalloc=$(ldconfig -p | awk '$1 == "libjemalloc.so.2" && p == "" {p = $NF} END {print p}')  # no early exit: SIGPIPE under pipefail
  if [ -n "$jemalloc" ]; then ovs_env=(env "LD_PRELOAD=$jemalloc"); else warn "libjemalloc2 is missing (make deps installs it): ovs-vswitchd runs on glibc's malloc"; fi
fi
part ovs-vswitchd 30 vswitchd_ok -- "${ovs_env[@]}" ovs-vswitchd "unix:$RUN/ovs/db.sock" --pidfile --no-chdir \
  -vconsole:info -vsyslog:off

# Chain buffers: one file per chain instance on a tmpfs with 2 MB pages.
if mountpoint -q "$PKTBUF"; then
  say "  chain buffers: $PKTBUF mounted$( [ -f "$RUN/pktbuf.mounted" ] || echo ' (not by make up, left alone)')"
else
  mkdir -p "$PKTBUF"
  mount -t tmpfs -o huge=always,mode=0700 keel-pktbuf "$PKTBUF"
  touch "$RUN/pktbuf.mounted"
  say "  chain buffers: mounted tmpfs (huge=always) on $PKTBUF"
fi

alive keel-place > /dev/null || port_free 127.0.0.1:50062
part keel-place 60 placer_ok -- "$VENV/bin/keel-place" serve --listen 127.0.0.1:50062 \
  --control-token-file "$TOKEN"

TOPOLOGY=$ROOT/deploy/local/topology.yaml
if [ "$SMARTNIC" = 0 ]; then
  TOPOLOGY=$RUN/topology.yaml
  sed 's/smartnic: {[^}]*}/smartnic: null/' "$ROOT/deploy/local/topology.yaml" > "$TOPOLOGY"
fi
for addr in 127.0.0.1:8080 127.0.0.1:50051; do alive keel-gateway > /dev/null || port_free $addr; done
part keel-gateway 30 gateway_ok -- "$BIN/keel-gateway" --listen 127.0.0.1:8080 --grpc-listen 127.0.0.1:50051 \
  --redis "unix:$RUN/redis.sock" --redis-user keel-gateway --redis-password-file "$RUN/secrets/redis-gateway" \
  --placer 127.0.0.1:50062 --secrets "$RUN/secrets" --control-token-file "$TOKEN" \
  --topology "$TOPOLOGY" --docker "unix://$DOCKER_SOCK" \
  --function-cpuset "$(unmanaged_cpus)" --torctl 127.0.0.1:50070 $([ "$FLOW_MOVES" = 1 ] && echo --flow-moves)

part keel-coopsched 20 coopsched_ok -- "$BIN/keel-coopsched" --cores "$MANAGED_CORES" \
  --listen "unix:$COOPSCHED_SOCK" --nf-listen "unix:$COOPSCHED_NF_SOCK" --pktbuf-dir "$PKTBUF" --no-rt-throttle

# The image every library NF runs in (keel/nf-sdk comes with it), rebuilt when keel-nf is
# newer than it.
nf_base=$(docker -H "unix://$DOCKER_SOCK" image inspect -f '{{.Created}}' keel/nf-base:latest 2>/dev/null || true)
if [ -n "$nf_base" ] && [ "$(date -d "$nf_base" +%s)" -ge "$(stat -L -c %Y "$BIN/keel-nf")" ]; then
  say "  keel/nf-base: present"
else
  say "  keel/nf-base: ${nf_base:+older than $BIN/keel-nf, }building (deploy/local/images.sh)"
  "$ROOT/deploy/local/images.sh" --bin "$BIN" "unix://$DOCKER_SOCK" | sed 's/^/    /'
fi

alive keel-agent > /dev/null || port_free 127.0.0.1:9101
part keel-agent 30 agent_ok -- "$BIN/keel-agent" --gateway 127.0.0.1:50051 --control-token-file "$TOKEN" \
  --worker local --docker "unix://$DOCKER_SOCK" --coopsched "unix:$COOPSCHED_SOCK" \
  --coopsched-nf "unix:$COOPSCHED_NF_SOCK" --cores "$MANAGED_CORES" \
  --ovsdb "unix:$RUN/ovs/db.sock" --pktbuf-dir "$PKTBUF" --redis 127.0.0.1:6379 \
  --redis-user keel-agent --redis-password-file "$RUN/secrets/redis-agent" \
  --redis-socket "$RUN/redis.sock" --secrets-dir "$NF_SECRETS" --listen 127.0.0.1:9101

# The embedded ToR: an OVS bridge whose table-miss sends new flows to keel-ingress, ports to
# the traffic source and sink network namespaces (fixed MACs; the source's next hop is the
# sink, so its kernel sends without ARP) and a trunk to each worker's NIC bridge.
source "$ROOT/deploy/lib/tor.sh"  # SRC_MAC, SINK_MAC, veth, tor_ports
vsctl() { ovs-vsctl --timeout=10 "$@"; }
vsctl --may-exist add-br keel-tor -- set bridge keel-tor datapath_type=netdev protocols=OpenFlow13 \
  fail-mode=secure other-config:datapath-id=$TOR_DPID -- set-controller keel-tor tcp:127.0.0.1:6653
tor_ports
vsctl --may-exist add-port keel-tor keel-tor-local
say "  ToR: bridge keel-tor (source netns keelsrc, sink netns keelsink, ingress keel-ing, worker local)"

# torctl is ready when the switch is connected and it knows the gateway's chains (a flow of a
# chain it has not seen yet would be refused).
torctl_ok() {
  local m
  listener "$PID" 127.0.0.1:50070 && m=$(curl -fsS -m 2 http://127.0.0.1:9102/metrics) &&
    grep -Eqx 'keel_torctl_switch_connected 1(\.0)?' <<< "$m" && grep -Eqx 'keel_torctl_gateway_synced 1(\.0)?' <<< "$m"
}
alive keel-torctl > /dev/null || for addr in 127.0.0.1:6653 127.0.0.1:50070 127.0.0.1:9102; do port_free $addr; done
part keel-torctl 30 torctl_ok -- "$VENV/bin/keel-torctl" --listen 127.0.0.1:50070 --ofp-listen 127.0.0.1:6653 \
  --gateway 127.0.0.1:50051 --control-token-file "$TOKEN" --ingress-port keel-ting --egress-port keel-tsink \
  --metrics 127.0.0.1:9102 --datapath-id "$TOR_DPID"

ingress_ok() { http_ok http://127.0.0.1:9103/metrics; }
alive keel-ingress > /dev/null || port_free 127.0.0.1:9103
# New flows wait out a restarting gateway: AssignFlow is tried 10 times (5 s, a gateway
# restart takes 1-2 s here) and a flow's first 512 packets are held meanwhile. A flow's own
# rule is written to the ToR's OpenFlow socket by the ingress itself, from the template torctl
# gave with the first flow of its chain instance (--tor-openflow). New flows that come within
# 5 ms of an AssignFlows call share the next one: fewer, larger calls and less control CPU per
# flow under load (bench/results/flow_setup.json, assign_window_1ms_vs_5ms). Only under load:
# below 200 new flows a second, or after a quiet spell, a flow goes at once (a few chains'
# flows opening in the same millisecond would pay up to 5 ms for nothing).
tor_openflow=$RUN/ovs/keel-tor.mgmt
[ "$TOR_OPENFLOW" = off ] && tor_openflow=
part keel-ingress 30 ingress_ok -- "$BIN/keel-ingress" --gateway 127.0.0.1:50051 --torctl 127.0.0.1:50070 --control-token-file "$TOKEN" \
  --tor-openflow "$tor_openflow" --assign-window-us 5000 --assign-busy-rate 200 ${KEEL_INGRESS_FLAGS:-} \
  --ingress-id ingress-0 --metrics 127.0.0.1:9103 --assign-attempts 10 --hold-per-flow 512 -- -l 0 --no-pci --no-huge -m 256 --no-telemetry \
  --log-level=error --file-prefix keel-ingress --vdev net_af_packet0,iface=keel-ing

# Prometheus (Debian's): scrapes every part above every 5 s; a short retention keeps
# run/prometheus/ small.
prometheus_ok() { http_ok http://127.0.0.1:9090/-/ready; }
if command -v prometheus > /dev/null; then
  alive prometheus > /dev/null || port_free 127.0.0.1:9090
  mkdir -p "$RUN/prometheus"
  part prometheus 30 prometheus_ok -- prometheus --config.file="$ROOT/deploy/local/prometheus.yml" \
    --web.listen-address=127.0.0.1:9090 --storage.tsdb.path="$RUN/prometheus" \
    --storage.tsdb.retention.time=2h
else
  warn "prometheus is not installed (make deps installs it): the stack runs without it"
fi

password=$RUN/secrets/basic-auth-password
await "" 10 test -s "$password"
cat <<EOF
keel is up ($((SECONDS - start)) s).
  gateway   http://127.0.0.1:8080 (faas-cli's default gateway)
  dashboard http://127.0.0.1:8080/ui/ (user admin and the password below; JSON: /system/keel/topology)
  metrics   http://127.0.0.1:9090 (Prometheus, scraping gateway, agent, torctl, ingress)
  password  $password (user $(cat "$RUN/secrets/basic-auth-user" 2>/dev/null || echo admin))
  log in    faas-cli login --password-stdin < $password
  gRPC      every call carries the control-plane token in $TOKEN
  Redis     REDISCLI_AUTH=\$(cat $RUN/secrets/redis-gateway) redis-cli --user keel-gateway -s $RUN/redis.sock
  OVS       ovs-vsctl --db=unix:$RUN/ovs/db.sock show
  ToR flows ovs-ofctl -O OpenFlow13 dump-flows unix:$RUN/ovs/keel-tor.mgmt
  traffic   ip netns exec keelsrc ...  (source, 198.18.0.1; sends through the ToR)
            ip netns exec keelsink ... (sink: what the chains send out)
  logs      $RUN/*.log
  stop      make down
EOF
