/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Monitor: counts packets and bytes (frame length) per IPv4 5-tuple and in
 * total, and never drops. The first kMaxFlows flows get a counter; packets
 * of later flows are counted in the totals and in
 * "flows_dropped_from_table" (per packet, as flows that did not fit are not
 * remembered). Non-IPv4 packets count in the totals only.
 *
 * The counters change on every packet, so they live in a flow table of the
 * NF's own rather than in the state API. It is an open-addressing table at
 * most half full with one writer, the packet thread; Stats() may run on any
 * thread: counters are relaxed atomics and a flow is published, in
 * first-seen order, only after its key is written.
 *
 * A flow moving to another instance (issue 37) takes its counters (both
 * directions') along: they stop being reported here and the other instance
 * goes on from them. Its slot stays taken, marked moved, and is used again
 * if the flow comes back.
 */
#include <arpa/inet.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>

#include "keel/nf.h"

namespace keel {
namespace {

constexpr uint32_t kMaxFlows = 65536;
constexpr uint32_t kSlots = 2 * kMaxFlows;

struct FlowCounters {
  FlowKey key;
  std::atomic<uint64_t> packets{0}; /* 0: the slot is free */
  std::atomic<uint64_t> bytes{0};
  std::atomic<bool> moved{false};   /* the flow moved away: not reported */
};

/* A flow's counters as a moving flow hands them over. */
struct MovedCounters {
  uint64_t packets;
  uint64_t bytes;
};

void Add(std::atomic<uint64_t>* c, uint64_t n) {
  c->store(c->load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

std::string Dotted(uint32_t ip) {
  in_addr a;
  a.s_addr = htonl(ip);
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &a, buf, sizeof(buf));
  return buf;
}

class Monitor : public NF {
 public:
  void Init(const Config& config) override {
    config.CheckObject({});
    slots_ = std::make_unique<FlowCounters[]>(kSlots);
    order_ = std::make_unique<uint32_t[]>(kMaxFlows);
  }

  void ProcessBatch(PacketBatch* batch) override {
    FlowKey keys[kMaxBurst];
    uint32_t slot[kMaxBurst];
    bool ipv4[kMaxBurst];
    uint64_t bytes = 0;
    for (int i = 0; i < batch->cnt(); i++) {
      Packet* p = batch->pkt(i);
      bytes += p->len();
      ipv4[i] = p->GetFlowKey(&keys[i]);
      if (!ipv4[i]) continue;
      slot[i] = static_cast<uint32_t>(FlowKeyHash()(keys[i])) & (kSlots - 1);
      __builtin_prefetch(&slots_[slot[i]]);
    }
    for (int i = 0; i < batch->cnt(); i++)
      if (ipv4[i]) Count(keys[i], slot[i], batch->pkt(i)->len());
    Add(&packets_, static_cast<uint64_t>(batch->cnt()));
    Add(&bytes_, bytes);
  }

  /* {"flows":[{"src_ip":..,"dst_ip":..,"src_port":..,"dst_port":..,
   * "proto":..,"packets":..,"bytes":..},...],"packets":..,"bytes":..,
   * "flows_dropped_from_table":..}, flows in the order first seen. */
  Json Stats() const override {
    uint32_t n = nflows_.load(std::memory_order_acquire);
    Json flows = Json::array();
    for (uint32_t i = 0; i < n; i++) {
      const FlowCounters& f = slots_[order_[i]];
      if (f.moved.load(std::memory_order_relaxed)) continue;
      flows.push_back({{"src_ip", Dotted(f.key.src_ip)},
                       {"dst_ip", Dotted(f.key.dst_ip)},
                       {"src_port", f.key.src_port},
                       {"dst_port", f.key.dst_port},
                       {"proto", f.key.proto},
                       {"packets", f.packets.load(std::memory_order_relaxed)},
                       {"bytes", f.bytes.load(std::memory_order_relaxed)}});
    }
    return {{"flows", std::move(flows)},
            {"packets", packets_.load(std::memory_order_relaxed)},
            {"bytes", bytes_.load(std::memory_order_relaxed)},
            {"flows_dropped_from_table", untracked_.load(std::memory_order_relaxed)}};
  }

  void ExportFlow(const FlowKey& flow, FlowExport* out) override {
    for (const FlowKey& k : {flow, flow.Reverse()}) {
      uint32_t s = Find(k);
      if (s == kNone || slots_[s].moved.load(std::memory_order_relaxed)) continue;
      FlowCounters& f = slots_[s];
      MovedCounters c{f.packets.load(std::memory_order_relaxed), f.bytes.load(std::memory_order_relaxed)};
      f.moved.store(true, std::memory_order_relaxed);
      StateRecord& r = out->records.emplace_back();
      r.key = k;
      r.len = sizeof c;
      std::memcpy(r.data, &c, sizeof c);
      if (flow == flow.Reverse()) break;
    }
  }

  /* Adds the counters to a flow already counted here. */
  bool ImportFlow(const std::vector<StateRecord>& records, std::string* err) override {
    uint32_t fresh = 0;
    for (const StateRecord& r : records) {
      MovedCounters c;
      if (r.len != sizeof c) {
        *err = "monitor: a record of " + std::to_string(r.len) + " bytes, expected " + std::to_string(sizeof c);
        return false;
      }
      std::memcpy(&c, r.data, sizeof c);
      if (c.packets == 0) {
        *err = "monitor: a flow of 0 packets";
        return false;
      }
      if (Find(r.key) == kNone) fresh++;
    }
    if (fresh > kMaxFlows - nflows_.load(std::memory_order_relaxed)) {
      *err = "monitor: flow table full (" + std::to_string(kMaxFlows) + " flows)";
      return false;
    }
    for (const StateRecord& r : records) {
      MovedCounters c;
      std::memcpy(&c, r.data, sizeof c);
      uint32_t s = Find(r.key);
      if (s == kNone) {
        Insert(r.key, c.packets, c.bytes);
        continue;
      }
      FlowCounters& f = slots_[s];
      if (f.moved.load(std::memory_order_relaxed)) {
        f.packets.store(c.packets, std::memory_order_relaxed);
        f.bytes.store(c.bytes, std::memory_order_relaxed);
        f.moved.store(false, std::memory_order_relaxed);
      } else {
        Add(&f.packets, c.packets);
        Add(&f.bytes, c.bytes);
      }
    }
    return true;
  }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;

  /* The slot of |key|, or kNone. */
  uint32_t Find(const FlowKey& key) const {
    uint32_t s = static_cast<uint32_t>(FlowKeyHash()(key)) & (kSlots - 1);
    for (; slots_[s].packets.load(std::memory_order_relaxed) != 0; s = (s + 1) & (kSlots - 1))
      if (slots_[s].key == key) return s;
    return kNone;
  }

  void Count(const FlowKey& key, uint32_t s, uint16_t len) {
    while (slots_[s].packets.load(std::memory_order_relaxed) != 0) {
      FlowCounters& f = slots_[s];
      if (f.key == key) {
        if (f.moved.load(std::memory_order_relaxed)) { /* back after it moved away: counts anew */
          f.packets.store(1, std::memory_order_relaxed);
          f.bytes.store(len, std::memory_order_relaxed);
          f.moved.store(false, std::memory_order_relaxed);
          return;
        }
        Add(&f.packets, 1);
        Add(&f.bytes, len);
        return;
      }
      s = (s + 1) & (kSlots - 1);
    }
    if (nflows_.load(std::memory_order_relaxed) == kMaxFlows) {
      Add(&untracked_, 1);
      return;
    }
    Place(key, s, 1, len);
  }

  /* Counts a new flow from |packets| and |bytes|; the table has room. */
  void Insert(const FlowKey& key, uint64_t packets, uint64_t bytes) {
    uint32_t s = static_cast<uint32_t>(FlowKeyHash()(key)) & (kSlots - 1);
    while (slots_[s].packets.load(std::memory_order_relaxed) != 0) s = (s + 1) & (kSlots - 1);
    Place(key, s, packets, bytes);
  }

  /* Fills the free slot |s| and publishes it. */
  void Place(const FlowKey& key, uint32_t s, uint64_t packets, uint64_t bytes) {
    uint32_t n = nflows_.load(std::memory_order_relaxed);
    FlowCounters& f = slots_[s];
    f.key = key;
    f.packets.store(packets, std::memory_order_relaxed);
    f.bytes.store(bytes, std::memory_order_relaxed);
    order_[n] = s;
    nflows_.store(n + 1, std::memory_order_release);
  }

  std::unique_ptr<FlowCounters[]> slots_;
  std::unique_ptr<uint32_t[]> order_; /* slots in the order their flows were first seen */
  std::atomic<uint32_t> nflows_{0};
  std::atomic<uint64_t> packets_{0};
  std::atomic<uint64_t> bytes_{0};
  std::atomic<uint64_t> untracked_{0};
};

}  // namespace

KEEL_NF(Monitor, "monitor", "counts packets and bytes per IPv4 flow and in total; never drops");
KEEL_NF_ARGS(Monitor, "[]");
KEEL_NF_STATE(Monitor, R"json({"scope": "per-flow",
  "doc": "packet and byte counters per 5-tuple, in a table of its own; the totals stay with the instance"})json");

}  // namespace keel
