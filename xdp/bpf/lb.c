/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * LB on the NIC: functions/lb/lb.cc. Each flow goes to the backend a hash
 * of its 5-tuple picks (nf-runtime's FlowKeyHash, so the NIC and keel-nf
 * pick the same one) and keeps it in lb_flows; the destination address is
 * rewritten and the IPv4 and TCP/UDP checksums patched. A new flow that
 * finds lb_flows full goes to its hash's backend untracked. Packets without
 * ports, and every fragment, are keyed by (src, dst, proto).
 * Counters: in, out, dropped, new_flows, untracked_flows.
 */
#include "keel_xdp.h"

#define LB_MAX_BACKENDS 1024
#define LB_FLOWS 65536

enum { LB_C_NEW = KEEL_C_NF0, LB_C_UNTRACKED };

/* keel::FlowKey: host byte order, 16 bytes. */
struct lb_key {
  __u32 src_ip;
  __u32 dst_ip;
  __u16 src_port;
  __u16 dst_port;
  __u8 proto;
  __u8 pad[3];
};

struct lb_conf {
  __u32 nbackends;
};

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, LB_FLOWS);
  __type(key, struct lb_key);
  __type(value, __u32); /* backend, host order */
} lb_flows SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, LB_MAX_BACKENDS);
  __type(key, __u32);
  __type(value, __u32);
} lb_backends SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct lb_conf);
} lb_conf SEC(".maps");

/* nf-runtime/src/packet.cc FlowKeyHash: splitmix64's finalizer. */
static __always_inline __u64 lb_hash(const struct lb_key* k) {
  __u64 a = ((__u64)k->src_ip << 32) | k->dst_ip;
  __u64 b = ((__u64)k->src_port << 24) | ((__u64)k->dst_port << 8) | k->proto;
  __u64 h = a ^ (b * 0x9E3779B97F4A7C15ull);
  h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
  h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
  return h ^ (h >> 31);
}

SEC("xdp")
int keel_lb(struct xdp_md* ctx) {
  keel_count(KEEL_C_IN, 1);
  struct keel_hdrs h;
  __u8* ip = keel_ipv4(ctx, &h);
  __u32 zero = 0;
  struct lb_conf* conf = bpf_map_lookup_elem(&lb_conf, &zero);
  if (!ip || h.malformed != KEEL_OK || !conf || conf->nbackends == 0) return keel_done(ctx, 1);
  struct lb_key key = {
      .src_ip = keel_be32(ip + 12),
      .dst_ip = keel_be32(ip + 16),
      .proto = ip[9],
  };
  if (h.l4) {
    __u8* l4 = keel_ptr(ctx, h.l4, 4);
    if (!l4) return keel_done(ctx, 1);
    key.src_port = ((__u16)l4[0] << 8) | l4[1];
    key.dst_port = ((__u16)l4[2] << 8) | l4[3];
  }
  if ((((__u16)ip[6] << 8) | ip[7]) & 0x3fff) key.src_port = key.dst_port = 0;
  __u32 backend;
  __u32* stored = bpf_map_lookup_elem(&lb_flows, &key);
  if (stored) {
    backend = *stored;
  } else {
    __u32 idx = (__u32)(lb_hash(&key) % conf->nbackends);
    __u32* b = bpf_map_lookup_elem(&lb_backends, &idx);
    if (!b) return keel_done(ctx, 1);
    backend = *b;
    if (bpf_map_update_elem(&lb_flows, &key, &backend, BPF_NOEXIST) == 0)
      keel_count(LB_C_NEW, 1);
    else
      keel_count(LB_C_UNTRACKED, 1);
  }
  __u32 old_dst, dst = bpf_htonl(backend);
  __builtin_memcpy(&old_dst, ip + 16, 4);
  if (h.l4_proto == KEEL_PROTO_TCP) {
    __u8* csum = keel_ptr(ctx, h.l4 + 16, 2);
    if (!csum) return keel_done(ctx, 1);
    keel_csum_replace32(csum, old_dst, dst);
  } else if (h.l4_proto == KEEL_PROTO_UDP) {
    __u8* csum = keel_ptr(ctx, h.l4 + 6, 2);
    if (!csum) return keel_done(ctx, 1);
    if (keel_load16(csum) != 0) {
      keel_csum_replace32(csum, old_dst, dst);
      if (keel_load16(csum) == 0) keel_store16(csum, 0xffff);
    }
  }
  ip = keel_ptr(ctx, h.l3, KEEL_IPV4_LEN);
  if (!ip) return keel_done(ctx, 1);
  keel_csum_replace32(ip + 10, old_dst, dst);
  __builtin_memcpy(ip + 16, &dst, 4);
  return keel_done(ctx, 0);
}
