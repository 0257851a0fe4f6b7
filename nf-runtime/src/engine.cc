/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/engine.h"

#include <rte_ethdev.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>

#include "keel/burst.h"
#include "keel/flow_move.h"
#include "keel/inband.h"
#include "keel/port.h"

namespace keel {

/* Packets to prefetch ahead in the chain's buffer (l3fwd does 8). */
static constexpr uint32_t kPrefetchAhead = 8;
/* Position 0's turns between NIC queue-length samples. */
static constexpr uint64_t kQueueSampleTurns = 64;
/* Longer than the ToR rules' idle timeout (torctl's default 10 s): a flow
 * quiet for that long comes through the ingress again. */
static constexpr uint64_t kHandoverForgetMs = 12000;

Engine::Engine(Chain* chain, rte_mempool* pool, PktBuf* buf, uint64_t* cycles, const EngineOptions& opt)
    : chain_(chain), pool_(pool), buf_(buf), cycles_(cycles), opt_(opt) {
  /* The TSC's rate is measured once, in a 50 ms sleep: here, before the
   * statistics thread (StatsJson) or the packet loop needs it, so that
   * neither waits for the other's measurement once the chain runs (a
   * coopsched Attach then Detach would miss the batch boundary). */
  TscHz();
  if (opt_.position != 0) return;
  HandoverConfig hc;
  hc.timeout = TscHz() * opt_.handover_timeout_ms / 1000;
  hc.forget = TscHz() * kHandoverForgetMs / 1000;
  handover_ = std::make_unique<HandoverRx>(hc);
  tx_chains_ = PortTxChains(opt_.tx_port);
  port_.rx_queue_len_known.Set(PortRxQueueLen(opt_.rx_port) >= 0);
  if (buf_) rx_tsc_.assign(buf_->nslots(), 0);
  if (opt_.rx_zero_copy && opt_.copy_in && buf_) {
    rx_zero_copy_ = true;
    held_.assign(buf_->nslots(), nullptr);
    /* Egress without a copy sends the mbufs the port received: no
     * external buffers to attach, and a port that holds them keeps their
     * slots out of the pool, not out of the ring. */
    zero_copy_ = opt_.egress_zero_copy;
  } else if (opt_.egress_zero_copy && opt_.copy_in && buf_) {
    zero_copy_ = true;
    shinfo_.resize(buf_->nslots());
    for (auto& sh : shinfo_) {
      sh.free_cb = &Engine::OnTxDone;
      sh.fcb_opaque = this;
      rte_mbuf_ext_refcnt_set(&sh, 0);
    }
  }
}

void Engine::Begin() {
  last_rx_ = Rdtsc();
  last_poll_ = last_rx_;
  begin_tsc_.store(last_rx_);
}

void Engine::StampRx(uint32_t used_before, uint64_t tsc) {
  const uint32_t used = buf_->used(), mask = buf_->nslots() - 1;
  if (used <= used_before) return;
  const uint32_t first = buf_->SlotIndex(used_before);
  for (uint32_t i = 0; i < used - used_before; i++) rx_tsc_[(first + i) & mask] = tsc;
}

void Engine::End() { end_tsc_.store(Rdtsc()); }

void Engine::OnTxDone(void*, void* opaque) {
  /* Called by the mbuf's last free, in this thread (inside tx_burst or a
   * later cleanup of the port's transmit ring). */
  static_cast<Engine*>(opaque)->in_flight_--;
}

int Engine::AttachOut(PacketBatch* batch, const Packet* views, const uint32_t* slots, rte_mbuf** out) {
  if (batch->cnt() == 0) return 0;
  if (rte_pktmbuf_alloc_bulk(pool_, out, static_cast<unsigned>(batch->cnt())) != 0) {
    port_.tx_dropped.Add(batch->cnt());
    return 0;
  }
  const bool va = rte_eal_iova_mode() == RTE_IOVA_VA;
  int i = 0;
  for (Packet* p : *batch) {
    rte_mbuf* m = out[i++];
    uint8_t* slot = p->data() - p->headroom();
    rte_mbuf_ext_shared_info* sh = &shinfo_[slots[p - views]];
    rte_mbuf_ext_refcnt_set(sh, 1);
    /* IOVA: the virtual address where DPDK runs IOVA as VA (vdevs, and a
     * VF whose IOMMU maps the chain file: rte_extmem_register plus
     * rte_dev_dma_map on a real NIC); unknown otherwise. */
    rte_pktmbuf_attach_extbuf(m, slot, va ? reinterpret_cast<rte_iova_t>(slot) : RTE_BAD_IOVA,
                              static_cast<uint16_t>(kSlotSize), sh);
    m->data_off = p->headroom();
    m->data_len = p->len();
    m->pkt_len = p->len();
    in_flight_++;
  }
  zero_copy_packets_.Add(static_cast<uint64_t>(i));
  return i;
}

bool Engine::SlotsReleased() {
  if (in_flight_ == 0) return true;
  /* A PMD that copies on transmit (memif, AF_XDP, pcap) has freed them
   * inside tx_burst; a NIC frees them once its DMA is done. */
  const uint64_t deadline = Rdtsc() + TscHz() / 1000;
  while (in_flight_ != 0 && Rdtsc() < deadline) rte_eth_tx_done_cleanup(opt_.tx_port, 0, 0);
  return in_flight_ == 0;
}

int Engine::ReturnHeld(uint32_t n, uint32_t used, rte_mbuf** out) {
  /* The chain is done with these packets (Egress runs after the last NF's
   * turn): each mbuf goes out with the extent the last NF left in its
   * descriptor, or back to the pool, and only then may the port fill its
   * slot again. The descriptor must still name the mbuf's own slot. */
  int nout = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (i + kPrefetchAhead < used) buf_->Prefetch(i + kPrefetchAhead);
    const uint32_t idx = buf_->SlotIndex(i);
    rte_mbuf* m = held_[idx];
    held_[idx] = nullptr;
    Packet v;
    if (!buf_->View(i, &v, HeldSlot(m)) || v.dropped()) {
      rte_pktmbuf_free(m);
      continue;
    }
    m->data_off = v.headroom();
    m->data_len = v.len();
    m->pkt_len = v.len();
    out[nout++] = m;
  }
  return nout;
}

