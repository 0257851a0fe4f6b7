/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * Tunnel on the NIC: functions/tunnel/tunnel.cc. Pushes an 802.1Q tag (PCP
 * 0, DEI 0, the configured VLAN id) after the MAC addresses, an outer one on
 * a tagged frame. Frames shorter than an Ethernet header, and frames the
 * headroom cannot grow by 4 bytes, are dropped.
 */
#include "keel_xdp.h"

struct tunnel_conf {
  __u32 vlan;
};

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct tunnel_conf);
} tunnel_conf SEC(".maps");

SEC("xdp")
int keel_tunnel(struct xdp_md* ctx) {
  keel_count(KEEL_C_IN, 1);
  __u32 zero = 0;
  struct tunnel_conf* conf = bpf_map_lookup_elem(&tunnel_conf, &zero);
  if (!conf || !keel_ptr(ctx, 0, KEEL_ETH_LEN)) return keel_done(ctx, 1);
  __u32 vlan = conf->vlan;
  if (bpf_xdp_adjust_head(ctx, -KEEL_VLAN_LEN) != 0) return keel_done(ctx, 1);
  __u8* d = keel_ptr(ctx, 0, KEEL_ETH_LEN + KEEL_VLAN_LEN);
  if (!d) return keel_done(ctx, 1);
  __builtin_memmove(d, d + KEEL_VLAN_LEN, 12);
  d[12] = KEEL_ETHERTYPE_VLAN >> 8;
  d[13] = KEEL_ETHERTYPE_VLAN & 0xff;
  d[14] = (vlan >> 8) & 0x0f;
  d[15] = vlan & 0xff;
  return keel_done(ctx, 0);
}
