/* SPDX-License-Identifier: Apache-2.0 */
/* Every reason the ingress drops a packet for; each has its own counter. */
#ifndef KEEL_INGRESS_DROP_REASON_H_
#define KEEL_INGRESS_DROP_REASON_H_

#include "parser.h"

namespace keel::ingress {

enum class DropReason {
  kTruncated,
  kBadIhl,
  kFragment,
  kUnknownEthertype,
  kNotIpv4,
  kNoChain,        /* matched no chain and --no-chain drop */
  kBufferFull,     /* the flow's or the ingress's hold buffer was full */
  kFlowTableFull,  /* no room for another flow in setup */
  kAssignFailed,   /* the gateway assigned no instance, or AssignFlow failed */
  kInstallFailed,  /* InstallFlow failed */
  kTimeout,        /* AssignFlow or InstallFlow took too long */
  kControlBusy,    /* the control thread's ring was full */
  kTxFull,         /* the port's TX queue stayed full */
  kNoHeadroom,     /* no room in front of the frame for the normal path's VLAN tag */
  kNotSynced,      /* a new flow before the gateway's chains arrived (a restart): not sent on
                    * the normal path, which would deliver a chain's packets untransformed */
  kPortRingFull,   /* the port's receive ring was full: the kernel dropped the frame before
                    * the ingress read it (the port's sockets' PACKET_STATISTICS, net_af_packet
                    * with --port-wake on; DPDK's af_packet driver does not count these) */
  kCount,
};

/* The counter label of |r|, e.g. "buffer_full". */
inline const char* DropReasonName(DropReason r) {
  static const char* const kNames[] = {"truncated",   "bad_ihl",        "fragment",        "unknown_ethertype",
                                       "not_ipv4",    "no_chain",       "buffer_full",     "flow_table_full",
                                       "assign_failed", "install_failed", "timeout",        "control_busy",
                                       "tx_full",     "no_headroom",    "not_synced",      "port_ring_full"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(DropReason::kCount));
  return kNames[static_cast<size_t>(r)];
}

/* The drop reason of a frame the parser rejected (|r| != kOk). */
inline DropReason DropReasonOf(ParseResult r) {
  switch (r) {
    case ParseResult::kBadIhl: return DropReason::kBadIhl;
    case ParseResult::kFragment: return DropReason::kFragment;
    case ParseResult::kUnknownEthertype: return DropReason::kUnknownEthertype;
    case ParseResult::kNotIpv4: return DropReason::kNotIpv4;
    default: return DropReason::kTruncated;
  }
}

}  // namespace keel::ingress

#endif  // KEEL_INGRESS_DROP_REASON_H_
