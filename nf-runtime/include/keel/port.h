/* SPDX-License-Identifier: Apache-2.0 */
/* DPDK port set-up for a chain instance: one RX and one TX queue. */
#ifndef KEEL_PORT_H_
#define KEEL_PORT_H_

#include <rte_mempool.h>

#include <cstdint>
#include <string>
#include <vector>

namespace keel {

/* Starts DPDK's EAL with |args| (args[0] is the program's name). Returns
 * false and sets |*err| on failure. */
bool EalInit(std::vector<std::string> args, std::string* err);

/* A pool of |n| default-size mbufs (|cache| per lcore) on the caller's
 * socket. Returns nullptr and sets |*err|, naming |name|, on failure. */
rte_mempool* MbufPool(const char* name, unsigned n, unsigned cache, std::string* err);

/* Configures |port| with one RX queue (buffers from |pool|) and one TX
 * queue that sends multi-segment mbufs if the PMD can, starts it and enables
 * promiscuous mode where the PMD has it.
 * Returns false and sets |*err| on failure. */
bool PortInit(uint16_t port, rte_mempool* pool, std::string* err);

/* True if |port| was set up to send multi-segment mbufs (PortInit enables
 * it wherever the PMD can). */
bool PortTxChains(uint16_t port);

/* RX descriptors in use on queue 0 of |port|, or -1 if the PMD cannot tell. */
int PortRxQueueLen(uint16_t port);

/* A short name for |port| ("net_pcap0", a PCI address, ...). */
std::string PortName(uint16_t port);

}  // namespace keel

#endif  // KEEL_PORT_H_
