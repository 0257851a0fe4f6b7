/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/config.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

namespace keel {

Json Config::ParseText(const std::string& text, const std::string& what) {
  if (text.empty()) return Json::object();
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    throw ConfigError(what + ": bad JSON at byte " + std::to_string(e.byte) + ": " + text);
  } catch (const Json::exception& e) {
    /* A number out of double's range, say (out_of_range 406). */
    throw ConfigError(what + ": bad JSON: " + e.what() + ": " + text);
  }
}

static std::string& SecretsDirRef() {
  static std::string dir = kDefaultSecretsDir;
  return dir;
}

void SetSecretsDir(const std::string& dir) { SecretsDirRef() = dir; }
const std::string& SecretsDir() { return SecretsDirRef(); }

/* faas-cli's secret names (the gateway's secrets store takes the same). */
static bool SecretNameOk(const std::string& n) {
  if (n.empty() || n.size() > 253 || n == "." || n == ".." || !std::isalnum(static_cast<unsigned char>(n[0])))
    return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
}

Json ResolveSecrets(const Json& v, const std::string& dir, const std::string& path) {
  if (v.is_object() && v.size() == 1 && v.contains("secret")) {
    const Json& name = v["secret"];
    if (!name.is_string() || !SecretNameOk(name.get<std::string>()))
      throw ConfigError(path + ": a secret's name is letters, digits, '-', '_' and '.', got " + name.dump());
    std::string file = dir + "/" + name.get<std::string>();
    std::ifstream in(file, std::ios::binary);
    if (!in)
      throw ConfigError(path + ": secret '" + name.get<std::string>() + "' is not mounted at " + file +
                        " (faas-cli secret create " + name.get<std::string>() +
                        ", and list it under the chain's secrets in stack.yml)");
    std::string value((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!value.empty() && value.back() == '\n') value.pop_back();
    if (!value.empty() && value.back() == '\r') value.pop_back();
    return value;
  }
  if (v.is_object()) {
    Json out = Json::object();
    for (auto it = v.begin(); it != v.end(); ++it)
      out[it.key()] = ResolveSecrets(it.value(), dir, path.empty() ? it.key() : path + "." + it.key());
    return out;
  }
  if (v.is_array()) {
    Json out = Json::array();
    for (size_t i = 0; i < v.size(); i++) out.push_back(ResolveSecrets(v[i], dir, path + "[" + std::to_string(i) + "]"));
    return out;
  }
  return v;
}

void Config::Fail(const std::string& msg) const { throw ConfigError(path_ + ": " + msg); }

static const char* TypeName(const Json& v) { return v.type_name(); }

void Config::CheckObject(std::initializer_list<const char*> allowed) const {
  if (!v_->is_object()) Fail(std::string("expected an object, got ") + TypeName(*v_));
  for (auto it = v_->begin(); it != v_->end(); ++it) {
    bool ok = std::any_of(allowed.begin(), allowed.end(),
                          [&](const char* k) { return it.key() == k; });
    if (!ok) Config(it.value(), path_ + "." + it.key()).Fail("unknown field");
  }
}

bool Config::Has(const char* key) const { return v_->is_object() && v_->contains(key); }

Config Config::operator[](const char* key) const {
  std::string p = path_ + "." + key;
  if (!v_->is_object()) Fail(std::string("expected an object, got ") + TypeName(*v_));
  auto it = v_->find(key);
  if (it == v_->end()) throw ConfigError(p + ": missing");
  return Config(*it, p);
}

std::optional<Config> Config::Get(const char* key) const {
  if (!Has(key)) return std::nullopt;
  return (*this)[key];
}

std::vector<Config> Config::Array() const {
  if (!v_->is_array()) Fail(std::string("expected an array, got ") + TypeName(*v_));
  std::vector<Config> out;
  for (size_t i = 0; i < v_->size(); i++)
    out.emplace_back((*v_)[i], path_ + "[" + std::to_string(i) + "]");
  return out;
}

std::string Config::String() const {
  if (!v_->is_string()) Fail(std::string("expected a string, got ") + TypeName(*v_));
  return v_->get<std::string>();
}

int64_t Config::Int(int64_t lo, int64_t hi) const {
  if (!v_->is_number_integer())
    Fail(std::string("expected an integer, got ") + (v_->is_number() ? v_->dump() : TypeName(*v_)));
  int64_t v = v_->get<int64_t>();
  if (v < lo || v > hi)
    Fail(std::to_string(v) + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return v;
}

bool Config::Bool() const {
  if (!v_->is_boolean()) Fail(std::string("expected true or false, got ") + TypeName(*v_));
  return v_->get<bool>();
}

static bool ParseIpv4(const std::string& s, uint32_t* out) {
  in_addr a;
  if (inet_pton(AF_INET, s.c_str(), &a) != 1) return false;
  *out = ntohl(a.s_addr);
  return true;
}

uint32_t Config::Ipv4() const {
  std::string s = String();
  uint32_t ip;
  if (!ParseIpv4(s, &ip)) Fail("'" + s + "' is not an IPv4 address");
  return ip;
}

Ipv4Prefix Config::Cidr() const {
  std::string s = String();
  Ipv4Prefix p;
  size_t slash = s.find('/');
  std::string addr = s.substr(0, slash);
  p.len = 32;
  if (slash != std::string::npos) {
    std::string len = s.substr(slash + 1);
    char* end = nullptr;
    long n = std::strtol(len.c_str(), &end, 10);
    if (len.empty() || *end || n < 0 || n > 32) Fail("'" + s + "' is not an IPv4 CIDR");
    p.len = static_cast<uint8_t>(n);
  }
  if (!ParseIpv4(addr, &p.addr)) Fail("'" + s + "' is not an IPv4 CIDR");
  p.addr &= p.mask();
  return p;
}

void Config::Mac(uint8_t out[6]) const {
  std::string s = String();
  unsigned b[6];
  char tail;
  if (std::sscanf(s.c_str(), "%2x:%2x:%2x:%2x:%2x:%2x%c", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5],
                  &tail) != 6 || s.size() != 17)
    Fail("'" + s + "' is not a MAC address (aa:bb:cc:dd:ee:ff)");
  for (int i = 0; i < 6; i++) out[i] = static_cast<uint8_t>(b[i]);
}

std::vector<uint8_t> Config::Hex(size_t nbytes) const {
  std::string s = String();
  if (s.size() != nbytes * 2)
    Fail("expected " + std::to_string(nbytes * 2) + " hex digits, got " + std::to_string(s.size()));
  std::vector<uint8_t> out(nbytes);
  for (size_t i = 0; i < nbytes; i++) {
    auto nib = [&](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      Fail(std::string("'") + c + "' is not a hex digit");
    };
    out[i] = static_cast<uint8_t>(nib(s[2 * i]) << 4 | nib(s[2 * i + 1]));
  }
  return out;
}

PortRange Config::Ports() const {
  PortRange r;
  if (v_->is_number_integer()) {
    r.lo = r.hi = static_cast<uint16_t>(Int(0, 65535));
    return r;
  }
  if (!v_->is_string()) Fail("expected a port number or \"lo-hi\"");
  std::string s = v_->get<std::string>();
  unsigned lo, hi;
  char tail;
  if (std::sscanf(s.c_str(), "%u-%u%c", &lo, &hi, &tail) != 2 || lo > hi || hi > 65535)
    Fail("'" + s + "' is not a port range lo-hi with lo <= hi <= 65535");
  r.lo = static_cast<uint16_t>(lo);
  r.hi = static_cast<uint16_t>(hi);
  return r;
}

}  // namespace keel
