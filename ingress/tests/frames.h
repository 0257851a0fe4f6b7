/* SPDX-License-Identifier: Apache-2.0 */
/* Test frames: Ethernet + IPv4 + UDP/TCP, built byte by byte. */
#ifndef KEEL_INGRESS_TESTS_FRAMES_H_
#define KEEL_INGRESS_TESTS_FRAMES_H_

#include <cstdint>
#include <vector>

namespace keel::ingress::testing {

/* An Ethernet frame carrying IPv4 |proto| from 198.18.0.1:|sport| to
 * 198.19.0.1:|dport| with |payload| bytes. */
inline std::vector<uint8_t> Ipv4Frame(uint8_t proto, uint16_t sport, uint16_t dport, size_t payload = 16) {
  size_t l4 = proto == 6 ? 20 : proto == 17 ? 8 : 0;
  size_t total = 20 + l4 + payload;
  std::vector<uint8_t> f(14 + total, 0xab);
  const uint8_t eth[14] = {2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00};
  const uint8_t ip[20] = {0x45, 0, uint8_t(total >> 8), uint8_t(total), 0, 1, 0, 0, 64, proto, 0, 0,
                          198,  18, 0, 1, 198, 19, 0, 1};
  for (size_t i = 0; i < 14; i++) f[i] = eth[i];
  for (size_t i = 0; i < 20; i++) f[14 + i] = ip[i];
  for (size_t i = 0; i < l4; i++) f[34 + i] = 0;
  if (l4) {
    f[34] = uint8_t(sport >> 8);
    f[35] = uint8_t(sport);
    f[36] = uint8_t(dport >> 8);
    f[37] = uint8_t(dport);
    if (proto == 6) f[34 + 12] = 0x50;
  }
  return f;
}

inline std::vector<uint8_t> UdpFrame(uint16_t sport, uint16_t dport = 5001) { return Ipv4Frame(17, sport, dport); }

}  // namespace keel::ingress::testing

#endif  // KEEL_INGRESS_TESTS_FRAMES_H_
