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
 * not found) a loop must nap short or poll to see a frame in time.
 * Users: keel-ingress (dataplane.cc: with flows in setup it napped 25-200 us,
 * 13-17 % of the shared core at any rate of new flows) and keel-trafgen's
 * sink (polled every 20 us, a third of the shared core during make demo).
 *
 * The PMD keeps the sockets private, so they are found the way lsof would:
 * the process' open sockets whose domain is AF_PACKET or AF_XDP. Both users
 * open no such socket themselves; their ports are the ones DPDK probed.
 */
#ifndef KEEL_PORT_WAKE_H_
#define KEEL_PORT_WAKE_H_

#include <vector>

namespace keel {

/* This process' open AF_PACKET and AF_XDP sockets, in fd order (empty if none). */
std::vector<int> FindPortWakeFds();

}  // namespace keel

#endif  // KEEL_PORT_WAKE_H_