void Engine::Egress() {
  if (!buf_) return;
  uint64_t t0 = Rdtsc();
  while (uint32_t used = buf_->used()) {
    int n = used < static_cast<uint32_t>(kMaxBurst) ? static_cast<int>(used) : kMaxBurst;
    rte_mbuf* out[kMaxBurst];
    int nout;
    uint64_t t1;
    if (rx_zero_copy_ && zero_copy_) {
      /* Nothing to copy or attach: the port's own mbufs go back out. */
      nout = ReturnHeld(static_cast<uint32_t>(n), used, out);
      zero_copy_packets_.Add(static_cast<uint64_t>(nout));
      t1 = Rdtsc();
    } else {
      Packet views[kMaxBurst];
      uint32_t slots[kMaxBurst];
      PacketBatch batch;
      for (uint32_t i = 0; i < static_cast<uint32_t>(n); i++) {
        if (i + kPrefetchAhead < used) buf_->Prefetch(i + kPrefetchAhead);
        slots[i] = buf_->SlotIndex(i);
        buf_->View(i, &views[i], rx_zero_copy_ ? HeldSlot(held_[slots[i]]) : PktBuf::kAnySlot);
        if (!views[i].dropped()) batch.Add(&views[i]);
      }
      t1 = Rdtsc();
      nout = zero_copy_ ? AttachOut(&batch, views, slots, out) : CopyOut(&batch, pool_, tx_chains_, out, &port_);
      if (rx_zero_copy_) /* copied out: the received mbufs go back to the pool */
        for (uint32_t i = 0; i < static_cast<uint32_t>(n); i++) {
          rte_pktmbuf_free(held_[slots[i]]);
          held_[slots[i]] = nullptr;
        }
    }
    uint64_t t2 = Rdtsc();
    uint64_t rx_tsc[kMaxBurst];
    const uint32_t first = buf_->SlotIndex(0), mask = buf_->nslots() - 1;
    for (int i = 0; i < n; i++) rx_tsc[i] = rx_tsc_[(first + static_cast<uint32_t>(i)) & mask];
    buf_->Release(static_cast<uint32_t>(n));
    TransmitBurst(opt_.tx_port, out, nout, &port_);
    uint64_t t3 = Rdtsc();
    sojourn_.RecordBurst(t3, rx_tsc, n); /* every packet of it left now, sent or dropped by an NF */
    uint64_t t4 = Rdtsc();
    Charge(KEEL_CYCLES_VIEW, t1 - t0);
    Charge(KEEL_CYCLES_COPY_OUT, t2 - t1);
    Charge(KEEL_CYCLES_TX, t3 - t2);
    Charge(KEEL_CYCLES_SOJOURN, t4 - t3);
    t0 = t4;
  }
  if (zero_copy_ && !SlotsReleased()) {
    /* The port holds slots longer than a turn can wait: copy from now on,
     * into slots after the ones it holds (the ring is not rewound). */
    zero_copy_ = false;
    zero_copy_fallbacks_.Add(1);
    std::fprintf(stderr, "keel: port %u keeps transmitted buffers; egress copies from now on\n", opt_.tx_port);
  }
  if (buf_->MaybeMoves()) buf_->ClearMoves(); /* the ring is empty */
  if (in_flight_ == 0) buf_->Rewind();
}

