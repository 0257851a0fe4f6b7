/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keel-chain: runs a whole NF chain in one process, run to completion, on a
 * DPDK port. It is the offline tool (pcap in, pcap out) and the
 * single-thread baseline of Galleon §7.1.
 */
#include <getopt.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cli.h"
#include "keel/chain.h"
#include "keel/port.h"
#include "keel/redis_mirror.h"
#include "keel/runner.h"

namespace {

using keel::cli::kExitUsage;
using keel::cli::ParseInt;
using keel::cli::UsageError;

constexpr unsigned kPoolMbufs = 8191;
constexpr unsigned kPoolCache = 256;

const char kUsage[] =
    "usage: keel-chain --nf NAME[=JSON] [--nf NAME[=JSON] ...] [--burst N]\n"
    "                  [--exit-when-idle MS] [--stats FILE] [--stats-interval MS]\n"
    "                  [--pktbuf PATH] [--redis HOST:PORT] [--tenant NAME]\n"
    "                  [--redis-auth-file FILE]\n"
    "                  [--chain-id ID] [--flow-capacity N] [--flow-idle-ms MS]\n"
    "                  -- <DPDK EAL arguments>\n"
    "       keel-chain --list [--json]\n"
    "\n"
    "Runs a chain of keel network functions in one process, run to completion:\n"
    "each burst received on port 0 goes through every NF in the order given and\n"
    "leaves on port 1 if there is one, else on port 0.\n"
    "\n"
    "  --nf NAME[=JSON]     add an NF to the chain with its JSON configuration,\n"
    "                       e.g. --nf 'tunnel={\"vlan\":7}'; --list shows the NFs\n"
    "  --burst N            packets per receive burst, 1..32 (default 32)\n"
    "  --exit-when-idle MS  exit 0 after MS milliseconds without a packet\n"
    "  --stats FILE         write statistics as JSON to FILE every second and at\n"
    "                       exit, in keel-nf's schema (keel-nf --help) as position\n"
    "                       0 of 1: packets in/out/dropped and cycles per packet\n"
    "                       per NF, port counters, NIC queue length, cycles per\n"
    "                       batch, and \"cycles\": where the turns' cycles went (a\n"
    "                       turn receives one burst and runs every NF on it)\n"
    "  --stats-interval MS  rewrite the --stats file every MS ms (default 1000)\n"
    "  --pktbuf PATH        copy packets after the first NF into a shared chain\n"
    "                       buffer file at PATH, run the other NFs there in place\n"
    "                       and copy them out to transmit (as a chain of keel-nf\n"
    "                       processes does with --egress-copy)\n"
    "  --redis ADDR         mirror NF state to Redis (HOST:PORT or unix:PATH) and load it at start\n"
    "  --tenant NAME        tenant of the chain, for Redis keys (default: default)\n"
    "  --redis-auth-file FILE  log in to --redis as the Redis ACL user in FILE, one line\n"
    "                       \"USER PASSWORD\" (as keel-nf: a refused login runs the chain\n"
    "                       as with Redis unreachable, an unreadable FILE exits 1)\n"
    "  --chain-id ID        chain instance id, for Redis keys (default: keel-chain)\n"
    "  --flow-capacity N    flows each NF's flow table holds at most (default 65536);\n"
    "                       a new flow beyond them is refused unless one is idle\n"
    "  --flow-idle-ms MS    a flow unused for MS ms is evicted, as are NAT mappings\n"
    "                       (default 300000; 0: never)\n"
    "  --list [--json]      list the NFs and exit; with --json print the NF\n"
    "                       catalogue (names, help, argument schemas) as JSON\n"
    "\n"
    "Example, processing a capture offline:\n"
    "  keel-chain --nf 'acl={\"rules\":[{\"dst_ip\":\"198.18.0.0/15\"}]}' --nf macswap \\\n"
    "    --exit-when-idle 200 -- --no-pci --no-huge -m 512 \\\n"
    "    --vdev net_pcap0,rx_pcap=in.pcap,tx_pcap=out.pcap\n"
    "\n";

keel::Runner* g_runner = nullptr;

void OnSignal(int) {
  if (g_runner) g_runner->Stop();
}


}  // namespace

