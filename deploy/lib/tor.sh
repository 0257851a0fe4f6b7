# SPDX-License-Identifier: Apache-2.0
# The embedded ToR's ports, shared by make up (deploy/local/up.sh) and make test-k8s's rack
# (deploy/kubernetes/testcluster/rack.sh): sourced, with ovs-vsctl pointed at the OVS that
# holds bridge keel-tor.

# The traffic source's and sink's fixed MACs: the source's next hop is the sink, so its
# kernel sends without ARP.
SRC_MAC=02:6b:65:00:00:01
SINK_MAC=02:6b:65:00:00:02

# The ToR bridge's OpenFlow datapath ID ("keel"), set as its other-config:datapath-id;
# keel-torctl --datapath-id refuses any other switch.
TOR_DPID=000000006b65656c

# veth HOST PEER [NETNS]: a veth pair with TX checksum offload off (OVS' userspace datapath
# loses TCP/UDP otherwise), PEER moved into NETNS if given; kept if it exists.
veth() {
  local host=$1 peer=$2 ns=${3:-}
  ip link show "$host" > /dev/null 2>&1 && return 0
  ip link add "$host" type veth peer name "$peer"
  if [ -n "$ns" ]; then
    ip netns list | grep -qw "^$ns" || ip netns add "$ns"
    ip link set "$peer" netns "$ns"
    ip netns exec "$ns" ethtool -K "$peer" tx off > /dev/null
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" ip link set "$peer" up
  else
    ethtool -K "$peer" tx off > /dev/null
    ip link set "$peer" up
  fi
  ethtool -K "$host" tx off > /dev/null
  ip link set "$host" up
}

# tor_ports: the ToR's ports keel-tsrc to the traffic source (netns keelsrc, 198.18.0.1,
# routing 198.18.0.0/15 to the sink), keel-tsink to the sink (netns keelsink, promiscuous)
# and keel-ting to keel-ingress (which reads keel-ing), added to bridge keel-tor.
tor_ports() {
  veth keel-tsrc keel-src keelsrc
  ip netns exec keelsrc ip link set keel-src address $SRC_MAC
  ip netns exec keelsrc ip addr replace 198.18.0.1/24 dev keel-src
  ip netns exec keelsrc ip neigh replace 198.18.0.254 lladdr $SINK_MAC dev keel-src nud permanent
  ip netns exec keelsrc ip route replace 198.18.0.0/15 via 198.18.0.254
  veth keel-tsink keel-sink keelsink
  ip netns exec keelsink ip link set keel-sink address $SINK_MAC promisc on
  veth keel-ting keel-ing
  local port
  for port in keel-tsrc keel-tsink keel-ting; do ovs-vsctl --timeout=10 --may-exist add-port keel-tor $port; done
}
