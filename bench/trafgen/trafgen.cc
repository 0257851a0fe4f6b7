/* SPDX-License-Identifier: Apache-2.0 */
#include "trafgen.h"

#include <fcntl.h>
#include <rte_cycles.h>
#include <rte_dev.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_mbuf.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "keel/port.h"
#include "keel/port_wake.h"

namespace keel::trafgen {

volatile std::sig_atomic_t g_stop = 0;

namespace {

constexpr unsigned kMbufs = 8192, kMbufCache = 256;
constexpr size_t kBurst = 32;
constexpr uint64_t kSleepThresholdNs = 50'000;  /* nap only if the next send is further away */
constexpr uint64_t kSweepNs = 1'000'000;
constexpr size_t kMaxExamples = 5;
constexpr size_t kSetupWorst = 5;  /* first packets named in the result's setup_worst */
constexpr uint64_t kActiveAfterTxNs = 5'000'000;  /* polls stay short this long after a send */

/* Runs |fn| with the calling thread in network namespace |ns|, then moves
 * it back. False with |*err| if either move fails. */
template <typename Fn>
bool InNetns(const std::string& ns, std::string* err, Fn fn) {
  int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  std::string path = "/var/run/netns/" + ns;
  int target = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (self < 0 || target < 0 || setns(target, CLONE_NEWNET) != 0) {
    *err = "cannot enter network namespace " + ns + " (" + path + "): " + std::strerror(errno) +
           "; is the stack up (make up) and are you root?";
    if (self >= 0) close(self);
    if (target >= 0) close(target);
    return false;
  }
  close(target);
  bool ok = fn();
  if (setns(self, CLONE_NEWNET) != 0) {
    *err = std::string("cannot return to the original network namespace: ") + std::strerror(errno);
    ok = false;
  }
  close(self);
  return ok;
}

void Nap(uint64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, nullptr);
}

double CpuSeconds() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double Round(double v, double digits = 3) {
  double m = std::pow(10, digits);
  return std::round(v * m) / m;
}

}  // namespace

Trafgen::Trafgen(const Scenario& sc, const Flags& flags) : sc_(sc), flags_(flags), rng_(flags.seed) {
  chains_.reserve(sc.chains.size());
  for (const Chain& c : sc.chains) {
    chains_.emplace_back(&c);
    if (c.expect.encrypt) chains_.back().aes = std::make_unique<Aes128Cbc>(c.expect.key, c.expect.iv);
  }
}

Trafgen::~Trafgen() {
  if (!eal_) return;
  uint16_t port;
  RTE_ETH_FOREACH_DEV(port) {
    rte_eth_dev_stop(port);
    rte_eth_dev_close(port);
  }
  rte_eal_cleanup();
}

bool Trafgen::Setup(std::string* err) {
  /* net_af_packet opens its socket, and later sets the interface's flags
   * (promiscuous mode, at start too) through fresh sockets, in the netns of
   * the calling thread: each port is probed and started inside its own. */
  std::string tx_dev = "net_af_packet0", rx_dev = "net_af_packet1";
  auto no_port = [&](const std::string& dev) {
    *err = "no DPDK port " + dev;
    return false;
  };
  bool ok = InNetns(flags_.tx_netns, err, [&] {
    if (!EalInit({"keel-trafgen", "-l", "0", "--no-pci", "--no-huge", "-m", "512", "--no-shconf", "--no-telemetry",
                  "--log-level=error", "--vdev", tx_dev + ",iface=" + flags_.tx_iface + ",framecnt=4096"},
                 err))
      return false;
    eal_ = true;
    pool_ = MbufPool("trafgen_mbufs", kMbufs, kMbufCache, err);
    if (!pool_) return false;
    if (rte_eth_dev_get_port_by_name(tx_dev.c_str(), &tx_port_) != 0) return no_port(tx_dev);
    if (!PortInit(tx_port_, pool_, err)) return false;
    rte_eth_promiscuous_disable(tx_port_);  /* the source needs no promiscuous mode */
    return true;
  });
  if (!ok) return false;
  ok = InNetns(flags_.rx_netns, err, [&] {
    std::string args = rx_dev + ",iface=" + flags_.rx_iface + ",framecnt=8192";
    if (int rc = rte_dev_probe(args.c_str()); rc < 0) {
      *err = "cannot open " + flags_.rx_iface + " in " + flags_.rx_netns + " (" + args + "): " + std::strerror(-rc);
      return false;
    }
    if (rte_eth_dev_get_port_by_name(rx_dev.c_str(), &rx_port_) != 0) return no_port(rx_dev);
    return PortInit(rx_port_, pool_, err);
  });
  hz_ = rte_get_tsc_hz();
  return ok;
}

