/* SPDX-License-Identifier: (GPL-2.0-only OR Apache-2.0) */
/*
 * ChaCha on the NIC: functions/chacha/chacha.cc. XORs the TCP/UDP payload with
 * the ChaCha20 keystream (RFC 8439 §2.3-2.4) of the configured key and nonce,
 * block counter 0 at the first payload byte of every packet, then recomputes
 * the TCP/UDP checksum as keel-nf's PayloadUpdateChecksum does (a UDP
 * checksum of zero stays zero). Packets without payload, non-IPv4 packets and
 * IP fragments pass unchanged. A payload longer than CHACHA_MAX_BLOCKS blocks
 * (frames beyond 2048 bytes, which keel-nf's one-segment mbufs never hold) is
 * dropped.
 * Counters: in, out, dropped, too_long.
 */
#include "keel_xdp.h"

#define CHACHA_MAX_BLOCKS 32 /* 2048 bytes of payload */
#define CHACHA_MAX_L4 2048

enum { CHACHA_C_TOO_LONG = KEEL_C_NF0 };

struct chacha_conf {
  __u32 key[8];   /* little-endian words of the key */
  __u32 nonce[3]; /* little-endian words of the nonce */
};

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct chacha_conf);
} chacha_conf SEC(".maps");

#define ROTL(v, n) (((v) << (n)) | ((v) >> (32 - (n))))
#define QR(a, b, c, d)                      \
  do {                                      \
    x[a] += x[b]; x[d] ^= x[a]; x[d] = ROTL(x[d], 16); \
    x[c] += x[d]; x[b] ^= x[c]; x[b] = ROTL(x[b], 12); \
    x[a] += x[b]; x[d] ^= x[a]; x[d] = ROTL(x[d], 8);  \
    x[c] += x[d]; x[b] ^= x[c]; x[b] = ROTL(x[b], 7);  \
  } while (0)

/* The keystream block |counter| (RFC 8439 §2.3), as 16 little-endian words. */
static __always_inline void chacha_block(const struct chacha_conf* k, __u32 counter, __u32 out[16]) {
  __u32 x[16] = {0x61707865, 0x3320646e, 0x79622d32, 0x6b206574,
                 k->key[0], k->key[1], k->key[2], k->key[3],
                 k->key[4], k->key[5], k->key[6], k->key[7],
                 counter, k->nonce[0], k->nonce[1], k->nonce[2]};
  __u32 in[16];
  __builtin_memcpy(in, x, sizeof(in));
  for (int r = 0; r < 10; r++) {
    QR(0, 4, 8, 12);
    QR(1, 5, 9, 13);
    QR(2, 6, 10, 14);
    QR(3, 7, 11, 15);
    QR(0, 5, 10, 15);
    QR(1, 6, 11, 12);
    QR(2, 7, 8, 13);
    QR(3, 4, 9, 14);
  }
  for (int i = 0; i < 16; i++) out[i] = x[i] + in[i];
}

/* What the bpf_loop callbacks work on: the frame, where the payload or the L4
 * segment lies, and the running checksum. The callbacks reach the frame only
 * through bpf_xdp_load_bytes and bpf_xdp_store_bytes, so the verifier checks
 * each callback once whatever the packet's length. */
struct chacha_run {
  struct xdp_md* ctx;
  const struct chacha_conf* conf;
  __u32 start; /* first byte of the payload, or of the L4 segment for the checksum */
  __u32 end;   /* the IPv4 packet's end */
  __u32 sum;
  int failed;
};

/* Chunk |b| (64 bytes) from run->start: its length, 0 past the end. */
static __always_inline __u64 chacha_chunk(const struct chacha_run* run, __u32 b) {
  __u64 off = (__u64)run->start + b * 64;
  if (off >= run->end) return 0;
  __u64 n = run->end - off;
  return n > 64 ? 64 : n;
}

