/* SPDX-License-Identifier: Apache-2.0 */
#include "flags.h"

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <functional>
#include <map>

namespace keel::ingress {

namespace {

/* EAL arguments when none follow `--`: core 0 only, no PCI scan, no huge
 * pages needed, the ToR's ingress port as an AF_XDP socket on keel-ing. */
const char* const kDefaultEal[] = {"-l", "0", "--no-pci", "--no-huge", "-m", "512", "--no-shconf",
                                   "--no-telemetry", "--log-level=error", "--vdev", "net_af_xdp0,iface=keel-ing"};

/* How much longer than its two calls' deadlines the lcore holds a setup's
 * packets: the control thread's decision is due before then. */
constexpr uint64_t kHoldTimeoutExtraMs = 250;

bool ParseUint(const std::string& s, uint64_t max, uint64_t* out) {
  if (s.empty() || s[0] == '-' || s[0] == '+') return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno || *end || v > max) return false;
  *out = v;
  return true;
}

}  // namespace

std::string Usage() {
  return R"(keel-ingress: the software ingress of keel's top-of-rack switch.

The ToR sends every packet it has no flow rule for (table-miss) to this
ingress's port. keel-ingress parses it (Ethernet/IPv4/TCP/UDP), matches the
first packet of each new flow against the chains' traffic filters (pcap-filter
expressions, followed live from the gateway's Control.Watch; chains in name
order, first match wins), asks the gateway for a chain instance (AssignFlows:
the new flows of a millisecond in one call)
and keel-torctl for the flow's rule (InstallFlow; with --tor-openflow the
ingress writes most rules to the ToR itself), holding the flow's packets
meanwhile. Once the rule is in, it sends the held packets back through the
ToR in order, then has the rule widened to every port. A flow that matches
no chain is sent back unchanged (the ToR forwards it to the uplink) or
dropped. Nothing is lost unless a buffer overflows or a setup fails; every
drop is counted by reason.

The gateway's controller may move flows between instances of their chain
(a FLOWS_MOVE on Control.Watch naming this ingress): the ingress holds the
flow's packets, has its rule taken off the ToR, carries the flow's NF state
from the old instance to the new one in band, installs the flow's rule to the
new instance and sends what it held there in order; then it tells the gateway
(ReportMoves). A move that fails leaves the flow whole on its old instance.

usage: keel-ingress [FLAGS] [-- EAL ARGS]

control plane:
  --gateway HOST:PORT      keel-gateway's gRPC address (Control)       [127.0.0.1:50051]
  --torctl HOST:PORT       keel-torctl's gRPC address (TorControl)     [127.0.0.1:50070]
  --ingress-id ID          this ingress's name in AssignFlow and stats [ingress-0]
  --control-token-file FILE
                           the control-plane token: every call to the
                           gateway and torctl carries "authorization:
                           Bearer TOKEN", TOKEN this file's content (the
                           first of keel's servers to start makes the
                           file; they refuse calls without it)
                           [/var/lib/keel/secrets/control-token]
  --assign-timeout-ms MS   deadline of one AssignFlows call            [500]
  --assign-attempts N      AssignFlows calls per new flow: a flow whose
                           call runs out of time or finds the gateway
                           unavailable is sent again (the gateway answers
                           a flow it has assigned with the same
                           instance)                                   [3]
  --assign-batch N         most new flows in one AssignFlows call      [64]
  --assign-window-us US    how long a new flow waits for others to share
                           its AssignFlows call; a full batch goes at
                           once, and so does a flow that comes this long
                           after the last call went                    [1000]
  --assign-busy-rate N     new flows a second (over the last ~100 ms) from
                           which a new flow waits --assign-window-us for
                           others; slower, it goes at once (0: always
                           waits)                                       [0]
  --max-assigning N        new flows in AssignFlows calls at once; new
                           flows beyond them wait their turn, and one that
                           waited longer than --assign-patience-ms is
                           dropped (control_busy): past the gateway's
                           capacity, flows that can still be set up in
                           time are, instead of every flow timing out and
                           being asked again                           [256]
  --assign-patience-ms MS  how long a new flow may wait for its place in
                           a call; 0: as long as its calls could take
                           (assign timeout x attempts), so a slow or
                           restarting gateway costs latency, not packets [0]
  --install-timeout-ms MS  deadline of one InstallFlow                 [1000]
  --tor-openflow PATH      the ToR's OpenFlow Unix socket (Open vSwitch:
                           /var/run/openvswitch/BRIDGE.mgmt): a flow's own
                           rule is written there by the ingress, from the
                           rule template keel-torctl returned with an
                           earlier flow of the same chain instance, and
                           reported to torctl in batches (RecordFlows);
                           the first flow of an instance, and any flow
                           whose write fails, goes through torctl. "":
                           torctl installs every rule                  [""]
  --rule-template-ttl-ms MS
                           how long a rule template is used before the
                           next flow of its instance asks torctl again
                           (a chain change the Watch announces drops the
                           chain's templates at once)                  [1000]
  --idle-timeout S         the ToR rule's idle timeout (0: torctl's default) [0]
  --report-interval-ms MS  ReportIngressStats period                   [2000]

