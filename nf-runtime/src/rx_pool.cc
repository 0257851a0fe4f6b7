/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/rx_pool.h"

#include <rte_bus.h>
#include <rte_dev.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mbuf_pool_ops.h>
#include <rte_memory.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "keel/port.h"

namespace keel {

/* Per-lcore cache of the pool (DPDK's largest). */
static constexpr unsigned kRxPoolCache = RTE_MEMPOOL_CACHE_MAX_SIZE;
/* The pool's free slots are a stack (last freed, first reused): a turn of
 * B x 32 packets then fills the slots the last turn sent, still in the
 * CPU's caches and TLB, as the copying path's Rewind does. DPDK's default
 * ring is FIFO: with more packets in flight than the per-lcore cache holds
 * (B x 32 > 768), every turn would take slots unused for the longest, and
 * the NFs would pay their cache misses (~90 cycles a packet at length 3
 * here, bench/results/chain_length.json's keel_rx_copy_minus_keel). */
static constexpr const char* kRxPoolOps = "stack";

/* Vdevs that do not simply receive into the mbufs their pool gives:
 * net_af_xdp makes its UMEM of the pool's own memory, here the mbufs'
 * headers, and computes buffer addresses from it. Every other vdev copies
 * into the mbuf's buffer, wherever it is (af_packet, pcap, tap, memif,
 * null), or passes the sender's mbufs on (ring), which the engine copies
 * into a slot (Engine::EnterSlots). */
static bool UsesPoolMemoryItself(const char* driver) { return std::strcmp(driver, "net_af_xdp") == 0; }

std::unique_ptr<ChainRxPool> ChainRxPool::Create(PktBuf* buf, uint16_t port, std::string* err) {
  std::unique_ptr<ChainRxPool> p(new ChainRxPool());
  p->buf_ = buf;
  rte_eth_dev_info info;
  if (int rc = rte_eth_dev_info_get(port, &info); rc != 0) {
    *err = PortName(port) + ": device info: " + std::strerror(-rc);
    return nullptr;
  }
  const char* bus = info.device ? rte_bus_name(rte_dev_bus(info.device)) : "vdev";
  const bool on_bus = bus && std::strcmp(bus, "vdev") != 0;
  if (!on_bus && UsesPoolMemoryItself(info.driver_name)) {
    *err = PortName(port) + ": driver " + info.driver_name +
           " cannot receive into the chain buffer (net_af_xdp makes its UMEM of the pool's own memory)";
    return nullptr;
  }
  const bool va = rte_eal_iova_mode() == RTE_IOVA_VA;
  uint8_t* slots = buf->SlotAddr(0);
  const size_t len = size_t{buf->nbufs()} * kSlotSize;
  if (on_bus) {
    /* The NIC writes the slots itself: the file must be in DPDK's memory
     * map and in the device's IOMMU domain, at IOVA = VA. */
    if (!va) {
      *err = PortName(port) + ": receiving into the chain buffer needs IOVA as VA (EAL --iova-mode=va, vfio)";
      return nullptr;
    }
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t dma_len = (len + page - 1) / page * page; /* the file is 2 MB-aligned in size */
    if (rte_extmem_register(slots, dma_len, nullptr, 0, page) != 0 && rte_errno != EEXIST) {
      *err = PortName(port) + ": rte_extmem_register: " + rte_strerror(rte_errno);
      return nullptr;
    }
    if (rte_dev_dma_map(info.device, slots, reinterpret_cast<uint64_t>(slots), dma_len) != 0) {
      *err = PortName(port) + ": rte_dev_dma_map of the chain buffer: " + rte_strerror(rte_errno);
      rte_extmem_unregister(slots, dma_len);
      return nullptr;
    }
    p->dev_ = info.device;
    p->dma_addr_ = slots;
    p->dma_len_ = dma_len;
  }
  rte_pktmbuf_extmem ext;
  ext.buf_ptr = slots;
  ext.buf_iova = va ? reinterpret_cast<rte_iova_t>(slots) : RTE_BAD_IOVA;
  ext.buf_len = len;
  ext.elt_size = static_cast<uint16_t>(kSlotSize);
  /* One mbuf per slot, in slot order; each buffer is the whole slot, the
   * packet at RTE_PKTMBUF_HEADROOM (= kSlotHeadroom), as Push places it. */
  static_assert(RTE_PKTMBUF_HEADROOM == kSlotHeadroom, "a received packet starts where a copied one does");
  std::string name = "keel_rx_" + std::to_string(port);
  const unsigned cache = std::min<unsigned>(kRxPoolCache, buf->nbufs() * 2 / 3); /* DPDK: n >= 1.5 x cache */
  /* rte_pktmbuf_pool_create_extbuf takes the process's mempool ops: set
   * for this pool only, and put back. Without the stack driver, the default. */
  const std::string ops = rte_mbuf_best_mempool_ops();
  const bool lifo = rte_mbuf_set_user_mempool_ops(kRxPoolOps) == 0;
  p->pool_ = rte_pktmbuf_pool_create_extbuf(name.c_str(), buf->nbufs(), cache, 0,
                                            static_cast<uint16_t>(kSlotSize), rte_socket_id(), &ext, 1);
  if (lifo) rte_mbuf_set_user_mempool_ops(ops.c_str());
  if (!p->pool_ && lifo)
    p->pool_ = rte_pktmbuf_pool_create_extbuf(name.c_str(), buf->nbufs(), cache, 0,
                                              static_cast<uint16_t>(kSlotSize), rte_socket_id(), &ext, 1);
  if (!p->pool_) {
    *err = name + ": " + rte_strerror(rte_errno);
    return nullptr; /* the destructor undoes the mapping */
  }
  return p;
}

ChainRxPool::~ChainRxPool() {
  if (pool_) rte_mempool_free(pool_);
  if (dev_) {
    rte_dev_dma_unmap(dev_, dma_addr_, reinterpret_cast<uint64_t>(dma_addr_), dma_len_);
    rte_extmem_unregister(dma_addr_, dma_len_);
  }
}

}  // namespace keel
