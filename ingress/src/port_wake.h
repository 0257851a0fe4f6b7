/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Sleeping on the port instead of napping beside it.
 *
 * DPDK's net_af_packet and net_af_xdp ports receive through a kernel socket
 * (a PACKET_RX_RING or an XSK ring) that the PMD opens and does not offer
 * for rx interrupts. poll() on that socket says POLLIN as soon as a frame is
 * in its ring, which is all a sleeping lcore needs: the lcore adds the
 * port's sockets to the ppoll it naps in, so a packet ends the nap at once
 * and the nap itself can be long. Without them (another PMD, or the sockets
 * not found) the lcore naps 25-200 us while flows are set up, which at any
 * rate of new flows costs 13-17 % of the shared core (bench/flow_setup.py,
 * ingress_cpu_pct before this change).
 *
 * The PMD keeps the sockets private, so they are found the way lsof would:
 * the process' open sockets whose domain is AF_PACKET or AF_XDP. keel-ingress
 * opens no such socket itself; its only port is the one DPDK probed.
 */
#ifndef KEEL_INGRESS_PORT_WAKE_H_
#define KEEL_INGRESS_PORT_WAKE_H_

#include <vector>

namespace keel::ingress {

/* This process' open AF_PACKET and AF_XDP sockets, in fd order (empty if none). */
std::vector<int> FindPortWakeFds();

}  // namespace keel::ingress

#endif  // KEEL_INGRESS_PORT_WAKE_H_
