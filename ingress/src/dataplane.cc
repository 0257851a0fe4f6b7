/* SPDX-License-Identifier: Apache-2.0 */
#include "dataplane.h"

#include <rte_ethdev.h>
#include <rte_ether.h>
#include <rte_mbuf.h>
#include <linux/if_packet.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <time.h>

#include <cstring>

#include "keel/inband.h"

namespace keel::ingress {

namespace {

constexpr uint16_t kBurst = 32;
constexpr uint64_t kExpireEveryNs = 10'000'000;
/* How often the port's sockets are asked what their full ring dropped (one getsockopt
 * each). */
constexpr uint64_t kRingStatsEveryNs = 100'000'000;
/* How long a full TX queue may hold the loop up before its packets are dropped. */
constexpr uint64_t kTxPatienceNs = 200'000;
/* Naps while the table has flows (in setup, or forwarding until their rule
 * takes over): they start at the first and double up to the second. A
 * decision ends a nap at once (the control thread writes the lcore's
 * eventfd), so these bound only how long a packet may wait in the port's
 * ring: 0.2 ms against a flow setup of milliseconds, and well inside the
 * gap between a flow's packets that a packet forwarded by the ingress must
 * not be overtaken by. Each nap is one ppoll, so they also bound the CPU
 * the lcore burns while flows are set up: at 50 us it was 20,000 wake-ups
 * and 18-20 % of the shared core at any rate of new flows; at 25-200 us
 * still 13-17 %. */
constexpr uint32_t kHoldingSleepMinUs = 25;
constexpr uint32_t kHoldingSleepMaxUs = 200;
/* Where the port's sockets end a nap as a frame arrives (keel/port_wake.h), a
 * nap is bounded only by the loop's timers: markers due
 * (DataPlaneConfig::marker_quiet_us, 10 ms), hold and move timeouts
 * (milliseconds). While any of those is pending the nap stops at 1 ms, a
 * tenth of the shortest; otherwise, flows in the table or not, it is the
 * idle nap (--idle-sleep-max-us). */
constexpr uint32_t kWokenSleepMaxUs = 1000;

/* Locally administered addresses: the frames are for the instance's positions, which eat them. */
constexpr uint8_t kInbandDst[6] = {0x02, 'k', 'e', 'e', 'l', 0x01};
constexpr uint8_t kInbandSrc[6] = {0x02, 'k', 'e', 'e', 'l', 0x00};

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

}  // namespace

DataPlane::DataPlane(const DataPlaneConfig& cfg, Channel* channel, IngressCounters* counters)
    : cfg_(cfg), channel_(channel), counters_(counters), table_(cfg.table), mover_(cfg.mover) {
  tx_.reserve(kBurst + cfg.table.hold_per_flow);
  wake_.push_back(pollfd{channel_->lcore_wake_fd(), POLLIN, 0});
  for (int fd : cfg.wake_fds) wake_.push_back(pollfd{fd, POLLIN, 0});
}

DataPlane::~DataPlane() {
  delete filters_;
  for (const Msg& m : backlog_) {
    if (m.kind == Msg::Kind::kFilterSetDone) delete m.filters;
  }
}

void DataPlane::Run(const std::atomic<bool>& stop) {
  /* Short idle sleeps must stay short: the default 50 us timer slack would
   * stretch every 1 us nap to 50 us. */
  prctl(PR_SET_TIMERSLACK, 1000UL);
  rte_mbuf* burst[kBurst];
  while (!stop.load(std::memory_order_relaxed)) {
    uint64_t now = NowNs();
    bool busy = DrainControl(now);
    uint16_t n = rte_eth_rx_burst(cfg_.port, 0, burst, kBurst);
    if (n < kBurst) seen_until_ = now;
    if (n) {
      counters_->packets_in.Add(n);
      for (uint16_t i = 0; i < n; i++) HandlePacket(burst[i], now);
      busy = true;
    }
    if (mover_.active()) mover_.Poll(now, seen_until_, &moves_);
    if (!moves_.empty()) ApplyMoves(now);
    if (!markers_.empty()) SendMarkers(seen_until_);
    FlushTx();
    if (now >= next_ring_stats_) {
      CountRingDrops();
      next_ring_stats_ = now + kRingStatsEveryNs;
    }
    if (now >= next_expire_) {
      scratch_.clear();
      table_.Expire(now, &scratch_);
      DropAll(&scratch_, DropReason::kTimeout);
      next_expire_ = now + kExpireEveryNs;
    }
    FlushBacklog();
    if (woke_control_) channel_->WakeControl();
    woke_control_ = false;
    PublishGauges();
    if (busy) {
      idle_us_ = 0;
      port_woke_ = false;
    } else {
      IdleSleep();
    }
  }
  FlushTx();
}

bool DataPlane::DrainControl(uint64_t now) {
  Msg m;
  bool any = false;
  while (channel_->FromControl(&m)) {
    any = true;
    if (m.kind == Msg::Kind::kFilterSet) {
      SwapFilters(m.filters);
    } else if (m.kind == Msg::Kind::kDecision) {
      ApplyDecision(m, now);
    } else if (m.kind == Msg::Kind::kInstalled) {
      if (table_.Installed(m.key, m.req_id, now)) markers_.push_back({m.key, m.req_id});
    } else {
      MoveMsg(m, now);
    }
  }
  if (!moves_.empty()) ApplyMoves(now);
  return any;
}

void DataPlane::ApplyDecision(const Msg& m, uint64_t now) {
  scratch_.clear();
  uint64_t since = 0;
  switch (table_.Resolve(m.key, m.req_id, m.failure, m.vlan, now, &scratch_, &since)) {
    case Resolution::kReleased: {
      counters_->flows_installed.Add(1);
      counters_->hold_latency.Observe(now - since);
      counters_->packets_reinjected.Add(scratch_.size());
      for (Packet p : scratch_) SendTagged(p, m.vlan);
      /* The held packets must be out before the flow's rule lets its later
       * packets bypass the ingress: that is what keeps them in order. */
      FlushTx();
      Msg done{Msg::Kind::kReleased};
      done.key = m.key;
      done.req_id = m.req_id;
      done.since_ns = since;
      SendControl(done);
      break;
    }
    case Resolution::kFailed:
      DropAll(&scratch_, m.failure);
      break;
    case Resolution::kStale:
      /* The lcore gave up first; an assignment made meanwhile must be released. */
      if (m.failure == DropReason::kCount) {
        Msg gone{Msg::Kind::kAbandoned};
        gone.key = m.key;
        gone.req_id = m.req_id;
        SendControl(gone);
      }
      break;
  }
}

void DataPlane::MoveMsg(const Msg& m, uint64_t now) {
  switch (m.kind) {
    case Msg::Kind::kMoveBegin:
      /* A flow whose rule or marker is still on its way would have the rule put back, or
       * its direct packets held at S, behind the export. */
      if (table_.Settling(m.key)) return FlowMover::Reject(m.move, m.key, MoveFailure::kBusy, &moves_);
      return mover_.Begin(m.move, m.key, m.vlan, m.to_vlan, now, &moves_);
    case Msg::Kind::kMoveRuleRemoved:
      return mover_.OnRuleRemoved(m.key, m.ok, now, &moves_);
    case Msg::Kind::kMoveInstalled:
      return mover_.OnInstalled(m.key, m.ok, now, &moves_);
    default:
      return;
  }
}

void DataPlane::ApplyMoves(uint64_t now) {
  for (MoveAction& a : moves_) {
    Msg msg{Msg::Kind::kMoveResult};
    msg.key = a.key;
    msg.move = a.move;
    switch (a.kind) {
      case MoveAction::Kind::kRemoveRule:
        msg.kind = Msg::Kind::kMoveRemoveRule;
        break;
      case MoveAction::Kind::kSendFrame:
        SendStateFrame(a);
        continue;
      case MoveAction::Kind::kInstall:
        msg.kind = Msg::Kind::kMoveInstall;
        msg.to_destination = true;
        break;
      case MoveAction::Kind::kRelease: {
        /* As a new flow's: to D its rule is in and the marker follows once quiet; back to S
         * the packets go first and the rule after them. */
        const uint64_t req = table_.Adopt(a.key, a.vlan, a.to_destination, now);
        counters_->move_packets_held.Add(a.packets.size());
        for (Packet p : a.packets) SendTagged(p, a.vlan);
        FlushTx();
        if (a.to_destination) {
          markers_.push_back({a.key, req});
          continue;
        }
        msg.kind = Msg::Kind::kMoveInstall;
        msg.req_id = req;
        break;
      }
      case MoveAction::Kind::kResult:
        counters_->moves[static_cast<size_t>(a.result.failure)].Add(1);
        if (a.result.failure == MoveFailure::kNone) counters_->move_pause.Observe(a.result.pause_ns);
        msg.move_failure = a.result.failure;
        msg.since_ns = a.result.pause_ns;
        break;
    }
    SendControl(msg);
  }
  moves_.clear();
  counters_->move_restores_failed.Set(mover_.restores_failed());
}

void DataPlane::SendStateFrame(const MoveAction& a) {
  const size_t len = std::max(inband::kMinFrame, inband::kMoveBodyOffset + a.body.size());
  SendInband(
      len, a.vlan,
      [&](uint8_t* frame) {
        return inband::WriteMoveFrame(frame, len, kInbandDst, kInbandSrc, a.type, a.body.data(), a.body.size()) != 0;
      },
      &counters_->move_frames_sent, &counters_->move_frames_unsent);
}

bool DataPlane::HandleInband(rte_mbuf* m, uint64_t now) {
  const uint8_t* frame = rte_pktmbuf_mtod(m, const uint8_t*);
  inband::Type type;
  size_t header = 0, body_len = 0;
  const inband::Malformed bad = inband::ParseMoveFrame(frame, rte_pktmbuf_data_len(m), &type, &header, &body_len);
  if (bad == inband::Malformed::kNotInband) return false;
  /* Back from an instance, the instance's VLAN above the mark says which. */
  const uint16_t vlan = header > inband::kPayloadOffset ? inband::Get16(frame + inband::kMacs + 2) & 0x0FFF : 0;
  const FrameVerdict v = bad == inband::Malformed::kNone
                             ? mover_.OnFrame(frame + header + inband::kHeaderLen, body_len, vlan, now, &moves_)
                             : FrameVerdict::kMalformed;
  (v == FrameVerdict::kTaken ? counters_->move_frames_back : counters_->move_frames_bad).Add(1);
  rte_pktmbuf_free(m);
  if (!moves_.empty()) ApplyMoves(now);
  return true;
}

void DataPlane::SwapFilters(FilterSet* next) {
  if (filters_) {
    Msg done{Msg::Kind::kFilterSetDone};
    done.filters = filters_;
    SendControl(done);
  }
  filters_ = next;
}

void DataPlane::SendControl(const Msg& m) {
  /* Behind a backlog, a message waits its turn so the control thread sees them in order. */
  if (!backlog_.empty() || !channel_->ToControl(m)) {
    backlog_.push_back(m);
    return;
  }
  woke_control_ = true;
}

void DataPlane::FlushBacklog() {
  size_t sent = 0;
  while (sent < backlog_.size() && channel_->ToControl(backlog_[sent])) sent++;
  backlog_.erase(backlog_.begin(), backlog_.begin() + static_cast<long>(sent));
  if (sent) woke_control_ = true;
}

void DataPlane::HandlePacket(rte_mbuf* m, uint64_t now) {
  const uint8_t* frame = rte_pktmbuf_mtod(m, const uint8_t*);
  FlowKey key;
  ParseResult pr = ParseFrame(frame, rte_pktmbuf_data_len(m), &key);
  if (pr != ParseResult::kOk) {
    /* Not IPv4: a move's frame coming back from an instance, or nothing for us. */
    if (HandleInband(m, now)) return;
    return Drop(m, DropReasonOf(pr));
  }
  if (mover_.active()) {
    switch (mover_.OnPacket(key, m, now)) {
      case HoldVerdict::kHeld:
        return;
      case HoldVerdict::kFull:
        return Drop(m, DropReason::kBufferFull);
      case HoldVerdict::kNotMoving:
        break;
    }
  }

  PacketVerdict v = table_.OnPacket(key, m, now);
  switch (v.verdict) {
    case Verdict::kHeld:
      return;
    case Verdict::kForward:
      counters_->packets_forwarded.Add(1);
      if (v.after_marker) counters_->packets_after_marker.Add(1);
      return SendTagged(m, v.vlan);
    case Verdict::kDrop:
      return Drop(m, v.reason);
    case Verdict::kUnknown:
      break;
  }
  /* Fail closed until the gateway's chains arrive (after a start or restart): a chain's flow
   * sent on the normal path would reach its destination untransformed (unencrypted, past
   * its ACL). */
  if (!filters_) return Drop(m, DropReason::kNotSynced);
  int chain = filters_->Match(frame, rte_pktmbuf_data_len(m), rte_pktmbuf_pkt_len(m));
  if (chain >= 0) return StartFlow(key, chain, m, now);
  if (!cfg_.no_chain_forward) return Drop(m, DropReason::kNoChain);
  counters_->packets_normal_path.Add(1);
  SendTagged(m, kNormalPathVlan);
}

void DataPlane::SendTagged(rte_mbuf* m, uint16_t vlan) {
  if (vlan == 0) return Send(m);
  /* The mark is for an instance's position 0: the normal path and a switch-only
   * chain's packets (its reinject VLAN) meet only the ToR's rules. */
  const bool mark = vlan != kNormalPathVlan && !(vlan & kChainReinject);
  if (mark && !InsertMark(m)) return Drop(m, DropReason::kNoHeadroom);
  m->vlan_tci = vlan & kVlanIdMask;
  if (rte_vlan_insert(&m) != 0) return Drop(m, DropReason::kNoHeadroom);
  Send(m);
}

bool DataPlane::InsertMark(rte_mbuf* m) {
  /* To an instance: the mark says "came via the ingress" to its position 0;
   * in front of the packet's EtherType, under its own tags (inband.h). */
  const size_t at = inband::MarkPlace(rte_pktmbuf_mtod(m, const uint8_t*), rte_pktmbuf_data_len(m));
  if (!RTE_MBUF_DIRECT(m) || rte_mbuf_refcnt_read(m) != 1) return false;
  auto* d = reinterpret_cast<uint8_t*>(rte_pktmbuf_prepend(m, inband::kTagLen));
  if (!d) return false;
  std::memmove(d, d + inband::kTagLen, at);
  inband::Put16(d + at, inband::kTpidVlan);
  inband::Put16(d + at + 2, inband::kMarkVid);
  return true;
}

void DataPlane::SendMarkers(uint64_t seen_until) {
  const uint64_t quiet = uint64_t{cfg_.marker_quiet_us} * 1000;
  size_t kept = 0;
  for (const PendingMarker& p : markers_) {
    uint16_t vlan = 0;
    switch (table_.MarkerState(p.key, p.req, seen_until, quiet, &vlan)) {
      case MarkerDue::kWait:
        markers_[kept++] = p;
        break;
      case MarkerDue::kDue:
        SendMarker(p.key, p.req, vlan);
        break;
      case MarkerDue::kGone:
        break;
    }
  }
  markers_.resize(kept);
}

void DataPlane::SendMarker(const FlowKey& key, uint64_t req, uint16_t vlan) {
  SendInband(
      inband::kMarkerFrameLen, vlan,
      [&](uint8_t* frame) {
        inband::WriteMarker(frame, kInbandDst, kInbandSrc, key, req);
        return true;
      },
      &counters_->markers_sent, &counters_->markers_unsent);
}

template <class Write>
void DataPlane::SendInband(size_t len, uint16_t vlan, Write write, Counter* sent, Counter* unsent) {
  rte_mbuf* m = cfg_.pool ? rte_pktmbuf_alloc(cfg_.pool) : nullptr;
  uint8_t* frame = m ? reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, static_cast<uint16_t>(len))) : nullptr;
  if (frame && write(frame)) {
    m->vlan_tci = vlan; /* the mark is in the frame already: only the instance VLAN goes on */
    if (rte_vlan_insert(&m) == 0) {
      sent->Add(1);
      return Send(m);
    }
  }
  if (m) rte_pktmbuf_free(m);
  unsent->Add(1);
}

