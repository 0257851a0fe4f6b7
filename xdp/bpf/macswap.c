/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/* MACSwap on the NIC: functions/macswap/macswap.cc; swaps the Ethernet
 * source and destination addresses, drops frames without an Ethernet header. */
#include "keel_xdp.h"

SEC("xdp")
int keel_macswap(struct xdp_md* ctx) {
  keel_count(KEEL_C_IN, 1);
  __u8* d = keel_ptr(ctx, 0, KEEL_ETH_LEN);
  if (!d) return keel_done(ctx, 1);
  __u8 tmp[6];
  __builtin_memcpy(tmp, d, 6);
  __builtin_memcpy(d, d + 6, 6);
  __builtin_memcpy(d + 6, tmp, 6);
  return keel_done(ctx, 0);
}
