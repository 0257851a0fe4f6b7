/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The state API of Galleon §4.2: update(flow, val) / read(flow, val) on a
 * flow table local to the NF instance. The runtime mirrors the table into an
 * external store (Redis) from another thread; the packet path never waits
 * for the store.
 *
 * The table is bounded the way Linux conntrack is: at most |capacity| flows,
 * and a flow neither read nor updated for |idle_timeout_ms| is evicted (and
 * deleted from the store). A new flow that finds the table full of flows
 * that are not idle is refused, so a flood of spoofed 5-tuples can neither
 * grow memory nor push out the flows in use.
 */
#ifndef KEEL_STATE_H_
#define KEEL_STATE_H_

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "keel/monitor.h"
#include "keel/packet.h"

namespace keel {

/* Largest value one flow can hold, in bytes. */
constexpr size_t kMaxStateValue = 64;

/* One change to mirror into the store; |len| 0 means "deleted". */
struct StateRecord {
  FlowKey key;
  uint8_t len = 0;
  uint8_t data[kMaxStateValue];
};

/* The bounds of a flow table (keel-nf and keel-chain --flow-capacity,
 * --flow-idle-ms). */
struct FlowLimits {
  size_t capacity = 65536;
  uint64_t idle_timeout_ms = 300000; /* 0: flows never expire */
};

/* A flow table of one NF instance. Read/Update/Remove/Advance run on the
 * packet thread only; Exchange and the counters are for other threads. */
class FlowState {
 public:
  FlowState();

  /* Copies the value of |flow| into |val| (|len| bytes) and marks the flow
   * used now; false if unknown. An unknown flow is also asked of the store,
   * so a later read may find it. */
  bool Read(const FlowKey& flow, void* val, size_t len);
  /* Sets the value of |flow| to |len| bytes at |val|; false (and counted in
   * refusals) if |flow| is new and the table is full of flows not idle. */
  bool Update(const FlowKey& flow, const void* val, size_t len);
  /* Forgets |flow| here and in the store. */
  void Remove(const FlowKey& flow);
  /* Copies the entry of |flow| into |*out| without marking it used and
   * without asking the store; false if unknown here. */
  bool Peek(const FlowKey& flow, StateRecord* out) const;
  /* A flow moving away (issue 37): copies the entry of |flow| into |*out|
   * and forgets it here and in the store; false if unknown here. */
  bool Take(const FlowKey& flow, StateRecord* out);
  size_t size() const { return table_.size(); }

  /* Sets the bounds; before packets flow. */
  void set_limits(const FlowLimits& l) { limits_ = l; }
  const FlowLimits& limits() const { return limits_; }
  /* Moves the table's clock to |now_ms| (steady clock, ms; never back) and
   * evicts a few of the flows idle since. The runtime calls it before each
   * batch; the clock starts at the steady clock's time of construction. */
  void Advance(uint64_t now_ms);
  uint64_t now_ms() const { return now_ms_; }
  /* Flows evicted for being idle, and new flows refused because the table
   * was full, since the start. Any thread. */
  uint64_t evictions() const { return evictions_.Get(); }
  uint64_t refusals() const { return refusals_.Get(); }
  uint64_t flows() const { return flows_.Get(); }

  template <class T>
  bool Read(const FlowKey& flow, T* val) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= kMaxStateValue);
    return Read(flow, val, sizeof(T));
  }
  template <class T>
  bool Update(const FlowKey& flow, const T& val) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= kMaxStateValue);
    return Update(flow, &val, sizeof(T));
  }

  /* Packet thread, between batches: hands dirty entries and pull requests
   * to the mirror and takes in values the mirror pulled. Never blocks: if the
   * mirror thread holds the lock, it tries again next time, unless |wait|
   * (shutdown) asks it to wait for the lock. */
  void Sync(bool wait = false);

  /* Mirror thread: moves out what Sync handed over and hands in |pulled|
   * (values found in the store for requested flows). */
  void Exchange(std::vector<StateRecord>* dirty, std::vector<FlowKey>* pulls,
                std::vector<StateRecord>* pulled);

  /* Start-up, before packets flow: inserts a value loaded from the store;
   * false if the table is full. */
  bool Preload(const StateRecord& rec);

  /* True when this table is mirrored (the runtime enabled a store). */
  void set_mirrored(bool m) { mirrored_ = m; }

 private:
  struct Entry {
    uint8_t len = 0;
    bool dirty = false;
    uint8_t data[kMaxStateValue];
    uint64_t used_ms = 0;                 /* last Read or Update */
    std::list<FlowKey>::iterator lru;     /* its place in lru_ */
  };
  void MarkDirty(const FlowKey& flow, Entry* e);
  /* The entry of |flow|, made if new; nullptr if the table is full. */
  Entry* Insert(const FlowKey& flow);
  void Touch(Entry* e);
  /* Evicts up to |max| of the least recently used flows that are idle;
   * returns how many. */
  size_t EvictIdle(size_t max);

  std::unordered_map<FlowKey, Entry, FlowKeyHash> table_;
  std::list<FlowKey> lru_; /* most recently used first */
  FlowLimits limits_;
  uint64_t now_ms_;
  Counter evictions_;
  Counter refusals_;
  Counter flows_;
  bool mirrored_ = false;
  /* Packet-thread side of the hand-over. */
  std::vector<FlowKey> dirty_keys_;
  std::vector<FlowKey> removed_;
  std::vector<FlowKey> pulls_;
  std::unordered_set<FlowKey, FlowKeyHash> asked_;
  /* Shared with the mirror thread under mu_. */
  std::mutex mu_;
  std::vector<StateRecord> out_;
  std::vector<FlowKey> out_pulls_;
  std::vector<StateRecord> in_;
};

}  // namespace keel

#endif  // KEEL_STATE_H_
