/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/runner.h"

#include "keel/stats_file.h"

namespace keel {

/* Turns between hand-overs of the NFs' state to the Redis mirror. */
static constexpr uint32_t kSyncTurns = 64;

std::unique_ptr<Runner> Runner::Create(Chain* chain, rte_mempool* pool, const RunnerOptions& opt,
                                       std::string* err) {
  std::unique_ptr<Runner> r(new Runner(chain, opt));
  if (!opt.pktbuf_path.empty() && chain->size() > 1) {
    r->pktbuf_ = PktBuf::Create(opt.pktbuf_path, kMaxBurstsPerTurn * kMaxBurst, err);
    if (!r->pktbuf_) return nullptr;
  }
  EngineOptions eo;
  eo.rx_port = opt.rx_port;
  eo.tx_port = opt.tx_port;
  eo.burst = opt.burst;
  eo.copy_in = r->pktbuf_ != nullptr;
  eo.head_nfs = eo.copy_in ? 1 : chain->size();
  r->engine_ = std::make_unique<Engine>(chain, pool, r->pktbuf_.get(), r->cycles_, eo);
  return r;
}

void Runner::Run() {
  const uint64_t idle_cycles = TscHz() / 1000 * static_cast<uint64_t>(opt_.exit_when_idle_ms);
  engine_->Begin();
  StatsFile stats(opt_.stats_path, opt_.stats_interval_ms, [this] { return engine_->StatsJson(); });
  stats.Start();
  uint32_t turns = 0;
  while (!stop_.load(std::memory_order_relaxed)) {
    const uint64_t start = Rdtsc();
    const uint32_t received = engine_->Head(1);
    if (received && pktbuf_) {
      engine_->InPlace(1, 1);
      engine_->Egress();
    }
    if (++turns == kSyncTurns) {
      turns = 0;
      chain_->SyncState(false);
    }
    engine_->EndTurn(start);
    if (!received && engine_->IdleLongerThan(idle_cycles)) break;
  }
  chain_->SyncState(true);
  stats.Stop();
  engine_->End();
  stats.Write(engine_->StatsJson());
}

}  // namespace keel
