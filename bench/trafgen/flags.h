/* SPDX-License-Identifier: Apache-2.0 */
/* keel-trafgen's command line. */
#ifndef KEEL_TRAFGEN_FLAGS_H_
#define KEEL_TRAFGEN_FLAGS_H_

#include <cstdint>
#include <string>

namespace keel::trafgen {

/* The sink's longest nap between polls while traffic is due, in µs: the
 * resolution of the latency it measures. */
constexpr uint64_t kRxPollMaxUs = 20;
/* ... and while no traffic is due. */
constexpr uint64_t kIdlePollMaxUs = 1000;

struct Flags {
  std::string scenario, out;
  uint64_t seed = 1;
  bool quiet = false, help = false;
  std::string tx_netns = "keelsrc", tx_iface = "keel-src";
  std::string rx_netns = "keelsink", rx_iface = "keel-sink";
  uint64_t drain_ms = 500;
  uint64_t open_timeout_ms = 1000;
  bool rx_wake = true;  /* --rx-wake: sleep on the ports' sockets (keel/port_wake.h) */
};

/* Parses argv. False with |*err| naming the bad flag. */
bool ParseFlags(int argc, char** argv, Flags* f, std::string* err);

/* The --help text. */
std::string Usage();

}  // namespace keel::trafgen

#endif  // KEEL_TRAFGEN_FLAGS_H_