data plane:
  --no-chain forward|drop  a flow matching no chain: send it back to the ToR
                           tagged with VLAN 4094 (the ToR pops the tag and
                           sends it to its uplink), or drop it (counted as
                           no_chain)                                   [forward]
  --hold-per-flow N        packets held per flow in setup              [64]
  --hold-max N             packets held in all                         [16384]
  --max-flows N            flows in setup or recently installed        [65536]
  --retry-backoff-ms MS    after a failed setup, the flow's packets are
                           dropped this long before it may try again   [200]
  --retire-ms MS           an installed flow is forgotten after this
                           long without a packet reaching the ingress  [2000]
  --idle-sleep-max-us US   longest nap of the packet loop when idle; it
                           sets the idle CPU (on this VM ~1.4 % of a core
                           at 2000 us, ~9 % at 200 us) and, with
                           --port-wake off, the latency an idle ingress
                           adds to a new flow's first packet           [2000]
  --port-wake on|off       on: the packet loop sleeps on the port's own
                           socket (net_af_packet, net_af_xdp), so a frame
                           ends its nap at once; off, or with another PMD:
                           it naps 25-200 us while flows are set up, which
                           costs 13-17 % of a core at any rate of new
                           flows                                         [on]
  --chain-reinject on|off  on: a switch-only chain's flows go back to the
                           ToR tagged with the chain's reinject VLAN (the
                           gateway's), which one rule per chain steers
                           through its switch NFs, once keel-torctl says
                           that rule is on the switch; off: each flow
                           waits for a stage-1 rule of its own (for
                           comparison, bench/switch_setup.py)          [on]
  --marker-quiet-us US     once a flow's own rule is in, the ingress sends
                           its instance a marker after the flow's last
                           packet here, when none came for this long; the
                           instance holds the flow's direct packets until
                           the marker, so they cannot overtake the ones
                           still passing through the ingress         [10000]
  --move-hold-per-flow N   packets held per flow while it moves        [2048]
  --move-hold-max N        packets held by all moving flows            [8192]
  --move-idle-quiet-us US  a moving flow's state leaves its old instance once
                           its rule is off the switch and its first packet
                           came here --marker-quiet-us ago (the switch has let
                           go of it, its last packets to the old instance have
                           arrived); a flow that sends nothing waits this long
                           after its rule went instead                 [50000]
  --move-frame-timeout-ms MS
                           a move's state frame (export from the flow's
                           old instance, import into its new one) that is
                           not back this long after it went fails the
                           move (timeout): the flow stays on its old
                           instance                                    [200]
  A setup that has no answer after assign timeout x attempts + install
  timeout + 250 ms is dropped as timeout. Until the gateway's first chain list arrives (at
  start, and after a restart) new flows are dropped as not_synced: the no-chain path would
  deliver a chain's packets untransformed.

reports:
  --metrics HOST:PORT      Prometheus /metrics (keel_ingress_*); "" disables [127.0.0.1:9103]
  --stats-json FILE        write the counters as JSON at exit and on SIGUSR1
  --help                   this text

EAL ARGS go to DPDK; the first port is the ingress port. Without them:
  -l 0 --no-pci --no-huge -m 512 --no-shconf --no-telemetry --log-level=error
  --vdev net_af_xdp0,iface=keel-ing