void Trafgen::OpenFlow(size_t c, uint64_t now) {
  ChainRun& cr = chains_[c];
  const Chain& ch = *cr.chain;
  uint64_t k = cr.flows_opened++;
  FlowInfo f;
  f.chain = static_cast<uint16_t>(c);
  uint32_t hosts = ch.dst_net.Hosts();
  f.tuple.src_ip = sc_.src_ip;
  f.tuple.dst_ip = ch.dst_net.Host(static_cast<uint32_t>(k % hosts));
  f.tuple.sport = static_cast<uint16_t>(10000 + (flags_.seed * 7919 + c * 977 + k / hosts) % 55000);
  f.tuple.dport = ch.dport;
  f.tuple.proto = ch.proto;
  if (ch.http) {
    /* Exactly blocked_fraction of the flows, spread evenly. */
    double fr = ch.http->blocked_fraction;
    f.blocked = std::floor((k + 1) * fr) > std::floor(k * fr);
    f.prefix = HttpRequest(*ch.http, f.blocked);
  }
  uint32_t id = static_cast<uint32_t>(flows_.size());
  flows_.push_back(std::move(f));
  FlowTx t;
  t.opened_tsc = now;
  t.end_tsc = now + static_cast<uint64_t>(ch.flow_lifetime_s * static_cast<double>(hz_));
  /* A blocked flow never reaches the sink: nothing to wait for. */
  t.state = flows_[id].blocked ? FlowState::kLive : FlowState::kOpening;
  tx_.push_back(t);
  rx_.emplace_back();
  cr.live.push_back(id);
  if (t.state == FlowState::kOpening) cr.opening.push_back(id);
  Enqueue(c, id, cr.sizes.Draw(rng_), now);
}

uint16_t Trafgen::Enqueue(size_t c, uint32_t flow, uint16_t bytes, uint64_t now) {
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (!m) return 0;
  FlowTx& t = tx_[flow];
  Stamp s{};
  s.chain = static_cast<uint16_t>(c);
  s.flow = flow;
  s.seq = t.next_seq++;
  s.tsc = now;
  uint8_t* data = rte_pktmbuf_mtod(m, uint8_t*);
  uint16_t len = BuildFrame(sc_, flows_[flow], s, bytes, data);
  m->data_len = m->pkt_len = len;
  burst_.push_back(m);
  pending_.push_back({static_cast<int>(c), flow, len});
  if (burst_.size() >= kBurst) Flush();
  return len;
}

void Trafgen::EnqueueMalformed() {
  rte_mbuf* m = rte_pktmbuf_alloc(pool_);
  if (!m) return;
  const std::string& kind = sc_.malformed.kinds[malformed_kind_++ % sc_.malformed.kinds.size()];
  uint16_t len = BuildMalformed(sc_, kind, sc_.malformed.dst_ip, rte_pktmbuf_mtod(m, uint8_t*));
  m->data_len = m->pkt_len = len;
  burst_.push_back(m);
  pending_.push_back({-1, 0, len});
  if (burst_.size() >= kBurst) Flush();
}

