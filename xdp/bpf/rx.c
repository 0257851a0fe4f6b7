/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * keel_rx: the entry of an instance's NIC part, attached to its VF. Drops
 * and counts what nf-runtime's receive path drops as malformed (by reason,
 * keel::Malformed), then runs the NIC-placed NFs through keel_chain.
 * Counters: in, out, dropped, then malformed by reason (truncated_eth,
 * truncated_vlan, bad_ipv4, truncated_l4).
 */
#include "keel_xdp.h"

SEC("xdp")
int keel_rx(struct xdp_md* ctx) {
  struct keel_hdrs h;
  keel_parse(ctx, &h);
  keel_count(KEEL_C_IN, 1);
  if (h.malformed != KEEL_OK) {
    keel_count(KEEL_C_NF0 + h.malformed - 1, 1);
    return keel_done(ctx, 1);
  }
  return keel_done(ctx, 0);
}
