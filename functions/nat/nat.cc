/* SPDX-License-Identifier: Apache-2.0 */
/*
 * NAT: stateful source NAT for TCP and UDP.
 *
 * A packet to external_ip on a port of port_range is reply traffic; every
 * other TCP/UDP packet is outbound. An outbound flow gets external_ip and a
 * port of the range as its source; a reply whose flow is mapped gets the
 * internal host back as its destination. Replies without a mapping, other
 * IPv4 protocols (and non-first fragments) and non-IPv4 frames are dropped.
 *
 * Each mapping lives in the NF's FlowState under two keys, so that an
 * instance preloaded with the same records translates the same way:
 *   forward: the internal 5-tuple                      => external ip:port
 *   reverse: remote -> external ip:port, as on the wire => internal ip:port
 * A packet either way marks both keys used, so a mapping expires whole once
 * its flow has been idle for the flow table's idle timeout (keel-nf
 * --flow-idle-ms); a full table refuses new mappings and their packets are
 * dropped (table_full_drops). A port is free for a new flow when no reverse
 * key holds it for the same remote ip:port and protocol; ports are tried
 * from a rotating cursor, and a flow that finds none is dropped.
 *
 * A flow moving to another instance (issue 37) takes both keys along; the
 * other instance must translate to the same external_ip, and refuses a
 * mapping whose port it has given to another flow.
 */
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "keel/nf.h"

namespace keel {

namespace {

/* One side of a mapping, host byte order. */
struct NatEndpoint {
  uint32_t ip;
  uint16_t port;
  uint16_t pad;
};

}  // namespace

class Nat : public NF {
 public:
  void Init(const Config& config) override {
    config.CheckObject({"external_ip", "port_range"});
    ext_ip_ = config["external_ip"].Ipv4();
    ext_ip_n_ = htonl(ext_ip_);
    Config range = config["port_range"];
    std::vector<Config> bounds = range.Array();
    if (bounds.size() != 2) range.Fail("expected [lo, hi]");
    lo_ = static_cast<uint16_t>(bounds[0].Int(1, 65535));
    hi_ = static_cast<uint16_t>(bounds[1].Int(1, 65535));
    if (lo_ > hi_)
      range.Fail("lo " + std::to_string(lo_) + " is greater than hi " + std::to_string(hi_));
    cursor_ = lo_;
  }

  void ProcessBatch(PacketBatch* batch) override {
    for (Packet* p : *batch) {
      Ipv4Hdr* ip = p->ipv4();
      void *sport, *dport, *l4csum; /* fields of a packed header: Load16 / Store16 */
      bool udp = false;
      if (TcpHdr* tcp = p->tcp()) {
        sport = &tcp->src_port;
        dport = &tcp->dst_port;
        l4csum = &tcp->checksum;
      } else if (UdpHdr* u = p->udp()) {
        sport = &u->src_port;
        dport = &u->dst_port;
        l4csum = &u->checksum;
        udp = true;
      } else {
        p->Drop();
        continue;
      }
      FlowKey key;
      p->GetFlowKey(&key);
      NatEndpoint to;
      if (ip->dst == ext_ip_n_ && key.dst_port >= lo_ && key.dst_port <= hi_) {
        if (!state().Read(key, &to)) {
          unmatched_reply_drops_++;
          p->Drop();
          continue;
        }
        FlowKey fwd = key;
        fwd.src_ip = to.ip;
        fwd.src_port = to.port;
        fwd.dst_ip = key.src_ip;
        fwd.dst_port = key.src_port;
        NatEndpoint ext;
        state().Read(fwd, &ext); /* keeps the forward key as fresh as this one */
        uint32_t addr = htonl(to.ip);
        Patch(ip, ip->dst, addr, dport, htons(to.port), l4csum, udp);
        ip->dst = addr;
      } else {
        bool known = state().Read(key, &to);
        if (known && !KeepReverse(key, to)) known = false;
        if (!known && !Allocate(key, &to)) {
          p->Drop();
          continue;
        }
        uint32_t addr = htonl(to.ip);
        Patch(ip, ip->src, addr, sport, htons(to.port), l4csum, udp);
        ip->src = addr;
      }
    }
  }

  /* A moving flow takes its mapping: both keys, found from either
   * direction's 5-tuple; the next position sees the translated flow. */
  void ExportFlow(const FlowKey& flow, FlowExport* out) override {
    FlowKey fwd = flow, rev;
    StateRecord r;
    NatEndpoint e;
    bool reply = flow.dst_ip == ext_ip_ && flow.dst_port >= lo_ && flow.dst_port <= hi_;
    if (reply) {
      if (!state().Peek(flow, &r)) return;
      std::memcpy(&e, r.data, sizeof e);
      rev = flow;
      fwd.src_ip = e.ip;
      fwd.src_port = e.port;
      fwd.dst_ip = flow.src_ip;
      fwd.dst_port = flow.src_port;
      out->next.dst_ip = e.ip;
      out->next.dst_port = e.port;
    } else {
      if (!state().Peek(flow, &r)) return;
      std::memcpy(&e, r.data, sizeof e);
      rev = Reverse(flow, e.port);
      out->next.src_ip = e.ip;
      out->next.src_port = e.port;
    }
    if (state().Take(fwd, &r)) out->records.push_back(r);
    /* The reverse key is the flow's only while it maps back to it. */
    if (state().Peek(rev, &r)) {
      std::memcpy(&e, r.data, sizeof e);
      if (e.ip == fwd.src_ip && e.port == fwd.src_port && state().Take(rev, &r)) out->records.push_back(r);
    }
  }