void Trafgen::Flush() {
  if (burst_.empty()) return;
  uint16_t sent = rte_eth_tx_burst(tx_port_, 0, burst_.data(), static_cast<uint16_t>(burst_.size()));
  if (sent < burst_.size())
    sent = static_cast<uint16_t>(sent + rte_eth_tx_burst(tx_port_, 0, burst_.data() + sent,
                                                         static_cast<uint16_t>(burst_.size() - sent)));
  for (size_t i = 0; i < burst_.size(); i++) {
    const Pending& p = pending_[i];
    if (i >= sent) {
      rte_pktmbuf_free(burst_[i]);
      tx_refused_++;
      continue;
    }
    if (p.chain < 0) {
      malformed_sent_++;
      continue;
    }
    ChainRun& cr = chains_[p.chain];
    cr.offered_pkts++;
    cr.offered_bytes += p.bytes;
    tx_[p.flow].sent++;
    if (flows_[p.flow].blocked)
      cr.blocked_sent++;
    else
      cr.expected_sent++;
  }
  last_tx_tsc_ = rte_rdtsc();
  burst_.clear();
  pending_.clear();
}

int Trafgen::NextDataFlow(ChainRun& cr) {
  for (size_t tries = 0; tries < cr.live.size(); tries++) {
    uint32_t id = cr.live[cr.rr++ % cr.live.size()];
    if (tx_[id].state == FlowState::kLive) return static_cast<int>(id);
  }
  return -1;
}

bool Trafgen::HasLiveFlow(const ChainRun& cr) const {
  for (uint32_t id : cr.live)
    if (tx_[id].state == FlowState::kLive) return true;
  return false;
}

void Trafgen::Sweep(uint64_t now) {
  uint64_t timeout = flags_.open_timeout_ms * hz_ / 1000;
  for (ChainRun& cr : chains_) {
    while (!cr.opening.empty()) {
      FlowTx& t = tx_[cr.opening.front()];
      if (t.state == FlowState::kOpening && now - t.opened_tsc < timeout) break;
      if (t.state == FlowState::kOpening) {
        t.state = FlowState::kLive;
        cr.open_timeouts++;
      }
      cr.opening.pop_front();
    }
    auto done = [&](uint32_t id) {
      if (now < tx_[id].end_tsc) return false;
      tx_[id].state = FlowState::kDone;
      return true;
    };
    cr.live.erase(std::remove_if(cr.live.begin(), cr.live.end(), done), cr.live.end());
  }
}

unsigned Trafgen::Receive() {
  rte_mbuf* burst[kBurst];
  unsigned total = 0;
  while (uint16_t n = rte_eth_rx_burst(rx_port_, 0, burst, kBurst)) {
    uint64_t rx_tsc = rte_rdtsc();
    for (uint16_t i = 0; i < n; i++) {
      rte_mbuf* m = burst[i];
      /* The kernel may hand the VLAN tag over beside the frame (af_packet's tp_vlan_tci):
       * put it back where the chain put it, so the check sees the frame as sent. */
      if ((m->ol_flags & RTE_MBUF_F_RX_VLAN_STRIPPED) && rte_vlan_insert(&burst[i]) != 0) {
        foreign_rx_++;
        continue;
      }
      m = burst[i];
      if (m->nb_segs == 1)
        OnFrame(rte_pktmbuf_mtod(m, const uint8_t*), m->data_len, rx_tsc);
      else
        foreign_rx_++;
    }
    rte_pktmbuf_free_bulk(burst, n);
    total += n;
    if (n < kBurst) break;
  }
  /* The TX port's socket receives too: what the ToR floods, our own frames. */
  while (uint16_t n = rte_eth_rx_burst(tx_port_, 0, burst, kBurst)) {
    rte_pktmbuf_free_bulk(burst, n);
    tx_port_rx_ += n;
  }
  return total;
}

void Trafgen::TransformError(ChainRun& cr, const std::string& what) {
  cr.transform_errors++;
  if (cr.examples.size() < kMaxExamples) cr.examples.push_back(what);
}