example (the ToR's ingress port is the veth keel-ing, read with AF_PACKET):
  keel-ingress --gateway 127.0.0.1:50051 --torctl 127.0.0.1:50070 --no-chain drop \
    --stats-json /tmp/ingress.json -- -l 0 --no-pci --no-huge -m 512 --no-shconf \
    --vdev net_af_packet0,iface=keel-ing

SIGTERM or SIGINT: exits within a second. Exit status 2: bad flags or no usable token file.
)";
}

bool ParseFlags(int argc, char** argv, Flags* f, std::string* err) {
  std::map<std::string, std::function<bool(const std::string&)>> strings = {
      {"--gateway", [&](const std::string& v) { f->control.gateway = v; return !v.empty(); }},
      {"--torctl", [&](const std::string& v) { f->control.torctl = v; return !v.empty(); }},
      {"--tor-openflow", [&](const std::string& v) { f->control.tor_openflow = v; return true; }},
      {"--ingress-id", [&](const std::string& v) { f->control.ingress_id = v; return !v.empty(); }},
      {"--control-token-file", [&](const std::string& v) { f->control_token_file = v; return !v.empty(); }},
      {"--metrics", [&](const std::string& v) { f->metrics = v; return true; }},
      {"--stats-json", [&](const std::string& v) { f->stats_json = v; return !v.empty(); }},
      {"--port-wake",
       [&](const std::string& v) {
         f->port_wake = v == "on";
         return v == "on" || v == "off";
       }},
      {"--chain-reinject",
       [&](const std::string& v) {
         f->control.chain_reinject = v == "on";
         return v == "on" || v == "off";
       }},
      {"--no-chain",
       [&](const std::string& v) {
         f->dataplane.no_chain_forward = v == "forward";
         return v == "forward" || v == "drop";
       }},
  };
  uint64_t assign_ms = 500, assign_attempts = 3, install_ms = 1000, backoff_ms = 200, retire_ms = 2000;
  uint64_t hold_per_flow = 64, hold_max = 16384, max_flows = 65536, idle_s = 0, report_ms = 2000, sleep_us = 2000,
           quiet_us = 10000;
  uint64_t max_assigning = 256, assign_batch = 64, assign_window_us = 1000, assign_patience_ms = 0, assign_busy_rate = 0;
  uint64_t template_ttl_ms = 1000;
  uint64_t move_hold_per_flow = 2048, move_hold_max = 8192, move_frame_ms = 200, move_idle_quiet_us = 50000;
  struct Num {
    uint64_t* v;
    uint64_t min, max;
  };
  std::map<std::string, Num> numbers = {
      {"--assign-timeout-ms", {&assign_ms, 1, 600000}},   {"--install-timeout-ms", {&install_ms, 1, 600000}},
      {"--assign-attempts", {&assign_attempts, 1, 10}},   {"--max-assigning", {&max_assigning, 1, 65536}},
      {"--assign-batch", {&assign_batch, 1, 1024}},       {"--assign-window-us", {&assign_window_us, 0, 100000}},
      {"--assign-busy-rate", {&assign_busy_rate, 0, 10000000}},
      {"--assign-patience-ms", {&assign_patience_ms, 0, 600000}},
      {"--retry-backoff-ms", {&backoff_ms, 0, 600000}},   {"--retire-ms", {&retire_ms, 1, 3600000}},
      {"--hold-per-flow", {&hold_per_flow, 1, 65536}},    {"--hold-max", {&hold_max, 1, 1u << 22}},
      {"--max-flows", {&max_flows, 1, 1u << 24}},         {"--idle-timeout", {&idle_s, 0, 65535}},
      {"--report-interval-ms", {&report_ms, 100, 3600000}}, {"--idle-sleep-max-us", {&sleep_us, 1, 100000}},
      {"--marker-quiet-us", {&quiet_us, 0, 1000000}},     {"--rule-template-ttl-ms", {&template_ttl_ms, 1, 3600000}},
      {"--move-hold-per-flow", {&move_hold_per_flow, 1, 1u << 20}}, {"--move-hold-max", {&move_hold_max, 1, 1u << 22}},
      {"--move-frame-timeout-ms", {&move_frame_ms, 1, 600000}}, {"--move-idle-quiet-us", {&move_idle_quiet_us, 0, 10000000}},
  };

  f->eal = {argv[0]};
  int i = 1;
  for (; i < argc; i++) {
    std::string arg = argv[i];
    if (arg == "--") break;
    if (arg == "--help" || arg == "-h") {
      f->help = true;
      return true;
    }
    std::string name = arg, value;
    bool has_value = false;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    bool known = strings.count(name) || numbers.count(name);
    if (!known) {
      *err = "unknown flag " + name + " (EAL arguments go after --)";
      return false;
    }
    if (!has_value) {
      if (i + 1 >= argc) {
        *err = name + " needs a value";
        return false;
      }
      value = argv[++i];
    }
    if (auto s = strings.find(name); s != strings.end()) {
      if (!s->second(value)) {
        *err = name + ": bad value \"" + value + "\"";
        return false;
      }
      continue;
    }
    const Num& n = numbers[name];
    if (!ParseUint(value, n.max, n.v) || *n.v < n.min) {
      *err = name + ": want a whole number from " + std::to_string(n.min) + " to " + std::to_string(n.max) +
             ", got \"" + value + "\"";
      return false;
    }
  }
  if (i < argc) {
    for (i++; i < argc; i++) f->eal.push_back(argv[i]);
  }
  if (f->eal.size() == 1) f->eal.insert(f->eal.end(), std::begin(kDefaultEal), std::end(kDefaultEal));
  if (hold_per_flow > hold_max) {
    *err = "--hold-per-flow (" + std::to_string(hold_per_flow) + ") exceeds --hold-max (" + std::to_string(hold_max) + ")";
    return false;
  }
  if (move_hold_per_flow > move_hold_max) {
    *err = "--move-hold-per-flow (" + std::to_string(move_hold_per_flow) + ") exceeds --move-hold-max (" +
           std::to_string(move_hold_max) + ")";
    return false;
  }

  f->control.assign_timeout_ms = static_cast<int>(assign_ms);
  f->control.assign_attempts = static_cast<int>(assign_attempts);
  f->control.max_assigning = static_cast<int>(max_assigning);
  f->control.assign_patience_ms = static_cast<int>(assign_patience_ms);
  f->control.assign_batch = static_cast<int>(assign_batch);
  f->control.assign_window_us = static_cast<int>(assign_window_us);
  f->control.assign_busy_rate = static_cast<int>(assign_busy_rate);
  f->control.install_timeout_ms = static_cast<int>(install_ms);
  f->control.template_ttl_ms = static_cast<int>(template_ttl_ms);
  f->control.idle_timeout_s = static_cast<uint32_t>(idle_s);
  f->control.report_interval_ms = static_cast<int>(report_ms);
  f->dataplane.idle_sleep_max_us = static_cast<uint32_t>(sleep_us);
  f->dataplane.marker_quiet_us = static_cast<uint32_t>(quiet_us);
  FlowTableConfig& t = f->dataplane.table;
  t.hold_per_flow = static_cast<uint32_t>(hold_per_flow);
  t.hold_max = static_cast<uint32_t>(hold_max);
  t.max_flows = static_cast<uint32_t>(max_flows);
  t.retry_backoff_ns = backoff_ms * 1'000'000;
  t.retire_ns = retire_ms * 1'000'000;
  t.hold_timeout_ns = (assign_ms * assign_attempts + install_ms + kHoldTimeoutExtraMs) * 1'000'000;
  MoverConfig& m = f->dataplane.mover;
  m.hold_per_flow = static_cast<uint32_t>(move_hold_per_flow);
  m.hold_max = static_cast<uint32_t>(move_hold_max);
  m.quiet_ns = quiet_us * 1000;
  m.idle_quiet_ns = move_idle_quiet_us * 1000;
  m.frame_timeout_ns = move_frame_ms * 1'000'000;
  /* RemoveFlow's deadline, or an install's behind a queue of them: the control thread answers first. */
  m.rule_timeout_ns = (2 * install_ms + kHoldTimeoutExtraMs) * 1'000'000;
  return true;
}

}  // namespace keel::ingress
