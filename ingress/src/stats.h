/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ingress's counters. Each has one writer (the lcore, or the control
 * thread for the control-side ones) and any thread may read them; the
 * reports (Prometheus text, the stats JSON, IngressStats) are built from
 * one Snapshot so they always agree with each other.
 */
#ifndef KEEL_INGRESS_STATS_H_
#define KEEL_INGRESS_STATS_H_

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "drop_reason.h"
#include "flow_mover.h"
#include "keel/monitor.h"

namespace keel::ingress {

/* A latency in fixed buckets, so its one writer records it with two relaxed
 * stores. */
class LatencyHistogram {
 public:
  static constexpr std::array<double, 14> kBoundsS = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                                                      0.025,  0.05,    0.1,    0.25,  0.5,    1.0,   2.5};
  void Observe(uint64_t ns);
  /* Per-bucket counts (the last is above every bound) and the sum. */
  std::array<uint64_t, kBoundsS.size() + 1> Buckets() const;
  uint64_t SumNs() const { return sum_ns_.Get(); }

 private:
  std::array<Counter, kBoundsS.size() + 1> buckets_;
  Counter sum_ns_;
};

struct IngressCounters {
  /* lcore */
  Counter packets_in;
  Counter new_flows;
  Counter flows_installed;      /* setups whose held packets were released */
  Counter packets_reinjected;   /* held packets sent back once their flow was decided */
  Counter packets_forwarded;    /* later packets of an installed flow that still reached the ingress */
  Counter packets_normal_path;  /* matched no chain, sent back tagged 4094 */
  Counter markers_sent;         /* handover markers sent to instances (inband.h) */
  Counter markers_unsent;       /* markers that found no mbuf or no room to go (the instance times out) */
  Counter packets_after_marker; /* packets of a flow that reached the ingress after its marker went */
  Counter buffered;
  Counter buffered_max;
  Counter flows_active;
  std::array<Counter, static_cast<size_t>(DropReason::kCount)> drops;
  LatencyHistogram hold_latency;     /* first packet -> held packets sent back */
  /* Flow moves (flow_mover.h): flows by outcome (kNone: moved), and the pause of the moved ones. */
  std::array<Counter, static_cast<size_t>(MoveFailure::kCount)> moves;
  LatencyHistogram move_pause;       /* first held packet -> the flow's rule to its new instance is in */
  Counter move_packets_held;         /* packets of moving flows held, then released in order */
  Counter move_frames_sent;          /* EXPORT_STATE / IMPORT_STATE frames sent to instances */
  Counter move_frames_unsent;        /* frames that found no mbuf (the move times out) */
  Counter move_frames_back;          /* frames that came back and were taken */
  Counter move_frames_bad;           /* returned frames dropped: malformed, or no move waits for them */
  Counter move_restores_failed;      /* state sent back to S that S refused or did not return */
  /* control thread (its completion-queue thread writes install_latency) */
  LatencyHistogram install_latency;  /* first packet -> the flow's own rule acknowledged by the switch */
  Counter stage2_installed;
  Counter stage2_failed;
  Counter stage2_direct;        /* of stage2_installed: written to the ToR by the ingress (--tor-openflow) */
  Counter stage2_direct_failed; /* direct writes that failed (the flow then went through torctl) */
  Counter record_failed;        /* RecordFlows calls that failed (their reports wait for the next) */
  Counter records_dropped;      /* reports dropped unsent (torctl away too long; its read-back finds the rules) */
  Counter chain_reinjects;      /* switch-only flows released by their chain's reinject VLAN (no stage 1) */
  Counter flows_released;       /* ReleaseFlow calls for setups that failed after AssignFlow */
  Counter assign_calls;         /* AssignFlows calls made (new flows / calls: the batch size) */
  Counter assign_retries;       /* flows sent again after a timeout or an unavailable gateway */
  Counter chains;               /* chains in the filter set now */
  Counter watch_restarts;
  Counter move_reports_failed;  /* ReportMoves calls that failed every attempt */
};

/* A copy of one LatencyHistogram. */
struct HistogramSnapshot {
  std::array<uint64_t, LatencyHistogram::kBoundsS.size() + 1> buckets{};
  uint64_t sum_ns = 0;

  uint64_t Count() const;
  /* The |q| quantile in ms (within its bucket, interpolated), or 0 without samples. */
  double QuantileMs(double q) const;
};

/* A consistent copy of the counters, with the derived figures. */
struct Snapshot {
  std::map<std::string, uint64_t> counters;  /* name (without _total) -> value */
  std::map<std::string, uint64_t> drops;     /* reason -> packets */
  std::map<std::string, uint64_t> moves;     /* "moved" or why not -> flows */
  uint64_t buffered = 0, buffered_max = 0, flows_active = 0, chains = 0;
  HistogramSnapshot install, hold, move_pause;
};

Snapshot TakeSnapshot(const IngressCounters& c);

/* The snapshot in Prometheus text exposition format (keel_ingress_*). */
std::string PrometheusText(const Snapshot& s);

/* The snapshot as a JSON document (the --stats-json file). */
std::string StatsJson(const Snapshot& s, const std::string& ingress_id);

}  // namespace keel::ingress

#endif  // KEEL_INGRESS_STATS_H_
