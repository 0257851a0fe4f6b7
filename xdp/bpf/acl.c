/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * ACL on the NIC: functions/acl/acl.cc. First-match IPv4 5-tuple filter:
 * each rule matches source and destination prefixes, port ranges and the
 * protocol, and passes or drops; a packet no rule matches is dropped, and
 * so is every non-IPv4 packet. Port fields match only packets that carry a
 * TCP or UDP header (not non-first fragments).
 *
 * The rules are an array map scanned in order with bpf_loop, so the
 * verifier checks the loop body once whatever the number of rules, and a
 * redeploy rewrites them in place (acl_conf.nrules last).
 */
#include "keel_xdp.h"

#define ACL_MAX_RULES 4096
#define ACL_HAS_PORTS 0x100

/* A rule in host byte order; the loader fills absent fields so that they
 * match anything (mask 0, ports 0-65535). */
struct acl_rule {
  __u32 src_addr;
  __u32 src_mask;
  __u32 dst_addr;
  __u32 dst_mask;
  __u16 sport_lo;
  __u16 sport_hi;
  __u16 dport_lo;
  __u16 dport_hi;
  __u32 proto_val; /* ACL_HAS_PORTS | protocol, as proto_mask selects */
  __u32 proto_mask;
  __u32 drop;
};

struct acl_conf {
  __u32 nrules;
};

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, ACL_MAX_RULES);
  __type(key, __u32);
  __type(value, struct acl_rule);
} acl_rules SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct acl_conf);
} acl_conf SEC(".maps");

struct acl_scan {
  __u32 src, dst, proto;
  __u16 sport, dport;
  __u32 drop; /* verdict; drop if nothing matches */
};

static long acl_match(__u32 i, void* arg) {
  struct acl_scan* s = arg;
  struct acl_rule* r = bpf_map_lookup_elem(&acl_rules, &i);
  if (!r) return 1;
  if ((s->src & r->src_mask) != r->src_addr || (s->dst & r->dst_mask) != r->dst_addr ||
      (s->proto & r->proto_mask) != r->proto_val || s->sport < r->sport_lo ||
      s->sport > r->sport_hi || s->dport < r->dport_lo || s->dport > r->dport_hi)
    return 0;
  s->drop = r->drop;
  return 1;
}

SEC("xdp")
int keel_acl(struct xdp_md* ctx) {
  keel_count(KEEL_C_IN, 1);
  struct keel_hdrs h;
  __u8* ip = keel_ipv4(ctx, &h);
  __u32 zero = 0;
  struct acl_conf* conf = bpf_map_lookup_elem(&acl_conf, &zero);
  if (!ip || !conf) return keel_done(ctx, 1);
  struct acl_scan s = {
      .src = keel_be32(ip + 12),
      .dst = keel_be32(ip + 16),
      .proto = ip[9],
      .drop = 1,
  };
  if (h.l4) {
    __u8* l4 = keel_ptr(ctx, h.l4, 4);
    if (!l4) return keel_done(ctx, 1);
    s.sport = ((__u16)l4[0] << 8) | l4[1];
    s.dport = ((__u16)l4[2] << 8) | l4[3];
    s.proto |= ACL_HAS_PORTS;
  }
  __u32 n = conf->nrules;
  if (n > ACL_MAX_RULES) n = ACL_MAX_RULES;
  bpf_loop(n, acl_match, &s, 0);
  return keel_done(ctx, s.drop != 0);
}