void Trafgen::OnFrame(const uint8_t* data, size_t len, uint64_t rx_tsc) {
  Parsed p;
  if (!ParseFrame(data, len, &p)) {
    (IsMalformedMarker(data, len) ? malformed_delivered_ : foreign_rx_)++;
    return;
  }
  size_t c = 0;
  while (c < chains_.size() && !chains_[c].chain->dst_net.Contains(p.dst_ip)) c++;
  if (c == chains_.size()) {
    (IsMalformedMarker(data, len) ? malformed_delivered_ : foreign_rx_)++;
    return;
  }
  ChainRun& cr = chains_[c];
  Check check = CheckFrame(*cr.chain, static_cast<uint16_t>(c), sc_.dst_mac, p, flows_, cr.aes.get(), &scratch_);
  if (!check.has_stamp) {
    TransformError(cr, check.error);
    return;
  }
  uint32_t id = check.stamp.flow;
  FlowRx& r = rx_[id];
  if (!r.Record(check.stamp.seq)) return;
  if (!check.ok) TransformError(cr, check.error);
  if (flows_[id].blocked) {
    cr.blocked_delivered++;
    TransformError(cr, "flow " + std::to_string(id) + " asked for a blocked URL and arrived");
  }
  if (cr.chain->expect.snat && check.ok && !r.RecordSource(check.seen_src_ip, check.seen_sport)) {
    cr.nat_changes++;
    TransformError(cr, "flow " + std::to_string(id) + " NAT mapping changed to " + Ipv4String(check.seen_src_ip) +
                           ":" + std::to_string(check.seen_sport));
  }
  cr.compared_bytes += check.compared_bytes;
  cr.delivered_pkts++;
  uint16_t l4 = p.proto == 6 ? kTcpHdr : kUdpHdr;
  cr.delivered_bytes += kEthHdr + kIpHdr + l4 + check.stamp.payload_len;
  uint64_t ns = rx_tsc > check.stamp.tsc ? (rx_tsc - check.stamp.tsc) * 1'000'000'000ull / hz_ : 0;
  if (check.stamp.seq == 0) {
    cr.setup.Record(ns);
    auto& w = cr.setup_worst;
    w.insert(std::upper_bound(w.begin(), w.end(), std::make_tuple(ns, id, check.stamp.tsc),
                              [](const auto& a, const auto& b) { return std::get<0>(a) > std::get<0>(b); }),
             std::make_tuple(ns, id, check.stamp.tsc));
    if (w.size() > kSetupWorst) w.pop_back();
    if (tx_[id].state == FlowState::kOpening) tx_[id].state = FlowState::kLive;
  } else {
    cr.latency.Record(ns);
    cr.second.Record(ns);
  }
}

uint64_t Trafgen::LiveLoss(size_t c, uint64_t now) {
  /* Two lower bounds of the loss so far, the larger one: holes below each
   * flow's highest sequence number seen (a late, reordered packet may still
   * fill one), and the packets sent over a second ago that outnumber all
   * packets received (catches flows of which nothing arrives). */
  ChainRun& cr = chains_[c];
  uint64_t holes = 0, received = 0;
  for (size_t id = 0; id < flows_.size(); id++) {
    if (flows_[id].chain != c || flows_[id].blocked) continue;
    const FlowRx& r = rx_[id];
    received += r.received;
    uint64_t highest = 0;
    for (uint32_t s = tx_[id].next_seq; s > 0; s--)
      if (r.Seen(s - 1)) {
        highest = s;
        break;
      }
    holes += highest - std::min(highest, r.received);
  }
  cr.sent_history.emplace_back(now, cr.expected_sent);
  while (!cr.sent_history.empty() && now - cr.sent_history.front().first >= hz_) {
    cr.sent_a_second_ago = cr.sent_history.front().second;
    cr.sent_history.pop_front();
  }
  return std::max(holes, cr.sent_a_second_ago - std::min(cr.sent_a_second_ago, received));
}

