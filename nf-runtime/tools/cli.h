/* SPDX-License-Identifier: Apache-2.0 */
/* Command-line helpers shared by keel-chain and keel-nf. */
#ifndef KEEL_TOOLS_CLI_H_
#define KEEL_TOOLS_CLI_H_

#include <cstdio>
#include <cstdlib>
#include <string>

#include "keel/nf.h"

namespace keel::cli {

/* Exit status for bad usage, bad NF names and bad configurations. */
constexpr int kExitUsage = 2;

/* The program's name in messages; set by main. */
inline const char* program = "keel";

/* Prints "<program>: <msg>" with a pointer to --help and exits 2. */
[[noreturn]] inline void UsageError(const std::string& msg) {
  std::fprintf(stderr, "%s: %s\n(run %s --help for usage)\n", program, msg.c_str(), program);
  std::exit(kExitUsage);
}

/* The integer value of |flag|, which must lie in [lo, hi]. */
inline int ParseInt(const char* flag, const char* text, int lo, int hi) {
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (!*text || *end || v < lo || v > hi)
    UsageError(std::string(flag) + ": '" + text + "' is not a number in " + std::to_string(lo) +
               ".." + std::to_string(hi));
  return static_cast<int>(v);
}

/* Text shared by the --help of keel-chain and keel-nf. */
inline const char kCatalogHelp[] =
    "The catalogue (--list --json) is one JSON object:\n"
    "  {\"version\": 1, \"nfs\": [{\"name\": NF, \"help\": LINE, \"args\": [ARG...],\n"
    "                             \"loaded_from\": SO (NFs of --load only)}]}\n"
    "ARG = {\"name\", \"type\", \"required\" (default false), \"default\", \"doc\"} where\n"
    "type is integer (minimum, maximum), boolean, string (enum), ipv4, cidr,\n"
    "proto (tcp/udp/icmp or 0..255), mac, hex (bytes), ports (N or \"lo-hi\"),\n"
    "array (items: a type, min_items, max_items) or object (fields: [ARG...]).\n"
    "An NF's configuration is a JSON object of its args: --nf 'tunnel={\"vlan\":7}'.\n";

/* Prints the registered NFs: a table, or the catalogue as JSON (CatalogJson). */
inline void PrintCatalog(bool json) {
  if (json) {
    std::printf("%s\n", CatalogJson().dump(2).c_str());
    return;
  }
  for (const NfInfo* nf : ListNfs()) std::printf("%-10s %s\n", nf->name.c_str(), nf->help.c_str());
}

}  // namespace keel::cli

#endif  // KEEL_TOOLS_CLI_H_
