/* SPDX-License-Identifier: Apache-2.0 */
/* keel-ingress: EAL and port set-up, the threads, signals; see --help. */
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <thread>

#include "control.h"
#include "control_token.h"
#include "dataplane.h"
#include "flags.h"
#include "keel/port.h"
#include "metrics_server.h"
#include "keel/port_wake.h"
#include "stats.h"

namespace keel::ingress {
namespace {

constexpr unsigned kChannelSize = 8192;
/* Mbufs beyond the hold buffers (new and moving flows'): RX and TX rings, a burst, the pool's cache. */
constexpr unsigned kMbufSlack = 4096;
constexpr unsigned kMbufCache = 256;
constexpr uint16_t kDrainBurst = 32;

/* Drops what the port queued before the ingress serves it: an AF_PACKET socket
 * sees every interface's packets until it is bound to one, and those must not
 * be sent out of the ingress port. Returns how many. */
unsigned DrainPort(uint16_t port) {
  rte_mbuf* burst[kDrainBurst];
  unsigned total = 0;
  while (uint16_t n = rte_eth_rx_burst(port, 0, burst, kDrainBurst)) {
    rte_pktmbuf_free_bulk(burst, n);
    total += n;
  }
  return total;
}

void WriteStatsJson(const std::string& path, const IngressCounters& c, const std::string& id) {
  if (path.empty()) return;
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << StatsJson(TakeSnapshot(c), id);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) std::perror(("keel-ingress: " + path).c_str());
}

/* Waits for SIGTERM/SIGINT (sets |stop|) and SIGUSR1 (writes the stats JSON). */
void SignalLoop(const sigset_t& set, std::atomic<bool>* stop, const Flags& flags, const IngressCounters& c) {
  for (;;) {
    int sig = sigwaitinfo(&set, nullptr);
    if (sig == SIGUSR1) {
      WriteStatsJson(flags.stats_json, c, flags.control.ingress_id);
    } else if (sig == SIGTERM || sig == SIGINT) {
      stop->store(true);
      return;
    }
  }
}

/* Runs the ingress on |port| until SIGTERM/SIGINT; false if it cannot start. */
bool Serve(const Flags& flags, uint16_t port, rte_mempool* pool, const sigset_t& signals) {
  std::string err;
  Channel channel;
  if (!channel.Init(kChannelSize, &err)) {
    std::fprintf(stderr, "keel-ingress: %s\n", err.c_str());
    return false;
  }
  IngressCounters counters;
  MetricsServer metrics(flags.metrics, [&] { return PrometheusText(TakeSnapshot(counters)); });
  if (!flags.metrics.empty() && !metrics.Start(&err)) {
    std::fprintf(stderr, "keel-ingress: %s\n", err.c_str());
    return false;
  }
  if (unsigned n = DrainPort(port)) std::fprintf(stderr, "keel-ingress: dropped %u frames queued before start\n", n);
  DataPlaneConfig dp = flags.dataplane;
  dp.port = port;
  dp.pool = pool;
  if (flags.port_wake) dp.wake_fds = FindPortWakeFds();
  if (flags.port_wake && dp.wake_fds.empty())
    std::fprintf(stderr, "keel-ingress: no socket of the port to sleep on (not net_af_packet or net_af_xdp): "
                         "naps of 25-200 us while flows are set up\n");
  DataPlane dataplane(dp, &channel, &counters);
  Control control(flags.control, &channel, &counters);
  control.Start();

  std::atomic<bool> stop{false};
  std::thread signal_thread([&] { SignalLoop(signals, &stop, flags, counters); });
  pthread_setname_np(signal_thread.native_handle(), "keel-ing-signal");
  std::fprintf(stderr, "keel-ingress: %s on %s, gateway %s, torctl %s\n", flags.control.ingress_id.c_str(),
               PortName(port).c_str(), flags.control.gateway.c_str(), flags.control.torctl.c_str());
  dataplane.Run(stop);

  signal_thread.join();
  control.Stop();
  metrics.Stop();
  WriteStatsJson(flags.stats_json, counters, flags.control.ingress_id);
  return true;
}

int Run(const Flags& flags) {
  /* Signals go to the signal thread only: block them before EAL and every
   * other thread start, so all of them inherit the mask. */
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGTERM, SIGINT, SIGUSR1}) sigaddset(&set, s);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  std::string err;
  if (!EalInit(flags.eal, &err)) {
    std::fprintf(stderr, "keel-ingress: %s\n", err.c_str());
    return 1;
  }
  int rc = 1;
  uint16_t port = 0;
  if (rte_eth_dev_count_avail() == 0) {
    std::fprintf(stderr, "keel-ingress: no DPDK port: give one after --, e.g. --vdev net_af_packet0,iface=IF\n");
  } else if (rte_mempool* pool = MbufPool("keel_ing_mbufs",
                                          flags.dataplane.table.hold_max + flags.dataplane.mover.hold_max + kMbufSlack,
                                          kMbufCache, &err);
             !pool || !PortInit(port = static_cast<uint16_t>(rte_eth_find_next(0)), pool, &err)) {
    std::fprintf(stderr, "keel-ingress: %s\n", err.c_str());
  } else {
    rc = Serve(flags, port, pool, set) ? 0 : 1;
    rte_eth_dev_stop(port);
    rte_eth_dev_close(port);
  }
  rte_eal_cleanup();
  return rc;
}

}  // namespace
}  // namespace keel::ingress

int main(int argc, char** argv) {
  using namespace keel::ingress;
  Flags flags;
  std::string err;
  if (!ParseFlags(argc, argv, &flags, &err)) {
    std::fprintf(stderr, "keel-ingress: %s\nkeel-ingress --help explains every flag.\n", err.c_str());
    return 2;
  }
  if (flags.help) {
    std::fputs(Usage().c_str(), stdout);
    return 0;
  }
  if (!ReadControlToken(flags.control_token_file, &flags.control.token, &err)) {
    std::fprintf(stderr, "keel-ingress: --control-token-file: %s\n", err.c_str());
    return 2;
  }
  return Run(flags);
}
