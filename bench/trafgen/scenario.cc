/* SPDX-License-Identifier: Apache-2.0 */
#include "scenario.h"

#include <arpa/inet.h>

#include <cmath>
#include <cstdio>
#include <set>

namespace keel::trafgen {

namespace {

using nlohmann::json;

/* Thrown by the parsing helpers; ParseScenario turns it into its error. */
struct Bad {
  std::string msg;
};

[[noreturn]] void Fail(const std::string& field, const std::string& what) { throw Bad{field + ": " + what}; }

/* Refuses keys of |j| outside |known|: a misspelt field must not be
 * silently ignored. */
void CheckKeys(const json& j, const std::string& field, std::initializer_list<const char*> known) {
  if (!j.is_object()) Fail(field.empty() ? "scenario" : field, "expected an object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    if (!ok) {
      std::string list;
      for (const char* k : known) list += std::string(list.empty() ? "" : ", ") + k;
      Fail(field.empty() ? it.key() : field + "." + it.key(), "unknown field (known: " + list + ")");
    }
  }
}


double Number(const json& j, const std::string& field, double min, double max) {
  if (!j.is_number()) Fail(field, "expected a number");
  double v = j.get<double>();
  if (!std::isfinite(v) || v < min || v > max)
    Fail(field, "expected a number from " + json(min).dump() + " to " + json(max).dump() + ", got " + j.dump());
  return v;
}

uint64_t Integer(const json& j, const std::string& field, uint64_t min, uint64_t max) {
  if (!j.is_number_integer() || (j.is_number_integer() && j.get<int64_t>() < 0))
    Fail(field, "expected an integer from " + std::to_string(min) + " to " + std::to_string(max));
  uint64_t v = j.get<uint64_t>();
  if (v < min || v > max)
    Fail(field, "expected an integer from " + std::to_string(min) + " to " + std::to_string(max) + ", got " +
                    std::to_string(v));
  return v;
}

std::string String(const json& j, const std::string& field) {
  if (!j.is_string() || j.get<std::string>().empty()) Fail(field, "expected a non-empty string");
  return j.get<std::string>();
}

uint32_t BenchIp(const json& j, const std::string& field) {
  uint32_t ip;
  if (!ParseIpv4(String(j, field), &ip)) Fail(field, "expected an IPv4 address a.b.c.d");
  if (!InBenchRange(ip)) Fail(field, j.get<std::string>() + " is outside 198.18.0.0/15 (keel's network rules)");
  return ip;
}

Mac MacField(const json& j, const std::string& field) {
  Mac m;
  if (!ParseMac(String(j, field), &m)) Fail(field, "expected a MAC address xx:xx:xx:xx:xx:xx");
  return m;
}

std::array<uint8_t, 16> Hex16(const json& j, const std::string& field) {
  std::string s = String(j, field);
  std::array<uint8_t, 16> out;
  if (s.size() != 32) Fail(field, "expected 32 hex digits (16 bytes)");
  for (size_t i = 0; i < 16; i++) {
    unsigned v;
    if (std::sscanf(s.c_str() + 2 * i, "%2x", &v) != 1 || !std::isxdigit(s[2 * i]) || !std::isxdigit(s[2 * i + 1]))
      Fail(field, "expected 32 hex digits (16 bytes)");
    out[i] = static_cast<uint8_t>(v);
  }
  return out;
}

Phase ParsePhase(const json& j, const std::string& f) {
  CheckKeys(j, f, {"name", "seconds", "mbps", "new_flows_per_s"});
  Phase p;
  p.name = j.contains("name") ? String(j["name"], f + ".name") : "";
  if (!j.contains("seconds")) Fail(f + ".seconds", "missing (the phase's length in seconds)");
  p.seconds = Number(j["seconds"], f + ".seconds", 0.001, kMaxSeconds);
  if (!j.contains("mbps")) Fail(f + ".mbps", "missing (a number, or [start, end] for a ramp)");
  const json& m = j["mbps"];
  if (m.is_array()) {
    if (m.size() != 2) Fail(f + ".mbps", "expected [start, end]");
    p.mbps_start = Number(m[0], f + ".mbps[0]", 0, kMaxMbpsPerChain);
    p.mbps_end = Number(m[1], f + ".mbps[1]", 0, kMaxMbpsPerChain);
  } else {
    p.mbps_start = p.mbps_end = Number(m, f + ".mbps", 0, kMaxMbpsPerChain);
  }
  p.new_flows_per_s = j.contains("new_flows_per_s")
                          ? Number(j["new_flows_per_s"], f + ".new_flows_per_s", 0, kMaxNewFlowsPerS)
                          : 0;
  return p;
}

Expect ParseExpect(const json& j, const std::string& f) {
  CheckKeys(j, f, {"vlan", "dst_mac", "encrypt", "snat"});
  Expect e;
  if (j.contains("vlan")) e.vlan = static_cast<uint16_t>(Integer(j["vlan"], f + ".vlan", 1, 4094));
  if (j.contains("dst_mac")) e.dst_mac = MacField(j["dst_mac"], f + ".dst_mac");
  if (j.contains("encrypt")) {
    const json& c = j["encrypt"];
    CheckKeys(c, f + ".encrypt", {"key", "iv"});
    if (!c.contains("key") || !c.contains("iv")) Fail(f + ".encrypt", "expected {\"key\": HEX32, \"iv\": HEX32}");
    e.encrypt = true;
    e.key = Hex16(c["key"], f + ".encrypt.key");
    e.iv = Hex16(c["iv"], f + ".encrypt.iv");
  }
  if (j.contains("snat")) {
    const json& s = j["snat"];
    CheckKeys(s, f + ".snat", {"ip", "ports"});
    if (!s.contains("ip")) Fail(f + ".snat.ip", "missing (the NAT's external address)");
    e.snat = true;
    e.snat_ip = BenchIp(s["ip"], f + ".snat.ip");
    e.snat_port_min = 1;
    e.snat_port_max = 65535;
    if (s.contains("ports")) {
      const json& p = s["ports"];
      if (!p.is_array() || p.size() != 2) Fail(f + ".snat.ports", "expected [lo, hi]");
      e.snat_port_min = static_cast<uint16_t>(Integer(p[0], f + ".snat.ports[0]", 1, 65535));
      e.snat_port_max = static_cast<uint16_t>(Integer(p[1], f + ".snat.ports[1]", e.snat_port_min, 65535));
    }
  }
  return e;
}

Http ParseHttp(const json& j, const std::string& f) {
  CheckKeys(j, f, {"host", "path", "blocked_path", "blocked_fraction"});
  Http h;
  auto text = [&](const char* key, std::string* out) {
    if (!j.contains(key)) return;
    *out = String(j[key], f + "." + key);
    for (char c : *out)
      if (c <= ' ' || c > '~') Fail(f + "." + key, "expected printable characters without spaces");
  };
  text("host", &h.host);
  text("path", &h.path);
  text("blocked_path", &h.blocked_path);
  if (h.path[0] != '/' || h.blocked_path[0] != '/') Fail(f, "path and blocked_path must start with /");
  if (j.contains("blocked_fraction")) h.blocked_fraction = Number(j["blocked_fraction"], f + ".blocked_fraction", 0, 1);
  return h;
}

Chain ParseChain(const json& j, const std::string& f) {
  CheckKeys(j, f, {"name", "dst_net", "proto", "dport", "sizes", "flow_lifetime_s", "phases", "http", "expect"});
  Chain c;
  if (!j.contains("name")) Fail(f + ".name", "missing");
  c.name = String(j["name"], f + ".name");
  if (!j.contains("dst_net")) Fail(f + ".dst_net", "missing (e.g. \"198.18.1.0/24\")");
  std::string net = String(j["dst_net"], f + ".dst_net");
  if (!ParsePrefix(net, &c.dst_net) || c.dst_net.len < 16 || c.dst_net.len > 30)
    Fail(f + ".dst_net", "expected a prefix a.b.c.d/len with len 16 to 30, got \"" + net + "\"");
  if (!InBenchRange(c.dst_net.net)) Fail(f + ".dst_net", net + " is outside 198.18.0.0/15 (keel's network rules)");
  std::string proto = j.contains("proto") ? String(j["proto"], f + ".proto") : "udp";
  if (proto != "udp" && proto != "tcp") Fail(f + ".proto", "expected \"udp\" or \"tcp\", got \"" + proto + "\"");
  c.proto = proto == "udp" ? 17 : 6;
  if (j.contains("dport")) c.dport = static_cast<uint16_t>(Integer(j["dport"], f + ".dport", 1, 65535));
  if (j.contains("http")) {
    if (c.proto != 6) Fail(f + ".http", "HTTP requests need \"proto\": \"tcp\"");
    c.http = ParseHttp(j["http"], f + ".http");
  }
  if (j.contains("expect")) c.expect = ParseExpect(j["expect"], f + ".expect");
  /* Encryption pads the payload by up to one block: the frame must still fit
   * the path's 1500-byte MTU afterwards. */
  uint16_t max_frame = c.expect.encrypt ? kMaxFrame - kAesBlock : kMaxFrame;
  if (!j.contains("sizes")) Fail(f + ".sizes", "missing (e.g. [[1024, 1]] or [[64, 7], [576, 4], [1500, 1]])");
  const json& s = j["sizes"];
  if (!s.is_array() || s.empty()) Fail(f + ".sizes", "expected [[bytes, weight], ...]");
  double total = 0;
  for (size_t i = 0; i < s.size(); i++) {
    std::string fi = f + ".sizes[" + std::to_string(i) + "]";
    if (!s[i].is_array() || s[i].size() != 2) Fail(fi, "expected [bytes, weight]");
    auto bytes = static_cast<uint16_t>(Integer(s[i][0], fi + "[0]", kMinFrame, max_frame));
    double w = Number(s[i][1], fi + "[1]", 0, 1e9);
    c.sizes.emplace_back(bytes, w);
    total += w;
  }
  if (total <= 0) Fail(f + ".sizes", "the weights add up to 0");
  if (j.contains("flow_lifetime_s"))
    c.flow_lifetime_s = Number(j["flow_lifetime_s"], f + ".flow_lifetime_s", 0.01, kMaxSeconds);
  if (!j.contains("phases") || !j["phases"].is_array() || j["phases"].empty())
    Fail(f + ".phases", "expected a non-empty array of phases");
  for (size_t i = 0; i < j["phases"].size(); i++)
    c.phases.push_back(ParsePhase(j["phases"][i], f + ".phases[" + std::to_string(i) + "]"));
  if (c.Seconds() > kMaxSeconds)
    Fail(f + ".phases", "last " + json(c.Seconds()).dump() + " s; at most " + json(kMaxSeconds).dump() + " s");
  return c;
}

Malformed ParseMalformed(const json& j, const std::string& f) {
  CheckKeys(j, f, {"per_s", "dst_ip", "kinds"});
  Malformed m;
  m.per_s = j.contains("per_s") ? Number(j["per_s"], f + ".per_s", 0, kMaxMalformedPerS) : 0;
  m.dst_ip = j.contains("dst_ip") ? BenchIp(j["dst_ip"], f + ".dst_ip") : (198u << 24 | 18u << 16 | 9u << 8 | 250u);
  if (j.contains("kinds")) {
    if (!j["kinds"].is_array() || j["kinds"].empty()) Fail(f + ".kinds", "expected a non-empty array");
    for (size_t i = 0; i < j["kinds"].size(); i++) {
      std::string k = String(j["kinds"][i], f + ".kinds[" + std::to_string(i) + "]");
      bool known = false;
      for (const std::string& name : MalformedKinds()) known = known || name == k;
      if (!known) Fail(f + ".kinds[" + std::to_string(i) + "]", "unknown kind \"" + k + "\"");
      m.kinds.push_back(k);
    }
  } else {
    m.kinds = MalformedKinds();
  }
  return m;
}

}  // namespace

