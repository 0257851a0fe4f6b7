/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ACL: a first-match IPv4 5-tuple filter with Lemur's semantics. Each rule
 * matches source and destination prefixes, source and destination port
 * ranges and the IP protocol, every field optional, and passes or drops what
 * it matches. A packet no rule matches is dropped, and so is every
 * non-IPv4 packet. Port fields match only TCP and UDP packets that carry
 * their header (not non-first fragments).
 *
 * Rules are kept column-wise in blocks of kBlock, tested kLanes at a time
 * with SSE2 and without branches. Verdicts of recent flows are cached when
 * there are enough rules for a scan to cost more than a cache probe; the
 * rules never change after Init, so a cached verdict is always the scan's.
 */
#include <emmintrin.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "keel/nf.h"

namespace keel {
namespace {

/* The fields a rule looks at, in host byte order. The protocol carries
 * kHasPorts when the packet has a TCP or UDP header; a rule with port
 * fields requires it. */
struct MatchKey {
  uint32_t src;
  uint32_t dst;
  uint32_t ports; /* source port << 16 | destination port */
  uint32_t proto;
};

typedef int32_t v4si __attribute__((vector_size(16)));

constexpr uint32_t kHasPorts = 0x100;
constexpr int kLanes = 4;
constexpr int kBlock = 2 * kLanes;
constexpr size_t kCacheMinRules = 32;
constexpr uint32_t kCacheBits = 12;

/* kBlock rules, one vector per kLanes rules and field. A port range lo..hi
 * is kept as lo - 0x8000 and (hi - lo) ^ 0x8000 so that "port outside the
 * range" is one signed 16-bit compare: (port - lo') > span'. */
struct RuleBlock {
  v4si src_addr[2];
  v4si src_mask[2];
  v4si dst_addr[2];
  v4si dst_mask[2];
  v4si ports_lo[2];
  v4si ports_span[2];
  v4si proto_val[2];
  v4si proto_mask[2];
  uint8_t drop[kBlock];
};

struct CacheEntry {
  MatchKey key;
  bool valid;
  bool drop;
};

uint8_t ParseProto(const Config& c) {
  if (c.json().is_number_integer()) return static_cast<uint8_t>(c.Int(0, 255));
  if (c.json().is_string()) {
    std::string s = c.String();
    if (s == "tcp") return kProtoTcp;
    if (s == "udp") return kProtoUdp;
    if (s == "icmp") return kProtoIcmp;
    c.Fail("'" + s + "' is not tcp, udp, icmp or a protocol number");
  }
  c.Fail("expected \"tcp\", \"udp\", \"icmp\" or a protocol number 0-255");
}

class Acl : public NF {
 public:
  void Init(const Config& config) override {
    config.CheckObject({"rules"});
    std::vector<Config> rules = config["rules"].Array();
    nrules_ = rules.size();
    blocks_.assign((nrules_ + kBlock - 1) / kBlock, RuleBlock{});
    for (RuleBlock& b : blocks_)
      for (int j = 0; j < kBlock; j++) Lane(b.proto_val, j) = -1; /* padding never matches */
    for (size_t i = 0; i < nrules_; i++) AddRule(rules[i], &blocks_[i / kBlock], i % kBlock);
    use_cache_ = nrules_ >= kCacheMinRules;
    if (use_cache_) cache_.assign(size_t{1} << kCacheBits, CacheEntry{});
  }

  void ProcessBatch(PacketBatch* batch) override {
    for (Packet* p : *batch) {
      MatchKey k;
      if (!GetKey(p, &k) || (use_cache_ ? CachedDrop(k) : Drops(k))) p->Drop();
    }
  }

 private:
  /* Element j of the lanes; through a pointer, which GCC and clang both take
   * (clang binds no reference to a vector element). */
  static int32_t& Lane(v4si* v, int j) { return reinterpret_cast<int32_t*>(&v[j / kLanes])[j % kLanes]; }