void Trafgen::Tick(uint64_t now) {
  ticks_++;
  double cpu = CpuSeconds();
  cpu_timeline_.push_back({{"t_s", ticks_}, {"cpu_pct", Round((cpu - cpu_at_tick_) * 100, 1)}});
  cpu_at_tick_ = cpu;
  std::string line = "t=" + std::to_string(ticks_) + "s";
  for (size_t c = 0; c < chains_.size(); c++) {
    ChainRun& cr = chains_[c];
    double offered = static_cast<double>(cr.offered_bytes - cr.tick_offered_bytes) * 8 / 1e6;
    double delivered = static_cast<double>(cr.delivered_bytes - cr.tick_delivered_bytes) * 8 / 1e6;
    cr.tick_offered_bytes = cr.offered_bytes;
    cr.tick_delivered_bytes = cr.delivered_bytes;
    size_t live = 0;
    for (uint32_t id : cr.live) live += tx_[id].state != FlowState::kDone && now < tx_[id].end_tsc;
    double p99 = static_cast<double>(cr.second.Quantile(0.99)) / 1000;
    uint64_t loss = LiveLoss(c, now);
    cr.second.Reset();
    timeline_.push_back({{"t_s", ticks_},
                         {"chain", cr.chain->name},
                         {"offered_mbps", Round(offered)},
                         {"delivered_mbps", Round(delivered)},
                         {"flows", live},
                         {"p99_us", Round(p99, 1)},
                         {"loss", loss},
                         {"transform_errors", cr.transform_errors}});
    char buf[192];
    std::snprintf(buf, sizeof(buf), "%s %s %.1f/%.1f Mbps %zu flows p99 %.0fus loss %llu wrong %llu", c ? " |" : "",
                  cr.chain->name.c_str(), offered, delivered, live, p99, static_cast<unsigned long long>(loss),
                  static_cast<unsigned long long>(cr.transform_errors));
    line += buf;
  }
  if (!flags_.quiet) std::fprintf(stderr, "%s\n", line.c_str());
}

uint64_t Trafgen::SendDue(size_t c, uint64_t now, double t) {
  const uint64_t us = hz_ / 1'000'000;
  ChainRun& cr = chains_[c];
  int ph = PhaseAt(cr.chain->phases, t);
  if (ph < 0) return UINT64_MAX;
  uint64_t next = UINT64_MAX;
  const Phase& phase = cr.chain->phases[ph];
  if (phase.new_flows_per_s > 0) {
    uint64_t gap = static_cast<uint64_t>(static_cast<double>(hz_) / phase.new_flows_per_s);
    for (size_t n = 0; cr.open.Due(now) && n < kBurst; n++) {
      OpenFlow(c, now);
      cr.open.Advance(gap, now, hz_ / 1000);
    }
    next = cr.open.Next();
  } else {
    cr.open.Start(now);
  }
  double mbps = MbpsAt(cr.chain->phases, t);
  if (mbps <= 0) {
    cr.data.Start(now);
    return next;
  }
  /* Credit for at most 5 ms of traffic (and at least one frame): a loop
   * that was descheduled catches up that much, no more. */
  cr.data.Refill(now, mbps, hz_, std::max(mbps * 5e3, kMaxFrame * 8.0));
  if (!cr.next_bytes) cr.next_bytes = cr.sizes.Draw(rng_);
  for (size_t n = 0; cr.data.CanSend(cr.next_bytes) && n < kBurst; n++) {
    int id = NextDataFlow(cr);
    if (id < 0) {
      cr.data.Start(now);  /* no flow ready: no credit builds up */
      break;
    }
    uint16_t bytes = Enqueue(c, static_cast<uint32_t>(id), cr.next_bytes, now);
    if (!bytes) break;
    cr.data.Spend(bytes);
    cr.next_bytes = cr.sizes.Draw(rng_);
  }
  uint64_t wait = cr.data.Wait(cr.next_bytes, mbps, hz_);
  /* With no flow ready, look again in 100 us. */
  if (!HasLiveFlow(cr)) wait = std::max<uint64_t>(wait, 100 * us);
  return std::min(next, now + std::min<uint64_t>(wait, hz_));
}

