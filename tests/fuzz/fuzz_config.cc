/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer harness: the NF configuration parser. The input is a config's
 * JSON text, given to every library NF's Init: each must accept it or throw
 * keel::ConfigError; any other exception, or a crash, is a finding. Input:
 * an NF selector byte (255: all NFs), then the text. */
#include <string>

#include "fuzz_nfs.h"
#include "keel/nf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool eal = keel::fuzz::StartEal();
  if (size == 0) return 0;
  uint8_t which = data[0];
  std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const auto& configs = keel::fuzz::NfConfigs();
  size_t k = 0;
  for (const auto& [name, valid] : configs) {
    bool chosen = which == 255 || which % configs.size() == k++;
    if (!chosen || (name == "ipv4fwd" && !eal)) continue;
    try {
      keel::MakeNf(name, text);
    } catch (const keel::ConfigError&) {
    }
  }
  return 0;
}
