/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keel-nf: runs one NF of a chain instance in its own process. Position 0
 * owns the DPDK port; the others map only the chain's buffer file.
 */
#include <getopt.h>
#include <net/if.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "cli.h"
#include "keel/chain.h"
#include "keel/coopsched_client.h"
#include "keel/member.h"
#include "keel/nf_loader.h"
#include "keel/rx_pool.h"
#include "keel/port.h"
#include "keel/redis_mirror.h"

namespace {

using keel::cli::kExitUsage;
using keel::cli::ParseInt;
using keel::cli::UsageError;

constexpr int kWaitForBufferMs = 10000;
constexpr int kWaitForIfaceMs = 30000;
constexpr auto kIfacePoll = std::chrono::milliseconds(10);

const char kUsage[] =
    "usage: keel-nf [--load NF.so] --nf NAME[=JSON] --chain-id ID --position K --of N [--pktbuf PATH]\n"
    "               [--coopsched unix:PATH] [--exit-when-idle MS]\n"
    "               [--stats FILE [--stats-interval MS]]\n"
    "               [--redis ADDR [--tenant T] [--redis-auth-file FILE]]\n"
    "               [--wait-iface NAME[:MS]] [--flow-capacity N] [--flow-idle-ms MS]\n"
    "               [-- <DPDK EAL arguments, position 0 only>]\n"
    "       keel-nf [--load NF.so] --list [--json]\n"
    "       keel-nf [--load NF.so] --check --nf NAME[=JSON] [--nf NAME[=JSON] ...]\n"
    "\n"
    "Runs NF number K (0-based) of a chain instance of N NFs as its own process.\n"
    "Position 0 receives from and transmits on DPDK port 0, straight into the\n"
    "chain's buffer file (or, with --rx-copy, copying each burst into it);\n"
    "positions 1..N-1 map only that file and work\n"
    "on the packets in place, each when its turn comes, in chain order. Run the\n"
    "processes on one core under keel-coopsched (SCHED_FIFO) for run-to-completion\n"
    "across them; elsewhere they take turns with sched_yield.\n"
    "\n"
    "  --load NF.so         first load a tenant's packet function (built from the\n"
    "                       packet-cpp template) so --nf can name it; repeatable\n"
    "  --nf NAME[=JSON]     the NF and its configuration (keel-chain --list shows them);\n"
    "                       an argument written {\"secret\":\"NAME\"} takes the value of\n"
    "                       secret NAME (faas-cli secret create) from --secrets\n"
    "  --secrets DIR        where the secrets are files, one per name (default\n"
    "                       /var/openfaas/secrets, where keel-agent mounts a chain's)\n"
    "  --chain-id ID        the chain instance ([A-Za-z0-9_.-], names its files)\n"
    "  --position K --of N  this NF's place in the chain\n"
    "  --pktbuf PATH        the chain's buffer file (default /dev/shm/keel/ID/pktbuf);\n"
    "                       position 0 creates it (mode 0600, directory 0700). Put\n"
    "                       it on a tmpfs mounted with huge=always: 2 MB pages keep\n"
    "                       TLB misses off every NF at large batches\n"
    "  --coopsched unix:P   announce this NF's thread to keel-coopsched at P\n"
    "  --exit-when-idle MS  position 0: stop the chain after MS ms without a packet\n"
    "  --wait-iface NAME[:MS]  position 0: before opening the port, wait until network\n"
    "                       interface NAME exists (the VF the agent moves into this\n"
    "                       network namespace after start), at most MS ms (default\n"
    "                       30000); exit 1 if it does not appear\n"
    "  --stats FILE         write this NF's statistics as JSON to FILE, rewritten\n"
    "                       whole (rename) every --stats-interval and at exit\n"
    "  --stats-interval MS  how often, 10..3600000 (default 1000)\n"
    "  --redis ADDR         keep the NF's flow table in Redis: load it at start, mirror\n"
    "                       changes, so a restarted NF of the same chain id and\n"
    "                       position continues with its state (hash\n"
    "                       keel:state:TENANT:ID:K-NAME, as keel-chain's)\n"
    "  --tenant T           the chain's tenant, for the Redis key (default: default)\n"
    "  --redis-auth-file FILE  log in to --redis (AUTH) as the Redis ACL user in FILE:\n"
    "                       one line \"USER PASSWORD\" (keel-agent mounts each instance's\n"
    "                       at /run/secrets/keel/redis, a user allowed only the\n"
    "                       instance's keys). An unreadable or malformed FILE exits 1;\n"
    "                       a login Redis refuses is reported once on stderr (never\n"
    "                       the password) and the NF runs as with Redis unreachable:\n"
    "                       empty state at start, changes retried every 500 ms, each\n"
    "                       new connection logging in again\n"
    "  --flow-capacity N    flows the NF's flow table holds at most (default 65536);\n"
    "                       a new flow beyond them is refused unless one is idle\n"
    "  --flow-idle-ms MS    a flow unused for MS ms is evicted, as are NAT mappings\n"
    "                       (default 300000; 0: never)\n"
    "  --copy-each-hop      positions > 0: isolate by copying each packet in and out\n"
    "                       of private memory (a baseline for benchmarks)\n"
    "  --egress-copy        position 0: copy each packet out of the chain buffer into\n"
    "                       a transmit buffer (default: transmit from the chain\n"
    "                       buffer itself, as DPDK external buffers, where the port\n"
    "                       lets go of them within a turn)\n"
    "  --rx-copy            position 0: receive into buffers of this process's own and\n"
    "                       copy each packet the first NF passes into the chain buffer\n"
    "                       (default: the port receives straight into the chain\n"
    "                       buffer's slots, which go back to it only once the chain\n"
    "                       is done with them; net_af_xdp always copies)\n"
    "  --handover-timeout-ms MS\n"
    "                       position 0: how long a new flow's packets that came\n"
    "                       straight from the switch wait for the ingress' marker\n"
    "                       behind the flow's first packets, to leave in order\n"
    "                       (default 500; longer than the switch's rule install\n"
    "                       takes under load)\n"
    "  --idle-nap-after-ms MS\n"
    "                       with --coopsched, position 0: after MS ms without a\n"
    "                       packet the chain is idle and leaves its core idle too:\n"
    "                       position 0 sleeps 10-100 us between polls of its port\n"
    "                       (up to 1 ms once idle for a second) and the other\n"
    "                       positions sleep until it has packets, so threads that\n"
    "                       are not coopsched's (statistics, Redis, a new instance\n"
    "                       starting on the core) get the core; the first packet\n"
    "                       after a pause waits up to 100 us more (1 ms after a\n"
    "                       second); a chain that gets a packet at least every MS\n"
    "                       ms never naps and pays no latency for it (default\n"
    "                       100; 0: never, the chain polls while attached)\n"
    "  --wait-futex         without --coopsched: wait for a turn asleep on a semaphore\n"
    "                       (a futex in the chain buffer) that the previous NF posts,\n"
    "                       as NFVnice's NFs do under the normal scheduler (a baseline\n"
    "                       for benchmarks; default: sched_yield, then 200 us sleeps)\n"
    "  --list [--json]      list the NFs (with --load: the tenant's too) and exit;\n"
    "                       with --json print the NF catalogue as JSON: each NF's\n"
    "                       name, help, argument schemas and \"state\": {\"scope\":\n"
    "                       \"per-flow\"|\"global\", \"doc\", \"per_flow_if\"?} (whether\n"
    "                       its flows can move to another instance with their state:\n"
    "                       KEEL_NF_STATE in keel/nf.h; per-flow if not declared)\n"
    "  --check              run each --nf's Init on its configuration, without ports\n"
    "                       or a chain (a device-less DPDK EAL without hugepages, for NFs\n"
    "                       that use DPDK libraries), and exit: 0 if every one is\n"
    "                       accepted, 2 with Init's message naming the NF and the\n"
    "                       field (e.g. \"nat.external_ip: 'x' is not an IPv4\n"
    "                       address\") if one is not\n"
    "\n"
    "The statistics file (cycles from rdtsc; counters count from the start; keel-chain\n"
    "writes the same, as position 0 of 1 with all its NFs in \"nfs\"):\n"
    "  {\"position\": K, \"of\": N, \"pid\": P, \"unix_ms\": T, \"final\": false|true,\n"
    "   \"tsc_hz\": HZ, \"seconds\": S (since the packet loop started),\n"
    "   \"chain_buffer\": PATH or null, \"turns\": n, \"order_violations\": n,\n"
    "   \"bad_descriptors\": {\"written_by\": J, \"count\": n} (packets dropped because\n"
    "   the descriptor position J, the one before this, left pointing outside its slot),\n"
    "   \"cycles\": {\"rx\", \"rx_idle\", \"nf\", \"copy_in\", \"view\", \"copy_out\", \"tx\",\n"
    "              \"sojourn\", \"busy\", \"handoff\": cycles, \"turns\": n} (where this position's turns\n"
    "   went; busy is all of them, handoff the cycles from the previous position\n"
    "   passing the turn to this one starting),\n"
    "   \"handoff_wait\": those handoff cycles of the turns that found packets in the\n"
    "   chain buffer (the scheduler's share of their sojourn), and \"turn_busy\": the busy\n"
    "   cycles of the turns that found or left packets there (this position's share),\n"
    "   histograms like \"sojourn\",\n"
    "   \"moves\": {\"malformed\": n} (flow moves' in-band frames dropped here as no\n"
    "   move frame),\n"
    "   \"nfs\": [{\"nf\": NAME, \"packets_in\": n, \"packets_out\": n, \"dropped\": n,\n"
    "            \"bursts\": n (ProcessBatch calls), \"cycles_per_packet\": x, \"flows\": {\"count\", \"capacity\",\n"
    "            \"evictions\" (idle), \"refusals\" (full)}, \"moves\": {\"exports\", \"imports\",\n"
    "            \"failed\": n} (flow moves' frames the NF's position handed state to or\n"
    "            took it from, and those it failed), \"stats\": {..} (final only)}],\n"
    "   position 0 only:\n"
    "   \"port\": {\"rx_packets\", \"rx_bytes\", \"rx_malformed\", \"tx_packets\", \"tx_bytes\",\n"
    "            \"tx_dropped\", \"tx_too_long\", \"copied\", \"copy_dropped\": n,\n"
    "            \"rx_queue_len\": n, or null where the PMD cannot tell,\n"
    "            \"rx_port\", \"tx_port\": NAME},\n"
    "   \"ingress\": {\"zero_copy\": true|false (received into the chain buffer),\n"
    "               \"zero_copy_packets\": n (entered it without a copy)},\n"
    "   \"egress\": {\"zero_copy\": true|false, \"zero_copy_packets\": n, \"fallbacks\": n},\n"
    "   \"bursts_per_turn\": B (the most bursts a turn receives: the batch size\n"
    "   coopsched's SetBatch sets), \"batches\": n (turns that received packets),\n"
    "   \"cycles_per_batch\": x (busy cycles of those turns, each on average),\n"
    "   \"sojourn\": each packet's TSC cycles from the receive burst that brought it to\n"
    "   the transmit burst that sent it (or the turn that found it dropped), and\n"
    "   \"rx_wait_bound\": the cycles since the poll before the one that received it (the\n"
    "   most it can have waited in the VF's queue unseen), both cumulative histograms\n"
    "   {\"unit\": \"tsc_cycles\", \"sub_bucket_bits\": 6, \"count\", \"sum\", \"max\": n,\n"
    "   \"buckets\": [[BUCKET, n], ...]}: values under 64 a bucket each, each power of\n"
    "   two above split into 64 (keel/sojourn.h)}\n";

keel::Member* g_member = nullptr;
void OnSignal(int) {
  if (g_member) g_member->Stop();
}


constexpr char kShmDir[] = "/dev/shm/keel";

/* Makes kShmDir if it is missing and checks that only this user can change
 * what is in it: a real directory (not a link), owned by the effective user,
 * writable by no one else. Otherwise another user could swap a chain's
 * directory for one of its own. */
bool SharedDirIsOurs(std::string* err) {
  mkdir(kShmDir, 0755);
  struct stat st;
  if (lstat(kShmDir, &st) != 0) {
    *err = std::string(kShmDir) + ": " + std::strerror(errno);
    return false;
  }
  if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH))) {
    *err = std::string(kShmDir) + ": not a directory of this user that only it can write; "
           "refusing to put chain buffers in it (give --pktbuf)";
    return false;
  }
  return true;
}

