/* SPDX-License-Identifier: Apache-2.0 */
/*
 * UrlFilter: drops HTTP requests for blocked URLs (Lemur's UrlFilter). A
 * packet is a request when its TCP payload starts with an HTTP method and a
 * space. Its URL is the host of the Host header, or of the request target
 * when that is an absolute "http://host/path" (RFC 7230 §5.4), followed by
 * the path of the request target. A blocklist entry "host/prefix" blocks a
 * request for that host whose path starts with "/prefix"; an entry without
 * '/' blocks every request for the host. Hosts compare case-insensitively
 * with a ":80" suffix ignored, paths byte for byte.
 *
 * Each packet is judged on its own: a request whose Host header is not in
 * the packet (cut short, or in a later segment) has no host and passes, and
 * so do responses, non-HTTP payloads and everything that is not TCP.
 */
#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "keel/nf.h"

namespace keel {
namespace {

constexpr size_t kMaxHost = 255;

/* The paths blocked on one host. */
struct Site {
  bool whole = false;
  std::vector<std::string> prefixes;
};

inline char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c; }

bool StartsWithNoCase(std::string_view s, std::string_view lower_prefix) {
  if (s.size() < lower_prefix.size()) return false;
  for (size_t i = 0; i < lower_prefix.size(); i++)
    if (Lower(s[i]) != lower_prefix[i]) return false;
  return true;
}

std::string_view StripPort80(std::string_view host) {
  if (host.size() > 3 && host.substr(host.size() - 3) == ":80") host.remove_suffix(3);
  return host;
}

/* Length of the method and its space at the start of |p|, or 0. */
size_t MethodLength(std::string_view p) {
  static constexpr std::string_view kMethods[] = {"GET ",    "POST ",  "HEAD ",  "PUT ",
                                                  "DELETE ", "OPTIONS ", "PATCH ", "CONNECT "};
  for (std::string_view m : kMethods)
    if (p.substr(0, m.size()) == m) return m.size();
  return 0;
}

bool ValidHost(std::string_view h) {
  if (h.empty() || h.size() > kMaxHost) return false;
  size_t colon = h.find(':');
  std::string_view name = h.substr(0, colon);
  if (name.empty()) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_')
      return false;
  if (colon == std::string_view::npos) return true;
  std::string_view port = h.substr(colon + 1);
  if (port.empty() || port.size() > 5) return false;
  for (char c : port)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

class UrlFilter : public NF {
 public:
  void Init(const Config& config) override {
    config.CheckObject({"blocklist"});
    for (const Config& c : config["blocklist"].Array()) {
      std::string entry = c.String();
      size_t slash = entry.find('/');
      std::string host = entry.substr(0, slash);
      if (!ValidHost(host)) c.Fail("'" + entry + "' is not host[:port][/path-prefix]");
      for (char& ch : host) ch = Lower(ch);
      host = std::string(StripPort80(host));
      Site& site = sites_[host];
      if (slash == std::string::npos)
        site.whole = true;
      else
        site.prefixes.push_back(entry.substr(slash));
      max_host_ = std::max(max_host_, host.size());
    }
    for (const auto& [host, site] : sites_) lookup_[host] = &site;
  }

  void ProcessBatch(PacketBatch* batch) override {
    for (Packet* p : *batch) {
      if (!p->tcp()) continue;
      uint16_t len;
      const uint8_t* payload = p->payload(&len);
      if (payload && Blocked(std::string_view(reinterpret_cast<const char*>(payload), len)))
        p->Drop();
    }
  }

 private:
  bool Blocked(std::string_view req) const {
    size_t start = MethodLength(req);
    if (start == 0) return false;
    size_t end = start;
    while (end < req.size() && req[end] != ' ' && req[end] != '\r' && req[end] != '\n') end++;
    std::string_view target = req.substr(start, end - start);
    std::string_view host, path = target;
    if (StartsWithNoCase(target, "http://")) {
      std::string_view rest = target.substr(7);
      size_t p = rest.find_first_of("/?");
      host = rest.substr(0, p);
      path = p == std::string_view::npos ? "/" : rest.substr(p);
    } else {
      host = HostHeader(req, end);
    }
    return Matches(StripPort80(host), path);
  }

  /* The value of the first Host header in the lines after |pos|, up to
   * the end of its line or of the packet. */
  static std::string_view HostHeader(std::string_view req, size_t pos) {
    size_t nl = req.find('\n', pos);
    while (nl != std::string_view::npos) {
      size_t begin = nl + 1;
      nl = req.find('\n', begin);
      std::string_view line = req.substr(begin, nl == std::string_view::npos ? nl : nl - begin);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty()) break;
      if (StartsWithNoCase(line, "host:")) {
        line.remove_prefix(5);
        size_t b = line.find_first_not_of(" \t");
        if (b == std::string_view::npos) return {};
        return line.substr(b, line.find_last_not_of(" \t") - b + 1);
      }
    }
    return {};
  }

  bool Matches(std::string_view host, std::string_view path) const {
    if (host.empty() || host.size() > max_host_) return false;
    char buf[kMaxHost];
    for (size_t i = 0; i < host.size(); i++) buf[i] = Lower(host[i]);
    auto it = lookup_.find(std::string_view(buf, host.size()));
    if (it == lookup_.end()) return false;
    const Site& site = *it->second;
    if (site.whole) return true;
    for (const std::string& prefix : site.prefixes)
      if (path.substr(0, prefix.size()) == prefix) return true;
    return false;
  }

  std::unordered_map<std::string, Site> sites_;
  std::unordered_map<std::string_view, const Site*> lookup_;
  size_t max_host_ = 0;
};

}  // namespace

KEEL_NF(UrlFilter, "urlfilter", "drops HTTP requests for blocked host/path prefixes");
KEEL_NF_ARGS(UrlFilter, R"json([
  {"name": "blocklist", "required": true, "type": "array", "items": {"type": "string"},
   "doc": "entries host[:port][/path-prefix]; a request for a listed host (and path prefix) is dropped"}
])json");

}  // namespace keel