void DataPlane::StartFlow(const FlowKey& key, int chain, rte_mbuf* m, uint64_t now) {
  PacketVerdict first;
  uint64_t req = table_.Start(key, m, now, &first);
  if (req == 0) return Drop(m, DropReason::kFlowTableFull);
  counters_->new_flows.Add(1);
  if (first.verdict == Verdict::kDrop) Drop(m, first.reason);
  Msg msg{Msg::Kind::kNewFlow};
  msg.key = key;
  msg.req_id = req;
  msg.SetChain(filters_->Name(chain));
  if (channel_->ToControl(msg)) {
    woke_control_ = true;
    return;
  }
  scratch_.clear();
  uint64_t since;
  table_.Resolve(key, req, DropReason::kControlBusy, 0, now, &scratch_, &since);
  DropAll(&scratch_, DropReason::kControlBusy);
}

void DataPlane::FlushTx() {
  size_t sent = 0;
  uint64_t give_up = 0;
  while (sent < tx_.size()) {
    uint16_t n = rte_eth_tx_burst(cfg_.port, 0, tx_.data() + sent,
                                  static_cast<uint16_t>(std::min<size_t>(tx_.size() - sent, UINT16_MAX)));
    sent += n;
    if (n) continue;
    uint64_t now = NowNs();
    if (give_up == 0) give_up = now + kTxPatienceNs;
    if (now >= give_up) break;
  }
  for (size_t i = sent; i < tx_.size(); i++) Drop(tx_[i], DropReason::kTxFull);
  tx_.clear();
}