uint32_t Engine::Head(uint32_t bursts) {
  if (port_.rx_queue_len_known.Get() && cycles_[KEEL_CYCLES_TURNS] % kQueueSampleTurns == 0)
    port_.rx_queue_len.Set(static_cast<uint64_t>(PortRxQueueLen(opt_.rx_port)));
  if (bursts < 1) bursts = 1;
  if (bursts > kMaxBurstsPerTurn) bursts = kMaxBurstsPerTurn;
  bursts_per_turn_.Set(bursts);
  const uint16_t burst = static_cast<uint16_t>(opt_.burst);
  uint64_t t = Rdtsc();
  uint32_t received = 0;
  for (uint32_t b = 0; b < bursts; b++) {
    rte_mbuf* mbufs[kMaxBurst];
    uint32_t moves;
    uint16_t n = handover_->Receive(opt_.rx_port, mbufs, burst, t, &moves);
    if (n == 0) {
      last_poll_ = t;
      Charge(KEEL_CYCLES_RX_IDLE, Rdtsc() - t);
      break;
    }
    /* They arrived after the poll before this one, or the queue would have
     * given them then: the wait the VF's queue hides from us is at most
     * this (af_packet and af_xdp carry no receive timestamp). */
    rx_wait_bound_.RecordN(t - last_poll_, n);
    last_poll_ = t;
    const uint64_t rx_tsc = t;
    received += n;
    if (__builtin_expect(moves == 0, 1)) {
      t = HeadBurst(mbufs, n, rx_tsc, t, false);
      continue;
    }
    /* A move frame (rare): the packets ahead of it, it, the packets behind it. */
    for (uint16_t i = 0, start = 0; i <= n; i++) {
      if (i < n && !(moves >> i & 1)) continue;
      if (i > start) t = HeadBurst(mbufs + start, static_cast<uint16_t>(i - start), rx_tsc, t, false);
      if (i < n) t = HeadBurst(mbufs + i, 1, rx_tsc, t, true);
      start = static_cast<uint16_t>(i + 1);
    }
  }
  turn_received_ = received;
  if (received) last_rx_ = t;
  return received;
}

