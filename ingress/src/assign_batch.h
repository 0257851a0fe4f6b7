/* SPDX-License-Identifier: Apache-2.0 */
/*
 * New flows on their way to the gateway's AssignFlows, gathered into batches.
 *
 * A flow joins the open batch; the batch is due once it holds |max_flows|
 * flows or its first flow has waited |window_ns|, so a burst of new flows
 * costs one call and a lone flow waits at most the window. A flow that
 * comes a window or more after the last batch went (new flows are rare)
 * goes at once: batching costs latency only where it saves calls. So does a
 * flow while new flows come slower than |busy_rate| a second (counted over
 * the last ~100 ms): a few flows that come together now and then (three
 * chains' flows opening in the same millisecond) would pay the window for
 * no call saved worth having. A flow whose
 * call failed for a moment (the gateway unavailable, the deadline passed)
 * is given back with Retry and goes out again at once, in the next batch,
 * until it has had |max_attempts| calls; AssignFlows is idempotent, so a
 * flow sent twice is assigned once. A new flow that waited longer than
 * |patience_ns| for its first call (the gateway past its capacity) is
 * handed back as late.
 *
 * Single-threaded (the caller locks) and free of gRPC: time is passed in.
 */
#ifndef KEEL_INGRESS_ASSIGN_BATCH_H_
#define KEEL_INGRESS_ASSIGN_BATCH_H_

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "parser.h"

namespace keel::ingress {

/* One new flow waiting for, or carried by, an AssignFlows call. */
struct PendingFlow {
  FlowKey key;
  uint64_t req_id = 0;
  std::string chain;
  int attempt = 0;    /* calls made for it so far */
  uint64_t since = 0; /* when it joined (its first time), for patience */
};

struct AssignBatchConfig {
  size_t max_flows = 64;
  uint64_t window_ns = 1'000'000;
  int max_attempts = 3;
  uint64_t patience_ns = 500'000'000;
  double busy_rate = 0; /* new flows a second from which a flow waits the window; 0: always */
};

class AssignBatcher {
 public:
  explicit AssignBatcher(const AssignBatchConfig& cfg) : cfg_(cfg) {}

  /* A new flow at |now|. */
  void Add(PendingFlow f, uint64_t now);
  /* A flow whose call failed for a moment, at |now|: true if it goes out
   * again (in the next batch, due at once), false if it has had its calls. */
  bool Retry(PendingFlow f, uint64_t now);

  /* True if a batch is due at |now|. */
  bool Due(uint64_t now) const;
  /* When the next batch is due; 0 when no flow waits. */
  uint64_t Deadline() const;
  /* Takes the next batch (oldest first, at most max_flows and |most|, each
   * flow's attempt counted), and appends flows that outwaited their
   * patience to |*late| instead. */
  std::vector<PendingFlow> Take(uint64_t now, size_t most, std::vector<PendingFlow>* late);

  size_t waiting() const { return waiting_.size(); }

 private:
  AssignBatchConfig cfg_;
  std::deque<PendingFlow> waiting_;
  uint64_t due_ = 0;       /* when the oldest waiting flow's batch is due */
  uint64_t last_take_ = 0; /* when the last batch was taken */
  bool taken_ = false;     /* a batch was taken before */
  /* Recent new flows: a count that decays by e every kRateTauNs (at a steady
   * rate r it stands near r x kRateTauNs). */
  static constexpr double kRateTauNs = 100e6;
  double recent_ = 0;
  uint64_t recent_at_ = 0;
};

}  // namespace keel::ingress

#endif  // KEEL_INGRESS_ASSIGN_BATCH_H_
