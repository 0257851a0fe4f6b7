/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer harness: the packet parser and accessors (packet.h) on arbitrary
 * frames, before and after the packet is grown and shrunk at both ends. The
 * buffer is a heap block of exactly one slot, so AddressSanitizer sees any
 * read or write past it. Input: four sizes for Prepend, Adj, Append and Trim
 * (one byte each), then the frame. */
#include <vector>

#include "fuzz_util.h"
#include "keel/pktbuf.h"

using keel::Packet;
using keel::fuzz::CheckPacket;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  keel::fuzz::Input in(data, size);
  uint8_t ops[4];
  for (uint8_t& o : ops) o = in.U8();
  std::vector<uint8_t> buf(keel::kSlotSize);
  uint16_t len = static_cast<uint16_t>(in.Take(buf.data() + keel::kSlotHeadroom, keel::kSlotDataRoom));
  Packet p;
  p.Reset(buf.data(), keel::kSlotHeadroom, len, static_cast<uint16_t>(buf.size()));
  volatile uint32_t sink = CheckPacket(&p, buf.data(), static_cast<uint16_t>(buf.size()));
  bool grew = p.Prepend(ops[0]);
  KEEL_FUZZ_CHECK(grew == (ops[0] <= keel::kSlotHeadroom));
  if (grew) std::memset(p.data(), 0xa5, ops[0]);
  p.Invalidate();
  sink = sink + CheckPacket(&p, buf.data(), static_cast<uint16_t>(buf.size()));
  uint16_t before = p.len();
  KEEL_FUZZ_CHECK(p.Adj(ops[1]) == (ops[1] <= before));
  before = p.len();
  if (p.Append(ops[2])) {
    KEEL_FUZZ_CHECK(p.len() == before + ops[2]);
    std::memset(p.data() + before, 0x5a, ops[2]);
  }
  before = p.len();
  KEEL_FUZZ_CHECK(p.Trim(ops[3]) == (ops[3] <= before));
  p.Invalidate();
  sink = sink + CheckPacket(&p, buf.data(), static_cast<uint16_t>(buf.size()));
  (void)sink;
  return 0;
}