uint64_t Engine::HeadBurst(rte_mbuf** mbufs, uint16_t n, uint64_t rx_tsc, uint64_t t, bool move) {
  Packet views[kMaxBurst];
  PacketBatch batch;
  ReceiveBurst(mbufs, n, views, &batch, &port_);
  uint64_t t1 = Rdtsc();
  if (!move) {
    chain_->Run(&batch, 0, opt_.head_nfs);
  } else {
    for (Packet* p : batch) MoveThrough(p, 0, opt_.head_nfs);
    batch.RemoveDropped();
  }
  uint64_t t2 = Rdtsc();
  Charge(KEEL_CYCLES_RX, t1 - t);
  Charge(KEEL_CYCLES_NF, t2 - t1);
  if (!opt_.copy_in) {
    rte_mbuf* out[kMaxBurst];
    TransmitBurst(opt_.tx_port, out, ReturnSurvivors(mbufs, views, n, &batch, out), &port_);
    const uint64_t t3 = Rdtsc();
    sojourn_.RecordN(t3 - rx_tsc, n); /* the whole burst left at once */
    t = Rdtsc();
    Charge(KEEL_CYCLES_TX, t3 - t2);
    Charge(KEEL_CYCLES_SOJOURN, t - t3);
    return t;
  }
  const uint32_t used_before = buf_->used();
  if (rx_zero_copy_) {
    /* Received into the chain buffer: the survivors enter it as they are. */
    EnterSlots(mbufs, views, n, &batch);
    StampRx(used_before, rx_tsc);
    t = Rdtsc();
    Charge(KEEL_CYCLES_VIEW, t - t2);
  } else {
    /* The spatial-isolation copy: only the head's survivors enter the
     * chain's buffer; the NIC's buffers go straight back to the port. */
    uint32_t copied = 0;
    for (Packet* p : batch) copied += buf_->Push(p->data(), p->len());
    StampRx(used_before, rx_tsc);
    port_.copied.Add(copied);
    port_.copy_dropped.Add(static_cast<uint32_t>(batch.cnt()) - copied);
    rte_pktmbuf_free_bulk(mbufs, n);
    t = Rdtsc();
    Charge(KEEL_CYCLES_COPY_IN, t - t2);
  }
  /* The positions after this one run MoveAt on it, not their NF. */
  if (move && buf_->used() > used_before) buf_->MarkMove(used_before);
  return t;
}

void Engine::MoveThrough(Packet* p, size_t first_nf, size_t last_nf) {
  inband::Type type;
  size_t header = 0, body = 0;
  /* As position 0 passed it on: marked outermost, the body right behind
   * the in-band header, the frame long enough for the largest body. */
  if (inband::ParseMoveFrame(p->data(), p->len(), &type, &header, &body) != inband::Malformed::kNone ||
      header != inband::kPayloadOffset || !p->Trim(static_cast<uint16_t>(p->len() - inband::kMoveBodyOffset - body)) ||
      !p->Append(static_cast<uint16_t>(inband::kMoveBodyMax - body))) {
    move_malformed_.Add(1);
    p->Drop();
    return;
  }
  uint8_t* b = p->data() + inband::kMoveBodyOffset;
  for (size_t i = first_nf; i < last_nf; i++) {
    std::string err;
    const uint8_t was = b[kMoveStatusAt];
    if (!chain_->MoveAt(i, static_cast<uint8_t>(static_cast<size_t>(opt_.position) + i), b, &body, &err)) {
      move_malformed_.Add(1);
      p->Drop();
      return;
    }
    if (was != b[kMoveStatusAt])
      std::fprintf(stderr, "keel: flow move stopped at position %zu, status %u%s%s\n",
                   static_cast<size_t>(opt_.position) + i, b[kMoveStatusAt], err.empty() ? "" : ": ", err.c_str());
  }
  inband::SetMoveHeader(p->data() + inband::kPayloadOffset, type, body);
  const size_t used = inband::kMoveBodyOffset + body;
  const size_t len = used < inband::kMinFrame ? inband::kMinFrame : used;
  std::memset(p->data() + used, 0, len - used);
  p->Trim(static_cast<uint16_t>(p->len() - len));
}

void Engine::EnterSlots(rte_mbuf** mbufs, Packet* views, uint16_t n, PacketBatch* batch) {
  uint32_t entered = 0, copied = 0;
  for (Packet* p : *batch) {
    rte_mbuf*& m = mbufs[p - views];
    int64_t slot = SlotOfMbuf(m);
    if (slot < 0) {
      /* A PMD that hands out mbufs of its own (net_ring passes the
       * sender's): copy the packet into a slot of the chain's pool. */
      rte_mbuf* c = p->len() <= kSlotDataRoom ? rte_pktmbuf_alloc(pool_) : nullptr;
      if (!c) continue;
      std::memcpy(static_cast<uint8_t*>(c->buf_addr) + kSlotHeadroom, p->data(), p->len());
      p->Reset(static_cast<uint8_t*>(c->buf_addr), kSlotHeadroom, p->len(), static_cast<uint16_t>(kSlotSize));
      rte_pktmbuf_free(m);
      m = c;
      slot = SlotOfMbuf(c);
      copied++;
    }
    uint32_t idx;
    if (!buf_->PushSlot(static_cast<uint32_t>(slot), p->headroom(), p->len(), &idx)) continue; /* ring full */
    held_[idx] = m;
    m = nullptr;
    entered++;
  }
  rx_zero_copy_packets_.Add(entered - copied);
  port_.copied.Add(copied);
  port_.copy_dropped.Add(static_cast<uint32_t>(batch->cnt()) - entered);
  for (uint16_t i = 0; i < n; i++)
    if (mbufs[i]) rte_pktmbuf_free(mbufs[i]); /* dropped by the head: never in the chain */
}

