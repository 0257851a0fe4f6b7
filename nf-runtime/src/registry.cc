/* SPDX-License-Identifier: Apache-2.0 */
#include <algorithm>
#include <map>

#include "keel/nf.h"

namespace keel {

static std::map<std::string, NfInfo>& Registry() {
  static std::map<std::string, NfInfo> registry;
  return registry;
}

NfRegistrar::NfRegistrar(const char* name, const char* help, NfFactory factory) {
  Registry()[name] = NfInfo{name, help, std::move(factory)};
}

std::unique_ptr<NF> CreateNf(const std::string& name) {
  auto it = Registry().find(name);
  if (it == Registry().end()) return nullptr;
  return it->second.factory();
}

std::vector<const NfInfo*> ListNfs() {
  std::vector<const NfInfo*> out;
  for (const auto& [name, info] : Registry()) out.push_back(&info);
  return out;
}

std::unique_ptr<NF> MakeNf(const std::string& name, const std::string& config_json) {
  std::unique_ptr<NF> nf = CreateNf(name);
  if (!nf) {
    std::string known;
    for (const NfInfo* i : ListNfs()) known += (known.empty() ? "" : ", ") + i->name;
    throw ConfigError("unknown NF '" + name + "' (known: " + known + ")");
  }
  Json j = Config::ParseText(config_json, name);
  nf->Init(Config(j, name));
  return nf;
}

}  // namespace keel
