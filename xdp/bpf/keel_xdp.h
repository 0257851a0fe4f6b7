/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * What every keel XDP network function shares: the packet parser (the same
 * rules as nf-runtime's Packet::Parse, so an NF on the NIC sees exactly the
 * headers its C++ twin sees), the RFC 1624 checksum update of
 * Packet's ChecksumReplace16/32, the per-CPU counters and the chain's
 * program array through which each NF hands the packet to the next one.
 *
 * Composition (Lemur's meta-compiler for the NIC target) is by tail calls:
 * keel_rx parses the frame, drops and counts a malformed one as keel-nf's
 * receive path does, and jumps to slot 0 of the instance's keel_chain
 * program array; the NF in slot i ends by jumping to slot keel_next, or, if
 * it is the last NIC-placed NF, returns keel_exit (XDP_PASS: on to the
 * server NFs of the instance; XDP_TX: back toward the ToR, a chain placed
 * wholly on the NIC). Each NF is compiled once; keel_next and keel_exit are
 * constants set when the agent loads it for one position of one instance.
 */
#ifndef KEEL_XDP_H_
#define KEEL_XDP_H_

#include <linux/bpf.h>
#include <linux/types.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define KEEL_MAX_NFS 16
#define KEEL_LAST 0xffffffffu

#define KEEL_ETH_LEN 14
#define KEEL_VLAN_LEN 4
#define KEEL_IPV4_LEN 20
#define KEEL_TCP_LEN 20
#define KEEL_UDP_LEN 8
#define KEEL_ETHERTYPE_IPV4 0x0800
#define KEEL_ETHERTYPE_VLAN 0x8100
#define KEEL_PROTO_TCP 6
#define KEEL_PROTO_UDP 17

/* Counters of one NF, per CPU: the first three are every NF's, the others
 * its own (named by the Go loader for each NF). */
enum {
  KEEL_C_IN = 0,
  KEEL_C_OUT,
  KEEL_C_DROP,
  KEEL_C_NF0, /* first NF-specific counter */
  KEEL_NCOUNTERS = 16,
};

struct keel_counters {
  __u64 c[KEEL_NCOUNTERS];
};

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct keel_counters);
} keel_stats SEC(".maps");

/* The instance's NIC-placed NFs in chain order; every program of the
 * instance is loaded with the same map. */
struct {
  __uint(type, BPF_MAP_TYPE_PROG_ARRAY);
  __uint(max_entries, KEEL_MAX_NFS);
  __type(key, __u32);
  __type(value, __u32);
} keel_chain SEC(".maps");

/* Set by the loader: the slot of the next NF, or KEEL_LAST. */
volatile const __u32 keel_next = KEEL_LAST;
/* Set by the loader: the verdict after the last NF (XDP_PASS or XDP_TX). */
volatile const __u32 keel_exit = XDP_PASS;

static __always_inline void keel_count(__u32 idx, __u64 n) {
  __u32 zero = 0;
  struct keel_counters* c = bpf_map_lookup_elem(&keel_stats, &zero);
  if (c && idx < KEEL_NCOUNTERS) c->c[idx] += n;
}

/* Why nf-runtime drops a frame on receive (keel::Malformed). */
enum keel_malformed {
  KEEL_OK = 0,
  KEEL_TRUNCATED_ETH,
  KEEL_TRUNCATED_VLAN,
  KEEL_BAD_IPV4,
  KEEL_TRUNCATED_L4,
};

/* Offsets from the frame start, as Packet::Parse sets them: 0 = absent. */
struct keel_hdrs {
  __u32 len;
  __u32 vlan;
  __u32 l3;
  __u32 l4;
  __u32 l3_end;
  __u8 l4_proto;
  __u8 malformed;
};

/* Parses Ethernet, one optional 802.1Q tag, IPv4 and TCP/UDP with the
 * checks of nf-runtime/src/packet.cc Packet::Parse, in the same order. */
