/* SPDX-License-Identifier: Apache-2.0 */
#include "stats.h"

#include <nlohmann/json.hpp>

#include <cstdio>

namespace keel::ingress {

void LatencyHistogram::Observe(uint64_t ns) {
  double s = static_cast<double>(ns) * 1e-9;
  size_t i = 0;
  while (i < kBoundsS.size() && s > kBoundsS[i]) i++;
  buckets_[i].Add(1);
  sum_ns_.Add(ns);
}

std::array<uint64_t, LatencyHistogram::kBoundsS.size() + 1> LatencyHistogram::Buckets() const {
  std::array<uint64_t, kBoundsS.size() + 1> b{};
  for (size_t i = 0; i < b.size(); i++) b[i] = buckets_[i].Get();
  return b;
}

uint64_t HistogramSnapshot::Count() const {
  uint64_t total = 0;
  for (uint64_t n : buckets) total += n;
  return total;
}

double HistogramSnapshot::QuantileMs(double q) const {
  uint64_t total = Count();
  if (total == 0) return 0;
  double want = q * static_cast<double>(total), seen = 0, lo = 0;
  const auto& bounds = LatencyHistogram::kBoundsS;
  for (size_t i = 0; i < buckets.size(); i++) {
    double n = static_cast<double>(buckets[i]);
    double hi = i < bounds.size() ? bounds[i] : bounds.back();
    if (n > 0 && seen + n >= want) return 1e3 * (lo + (hi - lo) * (want - seen) / n);
    seen += n;
    lo = hi;
  }
  return 1e3 * bounds.back();
}

Snapshot TakeSnapshot(const IngressCounters& c) {
  Snapshot s;
  s.counters = {
      {"packets_in", c.packets_in.Get()},
      {"new_flows", c.new_flows.Get()},
      {"flows_installed", c.flows_installed.Get()},
      {"packets_reinjected", c.packets_reinjected.Get()},
      {"markers_sent", c.markers_sent.Get()},
      {"markers_unsent", c.markers_unsent.Get()},
      {"packets_after_marker", c.packets_after_marker.Get()},
      {"packets_forwarded", c.packets_forwarded.Get()},
      {"packets_normal_path", c.packets_normal_path.Get()},
      {"stage2_installed", c.stage2_installed.Get()},
      {"stage2_failed", c.stage2_failed.Get()},
      {"stage2_direct", c.stage2_direct.Get()},
      {"stage2_direct_failed", c.stage2_direct_failed.Get()},
      {"record_failed", c.record_failed.Get()},
      {"records_dropped", c.records_dropped.Get()},
      {"chain_reinjects", c.chain_reinjects.Get()},
      {"flows_released", c.flows_released.Get()},
      {"assign_calls", c.assign_calls.Get()},
      {"assign_retries", c.assign_retries.Get()},
      {"watch_restarts", c.watch_restarts.Get()},
      {"move_packets_held", c.move_packets_held.Get()},
      {"move_frames_sent", c.move_frames_sent.Get()},
      {"move_frames_unsent", c.move_frames_unsent.Get()},
      {"move_frames_back", c.move_frames_back.Get()},
      {"move_frames_bad", c.move_frames_bad.Get()},
      {"move_restores_failed", c.move_restores_failed.Get()},
      {"move_reports_failed", c.move_reports_failed.Get()},
  };
  for (size_t i = 0; i < c.moves.size(); i++) {
    const MoveFailure f = static_cast<MoveFailure>(i);
    s.moves[f == MoveFailure::kNone ? "moved" : MoveFailureName(f)] = c.moves[i].Get();
  }
  for (size_t i = 0; i < c.drops.size(); i++) s.drops[DropReasonName(static_cast<DropReason>(i))] = c.drops[i].Get();
  s.buffered = c.buffered.Get();
  s.buffered_max = c.buffered_max.Get();
  s.flows_active = c.flows_active.Get();
  s.chains = c.chains.Get();
  s.install = {c.install_latency.Buckets(), c.install_latency.SumNs()};
  s.hold = {c.hold_latency.Buckets(), c.hold_latency.SumNs()};
  s.move_pause = {c.move_pause.Buckets(), c.move_pause.SumNs()};
  return s;
}

namespace {

void HistogramText(const std::string& name, const char* help, const HistogramSnapshot& h, std::string* out) {
  auto line = [&](const std::string& l) { *out += l + "\n"; };
  line("# HELP " + name + " " + help);
  line("# TYPE " + name + " histogram");
  uint64_t cum = 0;
  char le[32];
  for (size_t i = 0; i < h.buckets.size(); i++) {
    cum += h.buckets[i];
    if (i < LatencyHistogram::kBoundsS.size()) {
      std::snprintf(le, sizeof(le), "%g", LatencyHistogram::kBoundsS[i]);
    } else {
      std::snprintf(le, sizeof(le), "+Inf");
    }
    line(name + "_bucket{le=\"" + le + "\"} " + std::to_string(cum));
  }
  char sum[48];
  std::snprintf(sum, sizeof(sum), "%.9f", static_cast<double>(h.sum_ns) * 1e-9);
  line(name + "_sum " + sum);
  line(name + "_count " + std::to_string(cum));
}

}  // namespace

std::string PrometheusText(const Snapshot& s) {
  std::string out;
  auto line = [&](const std::string& l) { out += l + "\n"; };
  for (const auto& [name, v] : s.counters) {
    line("# TYPE keel_ingress_" + name + "_total counter");
    line("keel_ingress_" + name + "_total " + std::to_string(v));
  }
  line("# HELP keel_ingress_drops_total Packets dropped, by reason.");
  line("# TYPE keel_ingress_drops_total counter");
  for (const auto& [reason, v] : s.drops) line("keel_ingress_drops_total{reason=\"" + reason + "\"} " + std::to_string(v));
  line("# HELP keel_ingress_flow_moves_total Flows this ingress moved between instances (result=moved), or why not.");
  line("# TYPE keel_ingress_flow_moves_total counter");
  for (const auto& [result, v] : s.moves) line("keel_ingress_flow_moves_total{result=\"" + result + "\"} " + std::to_string(v));
  const std::pair<const char*, uint64_t> gauges[] = {{"buffered_packets", s.buffered},
                                                     {"buffered_packets_max", s.buffered_max},
                                                     {"flows_in_table", s.flows_active},
                                                     {"chains", s.chains}};
  for (const auto& [name, v] : gauges) {
    line(std::string("# TYPE keel_ingress_") + name + " gauge");
    line(std::string("keel_ingress_") + name + " " + std::to_string(v));
  }
  HistogramText("keel_ingress_install_latency_seconds",
                "A new flow's first packet to its rule acknowledged by the switch (later packets bypass the ingress).",
                s.install, &out);
  HistogramText("keel_ingress_hold_latency_seconds",
                "A new flow's first packet to its held packets sent back toward their chain.", s.hold, &out);
  HistogramText("keel_ingress_move_pause_seconds",
                "A moved flow's first held packet to its rule to the new instance acknowledged by the switch.",
                s.move_pause, &out);
  return out;
}

std::string StatsJson(const Snapshot& s, const std::string& ingress_id) {
  nlohmann::json j;
  j["ingress_id"] = ingress_id;
  for (const auto& [name, v] : s.counters) j[name] = v;
  j["drops"] = s.drops;
  j["moves"] = s.moves;
  j["buffered_packets"] = s.buffered;
  j["buffered_max"] = s.buffered_max;
  j["flows_in_table"] = s.flows_active;
  j["chains"] = s.chains;
  for (const auto& [what, h] :
       {std::pair{"install", &s.install}, std::pair{"hold", &s.hold}, std::pair{"move_pause", &s.move_pause}}) {
    const std::string w = what;
    uint64_t n = h->Count();
    j[w + "_p50_ms"] = h->QuantileMs(0.5);
    j[w + "_p99_ms"] = h->QuantileMs(0.99);
    j[w + "_count"] = n;
    j[w + "_mean_ms"] = n ? static_cast<double>(h->sum_ns) * 1e-6 / static_cast<double>(n) : 0.0;
  }
  return j.dump(2) + "\n";
}

}  // namespace keel::ingress
