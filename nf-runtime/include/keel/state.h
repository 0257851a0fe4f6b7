/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The state API of Galleon §4.2: update(flow, val) / read(flow, val) on a
 * flow table local to the NF instance. The runtime mirrors the table into an
 * external store (Redis) from another thread; the packet path never waits
 * for the store.
 */
#ifndef KEEL_STATE_H_
#define KEEL_STATE_H_

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <vector>

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

/* A flow table of one NF instance. Read/Update/Remove run on the packet
 * thread only; Exchange is the one call another thread makes. */
class FlowState {
 public:
  /* Copies the value of |flow| into |val| (|len| bytes); false if unknown.
   * An unknown flow is also asked of the store, so a later read may find it. */
  bool Read(const FlowKey& flow, void* val, size_t len);
  /* Sets the value of |flow| to |len| bytes at |val|. */
  void Update(const FlowKey& flow, const void* val, size_t len);
  /* Forgets |flow| here and in the store. */
  void Remove(const FlowKey& flow);
  size_t size() const { return table_.size(); }

  template <class T>
  bool Read(const FlowKey& flow, T* val) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= kMaxStateValue);
    return Read(flow, val, sizeof(T));
  }
  template <class T>
  void Update(const FlowKey& flow, const T& val) {
    static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= kMaxStateValue);
    Update(flow, &val, sizeof(T));
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

  /* Start-up, before packets flow: inserts a value loaded from the store. */
  void Preload(const StateRecord& rec);

  /* True when this table is mirrored (the runtime enabled a store). */
  void set_mirrored(bool m) { mirrored_ = m; }

 private:
  struct Entry {
    uint8_t len;
    bool dirty;
    uint8_t data[kMaxStateValue];
  };
  void MarkDirty(const FlowKey& flow, Entry* e);

  std::unordered_map<FlowKey, Entry, FlowKeyHash> table_;
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
