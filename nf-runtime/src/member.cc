/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/member.h"

#include <rte_ethdev.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <climits>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#include "keel/burst.h"
#include "keel/port.h"
#include "keel/stats_file.h"

namespace keel {

/* Bursts the chain's buffer holds: B x 32 packets for the largest B. */
static constexpr uint32_t kMaxBatchBursts = 64;
/* Packets to prefetch ahead in the chain's buffer (l3fwd does 8). */
static constexpr uint32_t kPrefetchAhead = 8;
/* Waiting for a turn: how often the position whose turn it is is checked
 * for life, how long to spin with sched_yield before sleeping between
 * looks (without coopsched), and how long position 0, asked to stop, waits
 * for its turn to send what is in flight. */
static constexpr uint64_t kLivenessCheckMs = 100;
static constexpr uint64_t kSpinMs = 1;
static constexpr auto kBackoffSleep = std::chrono::microseconds(200);
static constexpr uint64_t kStopGraceMs = 500;
/* Position 0's turns between NIC queue-length samples. */
static constexpr uint64_t kQueueSampleTurns = 64;

template <class T>
static T Load(const T* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
template <class T>
static void Store(T* p, T v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }

static uint64_t MsToCycles(uint64_t ms) { return TscHz() / 1000 * ms; }

/* --wait futex: sleeps while *word == seen, at most 100 ms (liveness checks). */
static void FutexWait(uint32_t* word, uint32_t seen) {
  struct timespec ts = {0, 100 * 1000 * 1000};
  syscall(SYS_futex, word, FUTEX_WAIT, seen, &ts, nullptr, 0);
}
static void FutexWake(uint32_t* word, int n) { syscall(SYS_futex, word, FUTEX_WAKE, n, nullptr, nullptr, 0); }


Member::Member(Chain* chain, rte_mempool* pool, const MemberOptions& opt)
    : chain_(chain), pool_(pool), opt_(opt) {}

Member::~Member() {
  stats_.reset();
  if (lock_fd_ >= 0) close(lock_fd_);
}

/* The byte of the buffer file that stands for position |k|. */
static struct flock PositionByte(short type, uint32_t k) {
  struct flock fl = {};
  fl.l_type = type;
  fl.l_whence = SEEK_SET;
  fl.l_start = static_cast<off_t>(k);
  fl.l_len = 1;
  return fl;
}

bool Member::HoldPosition(std::string* err) {
  lock_fd_ = open(opt_.pktbuf_path.c_str(), O_RDWR | O_CLOEXEC);
  struct flock fl = PositionByte(F_WRLCK, static_cast<uint32_t>(opt_.position));
  if (lock_fd_ >= 0 && fcntl(lock_fd_, F_OFD_SETLK, &fl) == 0) return true;
  *err = opt_.pktbuf_path + ": position " + std::to_string(opt_.position) + ": " +
         (errno == EAGAIN || errno == EACCES ? "another process holds this position"
                                              : std::strerror(errno));
  return false;
}

bool Member::PositionGone(uint32_t j) const {
  if (j >= KEEL_SCHED_MAX_NFS || Load(&buf_->sched()->tids[j]) == 0) return false;
  struct flock fl = PositionByte(F_WRLCK, j);
  return fcntl(lock_fd_, F_OFD_GETLK, &fl) == 0 && fl.l_type == F_UNLCK;
}

std::unique_ptr<Member> Member::Create(Chain* chain, rte_mempool* pool, const MemberOptions& opt,
                                       int wait_ms, std::string* err) {
  std::unique_ptr<Member> m(new Member(chain, pool, opt));
  if (opt.position == 0) {
    m->buf_ = PktBuf::Create(opt.pktbuf_path, kMaxBatchBursts * kMaxBurst, err);
    if (!m->buf_) return nullptr;
    keel_chain_sched* s = m->buf_->sched();
    s->nnfs = static_cast<uint32_t>(opt.count);
    s->batch = 1;
    Store<uint64_t>(&s->magic, KEEL_SCHED_MAGIC);
    m->tx_chains_ = PortTxChains(opt.port);
    if (opt.egress_zero_copy && opt.count > 1) {
      m->zero_copy_ = true;
      m->shinfo_.resize(m->buf_->nslots());
      for (auto& sh : m->shinfo_) {
        sh.free_cb = &Member::OnTxDone;
        sh.fcb_opaque = m.get();
        rte_mbuf_ext_refcnt_set(&sh, 0);
      }
    }
    m->port_.rx_queue_len_known.Set(PortRxQueueLen(opt.port) >= 0);
  } else {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
    for (;;) {
      m->buf_ = PktBuf::Open(opt.pktbuf_path, err);
      if (m->buf_ && Load(&m->buf_->sched()->magic) == KEEL_SCHED_MAGIC) break;
      m->buf_.reset();
      /* Waiting helps while position 0 creates the file, not when the file
       * is there and not ours to open. */
      if (access(opt.pktbuf_path.c_str(), F_OK) == 0 && access(opt.pktbuf_path.c_str(), R_OK | W_OK) != 0)
        return nullptr;
      if (std::chrono::steady_clock::now() > deadline) return nullptr;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (m->buf_->sched()->nnfs != static_cast<uint32_t>(opt.count)) {
      *err = opt.pktbuf_path + ": the chain has " + std::to_string(m->buf_->sched()->nnfs) +
             " NFs, not " + std::to_string(opt.count);
      return nullptr;
    }
  }
  err->clear(); /* what failed while waiting for the buffer no longer matters */
  if (!m->HoldPosition(err)) return nullptr;
  m->cycles_ = m->buf_->sched()->cycles[opt.position];
  Store<uint64_t>(&m->buf_->sched()->tids[opt.position], static_cast<uint64_t>(gettid()));
  Member* raw = m.get();
  m->stats_ = std::make_unique<StatsFile>(opt.stats_path, opt.stats_interval_ms,
                                          [raw] { return raw->StatsJson(false); });
  m->stats_->Start();
  return m;
}

void Member::OnTxDone(void*, void* opaque) {
  /* Called by the mbuf's last free, in this thread (inside tx_burst or a
   * later cleanup of the port's transmit ring). */
  static_cast<Member*>(opaque)->in_flight_--;
}

int Member::AttachOut(PacketBatch* batch, const Packet* views, const uint32_t* slots, rte_mbuf** out) {
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

bool Member::SlotsReleased() {
  if (in_flight_ == 0) return true;
  /* A PMD that copies on transmit (memif, AF_XDP, pcap) has freed them
   * inside tx_burst; a NIC frees them once its DMA is done. */
  const uint64_t deadline = Rdtsc() + MsToCycles(1);
  while (in_flight_ != 0 && Rdtsc() < deadline) rte_eth_tx_done_cleanup(opt_.port, 0, 0);
  if (in_flight_ == 0) return true;
  return false;
}

void Member::Egress() {
  uint64_t t0 = Rdtsc();
  while (uint32_t used = buf_->used()) {
    int n = used < static_cast<uint32_t>(kMaxBurst) ? static_cast<int>(used) : kMaxBurst;
    Packet views[kMaxBurst];
    uint32_t slots[kMaxBurst];
    PacketBatch batch;
    for (uint32_t i = 0; i < static_cast<uint32_t>(n); i++) {
      if (i + kPrefetchAhead < used) buf_->Prefetch(i + kPrefetchAhead);
      buf_->View(i, &views[i]);
      slots[i] = buf_->SlotIndex(i);
      if (!views[i].dropped()) batch.Add(&views[i]);
    }
    uint64_t t1 = Rdtsc();
    rte_mbuf* out[kMaxBurst];
    int nout = zero_copy_ ? AttachOut(&batch, views, slots, out)
                          : CopyOut(&batch, pool_, tx_chains_, out, &port_);
    uint64_t t2 = Rdtsc();
    buf_->Release(static_cast<uint32_t>(n));
    TransmitBurst(opt_.port, out, nout, &port_);
    uint64_t t3 = Rdtsc();
    Charge(KEEL_CYCLES_VIEW, t1 - t0);
    Charge(KEEL_CYCLES_COPY_OUT, t2 - t1);
    Charge(KEEL_CYCLES_TX, t3 - t2);
    t0 = t3;
  }
}

bool Member::HeadTurn(keel_chain_sched* s) {
  Egress();
  if (zero_copy_ && !SlotsReleased()) {
    /* The port holds slots longer than a turn can wait: copy from now on,
     * into slots after the ones it holds (the ring is not rewound). */
    zero_copy_ = false;
    zero_copy_fallbacks_.Add(1);
    std::fprintf(stderr, "keel-nf: port %u keeps transmitted buffers; egress copies from now on\n", opt_.port);
  }
  if (zero_copy_ || in_flight_ == 0) buf_->Rewind();
  if (Load(&s->detach_req)) {
    Store(&s->parked, 1u); /* a batch boundary: nothing is in flight */
    return true;
  }
  Store(&s->parked, 0u);
  if (port_.rx_queue_len_known.Get() && turns_.Get() % kQueueSampleTurns == 0)
    port_.rx_queue_len.Set(static_cast<uint64_t>(PortRxQueueLen(opt_.port)));
  uint32_t bursts = Load(&s->batch);
  if (bursts < 1) bursts = 1;
  if (bursts > kMaxBatchBursts) bursts = kMaxBatchBursts;
  uint64_t now = Rdtsc();
  uint64_t t = now;
  uint32_t received = 0;
  for (uint32_t b = 0; b < bursts; b++) {
    rte_mbuf* mbufs[kMaxBurst];
    uint16_t n = rte_eth_rx_burst(opt_.port, 0, mbufs, kMaxBurst);
    if (n == 0) {
      Charge(KEEL_CYCLES_RX_IDLE, Rdtsc() - t);
      break;
    }
    received += n;
    Packet views[kMaxBurst];
    PacketBatch batch;
    ReceiveBurst(mbufs, n, views, &batch, &port_);
    uint64_t t1 = Rdtsc();
    chain_->Run(&batch, 0, 1);
    uint64_t t2 = Rdtsc();
    Charge(KEEL_CYCLES_RX, t1 - t);
    Charge(KEEL_CYCLES_NF, t2 - t1);
    if (opt_.count == 1) {
      rte_mbuf* out[kMaxBurst];
      TransmitBurst(opt_.port, out, ReturnSurvivors(mbufs, views, n, &batch, out), &port_);
      t = Rdtsc();
      Charge(KEEL_CYCLES_TX, t - t2);
      continue;
    }
    uint32_t copied = 0;
    for (Packet* p : batch) copied += buf_->Push(p->data(), p->len());
    port_.copied.Add(copied);
    port_.copy_dropped.Add(static_cast<uint32_t>(batch.cnt()) - copied);
    rte_pktmbuf_free_bulk(mbufs, n);
    t = Rdtsc();
    Charge(KEEL_CYCLES_COPY_IN, t - t2);
  }
  last_received_ = received;
  if (received) {
    __atomic_add_fetch(&s->rounds, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->packets, received, __ATOMIC_RELAXED);
    port_.batches.Add(1);
    port_.batch_cycles.Add(Rdtsc() - now);
    last_rx_ = now;
  }
  return !(idle_cycles_ && now - last_rx_ > idle_cycles_);
}

void Member::InPlaceTurn() {
  const uint16_t k = static_cast<uint16_t>(opt_.position);
  uint32_t used = buf_->used();
  uint64_t t0 = Rdtsc();
  for (uint32_t first = 0; first < used; first += kMaxBurst) {
    uint32_t n = used - first < static_cast<uint32_t>(kMaxBurst) ? used - first : kMaxBurst;
    Packet views[kMaxBurst];
    PacketBatch batch;
    for (uint32_t i = 0; i < n; i++) {
      if (first + i + kPrefetchAhead < used) buf_->Prefetch(first + i + kPrefetchAhead);
      /* Temporal isolation, checked: the NF before this one finished it. */
      if (buf_->desc(first + i).stage != k - 1) order_violations_.Add(1);
      buf_->View(first + i, &views[i]);
      if (!views[i].dropped()) batch.Add(&views[i]);
    }
    uint64_t t1 = Rdtsc();
    if (opt_.copy_each_hop) {
      RunOnPrivateCopies(&batch); /* charges its copies and the NF itself */
    } else {
      chain_->Run(&batch, 0, 1);
      Charge(KEEL_CYCLES_NF, Rdtsc() - t1);
    }
    uint64_t t2 = Rdtsc();
    for (uint32_t i = 0; i < n; i++) buf_->Store(first + i, views[i], k);
    uint64_t t3 = Rdtsc();
    Charge(KEEL_CYCLES_VIEW, (t1 - t0) + (t3 - t2));
    t0 = t3;
  }
}

void Member::RunOnPrivateCopies(PacketBatch* batch) {
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
  chain_->Run(&copied, 0, 1);
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

bool Member::AwaitTurn(keel_chain_sched* s, std::string* err) {
  const uint32_t k = static_cast<uint32_t>(opt_.position);
  const uint64_t start = Rdtsc();
  uint64_t next_check = start + MsToCycles(kLivenessCheckMs);
  uint32_t turn;
  for (;;) {
    /* The semaphore's value before the turn is read: a wake in between
     * changes it, so FutexWait below returns at once instead of missing it. */
    const uint32_t seen = opt_.wait_futex ? Load(&s->wake[k]) : 0;
    if ((turn = Load(&s->turn)) == k) break;
    if (Load(&s->closing)) return false;
    uint64_t now = Rdtsc();
    if (stop_.load(std::memory_order_relaxed) && (k > 0 || now - start > MsToCycles(kStopGraceMs))) {
      Store(&s->closing, 1u);
      return false;
    }
    if (now >= next_check) {
      next_check = now + MsToCycles(kLivenessCheckMs);
      if (PositionGone(turn)) {
        *err = "position " + std::to_string(turn) + " of the chain is gone (its process ended); stopping";
        return false;
      }
    }
    if (opt_.wait_futex) {
      FutexWait(&s->wake[k], seen);
    } else if (!opt_.coopsched && now - start > MsToCycles(kSpinMs)) {
      std::this_thread::sleep_for(kBackoffSleep);
    } else {
      sched_yield();
    }
  }
  return true;
}

bool Member::Run(std::string* err) {
  err->clear();
  keel_chain_sched* s = buf_->sched();
  const uint32_t k = static_cast<uint32_t>(opt_.position);
  const uint32_t next = (k + 1) % static_cast<uint32_t>(opt_.count);
  idle_cycles_ = MsToCycles(static_cast<uint64_t>(opt_.exit_when_idle_ms));
  last_rx_ = Rdtsc();
  /* A one-NF chain hands off to no one (Galleon §4.2's single-NF case): it
   * yields only while another sgroup shares its core (chain_sched.h). */
  const bool solo = opt_.count == 1;
  bool running = true;
  while (running && AwaitTurn(s, err)) {
    const uint64_t start = Rdtsc();
    const uint64_t passed = Load(&s->handoff_tsc);
    if (passed && start > passed) Charge(KEEL_CYCLES_HANDOFF, start - passed);
    Store(&s->busy_since_tsc, start);
    if (k == 0) {
      if (stop_.load(std::memory_order_relaxed)) {
        Egress(); /* what the last NF finished goes out; nothing new comes in */
        running = false;
      } else {
        running = HeadTurn(s);
      }
    } else {
      running = !Load(&s->closing) && !stop_.load(std::memory_order_relaxed);
      if (running) InPlaceTurn();
    }
    /* Whoever stops first closes the chain: the others exit too. */
    if (!running) Store(&s->closing, 1u);
    turns_.Add(1);
    chain_->SyncState(false);
    Store<uint64_t>(&s->busy_since_tsc, 0);
    const uint64_t end = Rdtsc();
    Charge(KEEL_CYCLES_BUSY, end - start);
    Charge(KEEL_CYCLES_TURNS, 1);
    Store(&s->handoff_tsc, end);
    Store(&s->turn, next);
    __atomic_add_fetch(&s->handoffs, 1, __ATOMIC_RELAXED);
    if (opt_.wait_futex) {
      __atomic_add_fetch(&s->wake[next], 1, __ATOMIC_RELEASE);
      FutexWake(&s->wake[next], 1);
      if (!running) /* closing: the others may sleep on their own semaphores */
        for (uint32_t j = 0; j < static_cast<uint32_t>(opt_.count); j++) FutexWake(&s->wake[j], INT_MAX);
    } else if (!solo || !running || Load(&s->core_shared)) {
      sched_yield();
    }
  }
  chain_->SyncState(true);
  stats_->Stop();
  stats_->Write(StatsJson(true));
  return err->empty();
}

Json Member::StatsJson(bool final) const {
  Json j = {{"position", opt_.position},
            {"of", opt_.count},
            {"pid", getpid()},
            {"unix_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count()},
            {"final", final},
            {"chain_buffer", opt_.pktbuf_path},
            {"turns", turns_.Get()},
            {"order_violations", order_violations_.Get()},
            /* Between this position's turns only the position before it
             * wrote the descriptors it finds: that NF is to blame. */
            {"bad_descriptors", {{"written_by", (opt_.position + opt_.count - 1) % opt_.count},
                                 {"count", buf_->bad_descriptors()}}},
            {"cycles", CyclesJson(cycles_, "turns")},
            {"nfs", chain_->StatsJson(final)}};
  if (opt_.position == 0) {
    uint64_t batches = port_.batches.Get();
    j["port"] = PortJson(port_);
    j["egress"] = {{"zero_copy", zero_copy_},
                   {"zero_copy_packets", zero_copy_packets_.Get()},
                   {"fallbacks", zero_copy_fallbacks_.Get()}};
    j["bursts_per_turn"] = Load(&buf_->sched()->batch);
    j["batches"] = batches;
    j["cycles_per_batch"] = batches ? static_cast<double>(port_.batch_cycles.Get()) / batches : 0.0;
  }
  return j;
}

}  // namespace keel