static long chacha_xor(__u32 b, void* arg) {
  struct chacha_run* run = arg;
  __u64 n = chacha_chunk(run, b); /* 64-bit: the register checked is the one passed */
  if (n == 0 || n > 64) return 1;
  __u8 buf[64];
  __u32 ks[16];
  if (bpf_xdp_load_bytes(run->ctx, run->start + b * 64, buf, n) != 0) {
    run->failed = 1;
    return 1;
  }
  chacha_block(run->conf, b, ks);
  const __u8* kb = (const __u8*)ks;
  for (int i = 0; i < 64; i++) buf[i] ^= kb[i];
  if (bpf_xdp_store_bytes(run->ctx, run->start + b * 64, buf, n) != 0) {
    run->failed = 1;
    return 1;
  }
  return 0;
}

/* Adds chunk |b| of the L4 segment to the checksum in memory-order words, an odd
 * last byte as the low byte of a word (nf-runtime's SumWords). */
static long chacha_sum(__u32 b, void* arg) {
  struct chacha_run* run = arg;
  __u64 n = chacha_chunk(run, b); /* 64-bit: the register checked is the one passed */
  if (n == 0 || n > 64) return 1;
  __u8 buf[64];
  __builtin_memset(buf, 0, sizeof(buf));
  if (bpf_xdp_load_bytes(run->ctx, run->start + b * 64, buf, n) != 0) {
    run->failed = 1;
    return 1;
  }
  for (int i = 0; i < 64; i += 2) run->sum += keel_load16(buf + i);
  return 0;
}

SEC("xdp")
int keel_chacha(struct xdp_md* ctx) {
  keel_count(KEEL_C_IN, 1);
  struct keel_hdrs h;
  __u8* ip = keel_ipv4(ctx, &h);
  __u32 zero = 0;
  struct chacha_conf* conf = bpf_map_lookup_elem(&chacha_conf, &zero);
  if (!conf) return keel_done(ctx, 1);
  if (!ip || (((__u16)ip[6] << 8 | ip[7]) & 0x3fff) || !h.l4) return keel_done(ctx, 0);
  __u32 l4 = h.l4, start = l4 + KEEL_UDP_LEN;
  if (h.l4_proto == KEEL_PROTO_TCP) {
    __u8* t = keel_ptr(ctx, l4, KEEL_TCP_LEN);
    if (!t) return keel_done(ctx, 1);
    start = l4 + (t[12] >> 4) * 4;
  }
  __u32 end = h.l3_end;
  if (end <= start) return keel_done(ctx, 0); /* no payload */
  if (end - start > CHACHA_MAX_BLOCKS * 64 || end - l4 > CHACHA_MAX_L4) {
    keel_count(CHACHA_C_TOO_LONG, 1);
    return keel_done(ctx, 1);
  }
  struct chacha_run run = {.ctx = ctx, .conf = conf, .start = start, .end = end};
  bpf_loop(CHACHA_MAX_BLOCKS, chacha_xor, &run, 0);
  if (run.failed) return keel_done(ctx, 1);
  /* The checksum: L4UpdateChecksum over the pseudo-header and the segment with
   * its checksum field zero. */
  __u32 csum_off = l4 + (h.l4_proto == KEEL_PROTO_TCP ? 16 : 6);
  __u8* c = keel_ptr(ctx, csum_off, 2);
  if (!c) return keel_done(ctx, 1);
  if (h.l4_proto == KEEL_PROTO_UDP && keel_load16(c) == 0) return keel_done(ctx, 0);
  keel_store16(c, 0);
  ip = keel_ptr(ctx, h.l3, KEEL_IPV4_LEN);
  if (!ip) return keel_done(ctx, 1);
  __u32 l4_len = end - l4;
  run.start = l4;
  run.sum = 0;
  for (int i = 0; i < 8; i += 2) run.sum += keel_load16(ip + 12 + i);
  run.sum += bpf_htons((__u16)ip[9]);
  run.sum += bpf_htons((__u16)l4_len);
  bpf_loop(CHACHA_MAX_L4 / 64, chacha_sum, &run, 0);
  if (run.failed) return keel_done(ctx, 1);
  __u32 sum = run.sum;
  sum = (sum & 0xffff) + (sum >> 16);
  sum = (sum & 0xffff) + (sum >> 16);
  __u16 result = (__u16)~sum;
  if (h.l4_proto == KEEL_PROTO_UDP && result == 0) result = 0xffff;
  c = keel_ptr(ctx, csum_off, 2);
  if (!c) return keel_done(ctx, 1);
  keel_store16(c, result);
  return keel_done(ctx, 0);
}
