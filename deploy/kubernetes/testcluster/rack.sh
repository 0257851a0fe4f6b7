#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The rack around make test-k8s's node; see usage below.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
run=${KEEL_RACK_RUN:-$root/run/k8s-rack} # OVS' database, pids, logs (cluster.sh down empties run/k8s)
ovsrun=/var/run/openvswitch                # OVS' default sockets: keel-agent's DaemonSet mounts it
source "$root/deploy/lib/tor.sh"           # veth, tor_ports: as make up's (deploy/local/up.sh)

usage() {
  cat <<EOF
Usage: deploy/kubernetes/testcluster/rack.sh up | controller TARGET | trunk PORT | down

The network around make test-k8s's one node, as make up builds it for the local stack
(deploy/local/up.sh), on this machine:
  Open vSwitch   ovsdb-server and ovs-vswitchd (userspace datapath) on OVS' default socket
                 $ovsrun/db.sock, which keel-agent's DaemonSet mounts: the agent
                 builds its NIC bridge there (the embedded VF scheme); database, pids and
                 logs in $run
  ToR            bridge keel-tor (OpenFlow 1.3, fail-mode secure) with ports keel-tsrc to
                 the traffic source (netns keelsrc, 198.18.0.1), keel-tsink to the sink
                 (netns keelsink) and keel-ting to keel-ingress (which reads keel-ing)

  up                  start Open vSwitch and make the ToR and its ports
  controller TARGET   connect the ToR to keel-torctl (e.g. tcp:198.19.128.20:6653)
  trunk PORT          add the worker's trunk (keel-tor-ID, made by keel-agent) to the ToR
  down                remove the bridges, the veths on them and the namespaces, stop OVS

Refuses to start beside make up's stack, which uses the same names. As root.
EOF
}

say() { printf 'rack.sh: %s\n' "$*"; }
die() { say "$*" >&2; exit 1; }
vsctl() { ovs-vsctl --timeout=10 "$@"; }

pid_of() { # NAME: its pid if the process up started still runs
  local f=$run/$1.pid p
  [ -s "$f" ] && p=$(cat "$f") && kill -0 "$p" 2>/dev/null && echo "$p"
}

up() {
  for prog in ovsdb-tool ovsdb-server ovs-vswitchd ovs-vsctl ethtool; do
    command -v $prog >/dev/null || die "$prog is missing (make deps installs Open vSwitch)"
  done
  for link in keel-tsrc keel-tsink keel-ting; do
    ! ip link show "$link" >/dev/null 2>&1 || die "link $link exists: make up's stack (or an earlier rack) is up; make down, or rack.sh down, first"
  done
  [ ! -S "$ovsrun/db.sock" ] || [ -n "$(pid_of ovsdb-server)" ] ||
    die "an Open vSwitch not started here answers at $ovsrun/db.sock: the test needs its own"
  mkdir -p "$run" "$ovsrun"
  if [ -z "$(pid_of ovsdb-server)" ]; then
    rm -f "$run/conf.db"
    ovsdb-tool create "$run/conf.db" /usr/share/openvswitch/vswitch.ovsschema
    ovsdb-server "$run/conf.db" --remote="punix:$ovsrun/db.sock" --pidfile="$run/ovsdb-server.pid" \
      --unixctl="$run/ovsdb-server.ctl" --no-chdir --detach --log-file="$run/ovsdb-server.log" -vconsole:off -vsyslog:off
    vsctl --no-wait init
    # Two VLAN headers: an instance's VF port (dot1q-tunnel) keeps the tag an NF pushed.
    vsctl --no-wait set Open_vSwitch . other_config:vlan-limit=2
    # A new flow's datapath flow idles out after 1 s, not 10: fewer for OVS's revalidator to
    # walk at each rule change (as deploy/local/up.sh; bench/results/flow_setup.json).
    vsctl --no-wait set Open_vSwitch . other_config:max-idle=1000
  fi
  if [ -z "$(pid_of ovs-vswitchd)" ]; then
    ovs-vswitchd "unix:$ovsrun/db.sock" --pidfile="$run/ovs-vswitchd.pid" --no-chdir --detach \
      --log-file="$run/ovs-vswitchd.log" -vconsole:off -vsyslog:off
  fi
  vsctl add-br keel-tor -- set bridge keel-tor datapath_type=netdev protocols=OpenFlow13 fail-mode=secure \
    other-config:datapath-id=$TOR_DPID  # the ID config.yaml's keel-tor pins
  tor_ports
  say "Open vSwitch on $ovsrun/db.sock; ToR keel-tor (source netns keelsrc, sink netns keelsink, ingress keel-ing)"
}

down() {
  local links=() br p
  if [ -n "$(pid_of ovsdb-server)" ]; then
    for br in $(vsctl list-br 2>/dev/null); do
      # The bridge's own port is a tap device of the userspace datapath, which outlives OVS.
      links+=("$br")
      for p in $(vsctl list-ports "$br" 2>/dev/null); do links+=("$p"); done
      vsctl --if-exists del-br "$br" || true
    done
  fi
  for p in ovs-vswitchd ovsdb-server; do
    local pid
    pid=$(pid_of $p) || continue
    kill "$pid"
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    rm -f "$run/$p.pid"
  done
  # The bridges' taps and the veths they had (deleting one end removes its peer): the ToR's,
  # the agent's trunk and any instance VF left behind; names outside keel's are left alone.
  for p in "${links[@]}" keel-tsrc keel-tsink keel-ting; do
    case $p in keel*) ip link del "$p" 2>/dev/null || true ;; esac
  done
  for ns in keelsrc keelsink; do ip netns del "$ns" 2>/dev/null || true; done
  rm -f "$ovsrun/db.sock" "$ovsrun"/*.mgmt "$ovsrun"/*.snoop
  rmdir "$ovsrun" 2>/dev/null || true
  say "down"
}

[ $# -ge 1 ] || { usage >&2; exit 2; }
case $1 in
  up) up ;;
  controller) [ $# = 2 ] || die "controller needs a TARGET (tcp:IP:PORT)"; vsctl set-controller keel-tor "$2" ;;
  trunk) [ $# = 2 ] || die "trunk needs a PORT"; vsctl --may-exist add-port keel-tor "$2" ;;
  down) down ;;
  -h|--help) usage ;;
  *) usage >&2; exit 2 ;;
esac