uint32_t Prefix::Hosts() const { return len >= 31 ? (1u << (32 - len)) : (1u << (32 - len)) - 2; }

uint32_t Prefix::Host(uint32_t i) const { return net + (len >= 31 ? i : i + 1); }

double Chain::Seconds() const {
  double s = 0;
  for (const Phase& p : phases) s += p.seconds;
  return s;
}

double Scenario::Seconds() const {
  double s = 0;
  for (const Chain& c : chains) s = std::max(s, c.Seconds());
  return s;
}

const std::vector<std::string>& MalformedKinds() {
  static const std::vector<std::string> kinds = {"truncated_ipv4", "bad_ihl", "ip_length_past_frame",
                                                 "not_ipv4"};
  return kinds;
}

bool ParseScenario(const nlohmann::json& j, Scenario* out, std::string* err) {
  try {
    CheckKeys(j, "", {"src_mac", "dst_mac", "src_ip", "chains", "malformed"});
    Scenario s;
    ParseMac("02:6b:65:00:00:01", &s.src_mac);
    ParseMac("02:6b:65:00:00:02", &s.dst_mac);
    ParseIpv4("198.18.0.1", &s.src_ip);
    if (j.contains("src_mac")) s.src_mac = MacField(j["src_mac"], "src_mac");
    if (j.contains("dst_mac")) s.dst_mac = MacField(j["dst_mac"], "dst_mac");
    if (j.contains("src_ip")) s.src_ip = BenchIp(j["src_ip"], "src_ip");
    if (!j.contains("chains") || !j["chains"].is_array() || j["chains"].empty())
      Fail("chains", "expected a non-empty array of chains");
    std::set<std::string> names;
    for (size_t i = 0; i < j["chains"].size(); i++) {
      std::string f = "chains[" + std::to_string(i) + "]";
      Chain c = ParseChain(j["chains"][i], f);
      if (!names.insert(c.name).second) Fail(f + ".name", "\"" + c.name + "\" names two chains");
      /* The sink tells chains apart by destination address: prefixes must
       * not overlap. */
      for (const Chain& o : s.chains)
        if (o.dst_net.Contains(c.dst_net.net) || c.dst_net.Contains(o.dst_net.net))
          Fail(f + ".dst_net", "overlaps chain \"" + o.name + "\"'s " + Ipv4String(o.dst_net.net) + "/" +
                                   std::to_string(o.dst_net.len));
      if (c.dst_net.Contains(s.src_ip)) Fail(f + ".dst_net", "contains src_ip");
      s.chains.push_back(std::move(c));
    }
    if (j.contains("malformed")) {
      s.malformed = ParseMalformed(j["malformed"], "malformed");
      for (const Chain& c : s.chains)
        if (c.dst_net.Contains(s.malformed.dst_ip))
          Fail("malformed.dst_ip", "is in chain \"" + c.name + "\"'s dst_net; give it an address no chain uses");
    }
    *out = std::move(s);
    return true;
  } catch (const Bad& b) {
    *err = b.msg;
    return false;
  } catch (const nlohmann::json::exception& e) {
    *err = std::string("scenario: ") + e.what();
    return false;
  }
}

