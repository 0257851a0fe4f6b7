/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/burst.h"

#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_prefetch.h>

#include <algorithm>
#include <cstring>

namespace keel {

/* Packets to prefetch ahead while setting up views (DPDK l3fwd does 8). */
static constexpr int kPrefetchOffset = 8;

bool ReinsertVlan(rte_mbuf* m) {
  /* The tag the PMD reported beside the frame (a kernel socket that
   * stripped it, as af_packet's does) goes back in front of the ethertype.
   * DPDK's rte_vlan_insert does this for direct mbufs only; the chain
   * buffer's mbufs have pinned external buffers, which are not direct. */
  if (m->nb_segs != 1 || m->data_len < 2 * RTE_ETHER_ADDR_LEN || m->data_off < sizeof(rte_vlan_hdr))
    return false;
  uint8_t* old = rte_pktmbuf_mtod(m, uint8_t*);
  uint8_t* now = old - sizeof(rte_vlan_hdr);
  std::memmove(now, old, 2 * RTE_ETHER_ADDR_LEN);
  const uint16_t tpid = rte_cpu_to_be_16(RTE_ETHER_TYPE_VLAN), tci = rte_cpu_to_be_16(m->vlan_tci);
  std::memcpy(now + 2 * RTE_ETHER_ADDR_LEN, &tpid, 2);
  std::memcpy(now + 2 * RTE_ETHER_ADDR_LEN + 2, &tci, 2);
  m->data_off = static_cast<uint16_t>(m->data_off - sizeof(rte_vlan_hdr));
  m->data_len = static_cast<uint16_t>(m->data_len + sizeof(rte_vlan_hdr));
  m->pkt_len += sizeof(rte_vlan_hdr);
  m->ol_flags &= ~(RTE_MBUF_F_RX_VLAN_STRIPPED | RTE_MBUF_F_RX_VLAN);
  return true;
}

void ReceiveBurst(rte_mbuf** mbufs, int n, Packet* views, PacketBatch* batch, PortCounters* c) {
  uint64_t bytes = 0;
  for (int i = 0; i < n && i < kPrefetchOffset; i++)
    rte_prefetch0(rte_pktmbuf_mtod(mbufs[i], void*));
  for (int i = 0; i < n; i++) {
    if (i + kPrefetchOffset < n) rte_prefetch0(rte_pktmbuf_mtod(mbufs[i + kPrefetchOffset], void*));
    rte_mbuf* m = mbufs[i];
    /* A tag still beside the frame: the PMD could not put it back. */
    const bool tag_lost = (m->ol_flags & RTE_MBUF_F_RX_VLAN_STRIPPED) && !ReinsertVlan(m);
    bytes += rte_pktmbuf_pkt_len(m);
    views[i].Reset(static_cast<uint8_t*>(m->buf_addr), m->data_off, m->data_len, m->buf_len);
    if (tag_lost || m->nb_segs != 1 || views[i].malformed() != Malformed::kNone) {
      views[i].Drop();
      c->rx_malformed.Add(1);
      continue;
    }
    batch->Add(&views[i]);
  }
  c->rx_packets.Add(n);
  c->rx_bytes.Add(bytes);
}

int ReturnSurvivors(rte_mbuf** mbufs, Packet* views, int n, PacketBatch* batch, rte_mbuf** out) {
  int nout = 0;
  for (Packet* p : *batch) {
    rte_mbuf* m = mbufs[p - views];
    m->data_off = p->headroom();
    m->data_len = p->len();
    m->pkt_len = p->len();
    out[nout++] = m;
  }
  for (int i = 0; i < n; i++)
    if (views[i].dropped()) rte_pktmbuf_free(mbufs[i]);
  return nout;
}

/* Copies |len| bytes into the empty mbuf |m|, chaining further segments
 * from |pool| when |chain| allows and one mbuf is too small. False, with the
 * reason counted, if the packet cannot go out. */
static bool CopyInto(rte_mbuf* m, const uint8_t* data, uint16_t len, rte_mempool* pool, bool chain,
                     PortCounters* c) {
  uint16_t first = std::min(len, rte_pktmbuf_tailroom(m));
  if (first < len && !chain) {
    c->tx_too_long.Add(1);
    return false;
  }
  std::memcpy(rte_pktmbuf_append(m, first), data, first);
  for (uint16_t done = first; done < len;) {
    rte_mbuf* seg = rte_pktmbuf_alloc(pool);
    if (!seg) {
      c->tx_dropped.Add(1);
      return false;
    }
    uint16_t n = std::min<uint16_t>(static_cast<uint16_t>(len - done), rte_pktmbuf_tailroom(seg));
    std::memcpy(rte_pktmbuf_append(seg, n), data + done, n);
    if (rte_pktmbuf_chain(m, seg) != 0) {
      rte_pktmbuf_free(seg);
      c->tx_too_long.Add(1);
      return false;
    }
    done = static_cast<uint16_t>(done + n);
  }
  return true;
}

int CopyOut(PacketBatch* batch, rte_mempool* pool, bool chain, rte_mbuf** out, PortCounters* c) {
  if (batch->cnt() == 0) return 0;
  if (rte_pktmbuf_alloc_bulk(pool, out, static_cast<unsigned>(batch->cnt())) != 0) {
    c->tx_dropped.Add(batch->cnt());
    return 0;
  }
  int nout = 0, i = 0;
  for (Packet* p : *batch) {
    rte_mbuf* m = out[i++];
    if (CopyInto(m, p->data(), p->len(), pool, chain, c)) {
      out[nout++] = m;
    } else {
      rte_pktmbuf_free(m);
    }
  }
  return nout;
}

void TransmitBurst(uint16_t port, rte_mbuf** mbufs, int n, PortCounters* c) {
  if (n == 0) return;
  uint64_t bytes = 0;
  for (int i = 0; i < n; i++) bytes += rte_pktmbuf_pkt_len(mbufs[i]);
  int sent = rte_eth_tx_burst(port, 0, mbufs, static_cast<uint16_t>(n));
  for (int i = sent; i < n; i++) {
    bytes -= rte_pktmbuf_pkt_len(mbufs[i]);
    rte_pktmbuf_free(mbufs[i]);
  }
  c->tx_packets.Add(sent);
  c->tx_bytes.Add(bytes);
  c->tx_dropped.Add(n - sent);
}

}  // namespace keel
