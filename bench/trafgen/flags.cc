/* SPDX-License-Identifier: Apache-2.0 */
#include "flags.h"

#include <cerrno>
#include <cstdlib>

namespace keel::trafgen {

namespace {

bool ParseUint(const std::string& s, uint64_t min, uint64_t max, uint64_t* out) {
  if (s.empty() || s[0] == '-' || s[0] == '+') return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno || *end || v < min || v > max) return false;
  *out = v;
  return true;
}

/* keel's network rules: only its own namespaces and links. */
bool KeelName(const std::string& s) { return s.rfind("keel", 0) == 0 && s.size() < 16; }

}  // namespace

std::string Usage() {
  return R"(keel-trafgen: traffic generator and sink for keel's three chains.

One process sends flows from the source namespace (keelsrc, veth keel-src)
into the embedded ToR and receives what comes out at the sink (keelsink,
veth keel-sink), both through DPDK's net_af_packet on core 0. Per chain it
measures latency (p50/p99/p99.9/max of data packets, and separately the
setup latency of each flow's first packet, which waits in keel-ingress
until the flow's rule is on the switch), loss, reordering and duplicates,
and checks every packet's transformation: VLAN tag and MAC rewrite
(chain1), AES-128-CBC payload that decrypts to exactly what was sent and
no blocked URL delivered (chain2), source NATed into the range and stable
per flow (chain3), untouched (flows for no chain). A line per second goes to
stderr; the result is JSON.

usage: keel-trafgen --scenario FILE.json [--out RESULT.json] [--seed N] [--quiet]

  --scenario FILE      the scenario (JSON, below)
  --out FILE           write the result there (default: stdout)
  --seed N             seeds packet sizes and which flows are blocked    [1]
  --quiet              no live line on stderr
  --drain-ms MS        after the last phase, receive until nothing arrived
                       for this long (at most 10000)                      [500]
  --open-timeout-ms MS a flow's data starts once its first packet reached
                       the sink, or after this long (counted as
                       open_timeouts)                                     [1000]
  --rx-wake on|off     on: between sends the sink sleeps on its ports'
                       sockets, and a frame wakes it; off: it polls every
                       20 us while traffic is due (below)                  [on]
  --tx-netns NS  --tx-iface IF   where to send    [keelsrc, keel-src]
  --rx-netns NS  --rx-iface IF   where to receive [keelsink, keel-sink]
                       names must start with "keel" (keel's network rules)
  --help               this text

Measurement: each payload carries the TSC at send; the sink reads the TSC
when its poll returns the packet. With --rx-wake on (the default) the
process sleeps between sends on its ports' sockets and a frame wakes it, so
latencies include the kernel's wake-up of the sink (tens of us on a busy
core; "rx_wake" and "rx_wake_ups" in the result). With --rx-wake off the
sink naps at most 20 us between polls while traffic is due
("rx_poll_max_us") and up to 1 ms when none is, so latencies are overstated
by up to the nap; that costs about a third of the shared core during make
demo, time the stack under test then waits for. It never spins on a core.

Scenario (all addresses in 198.18.0.0/15; unknown fields are errors):
  {
    "src_ip": "198.18.0.1",              optional, the source address
    "src_mac": "02:6b:65:00:00:01",      optional
    "dst_mac": "02:6b:65:00:00:02",      optional, the sink's MAC
    "chains": [                          one entry per chain (or no-chain group)
      {"name": "chain1",
       "dst_net": "198.18.1.0/24",       flows go to hosts of this prefix; the
                                         sink tells chains apart by it
       "proto": "udp",                   udp | tcp
       "dport": 5001,
       "sizes": [[64, 7], [576, 4], [1500, 1]],  L2 frame bytes and weights
       "flow_lifetime_s": 5,             a flow sends this long, then stops
       "phases": [                       one after the other, from t=0
         {"name": "ramp", "seconds": 5, "mbps": [0, 40], "new_flows_per_s": 10},
         {"name": "steady", "seconds": 10, "mbps": 40, "new_flows_per_s": 5}],
       "http": {...},                    optional, TCP only (below)
       "expect": {                       what the chain does; {} = nothing
         "vlan": 7,                      an 802.1Q tag with this id
         "dst_mac": "02:00:00:00:01:01", rewritten destination MAC
         "encrypt": {"key": HEX32, "iv": HEX32},  AES-128-CBC, PKCS#7
         "snat": {"ip": "198.18.100.1", "ports": [1024, 65535]}}}
    ],
    "malformed": {"per_s": 5,            optional: bad frames (at most 1000/s)
                  "dst_ip": "198.18.9.250",
                  "kinds": ["truncated_ipv4", "bad_ihl",
                            "ip_length_past_frame", "not_ipv4"]}
  }
  "http": {"host": "example.com", "path": "/index.html",
           "blocked_path": "/ads/banner.gif", "blocked_fraction": 0.1}
  puts "GET PATH HTTP/1.1\r\nHost: HOST\r\n\r\n" before the stamp in every
  payload; blocked_fraction of the flows ask for blocked_path instead and
  must never arrive. Sizes below a flow's headers + request + 24-byte stamp
  are raised to that. Without "expect" a chain's packets must arrive as sent.

example (stack.yml's chains, one no-chain flow group, 10 s):
  {"chains": [
    {"name": "chain1", "dst_net": "198.18.1.0/24", "sizes": [[1024, 1]],
     "phases": [{"seconds": 10, "mbps": 5, "new_flows_per_s": 2}],
     "expect": {"vlan": 7, "dst_mac": "02:00:00:00:01:01"}},
    {"name": "chain2", "dst_net": "198.18.2.0/24", "proto": "tcp", "dport": 80,
     "sizes": [[512, 1]], "http": {"blocked_fraction": 0.2},
     "phases": [{"seconds": 10, "mbps": 5, "new_flows_per_s": 2}],
     "expect": {"encrypt": {"key": "000102030405060708090a0b0c0d0e0f",
                            "iv": "0f0e0d0c0b0a09080706050403020100"}}},
    {"name": "chain3", "dst_net": "198.18.3.0/24", "sizes": [[1024, 1]],
     "phases": [{"seconds": 10, "mbps": 5, "new_flows_per_s": 2}],
     "expect": {"snat": {"ip": "198.18.100.1", "ports": [1024, 65535]}}},
    {"name": "nochain", "dst_net": "198.18.9.0/25", "sizes": [[256, 1]],
     "phases": [{"seconds": 10, "mbps": 0.2, "new_flows_per_s": 0.5}]}],
   "malformed": {"per_s": 2}}

Result (JSON): duration_s, tsc_hz, rx_poll_max_us, chains[] (offered/delivered
packets and Mbps, loss, reordered, duplicates, p50/p99/p999/max_us,
setup_p50/p99_us, open_timeouts, flows, flows_with_loss, transform_errors
and up to 5 examples, blocked_sent, blocked_delivered, nat_changes,
payload_bytes_compared), timeline[] per second and chain (rates, live flows, p99,
loss and transform_errors so far), malformed_sent,
malformed_delivered, foreign_rx (frames of no flow of this run), port_stats.

Exit status: 0 the run completed (with or without loss), 2 bad scenario or
flags, 1 a runtime failure (DPDK, namespaces). Must run as root.
)";
}

bool ParseFlags(int argc, char** argv, Flags* f, std::string* err) {
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= argc) {
        *err = a + " needs a value";
        return false;
      }
      *out = argv[++i];
      return true;
    };
    std::string v;
    if (a == "--help" || a == "-h") {
      f->help = true;
    } else if (a == "--quiet") {
      f->quiet = true;
    } else if (a == "--scenario") {
      if (!value(&f->scenario)) return false;
    } else if (a == "--out") {
      if (!value(&f->out)) return false;
    } else if (a == "--seed") {
      if (!value(&v)) return false;
      if (!ParseUint(v, 0, UINT64_MAX, &f->seed)) return *err = "--seed: expected a non-negative integer", false;
    } else if (a == "--rx-wake") {
      if (!value(&v)) return false;
      if (v != "on" && v != "off") return *err = "--rx-wake: expected on or off", false;
      f->rx_wake = v == "on";
    } else if (a == "--drain-ms") {
      if (!value(&v)) return false;
      if (!ParseUint(v, 0, 10000, &f->drain_ms)) return *err = "--drain-ms: expected 0 to 10000", false;
    } else if (a == "--open-timeout-ms") {
      if (!value(&v)) return false;
      if (!ParseUint(v, 1, 60000, &f->open_timeout_ms)) return *err = "--open-timeout-ms: expected 1 to 60000", false;
    } else if (a == "--tx-netns" || a == "--tx-iface" || a == "--rx-netns" || a == "--rx-iface") {
      if (!value(&v)) return false;
      if (!KeelName(v)) return *err = a + ": \"" + v + "\" does not start with keel (keel's network rules)", false;
      (a == "--tx-netns" ? f->tx_netns : a == "--tx-iface" ? f->tx_iface : a == "--rx-netns" ? f->rx_netns : f->rx_iface) = v;
    } else {
      *err = "unknown argument " + a;
      return false;
    }
  }
  if (!f->help && f->scenario.empty()) {
    *err = "--scenario FILE is required";
    return false;
  }
  return true;
}

}  // namespace keel::trafgen
