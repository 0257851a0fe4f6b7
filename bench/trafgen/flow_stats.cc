/* SPDX-License-Identifier: Apache-2.0 */
#include "flow_stats.h"

namespace keel::trafgen {

bool FlowRx::Record(uint32_t seq) {
  if (seq / 64 >= seen_.size()) seen_.resize(seq / 64 + 1 + seen_.size() / 2);
  uint64_t bit = uint64_t{1} << (seq % 64);
  if (seen_[seq / 64] & bit) {
    duplicates++;
    return false;
  }
  seen_[seq / 64] |= bit;
  received++;
  if (any_ && seq < max_seq_) reordered++;
  if (!any_ || seq > max_seq_) max_seq_ = seq;
  any_ = true;
  return true;
}

bool FlowRx::RecordSource(uint32_t ip, uint16_t port) {
  if (!source_known_) {
    source_known_ = true;
    src_ip_ = ip;
    src_port_ = port;
    return true;
  }
  if (ip == src_ip_ && port == src_port_) return true;
  source_changes++;
  src_ip_ = ip;
  src_port_ = port;
  return false;
}

}  // namespace keel::trafgen
