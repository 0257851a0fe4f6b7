/* SPDX-License-Identifier: Apache-2.0 */
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "keel/nf.h"

namespace keel {

static std::map<std::string, NfInfo>& Registry() {
  static std::map<std::string, NfInfo> registry;
  return registry;
}

static std::string& Origin() {
  static std::string origin;
  return origin;
}

static std::vector<std::string>& Refused() {
  static std::vector<std::string> refused;
  return refused;
}

NfRegistrar::NfRegistrar(const char* name, const char* help, NfFactory factory) : name_(name) {
  accepted_ = Registry().emplace(name, NfInfo{name, help, std::move(factory), Json::array(), Origin()}).second;
  if (accepted_) return;
  if (Origin().empty()) {
    std::fprintf(stderr, "keel: two built-in NFs are registered as '%s'\n", name);
    std::abort();
  }
  /* A loaded object must not take a name: the NF that has it keeps it, and
   * LoadNfLibrary reports the attempt. */
  Refused().push_back(name);
}

std::vector<std::string> TakeRefusedNfNames() {
  std::vector<std::string> out;
  out.swap(Refused());
  return out;
}

/* The problem with one type schema (|named|: an argument, with name/required/
 * default/doc), or "". */
static std::string CheckTypeSchema(const Json& s, const std::string& where, bool named) {
  if (!s.is_object()) return where + ": expected an object";
  /* Function-local: KEEL_NF_ARGS of other files runs during static initialisation. */
  static const std::set<std::string> kTypes = {"integer", "boolean", "string", "ipv4",
                                               "cidr",    "proto",   "mac",    "hex",
                                               "ports",   "array",   "object"};
  static const std::set<std::string> kKeys = {"type",  "minimum", "maximum",   "enum",
                                              "bytes", "items",   "min_items", "max_items",
                                              "fields"};
  static const std::set<std::string> kArgKeys = {"name", "required", "default", "doc"};
  for (auto it = s.begin(); it != s.end(); ++it)
    if (!kKeys.count(it.key()) && !(named && kArgKeys.count(it.key())))
      return where + ": unknown key '" + it.key() + "'";
  if (!s.contains("type") || !s["type"].is_string() || !kTypes.count(s["type"].get<std::string>()))
    return where + ": 'type' must be one of integer, boolean, string, ipv4, cidr, proto, mac, hex, ports, array, object";
  std::string type = s["type"];
  auto only = [&](const char* key, const char* for_type) -> std::string {
    if (s.contains(key) && type != for_type) return where + ": '" + key + "' is for type " + for_type;
    return "";
  };
  for (auto [k, t] : {std::pair{"minimum", "integer"}, {"maximum", "integer"}, {"enum", "string"},
                      {"bytes", "hex"}, {"items", "array"}, {"min_items", "array"},
                      {"max_items", "array"}, {"fields", "object"}})
    if (std::string e = only(k, t); !e.empty()) return e;
  for (const char* k : {"minimum", "maximum", "bytes", "min_items", "max_items"})
    if (s.contains(k) && !s[k].is_number_integer()) return where + ": '" + k + "' must be an integer";
  if (type == "hex" && !s.contains("bytes")) return where + ": type hex needs 'bytes'";
  if (s.contains("enum") && !s["enum"].is_array()) return where + ": 'enum' must be an array of strings";
  if (type == "array") {
    if (!s.contains("items")) return where + ": type array needs 'items'";
    if (std::string e = CheckTypeSchema(s["items"], where + ".items", false); !e.empty()) return e;
  }
  if (type == "object") {
    if (!s.contains("fields")) return where + ": type object needs 'fields'";
    if (std::string e = CheckArgSchemas(s["fields"]); !e.empty()) return where + ".fields" + e;
  }
  if (named) {
    if (!s.contains("doc") || !s["doc"].is_string() || s["doc"].get<std::string>().empty())
      return where + ": 'doc' (one line) is missing";
    if (s.contains("required") && !s["required"].is_boolean()) return where + ": 'required' must be true or false";
  }
  return "";
}

std::string CheckArgSchemas(const Json& args) {
  if (!args.is_array()) return ": expected an array of argument schemas";
  std::set<std::string> seen;
  for (size_t i = 0; i < args.size(); i++) {
    const Json& a = args[i];
    std::string where = "[" + std::to_string(i) + "]";
    if (!a.is_object() || !a.contains("name") || !a["name"].is_string() ||
        a["name"].get<std::string>().empty())
      return where + ": 'name' is missing";
    where += " (" + a["name"].get<std::string>() + ")";
    if (!seen.insert(a["name"].get<std::string>()).second) return where + ": given twice";
    if (std::string e = CheckTypeSchema(a, where, true); !e.empty()) return e;
  }
  return "";
}

NfArgsRegistrar::NfArgsRegistrar(const NfRegistrar& nf, const char* args_json) {
  Json args = Json::parse(args_json, nullptr, false);
  std::string problem = args.is_discarded() ? ": not JSON" : CheckArgSchemas(args);
  if (!problem.empty()) {
    std::fprintf(stderr, "keel: KEEL_NF_ARGS of NF '%s': arguments%s\n", nf.name().c_str(),
                 problem.c_str());
    std::abort();
  }
  if (nf.accepted()) Registry()[nf.name()].args = std::move(args);
}

std::string CheckStateDecl(const Json& state, const Json& args) {
  if (!state.is_object()) return ": expected an object";
  static const std::set<std::string> kKeys = {"scope", "doc", "per_flow_if"};
  for (auto it = state.begin(); it != state.end(); ++it)
    if (!kKeys.count(it.key())) return ": unknown key '" + it.key() + "'";
  if (!state.contains("scope") || !state["scope"].is_string() ||
      (state["scope"] != "per-flow" && state["scope"] != "global"))
    return ": 'scope' must be \"per-flow\" or \"global\"";
  if (!state.contains("doc") || !state["doc"].is_string() || state["doc"].get<std::string>().empty())
    return ": 'doc' (one line: what the state is) is missing";
  if (state.contains("per_flow_if")) {
    const Json& cond = state["per_flow_if"];
    if (state["scope"] != "global") return ": 'per_flow_if' is for scope global";
    if (!cond.is_object() || cond.empty()) return ": 'per_flow_if' must be an object {\"ARG\": VALUE}";
    for (auto it = cond.begin(); it != cond.end(); ++it) {
      bool declared = false;
      for (const Json& a : args) declared = declared || a.value("name", "") == it.key();
      if (!declared) return ": 'per_flow_if' names '" + it.key() + "', which is not an argument";
    }
  }
  return "";
}

bool StateMovable(const Json& state, const Json& args, const Json& config) {
  if (state.value("scope", "per-flow") == "per-flow") return true;
  auto cond = state.find("per_flow_if");
  if (cond == state.end()) return false;
  for (auto it = cond->begin(); it != cond->end(); ++it) {
    const Json* value = nullptr;
    if (config.is_object() && config.contains(it.key())) value = &config[it.key()];
    for (const Json& a : args)
      if (!value && a.value("name", "") == it.key() && a.contains("default")) value = &a["default"];
    if (!value || *value != it.value()) return false;
  }
  return true;
}

NfStateRegistrar::NfStateRegistrar(const NfRegistrar& nf, const char* state_json) {
  if (!nf.accepted()) return; /* a refused name: LoadNfLibrary reports it */
  Json state = Json::parse(state_json, nullptr, false);
  const Json& args = Registry()[nf.name()].args;
  std::string problem = state.is_discarded() ? ": not JSON" : CheckStateDecl(state, args);
  if (!problem.empty()) {
    std::fprintf(stderr, "keel: KEEL_NF_STATE of NF '%s': state%s\n", nf.name().c_str(),
                 problem.c_str());
    std::abort();
  }
  Registry()[nf.name()].state = std::move(state);
}

void SetNfOrigin(const std::string& path) { Origin() = path; }

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

Json CatalogJson() {
  Json nfs = Json::array();
  for (const NfInfo* i : ListNfs()) {
    Json nf = {{"name", i->name}, {"help", i->help}, {"args", i->args}, {"state", i->state}};
    if (!i->loaded_from.empty()) nf["loaded_from"] = i->loaded_from;
    nfs.push_back(std::move(nf));
  }
  return Json{{"version", 1}, {"nfs", std::move(nfs)}};
}

std::unique_ptr<NF> MakeNf(const std::string& name, const std::string& config_json) {
  std::unique_ptr<NF> nf = CreateNf(name);
  if (!nf) {
    std::string known;
    for (const NfInfo* i : ListNfs()) known += (known.empty() ? "" : ", ") + i->name;
    throw ConfigError("unknown NF '" + name + "' (known: " + known + ")");
  }
  Json j = ResolveSecrets(Config::ParseText(config_json, name), SecretsDir(), name);
  nf->Init(Config(j, name));
  const NfInfo& info = Registry().at(name);
  nf->movable_ = StateMovable(info.state, info.args, j);
  return nf;
}

}  // namespace keel