  /* Refuses a mapping whose keys map elsewhere here: the external port is
   * taken by another flow of this instance. */
  bool ImportFlow(const std::vector<StateRecord>& records, std::string* err) override {
    for (const StateRecord& r : records) {
      StateRecord here;
      if (r.len != sizeof(NatEndpoint)) {
        *err = "nat: a record of " + std::to_string(r.len) + " bytes, expected " + std::to_string(sizeof(NatEndpoint));
        return false;
      }
      if (state().Peek(r.key, &here) && (here.len != r.len || std::memcmp(here.data, r.data, r.len) != 0)) {
        *err = "nat: the mapping conflicts with one of this instance (its port is taken)";
        return false;
      }
    }
    return NF::ImportFlow(records, err);
  }

  Json Stats() const override {
    return Json{{"mappings", mappings_},
                {"exhausted_drops", exhausted_drops_},
                {"table_full_drops", table_full_drops_},
                {"unmatched_reply_drops", unmatched_reply_drops_}};
  }

 private:
  /* Updates the checksums for an address change |old_addr| -> |new_addr|
   * (the caller stores the address) and rewrites |*port|. Network order. */
  static void Patch(Ipv4Hdr* ip, uint32_t old_addr, uint32_t new_addr, void* port,
                    uint16_t new_port, void* l4csum, bool udp) {
    ChecksumReplace32(&ip->checksum, old_addr, new_addr);
    if (!udp || Load16(l4csum) != 0) {
      ChecksumReplace32(l4csum, old_addr, new_addr);
      ChecksumReplace16(l4csum, Load16(port), new_port);
      if (udp && Load16(l4csum) == 0) Store16(l4csum, 0xffff);
    }
    Store16(port, new_port);
  }

  /* The reverse key of outbound flow |fwd| mapped to external port |port|. */
  FlowKey Reverse(const FlowKey& fwd, uint16_t port) const {
    FlowKey rev;
    rev.src_ip = fwd.dst_ip;
    rev.src_port = fwd.dst_port;
    rev.dst_ip = ext_ip_;
    rev.dst_port = port;
    rev.proto = fwd.proto;
    return rev;
  }

  /* Marks the reverse key of the mapping |fwd| => |to| used; if it expired
   * before the forward key, takes the port again while it is free. False if
   * the mapping is gone (the port went to another flow, or no room). */
  bool KeepReverse(const FlowKey& fwd, const NatEndpoint& to) {
    FlowKey rev = Reverse(fwd, to.port);
    NatEndpoint back;
    if (state().Read(rev, &back)) return back.ip == fwd.src_ip && back.port == fwd.src_port;
    return state().Update(rev, NatEndpoint{fwd.src_ip, fwd.src_port, 0});
  }

  /* Maps the outbound flow |fwd| to a free external port; false (counted)
   * when every port of the range is taken for its remote endpoint or the
   * flow table is full. */
  bool Allocate(const FlowKey& fwd, NatEndpoint* out) {
    NatEndpoint taken;
    for (uint32_t tries = uint32_t{hi_} - lo_ + 1; tries > 0; tries--) {
      FlowKey rev = Reverse(fwd, cursor_);
      cursor_ = cursor_ == hi_ ? lo_ : static_cast<uint16_t>(cursor_ + 1);
      if (state().Read(rev, &taken)) continue;
      *out = NatEndpoint{ext_ip_, rev.dst_port, 0};
      if (state().Update(rev, NatEndpoint{fwd.src_ip, fwd.src_port, 0})) {
        if (state().Update(fwd, *out)) {
          mappings_++;
          return true;
        }
        state().Remove(rev);
      }
      table_full_drops_++;
      return false;
    }
    exhausted_drops_++;
    return false;
  }

  uint32_t ext_ip_ = 0;   /* host order */
  uint32_t ext_ip_n_ = 0; /* network order */
  uint16_t lo_ = 0;
  uint16_t hi_ = 0;
  uint16_t cursor_ = 0;
  uint64_t mappings_ = 0;
  uint64_t exhausted_drops_ = 0;
  uint64_t table_full_drops_ = 0;
  uint64_t unmatched_reply_drops_ = 0;
};

KEEL_NF(Nat, "nat", "source NAT for TCP/UDP to external_ip and a port of port_range");
KEEL_NF_ARGS(Nat, R"json([
  {"name": "external_ip", "required": true, "type": "ipv4", "doc": "source address of translated flows"},
  {"name": "port_range", "required": true, "type": "array", "min_items": 2, "max_items": 2,
   "items": {"type": "integer", "minimum": 1, "maximum": 65535},
   "doc": "[lo, hi]: the source ports handed out to flows"}
])json");
KEEL_NF_STATE(Nat, R"json({"scope": "per-flow",
  "doc": "a mapping per flow in the flow table: forward and reverse key"})json");

}  // namespace keel
