/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/chain.h"

#include <chrono>

#include "keel/flow_move.h"

namespace keel {

NfSpec ParseNfSpec(const std::string& arg) {
  NfSpec s;
  size_t eq = arg.find('=');
  s.name = arg.substr(0, eq);
  if (eq != std::string::npos) s.config = arg.substr(eq + 1);
  return s;
}

Chain::Chain(const std::vector<NfSpec>& specs) {
  for (size_t i = 0; i < specs.size(); i++) {
    auto st = std::make_unique<Stage>();
    st->name = specs[i].name;
    st->id = NfId(st->name);
    try {
      st->nf = MakeNf(specs[i].name, specs[i].config);
    } catch (const ConfigError& e) {
      throw ConfigError("--nf #" + std::to_string(i + 1) + ": " + e.what());
    }
    stages_.push_back(std::move(st));
  }
}

void Chain::SetFlowLimits(const FlowLimits& limits) {
  for (auto& s : stages_) s->nf->state().set_limits(limits);
}

void Chain::Run(PacketBatch* batch, size_t first, size_t last) {
  const uint64_t now_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
  for (size_t i = first; i < last && batch->cnt() > 0; i++) {
    Stage& s = *stages_[i];
    int n = batch->cnt();
    s.nf->state().Advance(now_ms);
    uint64_t t0 = Rdtsc();
    s.nf->ProcessBatch(batch);
    uint64_t t1 = Rdtsc();
    int dropped = batch->RemoveDropped();
    s.counters.packets_in.Add(n);
    s.counters.packets_out.Add(n - dropped);
    s.counters.dropped.Add(dropped);
    s.counters.bursts.Add(1);
    s.counters.cycles.Add(t1 - t0);
  }
}

bool Chain::MoveAt(size_t i, uint8_t position, uint8_t* buf, size_t* len, std::string* err) {
  Stage& s = *stages_[i];
  const bool ok_before = buf[kMoveStatusAt] == static_cast<uint8_t>(MoveStatus::kOk);
  if (!keel::MoveAt(s.nf.get(), MovePosition{position, s.id}, buf, len, err)) return false;
  (buf[kMoveKindAt] == static_cast<uint8_t>(MoveKind::kExport) ? s.counters.move_exports : s.counters.move_imports)
      .Add(1);
  if (ok_before && buf[kMoveStatusAt] != static_cast<uint8_t>(MoveStatus::kOk)) s.counters.move_failed.Add(1);
  return true;
}

void Chain::SyncState(bool wait) {
  for (auto& s : stages_) s->nf->state().Sync(wait);
}

Json Chain::StatsJson(bool with_nf_stats) const {
  Json out = Json::array();
  for (const auto& s : stages_) {
    const NfCounters& c = s->counters;
    uint64_t in = c.packets_in.Get();
    Json j = {{"nf", s->name},
              {"packets_in", in},
              {"packets_out", c.packets_out.Get()},
              {"dropped", c.dropped.Get()},
              {"bursts", c.bursts.Get()},
              {"cycles_per_packet", in ? static_cast<double>(c.cycles.Get()) / in : 0.0},
              {"moves", {{"exports", c.move_exports.Get()},
                         {"imports", c.move_imports.Get()},
                         {"failed", c.move_failed.Get()}}}};
    FlowState& f = s->nf->state();
    j["flows"] = {{"count", f.flows()},
                  {"capacity", f.limits().capacity},
                  {"evictions", f.evictions()},
                  {"refusals", f.refusals()}};
    if (with_nf_stats) {
      Json extra = s->nf->Stats();
      if (!extra.is_null()) j["stats"] = extra;
    }
    out.push_back(j);
  }
  return out;
}

}  // namespace keel
