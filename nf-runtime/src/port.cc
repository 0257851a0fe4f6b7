/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/port.h"

#include <rte_eal.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <cstring>

namespace keel {

static constexpr uint16_t kRxDesc = 1024;
static constexpr uint16_t kTxDesc = 1024;

bool EalInit(std::vector<std::string> args, std::string* err) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  if (rte_eal_init(static_cast<int>(argv.size()), argv.data()) < 0) {
    *err = std::string("cannot start DPDK EAL: ") + rte_strerror(rte_errno);
    return false;
  }
  return true;
}

rte_mempool* MbufPool(const char* name, unsigned n, unsigned cache, std::string* err) {
  rte_mempool* pool = rte_pktmbuf_pool_create(name, n, cache, 0, RTE_MBUF_DEFAULT_BUF_SIZE, rte_socket_id());
  if (!pool) *err = std::string(name) + ": " + rte_strerror(rte_errno);
  return pool;
}

bool PortInit(uint16_t port, rte_mempool* pool, std::string* err) {
  auto fail = [&](const char* what, int rc) {
    *err = PortName(port) + ": " + what + ": " + std::strerror(rc < 0 ? -rc : rc);
    return false;
  };
  rte_eth_conf conf;
  std::memset(&conf, 0, sizeof(conf));
  rte_eth_dev_info info;
  int rc = rte_eth_dev_info_get(port, &info);
  if (rc < 0) return fail("device info", rc);
  conf.txmode.offloads = info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
  rc = rte_eth_dev_configure(port, 1, 1, &conf);
  if (rc < 0) return fail("configure", rc);
  uint16_t nb_rxd = kRxDesc, nb_txd = kTxDesc;
  rc = rte_eth_dev_adjust_nb_rx_tx_desc(port, &nb_rxd, &nb_txd);
  if (rc < 0) return fail("descriptor counts", rc);
  int socket = rte_eth_dev_socket_id(port);
  if (socket < 0) socket = 0;
  rc = rte_eth_rx_queue_setup(port, 0, nb_rxd, socket, nullptr, pool);
  if (rc < 0) return fail("RX queue", rc);
  rc = rte_eth_tx_queue_setup(port, 0, nb_txd, socket, nullptr);
  if (rc < 0) return fail("TX queue", rc);
  rc = rte_eth_dev_start(port);
  if (rc < 0) return fail("start", rc);
  rte_eth_promiscuous_enable(port);
  return true;
}

bool PortTxChains(uint16_t port) {
  /* PortInit turns multi-segment TX on wherever the driver offers it, so the
   * capability tells (rte_eth_dev_conf_get is still experimental in 22.11). */
  rte_eth_dev_info info;
  return rte_eth_dev_info_get(port, &info) == 0 && (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS);
}

int PortRxQueueLen(uint16_t port) {
  int n = rte_eth_rx_queue_count(port, 0);
  return n < 0 ? -1 : n;
}

std::string PortName(uint16_t port) {
  char name[RTE_ETH_NAME_MAX_LEN];
  if (rte_eth_dev_get_name_by_port(port, name) != 0) return "port " + std::to_string(port);
  return name;
}

}  // namespace keel
