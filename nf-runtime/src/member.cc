/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/member.h"

#include "keel/rx_pool.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <ctime>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

namespace keel {

/* Waiting for a turn: how often the position whose turn it is is checked
 * for life, how long to spin with sched_yield before sleeping between
 * looks (without coopsched), and how long position 0, asked to stop, waits
 * for its turn to send what is in flight. */
static constexpr uint64_t kLivenessCheckMs = 100;
static constexpr uint64_t kSpinMs = 1;
static constexpr auto kBackoffSleep = std::chrono::microseconds(200);
static constexpr uint64_t kStopGraceMs = 500;
/* Position 0 of an idle chain under coopsched (no packet for
 * --idle-nap-after-ms, 100 ms: a chain in use, even at 10 packets a second,
 * keeps polling, as its latency SLO needs: with 10 ms, make demo's chains,
 * quiet for 10 ms at times in their ramps, showed 118-120 us of VF queue
 * wait at p99 against 60-104 us polling) sleeps between polls of its
 * port, doubling from kNapMinUs to kNapMaxUs: the first packet after a
 * pause waits up to 100 us more, and the chain costs its core about 10,000
 * wake-ups a second (11.8 % of it here, bench/results/idle_core.json). Once
 * the chain has been idle for kLongIdleMs (its flows have likely ended) the
 * naps grow to kLongNapMaxUs, a tenth of that cost. */
static constexpr uint64_t kNapMinUs = 10;
static constexpr uint64_t kNapMaxUs = 100;
static constexpr uint64_t kLongIdleMs = 1000;
static constexpr uint64_t kLongNapMaxUs = 1000;

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


Member::Member(Chain* chain, const MemberOptions& opt) : chain_(chain), opt_(opt) {}

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

std::unique_ptr<PktBuf> Member::MakeBuffer(const MemberOptions& opt, std::string* err) {
  const uint32_t ring = kMaxBurstsPerTurn * kMaxBurst;
  const bool rx_pool = opt.rx_zero_copy && opt.count > 1;
  std::unique_ptr<PktBuf> buf = PktBuf::Create(opt.pktbuf_path, ring, err, rx_pool ? ring + kRxPoolExtraSlots : 0);
  if (!buf) return nullptr;
  keel_chain_sched* s = buf->sched();
  s->nnfs = static_cast<uint32_t>(opt.count);
  s->batch = 1;
  return buf;
}

std::unique_ptr<Member> Member::Create(Chain* chain, rte_mempool* pool, std::unique_ptr<PktBuf> buf,
                                       const MemberOptions& opt, int wait_ms, std::string* err) {
  std::unique_ptr<Member> m(new Member(chain, opt));
  if (opt.position == 0) {
    if (!buf) {
      *err = "position 0 needs the chain buffer MakeBuffer made";
      return nullptr;
    }
    m->buf_ = std::move(buf);
    /* The others open the file once this is set. */
    Store<uint64_t>(&m->buf_->sched()->magic, KEEL_SCHED_MAGIC);
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
  EngineOptions eo;
  eo.position = opt.position;
  eo.of = opt.count;
  eo.rx_port = eo.tx_port = opt.port;
  eo.copy_in = opt.count > 1; /* a one-NF chain skips the isolation copy (Galleon §4.2) */
  eo.egress_zero_copy = opt.egress_zero_copy;
  eo.rx_zero_copy = opt.rx_zero_copy;
  eo.copy_each_hop = opt.copy_each_hop;
  eo.handover_timeout_ms = opt.handover_timeout_ms;
  m->engine_ = std::make_unique<Engine>(chain, pool, m->buf_.get(), m->buf_->sched()->cycles[opt.position], eo);
  Store<uint64_t>(&m->buf_->sched()->tids[opt.position], static_cast<uint64_t>(gettid()));
  Member* raw = m.get();
  m->stats_ = std::make_unique<StatsFile>(opt.stats_path, opt.stats_interval_ms,
                                          [raw] { return raw->StatsJson(); });
  m->stats_->Start();
  return m;
}

bool Member::HeadTurn(keel_chain_sched* s, uint64_t* start) {
  engine_->Egress();
  if (Load(&s->detach_req)) {
    Store(&s->parked, 1u); /* a batch boundary: nothing is in flight */
    return true;
  }
  Store(&s->parked, 0u);
  uint32_t received = engine_->Head(Load(&s->batch));
  /* Idle for the nap time: what the last round carried went out above, so
   * nothing is in flight and the turn may be held asleep. */
  if (!received && nap_after_cycles_ && engine_->IdleLongerThan(nap_after_cycles_)) {
    const uint64_t slept = IdleNap(s, &received);
    *start += slept; /* the turn's busy cycles leave the sleep out */
  }
  if (received) {
    __atomic_add_fetch(&s->rounds, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->packets, received, __ATOMIC_RELAXED);
  }
  return !engine_->IdleLongerThan(idle_cycles_);
}

uint64_t Member::IdleNap(keel_chain_sched* s, uint32_t* received) {
  Store(&s->idle_nap, 1u);
  uint64_t slept = 0;
  uint64_t nap_us = kNapMinUs;
  *received = 0;
  while (!Load(&s->detach_req) && !Load(&s->closing) && !stop_.load(std::memory_order_relaxed) &&
         !engine_->IdleLongerThan(idle_cycles_)) {
    /* Asleep is not busy: the turn is held, the core is not. */
    Store<uint64_t>(&s->busy_since_tsc, 0);
    const uint64_t t0 = Rdtsc();
    struct timespec d = {0, static_cast<long>(nap_us * 1000)};
    nanosleep(&d, nullptr);
    const uint64_t t1 = Rdtsc();
    slept += t1 - t0;
    Store(&s->busy_since_tsc, t1);
    nap_us = std::min(nap_us * 2, engine_->IdleLongerThan(MsToCycles(kLongIdleMs)) ? kLongNapMaxUs : kNapMaxUs);
    if ((*received = engine_->Head(Load(&s->batch))) != 0) break;
  }
  Store(&s->idle_nap, 0u);
  /* Every waiting position may be asleep on its semaphore: back to yielding. */
  for (uint32_t j = 1; j < static_cast<uint32_t>(opt_.count); j++) {
    __atomic_add_fetch(&s->wake[j], 1, __ATOMIC_RELEASE);
    FutexWake(&s->wake[j], 1);
  }
  return slept;
}

bool Member::AwaitTurn(keel_chain_sched* s, std::string* err) {
  const uint32_t k = static_cast<uint32_t>(opt_.position);
  const uint64_t start = Rdtsc();
  uint64_t next_check = start + MsToCycles(kLivenessCheckMs);
  uint32_t turn;
  for (;;) {
    /* The semaphore's value before the turn is read: a wake in between
     * changes it, so FutexWait below returns at once instead of missing it. */
    const uint32_t seen = opt_.wait_futex || opt_.coopsched ? Load(&s->wake[k]) : 0;
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
    if (opt_.wait_futex || (opt_.coopsched && Load(&s->idle_nap))) {
      /* (coopsched: position 0 naps holding the turn; it wakes us all when
       * its nap ends, and we go back to yielding) */
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
  nap_after_cycles_ = opt_.coopsched && k == 0 ? MsToCycles(opt_.idle_nap_after_ms) : 0;
  engine_->Begin();
  /* A one-NF chain hands off to no one (Galleon §4.2's single-NF case): it
   * yields only while another sgroup shares its core (chain_sched.h). */
  const bool solo = opt_.count == 1;
  bool running = true;
  while (running && AwaitTurn(s, err)) {
    uint64_t start = Rdtsc();
    const uint64_t passed = Load(&s->handoff_tsc);
    if (passed && start > passed) engine_->Handoff(start - passed);
    Store(&s->busy_since_tsc, start);
    if (k == 0) {
      if (stop_.load(std::memory_order_relaxed)) {
        engine_->Egress(); /* what the last NF finished goes out; nothing new comes in */
        running = false;
      } else {
        running = HeadTurn(s, &start);
      }
    } else {
      running = !Load(&s->closing) && !stop_.load(std::memory_order_relaxed);
      if (running) engine_->InPlace(static_cast<uint16_t>(k), 0);
    }
    /* Whoever stops first closes the chain: the others exit too. */
    if (!running) Store(&s->closing, 1u);
    chain_->SyncState(false);
    Store<uint64_t>(&s->busy_since_tsc, 0);
    const uint64_t end = engine_->EndTurn(start);
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
  engine_->End();
  stats_->Write(StatsJson());
  return err->empty();
}

}  // namespace keel
