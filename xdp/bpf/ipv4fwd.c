/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * IPv4Fwd on the NIC: functions/ipv4fwd/ipv4fwd.cc. Longest-prefix match in
 * an LPM trie map; the matching route sets the destination MAC and counts
 * the packet on its output port, and the TTL is decremented with the
 * checksum patched. Non-IPv4 frames, packets with an incoming TTL <= 1 and
 * packets without a route are dropped.
 * Counters: in, out, dropped, ttl_drops, no_route_drops; the per-port packet
 * counts are in fwd_port_packets.
 */
#include "keel_xdp.h"

#define FWD_MAX_ROUTES 16384
#define FWD_MAX_PORTS 1024

enum { FWD_C_TTL = KEEL_C_NF0, FWD_C_NO_ROUTE };

struct fwd_key {
  __u32 prefixlen;
  __u8 addr[4];
};

struct fwd_route {
  __u8 mac[6];
  __u16 pad;
  __u32 counter; /* index into fwd_port_packets */
};

struct {
  __uint(type, BPF_MAP_TYPE_LPM_TRIE);
  __uint(max_entries, FWD_MAX_ROUTES);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, struct fwd_key);
  __type(value, __u32); /* index into fwd_routes */
} fwd_lpm SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, FWD_MAX_ROUTES);
  __type(key, __u32);
  __type(value, struct fwd_route);
} fwd_routes SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, FWD_MAX_PORTS);
  __type(key, __u32);
  __type(value, __u64);
} fwd_port_packets SEC(".maps");

SEC("xdp")
int keel_ipv4fwd(struct xdp_md* ctx) {
  keel_count(KEEL_C_IN, 1);
  struct keel_hdrs h;
  __u8* ip = keel_ipv4(ctx, &h);
  __u8* eth = keel_ptr(ctx, 0, KEEL_ETH_LEN);
  if (!ip || !eth) return keel_done(ctx, 1);
  if (ip[8] <= 1) {
    keel_count(FWD_C_TTL, 1);
    return keel_done(ctx, 1);
  }
  struct fwd_key key = {.prefixlen = 32};
  __builtin_memcpy(key.addr, ip + 16, 4);
  __u32* hop = bpf_map_lookup_elem(&fwd_lpm, &key);
  struct fwd_route* route = hop ? bpf_map_lookup_elem(&fwd_routes, hop) : 0;
  if (!route) {
    keel_count(FWD_C_NO_ROUTE, 1);
    return keel_done(ctx, 1);
  }
  __builtin_memcpy(eth, route->mac, 6);
  __u16 old_word = keel_load16(ip + 8); /* TTL and protocol share a checksum word */
  ip[8]--;
  keel_csum_replace16(ip + 10, old_word, keel_load16(ip + 8));
  __u64* port = bpf_map_lookup_elem(&fwd_port_packets, &route->counter);
  if (port) *port += 1;
  return keel_done(ctx, 0);
}