  static void AddRule(const Config& r, RuleBlock* b, int j) {
    r.CheckObject({"src_ip", "dst_ip", "src_port", "dst_port", "proto", "drop"});
    if (auto c = r.Get("src_ip")) {
      Ipv4Prefix p = c->Cidr();
      Lane(b->src_addr, j) = static_cast<int32_t>(p.addr);
      Lane(b->src_mask, j) = static_cast<int32_t>(p.mask());
    }
    if (auto c = r.Get("dst_ip")) {
      Ipv4Prefix p = c->Cidr();
      Lane(b->dst_addr, j) = static_cast<int32_t>(p.addr);
      Lane(b->dst_mask, j) = static_cast<int32_t>(p.mask());
    }
    PortRange src, dst;
    bool ports = false;
    if (auto c = r.Get("src_port")) {
      src = c->Ports();
      ports = true;
    }
    if (auto c = r.Get("dst_port")) {
      dst = c->Ports();
      ports = true;
    }
    auto lo = [](const PortRange& p) { return static_cast<uint16_t>(p.lo - 0x8000); };
    auto span = [](const PortRange& p) { return static_cast<uint16_t>((p.hi - p.lo) ^ 0x8000); };
    Lane(b->ports_lo, j) = static_cast<int32_t>(uint32_t{lo(src)} << 16 | lo(dst));
    Lane(b->ports_span, j) = static_cast<int32_t>(uint32_t{span(src)} << 16 | span(dst));
    uint32_t val = ports ? kHasPorts : 0, mask = val;
    if (auto c = r.Get("proto")) {
      uint8_t proto = ParseProto(*c);
      if (ports && proto != kProtoTcp && proto != kProtoUdp)
        c->Fail("port fields need proto tcp or udp, got " + std::to_string(proto));
      val |= proto;
      mask |= 0xff;
    }
    Lane(b->proto_val, j) = static_cast<int32_t>(val);
    Lane(b->proto_mask, j) = static_cast<int32_t>(mask);
    if (auto c = r.Get("drop")) b->drop[j] = c->Bool();
  }

  static bool GetKey(Packet* p, MatchKey* k) {
    const Ipv4Hdr* ip = p->ipv4();
    if (!ip) return false;
    k->src = ntohl(ip->src);
    k->dst = ntohl(ip->dst);
    k->proto = ip->proto;
    k->ports = 0;
    if (uint16_t l4 = p->l4_offset()) {
      uint16_t ports[2]; /* copied: a packet may start at an odd offset */
      std::memcpy(ports, p->data() + l4, sizeof ports);
      k->ports = uint32_t{ntohs(ports[0])} << 16 | ntohs(ports[1]);
      k->proto |= kHasPorts;
    }
    return true;
  }

  /* The verdict of the first matching rule; true (drop) if none matches. */
  bool Drops(const MatchKey& k) const {
    const v4si src = v4si{} + static_cast<int32_t>(k.src);
    const v4si dst = v4si{} + static_cast<int32_t>(k.dst);
    const v4si ports = v4si{} + static_cast<int32_t>(k.ports);
    const v4si proto = v4si{} + static_cast<int32_t>(k.proto);
    for (const RuleBlock& b : blocks_) {
      int hits = 0;
      for (int h = 0; h < 2; h++) {
        v4si hit = ((src & b.src_mask[h]) == b.src_addr[h]) &
                   ((dst & b.dst_mask[h]) == b.dst_addr[h]) &
                   ((proto & b.proto_mask[h]) == b.proto_val[h]);
        __m128i out = _mm_cmpgt_epi16(_mm_sub_epi16(reinterpret_cast<__m128i>(ports),
                                                    reinterpret_cast<__m128i>(b.ports_lo[h])),
                                      reinterpret_cast<__m128i>(b.ports_span[h]));
        hit &= reinterpret_cast<v4si>(out) == v4si{};
        hits |= _mm_movemask_ps(reinterpret_cast<__m128>(hit)) << (h * kLanes);
      }
      if (hits) return b.drop[__builtin_ctz(hits)];
    }
    return true;
  }

  bool CachedDrop(const MatchKey& k) {
    uint64_t h = (uint64_t{k.src} << 32 | k.dst) * 0x9E3779B97F4A7C15ull;
    h ^= (uint64_t{k.ports} << 16 ^ k.proto) * 0xC2B2AE3D27D4EB4Full;
    CacheEntry& e = cache_[h >> (64 - kCacheBits)];
    if (e.valid && e.key.src == k.src && e.key.dst == k.dst && e.key.ports == k.ports &&
        e.key.proto == k.proto)
      return e.drop;
    e.key = k;
    e.valid = true;
    e.drop = Drops(k);
    return e.drop;
  }

  size_t nrules_ = 0;
  std::vector<RuleBlock> blocks_;
  bool use_cache_ = false;
  std::vector<CacheEntry> cache_;
};

}  // namespace

KEEL_NF(Acl, "acl", "first-match IPv4 5-tuple filter; packets no rule matches are dropped");
KEEL_NF_ARGS(Acl, R"json([
  {"name": "rules", "required": true, "type": "array",
   "doc": "rules in order; the first that matches decides, packets no rule matches are dropped",
   "items": {"type": "object", "fields": [
     {"name": "src_ip", "type": "cidr", "doc": "source prefix (any if absent)"},
     {"name": "dst_ip", "type": "cidr", "doc": "destination prefix (any if absent)"},
     {"name": "src_port", "type": "ports", "doc": "source port or \"lo-hi\" (needs proto tcp or udp)"},
     {"name": "dst_port", "type": "ports", "doc": "destination port or \"lo-hi\" (needs proto tcp or udp)"},
     {"name": "proto", "type": "proto", "doc": "tcp, udp, icmp or an IP protocol number"},
     {"name": "drop", "type": "boolean", "default": false, "doc": "drop matching packets instead of passing them"}]}}
])json");

}  // namespace keel