void Trafgen::Run() {
  prctl(PR_SET_TIMERSLACK, 1);
  /* What the sink's socket queued before the run (other interfaces' frames
   * until it was bound, earlier traffic) is not this run's. */
  rte_mbuf* junk[kBurst];
  while (uint16_t n = rte_eth_rx_burst(rx_port_, 0, junk, kBurst)) rte_pktmbuf_free_bulk(junk, n);
  while (uint16_t n = rte_eth_rx_burst(tx_port_, 0, junk, kBurst)) rte_pktmbuf_free_bulk(junk, n);

  const uint64_t us = hz_ / 1'000'000;
  const uint64_t max_lag = hz_ / 1000;
  if (flags_.rx_wake)
    for (int fd : FindPortWakeFds()) wake_.push_back(pollfd{fd, POLLIN, 0});
  start_ = rte_rdtsc();
  traffic_end_ = start_ + static_cast<uint64_t>(sc_.Seconds() * static_cast<double>(hz_));
  next_tick_ = start_ + hz_;
  cpu_at_tick_ = CpuSeconds();
  for (ChainRun& cr : chains_) {
    cr.data.Start(start_);
    cr.open.Start(start_);
  }
  malformed_.Start(start_);
  uint64_t next_sweep = start_, last_poll = start_, last_rx = start_, backoff_ns = 0;
  bool draining = false;
  uint64_t drain_limit = 0;

  for (;;) {
    uint64_t now = rte_rdtsc();
    if (!draining && (now >= traffic_end_ || g_stop)) {
      draining = true;
      last_rx = now;
      drain_limit = now + 10 * hz_;
    }
    if (draining && (now - last_rx >= flags_.drain_ms * hz_ / 1000 || now >= drain_limit)) break;
    uint64_t next_send = UINT64_MAX;
    if (!draining) {
      if (now >= next_sweep) {
        Sweep(now);
        next_sweep = now + kSweepNs * us / 1000;
      }
      double t = static_cast<double>(now - start_) / static_cast<double>(hz_);
      for (size_t c = 0; c < chains_.size(); c++) next_send = std::min(next_send, SendDue(c, now, t));
      if (sc_.malformed.per_s > 0) {
        if (malformed_.Due(now)) {
          EnqueueMalformed();
          malformed_.Advance(static_cast<uint64_t>(static_cast<double>(hz_) / sc_.malformed.per_s), now, max_lag);
        }
        next_send = std::min(next_send, malformed_.Next());
      }
      Flush();
    }
    if (now >= next_tick_) {
      Tick(now);
      next_tick_ += hz_;
    }
    next_send = std::min(next_send, next_tick_);

    now = rte_rdtsc();
    bool active = draining || now - last_tx_tsc_ < kActiveAfterTxNs * us / 1000 ||
                  (next_send != UINT64_MAX && next_send < now + kIdlePollMaxUs * us);
    if (active) poll_gaps_.Record((now - last_poll) * 1000 / us);
    last_poll = now;
    if (Receive()) {
      last_rx = rte_rdtsc();
      backoff_ns = 0;
      continue;
    }
    uint64_t cap_ns = (active ? kRxPollMaxUs : kIdlePollMaxUs) * 1000;
    backoff_ns = std::min(cap_ns, std::max<uint64_t>(1000, backoff_ns * 2));
    uint64_t until_send_ns = next_send > now ? (next_send - now) * 1000 / us : 0;
    if (draining) until_send_ns = UINT64_MAX;
    if (until_send_ns <= kSleepThresholdNs) continue;
    if (wake_.empty()) {
      Nap(std::min(backoff_ns, until_send_ns - kSleepThresholdNs / 2));
    } else {
      /* Sleep until the next send, or a frame: the sink does not poll. */
      uint64_t ns = std::min<uint64_t>(until_send_ns - kSleepThresholdNs / 2, kIdlePollMaxUs * 1000);
      timespec ts{0, static_cast<long>(ns)};
      if (ppoll(wake_.data(), wake_.size(), &ts, nullptr) > 0) wake_ups_++;
    }
  }
  end_ = rte_rdtsc();
  Flush();
}

