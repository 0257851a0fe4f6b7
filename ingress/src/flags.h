/* SPDX-License-Identifier: Apache-2.0 */
/* keel-ingress's command line: its own flags, then `--` and DPDK EAL arguments. */
#ifndef KEEL_INGRESS_FLAGS_H_
#define KEEL_INGRESS_FLAGS_H_

#include <string>
#include <vector>

#include "control.h"
#include "control_token.h"
#include "dataplane.h"

namespace keel::ingress {

struct Flags {
  ControlConfig control;
  DataPlaneConfig dataplane;
  std::string control_token_file = kDefaultControlTokenFile;
  std::string metrics = "127.0.0.1:9103";
  std::string stats_json;
  std::vector<std::string> eal;  /* argv for rte_eal_init, program name first */
  bool port_wake = true;  /* --port-wake: sleep on the port's sockets (keel/port_wake.h) */
  bool help = false;
};

/* Parses argv into |*flags|. Returns false with |*err| naming the bad flag. */
bool ParseFlags(int argc, char** argv, Flags* flags, std::string* err);

/* The --help text. */
std::string Usage();

}  // namespace keel::ingress

#endif  // KEEL_INGRESS_FLAGS_H_
