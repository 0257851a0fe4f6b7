/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Receiving straight into the chain buffer (B5, issue 33).
 *
 * The instance's RX mempool is made over the slots of its chain buffer file
 * (rte_pktmbuf_pool_create_extbuf, one pinned external buffer per slot, in
 * slot order), so the port writes each packet into the slot every NF of the
 * chain reads, and the first NF's copy into the chain buffer (Galleon §4.4)
 * is gone. What stays as before:
 *  - spatial isolation: one port (VF) and one file per instance, the pool
 *    over that file alone;
 *  - the mbufs themselves (reference counts, segment links, the pool's
 *    free lists) are in position 0's private DPDK memory, out of reach of
 *    the NFs that map the file; the file holds only packet bytes and
 *    descriptors, which every NF checks;
 *  - temporal isolation: a slot goes back to the pool, from which the port
 *    refills its RX ring, only when its mbuf is freed: by position 0's
 *    Egress after the last NF's turn, or by the port once it has sent it
 *    (a NIC that holds buffers for DMA simply keeps them out of the pool).
 *
 * On a device on a bus (an SR-IOV VF bound to vfio-pci) the NIC's DMA
 * writes the slots: the file is registered with DPDK (rte_extmem_register)
 * and mapped for that device's IOMMU domain (rte_dev_dma_map), IOVA = VA.
 * On the kernel-backed vdevs keel uses here (af_packet, pcap, memif, tap)
 * the PMD's own copy from its socket lands in the slot; a PMD that passes
 * on mbufs of another pool (net_ring) has each copied into a slot. net_af_xdp is not
 * supported: it makes its UMEM of the pool's mbuf memory, which here holds
 * no packet data; keel-nf falls back to copying for it.
 */
#ifndef KEEL_RX_POOL_H_
#define KEEL_RX_POOL_H_

#include <rte_dev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include <memory>
#include <string>

#include "keel/pktbuf.h"

namespace keel {

/* Slots of a chain buffer made for receiving into it: the ring's
 * kMaxBurstsPerTurn x kMaxBurst (the most a turn holds in the chain), plus
 * what the port's RX and TX rings hold (PortInit's 1024 + 1024). When they
 * run out, the port counts RX misses (rx_nombuf) and nothing else breaks. */
constexpr uint32_t kRxPoolExtraSlots = 2048;

class ChainRxPool {
 public:
  /* Makes the mempool for |port| over every slot of |buf| (which outlives
   * it). nullptr and |*err| if |port|'s driver cannot receive into it (the
   * message says why; receiving with a copy still works). */
  static std::unique_ptr<ChainRxPool> Create(PktBuf* buf, uint16_t port, std::string* err);
  /* Frees the pool (after the port is closed) and undoes the DMA mapping. */
  ~ChainRxPool();

  rte_mempool* pool() const { return pool_; }
  /* The slot mbuf |m| of this pool receives into (its buffer's start). */
  int64_t SlotOf(const rte_mbuf* m) const { return buf_->SlotOf(m->buf_addr); }
  /* True if the device's DMA was mapped to the file (a bus device). */
  bool dma_mapped() const { return dev_ != nullptr; }

 private:
  ChainRxPool() = default;
  PktBuf* buf_ = nullptr;
  rte_mempool* pool_ = nullptr;
  rte_device* dev_ = nullptr; /* set when mapped for DMA */
  void* dma_addr_ = nullptr;
  size_t dma_len_ = 0;
};

}  // namespace keel

#endif  // KEEL_RX_POOL_H_