void Engine::InPlace(uint16_t stage, size_t first_nf) {
  /* Only a turn that may carry a move frame looks for one (a rare one). */
  if (__builtin_expect(buf_->MaybeMoves(), 0))
    InPlaceBursts<true>(stage, first_nf);
  else
    InPlaceBursts<false>(stage, first_nf);
}

template <bool kMoves>
void Engine::InPlaceBursts(uint16_t stage, size_t first_nf) {
  uint32_t used = buf_->used();
  uint64_t t0 = Rdtsc();
  for (uint32_t first = 0; first < used; first += kMaxBurst) {
    uint32_t n = used - first < static_cast<uint32_t>(kMaxBurst) ? used - first : kMaxBurst;
    Packet views[kMaxBurst];
    PacketBatch batch;
    uint32_t moves = 0;
    for (uint32_t i = 0; i < n; i++) {
      if (first + i + kPrefetchAhead < used) buf_->Prefetch(first + i + kPrefetchAhead);
      /* Temporal isolation, checked: the stage before this one finished it. */
      const PktDesc& d = buf_->desc(first + i);
      if (d.stage != stage - 1) order_violations_.Add(1);
      if (kMoves) moves |= static_cast<uint32_t>((d.flags & kDescMove) != 0) << i;
      buf_->View(first + i, &views[i]);
      if (!views[i].dropped()) batch.Add(&views[i]);
    }
    uint64_t t1 = Rdtsc();
    if (!kMoves || moves == 0)
      RunNfs(&batch, first_nf, t1);
    else
      RunAroundMoves(views, n, moves, first_nf);
    uint64_t t2 = Rdtsc();
    for (uint32_t i = 0; i < n; i++) {
      if (kMoves && (moves >> i & 1))
        buf_->StoreMove(first + i, views[i], stage);
      else
        buf_->Store(first + i, views[i], stage);
    }
    uint64_t t3 = Rdtsc();
    Charge(KEEL_CYCLES_VIEW, (t1 - t0) + (t3 - t2));
    t0 = t3;
  }
}

void Engine::RunNfs(PacketBatch* batch, size_t first_nf, uint64_t t0) {
  if (opt_.copy_each_hop) {
    RunOnPrivateCopies(batch, first_nf); /* charges its copies and the NFs themselves */
    return;
  }
  chain_->Run(batch, first_nf, chain_->size());
  Charge(KEEL_CYCLES_NF, Rdtsc() - t0);
}

void Engine::RunAroundMoves(Packet* views, uint32_t n, uint32_t moves, size_t first_nf) {
  PacketBatch between;
  for (uint32_t i = 0; i <= n; i++) {
    const bool move = i < n && (moves >> i & 1);
    if (i < n && !move) {
      if (!views[i].dropped()) between.Add(&views[i]);
      continue;
    }
    if (between.cnt()) RunNfs(&between, first_nf, Rdtsc());
    between.Clear();
    if (move && !views[i].dropped()) MoveThrough(&views[i], first_nf, chain_->size());
  }
}

