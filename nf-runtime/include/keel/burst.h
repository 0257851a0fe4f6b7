/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The steps of a burst's trip between a DPDK port and the NFs, which the
 * chain-buffer engine (engine.h) of keel-chain and keel-nf is made of.
 */
#ifndef KEEL_BURST_H_
#define KEEL_BURST_H_

#include <rte_mbuf.h>

#include "keel/batch.h"
#include "keel/monitor.h"

namespace keel {

/* Puts the VLAN tag a PMD left beside |m|'s frame (RTE_MBUF_F_RX_VLAN_STRIPPED,
 * vlan_tci) back into it; false if it cannot (no headroom, several segments). */
bool ReinsertVlan(rte_mbuf* m);
/* Points views[i] at mbufs[i] (prefetching headers ahead, as DPDK's l3fwd
 * does), with any VLAN tag the PMD left beside a frame put back in it, drops
 * and counts malformed packets, and adds the rest to |batch|. */
void ReceiveBurst(rte_mbuf** mbufs, int n, Packet* views, PacketBatch* batch, PortCounters* c);

/* After the NFs ran on the mbufs' own memory: writes each survivor's extent
 * back into its mbuf and puts it in |out|, frees the dropped ones. Returns
 * the number in |out|. */
int ReturnSurvivors(rte_mbuf** mbufs, Packet* views, int n, PacketBatch* batch, rte_mbuf** out);

/* The egress copy: copies the packets of |batch| into new mbufs from |pool|
 * into |out|; returns how many. A packet longer than one mbuf goes out as a
 * chain of segments if |chain| (the port sends multi-segment mbufs), else it
 * is dropped and counted as tx_too_long; an empty pool counts as TX drops. */
int CopyOut(PacketBatch* batch, rte_mempool* pool, bool chain, rte_mbuf** out, PortCounters* c);

/* Sends |n| mbufs on queue 0 of |port|, frees what the queue refused. */
void TransmitBurst(uint16_t port, rte_mbuf** mbufs, int n, PortCounters* c);

}  // namespace keel

#endif  // KEEL_BURST_H_