bool ValidId(const std::string& id) {
  if (id.empty() || id.size() > 64 || id[0] == '.') return false;
  for (char c : id)
    if (!isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') return false;
  return true;
}

/* HOST:PORT with a port in 1..65535, or unix:PATH. */
bool ValidRedisAddr(const std::string& addr) {
  if (addr.rfind("unix:", 0) == 0) return addr.size() > 5;
  size_t colon = addr.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  char* end = nullptr;
  long port = std::strtol(addr.c_str() + colon + 1, &end, 10);
  return colon + 1 < addr.size() && *end == '\0' && port >= 1 && port <= 65535;
}

/* The NAME of "--wait-iface NAME[:MS]"; MS, if given, into |*ms|. */
std::string ParseWaitIface(const std::string& arg, int* ms) {
  size_t colon = arg.find(':');
  std::string name = arg.substr(0, colon);
  if (name.empty() || name.size() >= IF_NAMESIZE || name.find('/') != std::string::npos)
    UsageError("--wait-iface: '" + name + "' is not an interface name");
  if (colon != std::string::npos) *ms = ParseInt("--wait-iface", arg.c_str() + colon + 1, 1, 3600000);
  return name;
}

/* Waits, polling every 10 ms, until interface |name| exists; false after |ms|. */
bool WaitForIface(const std::string& name, int ms) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (if_nametoindex(name.c_str()) == 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(kIfacePoll);
  }
  return true;
}

