/* SPDX-License-Identifier: Apache-2.0 */
/* Test helpers for the NFs that rewrite TCP/UDP payloads. */
#ifndef KEEL_FUNCTIONS_PAYLOAD_PAYLOAD_TESTING_H_
#define KEEL_FUNCTIONS_PAYLOAD_PAYLOAD_TESTING_H_

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "testing/nf_test.h"

namespace keel {

/* A UDP or TCP packet (198.18.0.1:1000 -> 198.18.1.2:2000) carrying |payload|. */
inline TestPacket L4Packet(uint8_t proto, const std::vector<uint8_t>& payload) {
  L4Spec s;
  s.src_ip = "198.18.0.1";
  s.dst_ip = "198.18.1.2";
  s.proto = proto;
  s.src_port = 1000;
  s.dst_port = 2000;
  s.payload.assign(payload.begin(), payload.end());
  return BuildPacket(s);
}

/* The TCP/UDP payload of |bytes| (bounded by the IPv4 total length). */
inline std::vector<uint8_t> PayloadOf(std::vector<uint8_t> bytes) {
  Packet p = View(&bytes);
  uint16_t len;
  const uint8_t* d = p.payload(&len);
  return d ? std::vector<uint8_t>(d, d + len) : std::vector<uint8_t>();
}

/* Runs |nf| over one packet in a buffer of exactly |headroom| + its size +
 * |tailroom| bytes, so that a read past the room is caught by sanitizers. */
inline RunResult RunTight(NF* nf, const std::vector<uint8_t>& bytes, uint16_t tailroom,
                          uint16_t headroom = kTestHeadroom) {
  size_t cap = headroom + bytes.size() + tailroom;
  std::unique_ptr<uint8_t[]> buf(new uint8_t[cap]);
  std::memset(buf.get(), 0xee, cap);
  if (!bytes.empty()) std::memcpy(buf.get() + headroom, bytes.data(), bytes.size());
  Packet pkt;
  pkt.Reset(buf.get(), headroom, static_cast<uint16_t>(bytes.size()), static_cast<uint16_t>(cap));
  PacketBatch batch;
  batch.Add(&pkt);
  nf->ProcessBatch(&batch);
  RunResult r;
  r.dropped = batch.RemoveDropped();
  for (Packet* p : batch) r.out.emplace_back(p->data(), p->data() + p->len());
  return r;
}

}  // namespace keel

#endif  // KEEL_FUNCTIONS_PAYLOAD_PAYLOAD_TESTING_H_