bool ParseIpv4(const std::string& s, uint32_t* ip) {
  in_addr a;
  if (inet_pton(AF_INET, s.c_str(), &a) != 1) return false;
  *ip = ntohl(a.s_addr);
  return true;
}

bool ParsePrefix(const std::string& s, Prefix* p) {
  size_t slash = s.find('/');
  if (slash == std::string::npos) return false;
  uint32_t ip;
  if (!ParseIpv4(s.substr(0, slash), &ip)) return false;
  std::string len = s.substr(slash + 1);
  if (len.empty() || len.size() > 2 || len.find_first_not_of("0123456789") != std::string::npos) return false;
  int l = std::stoi(len);
  if (l > 32) return false;
  uint32_t mask = l == 0 ? 0 : ~0u << (32 - l);
  if (ip & ~mask) return false;
  p->net = ip;
  p->len = l;
  return true;
}

bool ParseMac(const std::string& s, Mac* mac) {
  unsigned b[6];
  char tail;
  if (s.size() != 17 || std::sscanf(s.c_str(), "%2x:%2x:%2x:%2x:%2x:%2x%c", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5],
                                    &tail) != 6)
    return false;
  for (int i = 0; i < 6; i++) (*mac)[i] = static_cast<uint8_t>(b[i]);
  return true;
}

std::string Ipv4String(uint32_t ip) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%u.%u.%u.%u", ip >> 24, (ip >> 16) & 255, (ip >> 8) & 255, ip & 255);
  return buf;
}

std::string MacString(const Mac& m) {
  char buf[18];
  std::snprintf(buf, sizeof(buf), "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
  return buf;
}

bool InBenchRange(uint32_t ip) { return (ip >> 17) == ((198u << 24 | 18u << 16) >> 17); }

}  // namespace keel::trafgen
