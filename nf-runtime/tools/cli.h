/* SPDX-License-Identifier: Apache-2.0 */
/* Command-line helpers shared by keel-chain and keel-nf. */
#ifndef KEEL_TOOLS_CLI_H_
#define KEEL_TOOLS_CLI_H_

#include <cstdio>
#include <cstdlib>
#include <string>

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

}  // namespace keel::cli

#endif  // KEEL_TOOLS_CLI_H_
