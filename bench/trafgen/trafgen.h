/* SPDX-License-Identifier: Apache-2.0 */
/* The generator and sink: DPDK ports in the source and sink namespaces, the
 * send/receive loop, the per-chain measurements and the result JSON. */
#ifndef KEEL_TRAFGEN_TRAFGEN_H_
#define KEEL_TRAFGEN_TRAFGEN_H_

#include <poll.h>

#include <csignal>
#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "flags.h"
#include "flow_stats.h"
#include "histogram.h"
#include "packet.h"
#include "pacing.h"
#include "scenario.h"

struct rte_mbuf;
struct rte_mempool;

namespace keel::trafgen {

/* Set by SIGINT/SIGTERM: stop sending, drain, report. */
extern volatile std::sig_atomic_t g_stop;

class Trafgen {
 public:
  Trafgen(const Scenario& sc, const Flags& flags);
  ~Trafgen();

  /* Starts EAL with the TX port in the source namespace and probes the RX
   * port in the sink namespace. False with |*err| on failure. */
  bool Setup(std::string* err);
  /* Sends the scenario's phases, then drains. */
  void Run();
  /* The result document. */
  nlohmann::json Result() const;

 private:
  enum class FlowState { kOpening, kLive, kDone };

  /* The sender's side of a flow. */
  struct FlowTx {
    FlowState state = FlowState::kOpening;
    uint64_t opened_tsc = 0, end_tsc = 0;
    uint32_t next_seq = 0;
    uint64_t sent = 0;
  };

  /* One chain's schedule and counters. */
  struct ChainRun {
    const Chain* chain;
    SizeMix sizes;
    Pacer data;
    Schedule open;
    uint16_t next_bytes = 0;  /* the size of the chain's next data frame */
    std::vector<uint32_t> live;      /* flows opening or live */
    std::deque<uint32_t> opening;    /* flows waiting for their first packet, oldest first */
    size_t rr = 0;
    uint64_t flows_opened = 0;
    std::unique_ptr<Aes128Cbc> aes;
    Histogram latency, setup, second;
    /* The slowest first packets: (latency ns, flow, send TSC), slowest first, kSetupWorst at most. */
    std::vector<std::tuple<uint64_t, uint32_t, uint64_t>> setup_worst;
    uint64_t offered_pkts = 0, offered_bytes = 0, delivered_pkts = 0, delivered_bytes = 0;
    uint64_t expected_sent = 0;  /* packets sent by flows that are not blocked */
    std::deque<std::pair<uint64_t, uint64_t>> sent_history;  /* (tick TSC, expected_sent) */
    uint64_t sent_a_second_ago = 0;
    uint64_t open_timeouts = 0, transform_errors = 0, blocked_sent = 0, blocked_delivered = 0;
    uint64_t nat_changes = 0, compared_bytes = 0;
    std::vector<std::string> examples;
    uint64_t tick_offered_bytes = 0, tick_delivered_bytes = 0;  /* at the last tick */
    explicit ChainRun(const Chain* c) : chain(c), sizes(c->sizes) {}
  };

  /* A frame in the TX burst and what it counts for once sent. */
  struct Pending {
    int chain = -1;      /* -1: a malformed frame */
    uint32_t flow = 0;
    uint16_t bytes = 0;
  };

  /* Opens the flows and sends the data chain |c| has due at |now|, |t|
   * seconds into the run; returns when it next has something due. */
  uint64_t SendDue(size_t c, uint64_t now, double t);
  void OpenFlow(size_t c, uint64_t now);
  /* Builds |flow|'s next packet into the TX burst; its length, 0 if no mbuf. */
  uint16_t Enqueue(size_t c, uint32_t flow, uint16_t bytes, uint64_t now);
  void EnqueueMalformed();
  void Flush();
  int NextDataFlow(ChainRun& cr);
  bool HasLiveFlow(const ChainRun& cr) const;
  void Sweep(uint64_t now);
  unsigned Receive();
  void OnFrame(const uint8_t* data, size_t len, uint64_t rx_tsc);
  void TransformError(ChainRun& cr, const std::string& what);
  void Tick(uint64_t now);
  /* The loss so far for the live line: a lower bound while packets are on
   * the way. */
  uint64_t LiveLoss(size_t c, uint64_t now);

  const Scenario& sc_;
  const Flags& flags_;
  uint16_t tx_port_ = 0, rx_port_ = 0;
  rte_mempool* pool_ = nullptr;
  bool eal_ = false;
  uint64_t hz_ = 0, start_ = 0, traffic_end_ = 0, end_ = 0;
  std::mt19937_64 rng_;

  std::vector<FlowInfo> flows_;
  std::vector<FlowTx> tx_;
  std::vector<FlowRx> rx_;
  std::vector<ChainRun> chains_;

  std::vector<rte_mbuf*> burst_;
  std::vector<Pending> pending_;
  Schedule malformed_;
  size_t malformed_kind_ = 0;
  uint64_t malformed_sent_ = 0, malformed_delivered_ = 0, foreign_rx_ = 0, tx_refused_ = 0, tx_port_rx_ = 0;
  uint64_t last_tx_tsc_ = 0;
  Histogram poll_gaps_;  /* between the sink's polls while traffic is due */
  std::vector<pollfd> wake_;  /* the ports' sockets (--rx-wake on; keel/port_wake.h) */
  uint64_t wake_ups_ = 0;     /* sleeps a frame ended */

  uint64_t next_tick_ = 0, ticks_ = 0;
  double cpu_at_tick_ = 0;
  nlohmann::json timeline_ = nlohmann::json::array();
  nlohmann::json cpu_timeline_ = nlohmann::json::array();
  std::vector<uint8_t> scratch_;
};

}  // namespace keel::trafgen

#endif  // KEEL_TRAFGEN_TRAFGEN_H_