nlohmann::json Trafgen::Result() const {
  using nlohmann::json;
  json chains = json::array();
  for (size_t c = 0; c < chains_.size(); c++) {
    const ChainRun& cr = chains_[c];
    double secs = cr.chain->Seconds();
    uint64_t loss = 0, flows = 0, flows_with_loss = 0, reordered = 0, duplicates = 0;
    for (size_t id = 0; id < flows_.size(); id++) {
      if (flows_[id].chain != c) continue;
      flows++;
      reordered += rx_[id].reordered;
      duplicates += rx_[id].duplicates;
      if (flows_[id].blocked) continue;
      uint64_t lost = tx_[id].sent - std::min(tx_[id].sent, rx_[id].received);
      loss += lost;
      flows_with_loss += lost > 0;
    }
    auto us = [](uint64_t ns) { return Round(static_cast<double>(ns) / 1000, 1); };
    json worst = json::array();
    for (const auto& [ns, id, tsc] : cr.setup_worst)
      worst.push_back({{"flow", id},
                       {"sent_s", Round(static_cast<double>(tsc > start_ ? tsc - start_ : 0) / static_cast<double>(hz_))},
                       {"ms", Round(static_cast<double>(ns) / 1e6)}});
    chains.push_back({{"name", cr.chain->name},
                      {"offered_pkts", cr.offered_pkts},
                      {"offered_mbps", Round(static_cast<double>(cr.offered_bytes) * 8 / 1e6 / secs)},
                      {"delivered_pkts", cr.delivered_pkts},
                      {"delivered_mbps", Round(static_cast<double>(cr.delivered_bytes) * 8 / 1e6 / secs)},
                      {"loss", loss},
                      {"reordered", reordered},
                      {"duplicates", duplicates},
                      {"p50_us", us(cr.latency.Quantile(0.5))},
                      {"p99_us", us(cr.latency.Quantile(0.99))},
                      {"p999_us", us(cr.latency.Quantile(0.999))},
                      {"max_us", us(cr.latency.Max())},
                      {"setup_p50_us", us(cr.setup.Quantile(0.5))},
                      {"setup_p99_us", us(cr.setup.Quantile(0.99))},
                      {"setup_worst", worst},
                      {"open_timeouts", cr.open_timeouts},
                      {"flows", flows},
                      {"flows_with_loss", flows_with_loss},
                      {"transform_errors", cr.transform_errors},
                      {"transform_error_examples", cr.examples},
                      {"blocked_sent", cr.blocked_sent},
                      {"blocked_delivered", cr.blocked_delivered},
                      {"nat_changes", cr.nat_changes},
                      {"payload_bytes_compared", cr.compared_bytes}});
  }
  json ports = json::object();
  for (auto [name, port] : {std::pair<const char*, uint16_t>{"tx", tx_port_}, {"rx", rx_port_}}) {
    rte_eth_stats s{};
    rte_eth_stats_get(port, &s);
    ports[name] = {{"iface", std::string(name) == "tx" ? flags_.tx_iface : flags_.rx_iface},
                   {"ipackets", s.ipackets},
                   {"opackets", s.opackets},
                   {"imissed", s.imissed},
                   {"oerrors", s.oerrors}};
  }
  double hz = static_cast<double>(hz_);
  return {{"duration_s", Round(static_cast<double>(end_ - start_) / hz)},
          {"traffic_s", Round(sc_.Seconds())},
          {"tsc_hz", hz_},
          {"rx_wake", !wake_.empty()},
          {"rx_wake_ups", wake_ups_},
          {"rx_poll_max_us", kRxPollMaxUs},
          {"rx_poll_gap_p99_us", Round(static_cast<double>(poll_gaps_.Quantile(0.99)) / 1000, 1)},
          {"rx_poll_gap_max_us", Round(static_cast<double>(poll_gaps_.Max()) / 1000, 1)},
          {"seed", flags_.seed},
          {"chains", chains},
          {"timeline", timeline_},
          {"cpu_timeline", cpu_timeline_},
          {"malformed_sent", malformed_sent_},
          {"malformed_delivered", malformed_delivered_},
          {"foreign_rx", foreign_rx_},
          {"tx_refused", tx_refused_},
          {"tx_port_rx", tx_port_rx_},
          {"port_stats", ports}};
}

}  // namespace keel::trafgen
