/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A chain of NFs run to completion over a burst: each NF processes the
 * whole burst, the packets it dropped are removed, the next NF runs.
 */
#ifndef KEEL_CHAIN_H_
#define KEEL_CHAIN_H_

#include <memory>
#include <string>
#include <vector>

#include "keel/monitor.h"
#include "keel/nf.h"

namespace keel {

/* One NF of a chain as given on a command line: NAME or NAME=JSON. */
struct NfSpec {
  std::string name;
  std::string config; /* JSON text; empty means {} */
};

/* Parses "NAME[=JSON]". */
NfSpec ParseNfSpec(const std::string& arg);

class Chain {
 public:
  /* Creates every NF and runs its Init; throws ConfigError naming the NF
   * (by position and name) and the problem. */
  explicit Chain(const std::vector<NfSpec>& specs);

  size_t size() const { return stages_.size(); }
  NF* nf(size_t i) { return stages_[i]->nf.get(); }
  const std::string& name(size_t i) const { return stages_[i]->name; }
  const NfCounters& counters(size_t i) const { return stages_[i]->counters; }

  /* Bounds every NF's flow table; before packets flow. */
  void SetFlowLimits(const FlowLimits& limits);

  /* Runs NFs [first, last) in order over |batch|, removing dropped packets
   * after each NF and counting packets and cycles per NF; each NF's flow
   * table first moves to the current time (idle flows expire). */
  void Run(PacketBatch* batch, size_t first, size_t last);

  /* A flow move's frame (flow_move.h, the |*len| bytes at |buf|, room for
   * kMoveFrameMax) passing NF |i|, which is at chain position |position|:
   * keel::MoveAt, counted. False, with the problem in |*err|, if the bytes
   * are not a move frame; a failure the NF reports is in the frame (and
   * |*err|). */
  bool MoveAt(size_t i, uint8_t position, uint8_t* buf, size_t* len, std::string* err);

  /* Packet thread: hands every NF's state changes to the Redis mirror.
   * |wait| blocks for the hand-over (shutdown only). */
  void SyncState(bool wait);

  /* Per-NF figures: [{"nf":..,"packets_in":..,"packets_out":..,"dropped":..,
   * "bursts":..,"cycles_per_packet":..,"flows":{"count","capacity",
   * "evictions","refusals"},"stats":<NF::Stats()>}, ...].
   * NF::Stats() reads the NF's own tables, so |with_nf_stats| is only for
   * the packet thread or after it stopped. */
  Json StatsJson(bool with_nf_stats) const;

 private:
  struct Stage {
    std::string name;
    uint32_t id = 0; /* NfId(name): how move records name their NF */
    std::unique_ptr<NF> nf;
    NfCounters counters;
  };
  std::vector<std::unique_ptr<Stage>> stages_;
};

}  // namespace keel

#endif  // KEEL_CHAIN_H_
