/* SPDX-License-Identifier: Apache-2.0 */
/* What the sink counts per flow: unique packets, duplicates, packets that
 * arrived after a later one (reordered), and the NAT mapping it saw. */
#ifndef KEEL_TRAFGEN_FLOW_STATS_H_
#define KEEL_TRAFGEN_FLOW_STATS_H_

#include <cstdint>
#include <vector>

namespace keel::trafgen {

class FlowRx {
 public:
  /* Records packet |seq|; false if it was a duplicate. */
  bool Record(uint32_t seq);
  /* Records the source the packet arrived with; false if the flow was seen
   * with another source before (the NAT mapping changed). */
  bool RecordSource(uint32_t ip, uint16_t port);
  bool Seen(uint32_t seq) const { return seq / 64 < seen_.size() && (seen_[seq / 64] >> (seq % 64) & 1); }

  uint64_t received = 0;  /* unique packets */
  uint64_t duplicates = 0;
  uint64_t reordered = 0;
  uint64_t source_changes = 0;

 private:
  std::vector<uint64_t> seen_;
  uint32_t max_seq_ = 0;
  bool any_ = false, source_known_ = false;
  uint32_t src_ip_ = 0;
  uint16_t src_port_ = 0;
};

}  // namespace keel::trafgen

#endif  // KEEL_TRAFGEN_FLOW_STATS_H_