static __always_inline void keel_parse(struct xdp_md* ctx, struct keel_hdrs* h) {
  void* data = (void*)(long)ctx->data;
  void* end = (void*)(long)ctx->data_end;
  __u8* d = data;
  __builtin_memset(h, 0, sizeof(*h));
  h->len = (__u32)(end - data);
  if (d + KEEL_ETH_LEN > (__u8*)end) {
    h->malformed = KEEL_TRUNCATED_ETH;
    return;
  }
  __u16 type = ((__u16)d[12] << 8) | d[13];
  __u32 off = KEEL_ETH_LEN;
  if (type == KEEL_ETHERTYPE_VLAN) {
    if (d + KEEL_ETH_LEN + KEEL_VLAN_LEN > (__u8*)end) {
      h->malformed = KEEL_TRUNCATED_VLAN;
      return;
    }
    h->vlan = off;
    type = ((__u16)d[16] << 8) | d[17];
    off += KEEL_VLAN_LEN;
  }
  if (type != KEEL_ETHERTYPE_IPV4) return;
  __u8* ip = d + off;
  if (ip + KEEL_IPV4_LEN > (__u8*)end) {
    h->malformed = KEEL_BAD_IPV4;
    return;
  }
  __u32 ihl = (ip[0] & 0x0f) * 4;
  __u32 total = ((__u32)ip[2] << 8) | ip[3];
  if ((ip[0] >> 4) != 4 || ihl < KEEL_IPV4_LEN || total < ihl || off + total > h->len) {
    h->malformed = KEEL_BAD_IPV4;
    return;
  }
  h->l3 = off;
  h->l3_end = off + total;
  if (((((__u32)ip[6] << 8) | ip[7]) & 0x1fff) != 0) return; /* non-first fragment */
  __u32 l4 = off + ihl;
  __u8 proto = ip[9];
  if (proto == KEEL_PROTO_TCP) {
    if (l4 + KEEL_TCP_LEN > h->l3_end) {
      h->malformed = KEEL_TRUNCATED_L4;
      return;
    }
    /* l4 + 20 <= l3_end <= len: the data offset byte is in the frame. */
    __u8* t = d + (l4 & 0xff);
    if (t + 13 > (__u8*)end) {
      h->malformed = KEEL_TRUNCATED_L4;
      return;
    }
    __u32 doff = (t[12] >> 4) * 4;
    if (doff < 20 || l4 + doff > h->l3_end) {
      h->malformed = KEEL_TRUNCATED_L4;
      return;
    }
  } else if (proto == KEEL_PROTO_UDP) {
    if (l4 + KEEL_UDP_LEN > h->l3_end) {
      h->malformed = KEEL_TRUNCATED_L4;
      return;
    }
  } else {
    return;
  }
  h->l4 = l4;
  h->l4_proto = proto;
}

/* A pointer to |n| bytes at |off| of the frame, or NULL past its end. The
 * offset is bounded first so that the verifier can follow it. */
static __always_inline __u8* keel_ptr(struct xdp_md* ctx, __u32 off, __u32 n) {
  __u8* d = (__u8*)(long)ctx->data;
  __u8* end = (__u8*)(long)ctx->data_end;
  if (off > 0xffff) return 0;
  __u8* p = d + off;
  if (p + n > end) return 0;
  return p;
}

/* Parses the frame into |h| and returns its IPv4 header, or NULL if it has none. */
static __always_inline __u8* keel_ipv4(struct xdp_md* ctx, struct keel_hdrs* h) {
  keel_parse(ctx, h);
  return h->l3 ? keel_ptr(ctx, h->l3, KEEL_IPV4_LEN) : 0;
}

/* A big-endian 32-bit field of a header, in host order. */
static __always_inline __u32 keel_be32(const __u8* p) {
  return ((__u32)p[0] << 24) | ((__u32)p[1] << 16) | ((__u32)p[2] << 8) | p[3];
}

static __always_inline __u16 keel_load16(const __u8* p) {
  __u16 v;
  __builtin_memcpy(&v, p, 2);
  return v;
}

static __always_inline void keel_store16(__u8* p, __u16 v) { __builtin_memcpy(p, &v, 2); }

/* RFC 1624 eq. 3, HC' = ~(~HC + ~m + m'), as Packet's ChecksumReplace16:
 * the same words in memory order give the same bytes. */
static __always_inline void keel_csum_replace16(__u8* csum, __u16 old_val, __u16 new_val) {
  __u32 sum = (__u16)~keel_load16(csum) + (__u16)~old_val + (__u32)new_val;
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);
  keel_store16(csum, (__u16)~sum);
}

/* ChecksumReplace32: |old_val| and |new_val| as loaded from memory. */
static __always_inline void keel_csum_replace32(__u8* csum, __u32 old_val, __u32 new_val) {
  keel_csum_replace16(csum, (__u16)(old_val >> 16), (__u16)(new_val >> 16));
  keel_csum_replace16(csum, (__u16)old_val, (__u16)new_val);
}

/* Ends an NF: a dropped packet is counted and dropped; a passed one goes
 * to the next NF of the instance, or leaves with keel_exit. A failed tail
 * call (a slot being replaced) drops: the chain is never skipped. */
static __always_inline int keel_done(struct xdp_md* ctx, int drop) {
  if (drop) {
    keel_count(KEEL_C_DROP, 1);
    return XDP_DROP;
  }
  keel_count(KEEL_C_OUT, 1);
  if (keel_next == KEEL_LAST) return keel_exit;
  bpf_tail_call(ctx, &keel_chain, keel_next);
  return XDP_DROP;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#endif /* KEEL_XDP_H_ */
