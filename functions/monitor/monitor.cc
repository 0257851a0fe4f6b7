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
 */
#include <arpa/inet.h>

#include <atomic>
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

 private:
  void Count(const FlowKey& key, uint32_t s, uint16_t len) {
    while (slots_[s].packets.load(std::memory_order_relaxed) != 0) {
      FlowCounters& f = slots_[s];
      if (f.key == key) {
        Add(&f.packets, 1);
        Add(&f.bytes, len);
        return;
      }
      s = (s + 1) & (kSlots - 1);
    }
    uint32_t n = nflows_.load(std::memory_order_relaxed);
    if (n == kMaxFlows) {
      Add(&untracked_, 1);
      return;
    }
    FlowCounters& f = slots_[s];
    f.key = key;
    f.packets.store(1, std::memory_order_relaxed);
    f.bytes.store(len, std::memory_order_relaxed);
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

}  // namespace keel
