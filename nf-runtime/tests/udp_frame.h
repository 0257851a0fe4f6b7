/* SPDX-License-Identifier: Apache-2.0 */
/* The frames the runtime's in-band tests (handover_test, move_frame_test) send. */
#ifndef KEEL_TESTS_UDP_FRAME_H_
#define KEEL_TESTS_UDP_FRAME_H_

#include <cstdint>
#include <vector>

#include "keel/inband.h"

namespace keel {

/* A UDP/IPv4 frame (addresses and ports in host byte order) whose payload's
 * first byte is |seq|; with the ingress' mark (inband.h) when |marked|. */
inline std::vector<uint8_t> UdpFrame(uint32_t src_ip, uint32_t dst_ip, uint16_t sport, uint16_t dport, uint8_t seq,
                                     bool marked) {
  std::vector<uint8_t> f(14 + 20 + 8 + 4, 0);
  f[0] = 2;
  f[6] = 2;
  f[12] = 0x08;
  uint8_t* ip = f.data() + 14;
  ip[0] = 0x45;
  inband::Put16(ip + 2, 32);
  ip[8] = 64;
  ip[9] = 17;
  inband::Put32(ip + 12, src_ip);
  inband::Put32(ip + 16, dst_ip);
  inband::Put16(ip + 20, sport);
  inband::Put16(ip + 22, dport);
  inband::Put16(ip + 24, 12);
  ip[28] = seq;
  if (marked) {
    const uint8_t tag[4] = {0x81, 0x00, inband::kMarkVid >> 8, inband::kMarkVid & 0xFF};
    f.insert(f.begin() + 12, tag, tag + 4);
  }
  return f;
}

}  // namespace keel

#endif  // KEEL_TESTS_UDP_FRAME_H_
