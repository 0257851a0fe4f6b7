/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/runner.h"

#include <rte_ethdev.h>

#include <chrono>

#include "keel/burst.h"
#include "keel/port.h"
#include "keel/stats_file.h"

namespace keel {

/* Poll iterations between NIC queue-length samples and state hand-overs. */
static constexpr uint32_t kHousekeepingPolls = 64;

Runner::Runner(Chain* chain, rte_mempool* pool, const RunnerOptions& opt)
    : chain_(chain), pool_(pool), opt_(opt) {}

std::unique_ptr<Runner> Runner::Create(Chain* chain, rte_mempool* pool, const RunnerOptions& opt,
                                       std::string* err) {
  std::unique_ptr<Runner> r(new Runner(chain, pool, opt));
  r->tx_chains_ = PortTxChains(opt.tx_port);
  if (!opt.pktbuf_path.empty() && chain->size() > 1) {
    /* Room for the bursts of one scheduling round (Galleon §4.3: B x 32). */
    r->pktbuf_ = PktBuf::Create(opt.pktbuf_path, 4 * kMaxBurst, err);
    if (!r->pktbuf_) return nullptr;
  }
  return r;
}

/* One received burst through the chain (Galleon Fig. 2 steps 1-6). */
void Runner::ProcessBurst(rte_mbuf** mbufs, int n, uint64_t t) {
  Packet views[kMaxBurst];
  PacketBatch batch;
  ReceiveBurst(mbufs, n, views, &batch, &port_);
  uint64_t t1 = Rdtsc();
  chain_->Run(&batch, 0, pktbuf_ ? 1 : chain_->size());
  uint64_t t2 = Rdtsc();
  Charge(KEEL_CYCLES_RX, t1 - t);
  Charge(KEEL_CYCLES_NF, t2 - t1);

  if (pktbuf_) {
    /* The spatial-isolation copy: only survivors of NF 1 enter the chain's
     * buffer; the NIC's buffers go straight back to the port. */
    uint32_t copied = 0;
    for (Packet* p : batch) copied += pktbuf_->Push(p->data(), p->len());
    port_.copied.Add(copied);
    port_.copy_dropped.Add(static_cast<uint32_t>(batch.cnt()) - copied);
    rte_pktmbuf_free_bulk(mbufs, n);
    Charge(KEEL_CYCLES_COPY_IN, Rdtsc() - t2);
    RunFromChainBuffer();
    return;
  }
  rte_mbuf* out[kMaxBurst];
  TransmitBurst(opt_.tx_port, out, ReturnSurvivors(mbufs, views, n, &batch, out), &port_);
  Charge(KEEL_CYCLES_TX, Rdtsc() - t2);
}

/* NFs 2..N over the chain's buffer in place, then the egress copy. */
void Runner::RunFromChainBuffer() {
  while (uint32_t used = pktbuf_->used()) {
    int n = used < static_cast<uint32_t>(kMaxBurst) ? static_cast<int>(used) : kMaxBurst;
    uint64_t t0 = Rdtsc();
    Packet views[kMaxBurst];
    PacketBatch batch;
    for (int i = 0; i < n; i++)
      if (pktbuf_->View(i, &views[i])) batch.Add(&views[i]);
    uint64_t t1 = Rdtsc();
    chain_->Run(&batch, 1, chain_->size());
    uint64_t t2 = Rdtsc();
    rte_mbuf* out[kMaxBurst];
    int nout = CopyOut(&batch, pool_, tx_chains_, out, &port_);
    uint64_t t3 = Rdtsc();
    pktbuf_->Release(static_cast<uint32_t>(n));
    pktbuf_->Rewind();
    TransmitBurst(opt_.tx_port, out, nout, &port_);
    Charge(KEEL_CYCLES_VIEW, t1 - t0);
    Charge(KEEL_CYCLES_NF, t2 - t1);
    Charge(KEEL_CYCLES_COPY_OUT, t3 - t2);
    Charge(KEEL_CYCLES_TX, Rdtsc() - t3);
  }
}

void Runner::Run() {
  const uint64_t hz = TscHz();
  const uint64_t idle_cycles = hz / 1000 * static_cast<uint64_t>(opt_.exit_when_idle_ms);
  start_tsc_ = Rdtsc();
  StatsFile stats(opt_.stats_path, opt_.stats_interval_ms, [this] { return PeriodicStats(); });
  stats.Start();
  const bool queue_len_known = PortRxQueueLen(opt_.rx_port) >= 0;
  port_.rx_queue_len_known.Set(queue_len_known);
  uint64_t last_rx = Rdtsc();
  uint32_t polls = 0;
  rte_mbuf* mbufs[kMaxBurst];
  uint64_t t = Rdtsc();
  while (!stop_.load(std::memory_order_relaxed)) {
    const uint64_t loop = t;
    uint16_t n = rte_eth_rx_burst(opt_.rx_port, 0, mbufs, static_cast<uint16_t>(opt_.burst));
    uint64_t now = Rdtsc();
    if (++polls == kHousekeepingPolls) {
      polls = 0;
      if (queue_len_known) port_.rx_queue_len.Set(static_cast<uint64_t>(PortRxQueueLen(opt_.rx_port)));
      chain_->SyncState(false);
    }
    if (n == 0) {
      Charge(KEEL_CYCLES_RX_IDLE, now - loop);
      t = Rdtsc();
      Charge(KEEL_CYCLES_BUSY, t - loop);
      if (idle_cycles && now - last_rx > idle_cycles) break;
      continue;
    }
    last_rx = now;
    ProcessBurst(mbufs, n, loop);
    t = Rdtsc();
    port_.batches.Add(1);
    port_.batch_cycles.Add(t - now);
    Charge(KEEL_CYCLES_BUSY, t - loop);
    Charge(KEEL_CYCLES_TURNS, 1);
  }
  end_tsc_ = Rdtsc();
  chain_->SyncState(true);
  stats.Stop();
  done_ = true;
  stats.Write(StatsJson());
}

Json Runner::PeriodicStats() {
  auto now = std::chrono::steady_clock::now();
  uint64_t rx = port_.rx_packets.Get();
  if (rate_since_.time_since_epoch().count()) {
    double secs = std::chrono::duration<double>(now - rate_since_).count();
    rx_pps_ = static_cast<double>(rx - rate_rx_) / secs;
  }
  rate_rx_ = rx;
  rate_since_ = now;
  return StatsJson();
}

Json Runner::StatsJson() const {
  uint64_t hz = TscHz();
  uint64_t end = end_tsc_.load() ? end_tsc_.load() : Rdtsc();
  uint64_t batches = port_.batches.Get();
  Json ports = PortJson(port_);
  ports["rx_port"] = PortName(opt_.rx_port);
  ports["tx_port"] = PortName(opt_.tx_port);
  ports["rx_pps"] = rx_pps_.load();
  return {{"tsc_hz", hz},
          {"seconds", static_cast<double>(end - start_tsc_) / static_cast<double>(hz)},
          {"chain_buffer", pktbuf_ ? Json(pktbuf_->path()) : Json(nullptr)},
          {"batches", batches},
          {"cycles_per_batch", batches ? static_cast<double>(port_.batch_cycles.Get()) / batches : 0.0},
          {"port", ports},
          {"cycles", CyclesJson(cycles_, "bursts")},
          {"nfs", chain_->StatsJson(done_.load())}};
}

}  // namespace keel