void Engine::RunOnPrivateCopies(PacketBatch* batch, size_t first_nf) {
  /* Each packet is copied into a packet buffer allocated, one by one, from
   * this process's own pool, the way a copying message bus hands a packet
   * to the next NF (Galleon §7.1, Fig. 7: allocation plus copy), and copied
   * back into the chain's buffer once the NF is done with it. */
  uint64_t t0 = Rdtsc();
  rte_mbuf* mbufs[kMaxBurst];
  Packet copies[kMaxBurst];
  PacketBatch copied;
  for (Packet* p : *batch) {
    int i = copied.cnt();
    mbufs[i] = rte_pktmbuf_alloc(pool_);
    if (!mbufs[i]) {
      p->Drop();
      port_.copy_dropped.Add(1);
      continue;
    }
    rte_mbuf* m = mbufs[i];
    std::memcpy(static_cast<uint8_t*>(m->buf_addr) + p->headroom(), p->data(), p->len());
    copies[i].Reset(static_cast<uint8_t*>(m->buf_addr), p->headroom(), p->len(), m->buf_len);
    copied.Add(&copies[i]);
  }
  uint64_t t1 = Rdtsc();
  chain_->Run(&copied, first_nf, chain_->size());
  uint64_t t2 = Rdtsc();
  int i = 0;
  for (Packet* p : *batch) {
    if (p->dropped()) continue; /* no buffer was left for it above */
    const Packet& c = copies[i];
    if (c.dropped()) {
      p->Drop();
    } else {
      std::memcpy(p->data() - p->headroom() + c.headroom(), c.data(), c.len());
      p->Reset(p->data() - p->headroom(), c.headroom(), c.len(), kSlotSize);
    }
    rte_pktmbuf_free(mbufs[i++]);
  }
  Charge(KEEL_CYCLES_NF, t2 - t1);
  Charge(KEEL_CYCLES_COPY_IN, (t1 - t0) + (Rdtsc() - t2));
}

uint64_t Engine::EndTurn(uint64_t start) {
  const uint64_t end = Rdtsc();
  Charge(KEEL_CYCLES_BUSY, end - start);
  Charge(KEEL_CYCLES_TURNS, 1);
  if (carrying_ || turn_received_ || (buf_ && buf_->used())) turn_busy_.Record(end - start);
  carrying_ = false;
  if (turn_received_) {
    port_.batches.Add(1);
    port_.batch_cycles.Add(end - start);
    turn_received_ = 0;
  }
  return end;
}

Json Engine::StatsJson() const {
  const uint64_t hz = TscHz();
  const uint64_t end = end_tsc_.load();
  const uint64_t now = end ? end : Rdtsc();
  const uint64_t begin = begin_tsc_.load();
  Json j = {{"position", opt_.position},
            {"of", opt_.of},
            {"pid", getpid()},
            {"unix_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count()},
            {"final", end != 0},
            {"tsc_hz", hz},
            {"seconds", begin ? static_cast<double>(now - begin) / static_cast<double>(hz) : 0.0},
            {"chain_buffer", buf_ ? Json(buf_->path()) : Json(nullptr)},
            {"turns", __atomic_load_n(&cycles_[KEEL_CYCLES_TURNS], __ATOMIC_RELAXED)},
            {"order_violations", order_violations_.Get()},
            /* Between this position's turns only the position before it
             * wrote the descriptors it finds: that NF is to blame. */
            {"bad_descriptors", {{"written_by", (opt_.position + opt_.of - 1) % opt_.of},
                                 {"count", buf_ ? buf_->bad_descriptors() : 0}}},
            {"cycles", CyclesJson(cycles_)},
            /* The waits for this position's turns that carried packets: the
             * scheduler's share of their sojourn (chain_sched.h, handoff). */
            {"handoff_wait", handoff_wait_.ToJson()},
            {"turn_busy", turn_busy_.ToJson()},
            /* Flow moves' frames dropped here as no move frame (issue 37);
             * each NF's "moves" counts the frames it passed. */
            {"moves", {{"malformed", move_malformed_.Get()}}},
            {"nfs", chain_->StatsJson(end != 0)}};
  if (opt_.position == 0) {
    const uint64_t batches = port_.batches.Get();
    Json port = PortJson(port_);
    port["rx_port"] = PortName(opt_.rx_port);
    port["tx_port"] = PortName(opt_.tx_port);
    j["port"] = port;
    j["ingress"] = {{"zero_copy", rx_zero_copy_}, {"zero_copy_packets", rx_zero_copy_packets_.Get()}};
    j["egress"] = {{"zero_copy", zero_copy_},
                   {"zero_copy_packets", zero_copy_packets_.Get()},
                   {"fallbacks", zero_copy_fallbacks_.Get()}};
    j["bursts_per_turn"] = bursts_per_turn_.Get();
    j["batches"] = batches;
    j["cycles_per_batch"] = batches ? static_cast<double>(port_.batch_cycles.Get()) / batches : 0.0;
    j["sojourn"] = sojourn_.ToJson();
    j["handover"] = handover_->ToJson();
    j["rx_wait_bound"] = rx_wait_bound_.ToJson();
  }
  return j;
}

}  // namespace keel