int main(int argc, char** argv) {
  keel::cli::program = "keel-chain";
  std::vector<keel::NfSpec> specs;
  keel::RunnerOptions opt;
  keel::FlowLimits flows;
  std::string redis, redis_auth_file, tenant = "default", chain_id = "keel-chain";
  bool list = false, json = false;
  int eal_at = argc;
  for (int i = 1; i < argc; i++)
    if (std::string(argv[i]) == "--") {
      eal_at = i;
      break;
    }
  static const option kOptions[] = {
      {"nf", required_argument, nullptr, 'n'},     {"burst", required_argument, nullptr, 'b'},
      {"exit-when-idle", required_argument, nullptr, 'i'},
      {"stats", required_argument, nullptr, 's'},  {"pktbuf", required_argument, nullptr, 'p'},
      {"stats-interval", required_argument, nullptr, 'S'},
      {"redis", required_argument, nullptr, 'r'},  {"tenant", required_argument, nullptr, 't'},
      {"redis-auth-file", required_argument, nullptr, 'A'},
      {"chain-id", required_argument, nullptr, 'c'}, {"list", no_argument, nullptr, 'l'},
      {"json", no_argument, nullptr, 'j'},
      {"flow-capacity", required_argument, nullptr, 'F'},
      {"flow-idle-ms", required_argument, nullptr, 'E'},
      {"help", no_argument, nullptr, 'h'},         {nullptr, 0, nullptr, 0}};
  opterr = 0;
  int c;
  while ((c = getopt_long(eal_at, argv, ":", kOptions, nullptr)) != -1) {
    switch (c) {
      case 'n': specs.push_back(keel::ParseNfSpec(optarg)); break;
      case 'b': opt.burst = ParseInt("--burst", optarg, 1, keel::kMaxBurst); break;
      case 'i': opt.exit_when_idle_ms = ParseInt("--exit-when-idle", optarg, 1, 86400000); break;
      case 's': opt.stats_path = optarg; break;
      case 'S': opt.stats_interval_ms = ParseInt("--stats-interval", optarg, 10, 3600000); break;
      case 'p': opt.pktbuf_path = optarg; break;
      case 'r': redis = optarg; break;
      case 'A': redis_auth_file = optarg; break;
      case 't': tenant = optarg; break;
      case 'c': chain_id = optarg; break;
      case 'F': flows.capacity = static_cast<size_t>(ParseInt("--flow-capacity", optarg, 1, 1 << 24)); break;
      case 'E': flows.idle_timeout_ms = static_cast<uint64_t>(ParseInt("--flow-idle-ms", optarg, 0, 86400000)); break;
      case 'l': list = true; break;
      case 'j': json = true; break;
      case 'h':
        std::fputs(kUsage, stdout);
        std::fputs(keel::cli::kCatalogHelp, stdout);
        return 0;
      case ':': UsageError(std::string(argv[optind - 1]) + " needs a value");
      default: UsageError(std::string("unknown option ") + argv[optind - 1]);
    }
  }
  if (optind < eal_at) UsageError(std::string("unexpected argument '") + argv[optind] + "'");
  if (json && !list) UsageError("--json goes with --list");
  if (list) {
    keel::cli::PrintCatalog(json);
    return 0;
  }
  if (specs.empty()) UsageError("no --nf given: a chain needs at least one NF");
  if (eal_at == argc) UsageError("missing '--' followed by the DPDK EAL arguments");
  if (!redis_auth_file.empty() && redis.empty()) UsageError("--redis-auth-file goes with --redis");
  keel::RedisAuth redis_auth;
  if (std::string err; !redis_auth_file.empty() && !keel::ReadRedisAuthFile(redis_auth_file, &redis_auth, &err)) {
    std::fprintf(stderr, "keel-chain: --redis-auth-file %s\n", err.c_str());
    return 1;
  }

  /* Names and JSON syntax are checked before DPDK starts, so that mistakes
   * are reported at once; Init runs after (some NFs use DPDK libraries). */
  for (size_t i = 0; i < specs.size(); i++) {
    if (!keel::CreateNf(specs[i].name))
      UsageError("--nf #" + std::to_string(i + 1) + ": unknown NF '" + specs[i].name + "' (--list shows the NFs)");
    try {
      keel::Config::ParseText(specs[i].config, "--nf #" + std::to_string(i + 1) + " " + specs[i].name);
    } catch (const keel::ConfigError& e) {
      UsageError(e.what());
    }
  }

  std::vector<std::string> eal_args{argv[0]};
  for (int i = eal_at + 1; i < argc; i++) eal_args.push_back(argv[i]);
  if (std::string err; !keel::EalInit(eal_args, &err)) {
    std::fprintf(stderr, "keel-chain: %s\n", err.c_str());
    return 1;
  }

  int rc = 0;
  {
    std::unique_ptr<keel::Chain> chain;
    try {
      chain = std::make_unique<keel::Chain>(specs);
    } catch (const keel::ConfigError& e) {
      std::fprintf(stderr, "keel-chain: %s\n", e.what());
      rte_eal_cleanup();
      return kExitUsage;
    }
    chain->SetFlowLimits(flows);

    uint16_t nports = rte_eth_dev_count_avail();
    if (nports == 0) {
      std::fprintf(stderr, "keel-chain: no DPDK port (give a PCI device or --vdev)\n");
      rte_eal_cleanup();
      return 1;
    }
    opt.rx_port = 0;
    opt.tx_port = nports > 1 ? 1 : 0;
    std::string err;
    rte_mempool* pool = keel::MbufPool("keel_chain_pool", kPoolMbufs, kPoolCache, &err);
    for (uint16_t port = 0; err.empty() && port <= opt.tx_port; port++) keel::PortInit(port, pool, &err);

    std::unique_ptr<keel::RedisMirror> mirror;
    if (err.empty() && !redis.empty()) {
      mirror = std::make_unique<keel::RedisMirror>(redis, std::chrono::milliseconds(100));
      mirror->SetAuth(redis_auth);
      for (size_t i = 0; i < chain->size(); i++)
        mirror->Add(&chain->nf(i)->state(), keel::StateKey(tenant, chain_id, i, chain->name(i)));
      mirror->Start();
    }

    std::unique_ptr<keel::Runner> runner;
    if (err.empty()) runner = keel::Runner::Create(chain.get(), pool, opt, &err);
    if (!err.empty()) {
      std::fprintf(stderr, "keel-chain: %s\n", err.c_str());
      rc = 1;
    } else {
      g_runner = runner.get();
      std::signal(SIGINT, OnSignal);
      std::signal(SIGTERM, OnSignal);
      runner->Run();
      g_runner = nullptr;
    }
    if (mirror) mirror->Stop(std::chrono::milliseconds(1000));
    for (uint16_t port = 0; port < nports; port++) {
      rte_eth_dev_stop(port);
      rte_eth_dev_close(port);
    }
    runner.reset();
    chain.reset();
    if (pool) rte_mempool_free(pool);
  }
  rte_eal_cleanup();
  return rc;
}
