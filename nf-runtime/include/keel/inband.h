/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keel's in-band frames between keel-ingress and a chain instance's
 * position 0: the mark on every packet the ingress sends to an instance, and
 * the control frames that travel the same path (today the per-flow MARKER of
 * the order-preserving handover, handover.h). Shared by ingress/ and
 * nf-runtime/; free of DPDK so both sides and their tests include it.
 *
 * The mark is one 802.1Q tag, TPID 0x8100, TCI = PCP 0, DEI 0, VID 4093.
 * The ingress puts it right in front of the packet's own EtherType (under
 * the VLAN tags the packet came with, at most two), then pushes the
 * instance VLAN outermost. What position 0 sees after the worker's NIC
 * switch took the instance VLAN off:
 *
 *   dst MAC (6) | src MAC (6) | [the packet's tags] | 0x8100 | VID 4093 | EtherType ...
 *
 * Under the packet's own tags, the mark survives the switch NFs before the
 * server: a detunnel pops the tag above it, a tunnel pushes one above it,
 * and ACL, monitor and ipv4fwd match eth_type and the IPv4 fields behind it
 * as behind the instance VLAN (the ToR parses two tags, vlan-limit=2).
 * Position 0 looks for it as the outermost or the second tag and takes it
 * off before any NF sees the packet.
 *
 * A control frame is marked with the mark outermost:
 *
 *   dst MAC | src MAC | 0x8100, VID 4093 |
 *   0x88B5 (IEEE 802 local experimental EtherType)
 *   | version (1 byte, = 1) | type (1) | length (2, big endian: header + body,
 *     padding excluded) | body (length - 4 bytes) | padding to 60 bytes
 *
 *   type 1, FLOW_MARKER, body 24 bytes (big endian):
 *     src_ip (4) | dst_ip (4) | src_port (2) | dst_port (2) | proto (1)
 *     | reserved (3, zero) | seq (8: the ingress' setup id of the flow)
 *   The ingress sends it once per flow, after the flow's own ToR rule was
 *   confirmed (barrier), it sent every packet it had of the flow and none
 *   came for its quiet time (--marker-quiet-us): nothing of that flow is
 *   expected via the ingress after it (OpenNF's order-preserving move,
 *   SIGCOMM'14 §5.1.2, with the ingress as the source side). A packet that
 *   still comes is counted late on both sides and passes.
 *
 *   type 2, EXPORT_STATE, and type 3, IMPORT_STATE (issue 37's flow moves):
 *     body = one flow_move.h frame (magic 'K' 'M', its kind export or
 *     import, status, flow, records), 34 to kMoveBodyMax (1400) bytes; the
 *     whole frame is at most kMoveFrameMaxLen = 18 + 4 + 1400 bytes before
 *     the sender pushes the instance VLAN (4 more on the wire).
 *   The ingress sends an export behind a moving flow's last packets (the
 *   flow's ToR rule gone, its new packets held, its quiet time over) to the
 *   source instance, an import ahead of the held packets to the
 *   destination. Position 0 recognises the frame and keeps it marked; each
 *   position of the chain, in order, runs flow_move.h's MoveAt on the body
 *   in place (no NF's ProcessBatch sees the frame; the chain buffer's
 *   descriptor says it is a move frame, kDescMove), which appends or takes
 *   that position's records and sets the status; the last position sends it
 *   out of the instance as it sends packets, still marked, EtherType 0x88B5,
 *   the length field updated to the new body. The instance's return rule
 *   on the ToR sends it back to the ingress with the instance VLAN on
 *   (instance VLAN | mark | 0x88B5 | ...), where the ingress reads the
 *   result (WriteMoveFrame / ParseMoveFrame below; EncodeMoveFrame /
 *   DecodeMoveFrame for the body). A frame that is not a well-formed move
 *   frame is dropped and counted where it is found, never passed on.
 *   A receiver drops and counts a type it does not know.
 *
 * On the ToR, keel-torctl sends an instance's marked control frames
 * (in_port ingress, its VLAN, eth_type 0x88B5) straight to the instance,
 * past the chain's switch NFs, which would drop a frame that is not IPv4.
 */
#ifndef KEEL_INBAND_H_
#define KEEL_INBAND_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace keel::inband {

constexpr uint16_t kTpidVlan = 0x8100;
/* The VID of the mark (one below the ingress' normal-path VLAN, 4094; the
 * gateway hands out instance VLANs from 100 to 4092). */
constexpr uint16_t kMarkVid = 4093;
constexpr uint16_t kEtherType = 0x88B5;
constexpr uint8_t kVersion = 1;

enum class Type : uint8_t {
  kFlowMarker = 1,
  kExportState = 2, /* a flow's state on its way out of the source instance (issue 37) */
  kImportState = 3, /* a flow's state on its way into the destination instance */
};

inline bool IsMoveType(uint8_t t) {
  return t == static_cast<uint8_t>(Type::kExportState) || t == static_cast<uint8_t>(Type::kImportState);
}

constexpr size_t kMacs = 12;
constexpr size_t kTagLen = 4;
constexpr size_t kHeaderLen = 4;      /* version, type, length */
constexpr size_t kMarkerBodyLen = 24;
constexpr size_t kMinFrame = 60;      /* Ethernet's minimum without the FCS */
/* Where the in-band header starts in a marked frame (after MACs, mark, EtherType). */
constexpr size_t kPayloadOffset = kMacs + kTagLen + 2;
constexpr size_t kMarkerFrameLen = kMinFrame;
static_assert(kPayloadOffset + kHeaderLen + kMarkerBodyLen <= kMarkerFrameLen);
/* A move frame's body (the flow_move.h frame) starts here, after the
 * in-band header, and holds at most kMoveBodyMax bytes (flow_move.h's
 * kMoveFrameMax); its shortest is the flow_move.h header. */
constexpr size_t kMoveBodyOffset = kPayloadOffset + kHeaderLen;
constexpr size_t kMoveBodyMax = 1400;
constexpr size_t kMoveBodyMin = 34;
constexpr size_t kMoveFrameMaxLen = kMoveBodyOffset + kMoveBodyMax;

/* A flow as the ingress keys it: the 5-tuple in host byte order, ports 0
 * for protocols without them. */
struct FlowId {
  uint32_t src_ip = 0;
  uint32_t dst_ip = 0;
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  uint8_t proto = 0;
  bool operator==(const FlowId& o) const {
    return src_ip == o.src_ip && dst_ip == o.dst_ip && src_port == o.src_port && dst_port == o.dst_port &&
           proto == o.proto;
  }
};

inline uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] << 8 | p[1]); }
inline uint32_t Get32(const uint8_t* p) { return uint32_t{Get16(p)} << 16 | Get16(p + 2); }
inline void Put16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
inline void Put32(uint8_t* p, uint32_t v) {
  Put16(p, static_cast<uint16_t>(v >> 16));
  Put16(p + 2, static_cast<uint16_t>(v));
}

constexpr uint16_t kTpidQinq = 0x88A8;

/* Where the mark is in the |len| bytes at |frame|: the offset of its TPID
 * (kMacs: the outermost tag; kMacs + kTagLen: the second, under a tag a
 * switch NF pushed), or 0 if the frame carries none. */
inline size_t MarkOffset(const uint8_t* frame, size_t len) {
  for (size_t off = kMacs; off <= kMacs + kTagLen && len >= off + kTagLen + 2; off += kTagLen) {
    const uint16_t tpid = Get16(frame + off);
    if (tpid == kTpidVlan && (Get16(frame + off + 2) & 0x0FFF) == kMarkVid) return off;
    if (tpid != kTpidVlan && tpid != kTpidQinq) return 0;
  }
  return 0;
}

inline bool IsMarked(const uint8_t* frame, size_t len) { return MarkOffset(frame, len) != 0; }

/* Where the ingress puts the mark in |frame|: after the MACs and the
 * packet's own VLAN tags (at most two). */
inline size_t MarkPlace(const uint8_t* frame, size_t len) {
  size_t off = kMacs;
  for (int tags = 0; tags < 2 && len >= off + kTagLen + 2; tags++) {
    const uint16_t tpid = Get16(frame + off);
    if (tpid != kTpidVlan && tpid != kTpidQinq) break;
    off += kTagLen;
  }
  return off;
}

/* Writes a control frame's headers into |out|: MACs, the mark outermost,
 * EtherType 0x88B5 and the in-band header of |type| for a body of
 * |body_len| bytes. Returns where the body goes. */
inline uint8_t* WriteControlHeaders(uint8_t* out, const uint8_t dst_mac[6], const uint8_t src_mac[6], Type type,
                                    size_t body_len) {
  std::memcpy(out, dst_mac, 6);
  std::memcpy(out + 6, src_mac, 6);
  Put16(out + kMacs, kTpidVlan);
  Put16(out + kMacs + 2, kMarkVid);
  Put16(out + kMacs + kTagLen, kEtherType);
  uint8_t* h = out + kPayloadOffset;
  h[0] = kVersion;
  h[1] = static_cast<uint8_t>(type);
  Put16(h + 2, static_cast<uint16_t>(kHeaderLen + body_len));
  return h + kHeaderLen;
}

/* Writes a FLOW_MARKER frame, marked, without the instance VLAN (the sender
 * pushes that as it does on its data), into |out| (kMarkerFrameLen bytes). */
inline void WriteMarker(uint8_t* out, const uint8_t dst_mac[6], const uint8_t src_mac[6], const FlowId& f,
                        uint64_t seq) {
  std::memset(out, 0, kMarkerFrameLen);
  uint8_t* b = WriteControlHeaders(out, dst_mac, src_mac, Type::kFlowMarker, kMarkerBodyLen);
  Put32(b, f.src_ip);
  Put32(b + 4, f.dst_ip);
  Put16(b + 8, f.src_port);
  Put16(b + 10, f.dst_port);
  b[12] = f.proto;
  for (int i = 0; i < 8; i++) b[16 + i] = static_cast<uint8_t>(seq >> (56 - 8 * i));
}

/* Why an in-band frame was not taken (each is counted). */
enum class Malformed : uint8_t {
  kNone,
  kTruncated,    /* shorter than its header or than its length says */
  kVersion,      /* a version this side does not speak */
  kUnknownType,  /* a type this side does not know (or a reserved one) */
  kBadLength,    /* the length does not fit the type */
  kNotInband,    /* no mark where a control frame has it, or not EtherType 0x88B5 */
};

/* Parses the in-band payload |p| (|len| bytes from the version byte, the
 * frame's padding included) as a FLOW_MARKER into |*f| and |*seq|. */
inline Malformed ParseMarker(const uint8_t* p, size_t len, FlowId* f, uint64_t* seq) {
  if (len < kHeaderLen) return Malformed::kTruncated;
  if (p[0] != kVersion) return Malformed::kVersion;
  if (p[1] != static_cast<uint8_t>(Type::kFlowMarker)) return Malformed::kUnknownType;
  const uint16_t n = Get16(p + 2);
  if (n != kHeaderLen + kMarkerBodyLen) return Malformed::kBadLength;
  if (len < n) return Malformed::kTruncated;
  const uint8_t* b = p + kHeaderLen;
  if (b[13] | b[14] | b[15]) return Malformed::kBadLength;
  f->src_ip = Get32(b);
  f->dst_ip = Get32(b + 4);
  f->src_port = Get16(b + 8);
  f->dst_port = Get16(b + 10);
  f->proto = b[12];
  uint64_t s = 0;
  for (int i = 0; i < 8; i++) s = s << 8 | b[16 + i];
  *seq = s;
  return Malformed::kNone;
}

/* Writes an EXPORT_STATE or IMPORT_STATE frame (|type|) with the
 * flow_move.h frame |body| (|body_len| bytes), marked, without the instance
 * VLAN (the sender pushes it as on its data), into |out| (|cap| bytes),
 * padded to kMinFrame. Returns the frame's length, or 0 (nothing usable
 * written) if |type| is no move type, the body is shorter than
 * kMoveBodyMin or longer than kMoveBodyMax, or |cap| is too small. */
inline size_t WriteMoveFrame(uint8_t* out, size_t cap, const uint8_t dst_mac[6], const uint8_t src_mac[6], Type type,
                             const uint8_t* body, size_t body_len) {
  const size_t used = kMoveBodyOffset + body_len;
  const size_t len = used < kMinFrame ? kMinFrame : used;
  if (!IsMoveType(static_cast<uint8_t>(type)) || body_len < kMoveBodyMin || body_len > kMoveBodyMax || cap < len)
    return 0;
  std::memmove(out + kMoveBodyOffset, body, body_len); /* first: |body| may be in |out| already */
  WriteControlHeaders(out, dst_mac, src_mac, type, body_len);
  std::memset(out + used, 0, len - used);
  return len;
}

/* Parses the in-band payload |p| (|len| bytes from the version byte, the
 * frame's padding included) as an EXPORT_STATE or IMPORT_STATE frame: its
 * type in |*type|, its body (at p + kHeaderLen) |*body_len| bytes long. The
 * body itself is flow_move.h's to check (DecodeMoveFrame, MoveAt). */
inline Malformed ParseMove(const uint8_t* p, size_t len, Type* type, size_t* body_len) {
  if (len < kHeaderLen) return Malformed::kTruncated;
  if (p[0] != kVersion) return Malformed::kVersion;
  if (!IsMoveType(p[1])) return Malformed::kUnknownType;
  const uint16_t n = Get16(p + 2);
  if (n < kHeaderLen + kMoveBodyMin || n > kHeaderLen + kMoveBodyMax) return Malformed::kBadLength;
  if (len < n) return Malformed::kTruncated;
  *type = static_cast<Type>(p[1]);
  *body_len = n - kHeaderLen;
  return Malformed::kNone;
}

/* Finds a move frame in the |len| bytes at |frame|, as an instance sends it
 * (the mark outermost) or as the ToR's return rule hands it to the ingress
 * (the instance VLAN, then the mark): sets |*header_off| to where its
 * in-band header starts (its body follows kHeaderLen later), |*type| and
 * |*body_len|. kNotInband if the mark is not outermost or under one tag, or
 * EtherType 0x88B5 does not follow it. */
inline Malformed ParseMoveFrame(const uint8_t* frame, size_t len, Type* type, size_t* header_off, size_t* body_len) {
  const size_t at = MarkOffset(frame, len);
  if (at == 0 || len < at + kTagLen + 2 || Get16(frame + at + kTagLen) != kEtherType) return Malformed::kNotInband;
  *header_off = at + kTagLen + 2;
  return ParseMove(frame + *header_off, len - *header_off, type, body_len);
}

/* The flow a move frame's body (flow_move.h: the ingress' key at offset 8:
 * src ip, dst ip, src port, dst port, proto) moves; false if the body is
 * shorter than kMoveBodyMin. */
inline bool MoveFlowId(const uint8_t* body, size_t body_len, FlowId* f) {
  if (body_len < kMoveBodyMin) return false;
  const uint8_t* k = body + 8;
  f->src_ip = Get32(k);
  f->dst_ip = Get32(k + 4);
  f->src_port = Get16(k + 8);
  f->dst_port = Get16(k + 10);
  f->proto = k[12];
  return true;
}

/* Rewrites the in-band header at |header| (ParseMoveFrame's |header_off|)
 * for a body of |body_len| bytes of type |type|, e.g. an export that came
 * back, turned into an import. The frame must have room for the body. */
inline void SetMoveHeader(uint8_t* header, Type type, size_t body_len) {
  header[1] = static_cast<uint8_t>(type);
  Put16(header + 2, static_cast<uint16_t>(kHeaderLen + body_len));
}

}  // namespace keel::inband

#endif  // KEEL_INBAND_H_
