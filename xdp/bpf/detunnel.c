/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * Detunnel on the NIC: functions/detunnel/detunnel.cc. Removes the outer
 * 802.1Q tag; untagged frames pass unchanged, frames shorter than an
 * Ethernet header and tagged frames too short for the whole tag are dropped.
 */
#include "keel_xdp.h"

SEC("xdp")
int keel_detunnel(struct xdp_md* ctx) {
  keel_count(KEEL_C_IN, 1);
  __u8* d = keel_ptr(ctx, 0, KEEL_ETH_LEN);
  if (!d) return keel_done(ctx, 1);
  if (d[12] != (KEEL_ETHERTYPE_VLAN >> 8) || d[13] != (KEEL_ETHERTYPE_VLAN & 0xff))
    return keel_done(ctx, 0);
  d = keel_ptr(ctx, 0, KEEL_ETH_LEN + KEEL_VLAN_LEN);
  if (!d) return keel_done(ctx, 1);
  __builtin_memmove(d + KEEL_VLAN_LEN, d, 12);
  if (bpf_xdp_adjust_head(ctx, KEEL_VLAN_LEN) != 0) return keel_done(ctx, 1);
  return keel_done(ctx, 0);
}