void DataPlane::Drop(rte_mbuf* m, DropReason why) {
  counters_->drops[static_cast<size_t>(why)].Add(1);
  rte_pktmbuf_free(m);
}

void DataPlane::DropAll(std::vector<Packet>* pkts, DropReason why) {
  for (Packet p : *pkts) Drop(p, why);
  pkts->clear();
}

void DataPlane::CountRingDrops() {
  for (size_t i = 1; i < wake_.size(); i++) {
    /* PACKET_STATISTICS returns the counts since the last read and clears them (no one else
     * reads them: DPDK's af_packet driver does not). tp_drops is the second field of both
     * tpacket_stats and tpacket_stats_v3. Not an AF_PACKET socket (net_af_xdp): it fails. */
    tpacket_stats_v3 st{};
    socklen_t len = sizeof st;
    if (getsockopt(wake_[i].fd, SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0 && st.tp_drops)
      counters_->drops[static_cast<size_t>(DropReason::kPortRingFull)].Add(st.tp_drops);
  }
}

void DataPlane::PublishGauges() {
  counters_->buffered.Set(table_.held() + mover_.held());
  counters_->buffered_max.Set(table_.held_max());
  counters_->flows_active.Set(table_.flows());
}

void DataPlane::IdleSleep() {
  /* Nothing came in: sleep until a decision (the control thread's eventfd)
   * or, where the port's sockets are known, a frame arrives; the next packet
   * or message resets the nap. Without the port's sockets the nap doubles
   * up to the cap, so an idle ingress costs next to no CPU, and while the
   * table has flows the naps stay short: a packet of a flow whose rule is on
   * its way could otherwise be overtaken by the next one, which takes the
   * rule. With them a frame ends the nap, which starts at its cap. */
  const bool timers = !markers_.empty() || table_.held() || mover_.active();
  const bool holding = timers || table_.flows();
  /* A port socket that woke the last nap although the burst after it was
   * empty (a frame the PMD could not take: no mbuf) would wake every nap at
   * once: nap without the port's sockets until something comes in. */
  const bool woken = wake_.size() > 1 && !port_woke_;
  uint32_t cap = cfg_.idle_sleep_max_us, first = 1;
  if (woken) {
    if (timers) cap = std::min(kWokenSleepMaxUs, cap);
    first = cap;
  } else if (holding) {
    cap = std::min(kHoldingSleepMaxUs, cap);
    first = std::min(kHoldingSleepMinUs, cap);
  }
  idle_us_ = idle_us_ ? std::min(idle_us_ * 2, cap) : first;
  timespec d{0, static_cast<long>(idle_us_) * 1000};
  const nfds_t n = woken ? wake_.size() : 1;
  for (pollfd& p : wake_) p.revents = 0;
  port_woke_ = false;
  if (ppoll(wake_.data(), n, &d, nullptr) > 0) {
    if (wake_[0].revents) channel_->DrainLcoreWake();
    for (nfds_t i = 1; i < n; i++) port_woke_ |= wake_[i].revents != 0;
    idle_us_ = 0;
  }
}

}  // namespace keel::ingress