/* keel-nf --check: Init of every NF spec on its configuration; exit status 0 or 2. */
int CheckNfs(char* argv0, const std::vector<std::string>& nfs) {
  if (nfs.empty()) UsageError("--check needs at least one --nf");
  std::vector<keel::NfSpec> specs;
  for (const std::string& nf : nfs) {
    specs.push_back(keel::ParseNfSpec(nf));
    if (!keel::CreateNf(specs.back().name))
      UsageError("--nf: unknown NF '" + specs.back().name + "' (keel-nf --list shows the NFs)");
  }
  std::string prefix = "--file-prefix=keel-check-" + std::to_string(getpid());
  std::vector<std::string> eal{argv0, "--no-pci", "--no-huge", "-m", "160", "--no-shconf",
                               "--log-level=error", "--no-telemetry", prefix};
  if (std::string err; !keel::EalInit(eal, &err)) {
    std::fprintf(stderr, "keel-nf: %s\n", err.c_str());
    return 1;
  }
  std::string runtime_dir = rte_eal_get_runtime_dir();
  int rc = 0;
  for (const keel::NfSpec& spec : specs) {
    try {
      keel::MakeNf(spec.name, spec.config);
    } catch (const keel::ConfigError& e) {
      std::fprintf(stderr, "keel-nf: %s\n", e.what());
      rc = kExitUsage;
      break;
    }
  }
  rte_eal_cleanup();
  /* The EAL's run-time files of this one-shot process. */
  std::error_code ignored;
  std::filesystem::remove_all(runtime_dir, ignored);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  keel::cli::program = "keel-nf";
  keel::MemberOptions opt;
  opt.count = 0;
  opt.position = -1;
  std::string chain_id, coopsched, redis, redis_auth_file, tenant = "default", wait_iface;
  int wait_iface_ms = kWaitForIfaceMs;
  std::vector<std::string> loads, nfs;
  keel::FlowLimits flows;
  bool list = false, json = false, check = false;
  int eal_at = argc;
  for (int i = 1; i < argc; i++)
    if (std::string(argv[i]) == "--") {
      eal_at = i;
      break;
    }
  static const option kOptions[] = {
      {"nf", required_argument, nullptr, 'n'},       {"chain-id", required_argument, nullptr, 'c'},
      {"position", required_argument, nullptr, 'k'}, {"of", required_argument, nullptr, 'o'},
      {"pktbuf", required_argument, nullptr, 'p'},   {"coopsched", required_argument, nullptr, 's'},
      {"exit-when-idle", required_argument, nullptr, 'i'},
      {"stats", required_argument, nullptr, 'S'},    {"help", no_argument, nullptr, 'h'},
      {"stats-interval", required_argument, nullptr, 'I'},
      {"load", required_argument, nullptr, 'L'},
      {"copy-each-hop", no_argument, nullptr, 'C'},
      {"wait-futex", no_argument, nullptr, 'W'},
      {"egress-copy", no_argument, nullptr, 'X'},
      {"rx-copy", no_argument, nullptr, 'R'},
      {"handover-timeout-ms", required_argument, nullptr, 'H'},
      {"idle-nap-after-ms", required_argument, nullptr, 'N'},
      {"wait-iface", required_argument, nullptr, 'w'},
      {"redis", required_argument, nullptr, 'r'},    {"tenant", required_argument, nullptr, 't'},
      {"redis-auth-file", required_argument, nullptr, 'A'},
      {"list", no_argument, nullptr, 'l'},           {"json", no_argument, nullptr, 'j'},
      {"check", no_argument, nullptr, 'K'},
      {"flow-capacity", required_argument, nullptr, 'F'},
      {"flow-idle-ms", required_argument, nullptr, 'E'},
      {"secrets", required_argument, nullptr, 'Z'},
      {nullptr, 0, nullptr, 0}};
  opterr = 0;
  int c;
  while ((c = getopt_long(eal_at, argv, ":", kOptions, nullptr)) != -1) {
    switch (c) {
      case 'n': nfs.push_back(optarg); break;
      case 'c': chain_id = optarg; break;
      case 'k': opt.position = ParseInt("--position", optarg, 0, KEEL_SCHED_MAX_NFS - 1); break;
      case 'o': opt.count = ParseInt("--of", optarg, 1, KEEL_SCHED_MAX_NFS); break;
      case 'p': opt.pktbuf_path = optarg; break;
      case 's': coopsched = optarg; opt.coopsched = true; break;
      case 'i': opt.exit_when_idle_ms = ParseInt("--exit-when-idle", optarg, 1, 86400000); break;
      case 'S': opt.stats_path = optarg; break;
      case 'I': opt.stats_interval_ms = ParseInt("--stats-interval", optarg, 10, 3600000); break;
      case 'l': list = true; break;
      case 'j': json = true; break;
      case 'K': check = true; break;
      case 'h':
        std::fputs(kUsage, stdout);
        std::fputs(keel::cli::kCatalogHelp, stdout);
        return 0;
      case 'L': loads.push_back(optarg); break;
      case 'C': opt.copy_each_hop = true; break;
      case 'W': opt.wait_futex = true; break;
      case 'X': opt.egress_zero_copy = false; break;
      case 'R': opt.rx_zero_copy = false; break;
      case 'H': opt.handover_timeout_ms = ParseInt("--handover-timeout-ms", optarg, 1, 60000); break;
      case 'N': opt.idle_nap_after_ms = ParseInt("--idle-nap-after-ms", optarg, 0, 60000); break;
      case 'r': redis = optarg; break;
      case 'A': redis_auth_file = optarg; break;
      case 'w': wait_iface = ParseWaitIface(optarg, &wait_iface_ms); break;
      case 't': tenant = optarg; break;
      case 'F': flows.capacity = static_cast<size_t>(ParseInt("--flow-capacity", optarg, 1, 1 << 24)); break;
      case 'Z': keel::SetSecretsDir(optarg); break;
      case 'E': flows.idle_timeout_ms = static_cast<uint64_t>(ParseInt("--flow-idle-ms", optarg, 0, 86400000)); break;
      case ':': UsageError(std::string(argv[optind - 1]) + " needs a value");
      default: UsageError(std::string("unknown option ") + argv[optind - 1]);
    }
  }
  if (optind < eal_at) UsageError(std::string("unexpected argument '") + argv[optind] + "'");
  for (const std::string& so : loads)
    if (std::string err; !keel::LoadNfLibrary(so, nullptr, &err)) UsageError("--load " + err);
  if (json && !list) UsageError("--json goes with --list");
  if (list) {
    keel::cli::PrintCatalog(json);
    return 0;
  }
  if (check) return CheckNfs(argv[0], nfs);
  if (nfs.size() != 1) UsageError(nfs.empty() ? "--nf is required" : "--nf is given more than once (only --check takes several)");
  const std::string& nf = nfs[0];
  if (!ValidId(chain_id)) UsageError("--chain-id: '" + chain_id + "' is not a chain id ([A-Za-z0-9_.-], 1-64)");
  if (opt.position < 0 || opt.count == 0) UsageError("--position and --of are required");
  if (opt.position >= opt.count)
    UsageError("--position " + std::to_string(opt.position) + " is not below --of " + std::to_string(opt.count));
  if (opt.position > 0 && eal_at < argc - 1)
    UsageError("DPDK EAL arguments are for position 0 only: the others never open the port");
  if (!wait_iface.empty() && opt.position != 0)
    UsageError("--wait-iface is for position 0 only: the others never open the port");
  if (opt.wait_futex && opt.coopsched)
    UsageError("--wait-futex is for chains without --coopsched (coopsched hands the core on itself)");
  if (!ValidId(tenant)) UsageError("--tenant: '" + tenant + "' is not a tenant name ([A-Za-z0-9_.-], 1-64)");
  if (!redis.empty() && !ValidRedisAddr(redis)) UsageError("--redis: '" + redis + "' is not HOST:PORT or unix:PATH");
  if (!redis_auth_file.empty() && redis.empty()) UsageError("--redis-auth-file goes with --redis");
  keel::RedisAuth redis_auth;
  if (std::string err; !redis_auth_file.empty() && !keel::ReadRedisAuthFile(redis_auth_file, &redis_auth, &err)) {
    std::fprintf(stderr, "keel-nf: --redis-auth-file %s\n", err.c_str());
    return 1;
  }
  if (!coopsched.empty() && coopsched.rfind("unix:", 0) != 0)
    UsageError("--coopsched: '" + coopsched + "' is not unix:PATH");
  keel::NfSpec spec = keel::ParseNfSpec(nf);
  if (!keel::CreateNf(spec.name)) UsageError("--nf: unknown NF '" + spec.name + "' (keel-chain --list shows the NFs)");
  try {
    keel::Config::ParseText(spec.config, "--nf " + spec.name);
  } catch (const keel::ConfigError& e) {
    UsageError(e.what());
  }
  if (!wait_iface.empty() && !WaitForIface(wait_iface, wait_iface_ms)) {
    std::fprintf(stderr, "keel-nf: --wait-iface: interface %s did not appear within %d ms\n",
                 wait_iface.c_str(), wait_iface_ms);
    return 1;
  }

  std::string own_dir; /* the chain's directory position 0 made, removed at exit */
  if (opt.pktbuf_path.empty()) {
    std::string dir = kShmDir;
    if (std::string err; !SharedDirIsOurs(&err)) {
      std::fprintf(stderr, "keel-nf: %s\n", err.c_str());
      return 1;
    }
    dir += "/" + chain_id;
    if (opt.position == 0) {
      /* A directory that is there already was made by someone else: another
       * instance of the chain, one that died without cleaning up, or a
       * process that wants this chain's packets. */
      if (mkdir(dir.c_str(), 0700) != 0) {
        std::fprintf(stderr, "keel-nf: %s: %s\n", dir.c_str(),
                     errno == EEXIST ? "already exists: another instance of this chain id runs, or one "
                                       "ended without removing it (remove it if no keel-nf of the chain runs)"
                                     : std::strerror(errno));
        return 1;
      }
      own_dir = dir;
    }
    opt.pktbuf_path = dir + "/pktbuf";
  }

  /* Positions after the first get an EAL of their own without devices
   * (some NFs use DPDK libraries), so they never map the NIC's buffers. */
  std::string prefix = "--file-prefix=keel-" + chain_id + "-" + std::to_string(opt.position);
  std::vector<std::string> eal_words{argv[0]};
  if (opt.position == 0) {
    for (int i = eal_at + 1; i < argc; i++) eal_words.push_back(argv[i]);
  } else {
    eal_words.insert(eal_words.end(), {"--no-pci", "--no-huge", "-m", "256", "--log-level=error",
                                       "--no-telemetry", prefix});
  }
  if (std::string err; !keel::EalInit(eal_words, &err)) {
    std::fprintf(stderr, "keel-nf: %s\n", err.c_str());
    return 1;
  }

  int rc = 0;
  {
    std::unique_ptr<keel::Chain> chain;
    try {
      chain = std::make_unique<keel::Chain>(std::vector<keel::NfSpec>{spec});
    } catch (const keel::ConfigError& e) {
      std::fprintf(stderr, "keel-nf: %s\n", e.what());
      rte_eal_cleanup();
      return kExitUsage;
    }
    chain->SetFlowLimits(flows);
    rte_mempool* pool = nullptr;  /* this process's own, freed at the end */
    std::unique_ptr<keel::ChainRxPool> rx_pool;
    std::unique_ptr<keel::PktBuf> buf;
    std::string err;
    if (opt.position == 0) {
      if (rte_eth_dev_count_avail() == 0) err = "no DPDK port (give a PCI device or --vdev)";
      if (err.empty()) buf = keel::Member::MakeBuffer(opt, &err);
      if (buf && opt.rx_zero_copy && opt.count > 1) {
        rx_pool = keel::ChainRxPool::Create(buf.get(), 0, &err);
        if (!rx_pool) {
          std::fprintf(stderr, "keel-nf: %s; copying into the chain buffer instead\n", err.c_str());
          err.clear();
          opt.rx_zero_copy = false;
        }
      }
      if (buf && !rx_pool) pool = keel::MbufPool("keel_nf_pool", 8191, 256, &err);
      if (err.empty()) keel::PortInit(0, rx_pool ? rx_pool->pool() : pool, &err);
    } else if (opt.copy_each_hop) {
      /* The packet memory of this process alone, for its private copies. */
      pool = keel::MbufPool("keel_nf_private", 1023, 64, &err);
    }
    std::unique_ptr<keel::RedisMirror> mirror;
    if (err.empty() && !redis.empty()) {
      mirror = std::make_unique<keel::RedisMirror>(redis, std::chrono::milliseconds(100));
      mirror->SetAuth(redis_auth);
      mirror->Add(&chain->nf(0)->state(), keel::StateKey(tenant, chain_id, static_cast<size_t>(opt.position),
                                                        chain->name(0)));
      mirror->Start();
    }
    std::unique_ptr<keel::Member> member;
    if (err.empty())
      member = keel::Member::Create(chain.get(), rx_pool ? rx_pool->pool() : pool, std::move(buf), opt,
                                    kWaitForBufferMs, &err);
    if (member && !coopsched.empty() &&
        !keel::AnnounceToCoopsched(coopsched, chain_id, opt.position, opt.count,
                                   opt.pktbuf_path, &err))
      member.reset();
    if (!member) {
      std::fprintf(stderr, "keel-nf: %s\n", err.c_str());
      rc = 1;
    } else {
      g_member = member.get();
      std::signal(SIGINT, OnSignal);
      std::signal(SIGTERM, OnSignal);
      /* What faas-cli logs CHAIN shows of a healthy NF. */
      std::fprintf(stderr, "keel-nf: chain %s position %d of %d: %s running%s\n", chain_id.c_str(), opt.position,
                   opt.count, chain->name(0).c_str(), coopsched.empty() ? "" : " under keel-coopsched");
      if (!member->Run(&err)) {
        std::fprintf(stderr, "keel-nf: %s\n", err.c_str());
        rc = 1;
      } else {
        std::fprintf(stderr, "keel-nf: chain %s position %d: %s stopped\n", chain_id.c_str(), opt.position,
                     chain->name(0).c_str());
      }
      g_member = nullptr;
    }
    if (opt.position == 0) {
      rte_eth_dev_stop(0);
      rte_eth_dev_close(0);
    }
    rx_pool.reset(); /* the port gave its buffers back; the chain buffer is still mapped */
    member.reset();
    if (mirror) mirror->Stop(std::chrono::milliseconds(1000));
    chain.reset();
    if (pool) rte_mempool_free(pool);
  }
  if (!own_dir.empty()) rmdir(own_dir.c_str());
  rte_eal_cleanup();
  return rc;
}
