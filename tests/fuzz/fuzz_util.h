/* SPDX-License-Identifier: Apache-2.0 */
/* What the fuzz harnesses share: a reader of the fuzzer's bytes and the
 * check that a packet view stays inside its buffer. A broken invariant
 * aborts, which libFuzzer reports as a crash with the input that caused it. */
#ifndef KEEL_TESTS_FUZZ_FUZZ_UTIL_H_
#define KEEL_TESTS_FUZZ_FUZZ_UTIL_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "keel/packet.h"

namespace keel::fuzz {

/* Takes bytes off the front of the fuzzer's input; zeros once it is used up. */
class Input {
 public:
  Input(const uint8_t* data, size_t size) : p_(data), left_(size) {}
  uint8_t U8() { return left_ ? (left_--, *p_++) : 0; }
  uint16_t U16() { return static_cast<uint16_t>(U8() | U8() << 8); }
  /* Up to |n| bytes: fewer if the input ends first. */
  size_t Take(uint8_t* out, size_t n) {
    if (n > left_) n = left_;
    std::memcpy(out, p_, n);
    p_ += n;
    left_ -= n;
    return n;
  }
  size_t left() const { return left_; }

 private:
  const uint8_t* p_;
  size_t left_;
};

[[noreturn]] inline void Fail(const char* what) {
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  std::abort();
}

#define KEEL_FUZZ_CHECK(cond) \
  do {                        \
    if (!(cond)) ::keel::fuzz::Fail(#cond); \
  } while (0)

/* Every accessor of |p| answers inside [buf, buf + cap) and inside the
 * packet; reads every byte the accessors point at. */
inline uint32_t CheckPacket(Packet* p, const uint8_t* buf, uint16_t cap) {
  KEEL_FUZZ_CHECK(static_cast<uint32_t>(p->headroom()) + p->len() <= cap);
  KEEL_FUZZ_CHECK(p->data() >= buf && p->data() + p->len() <= buf + cap);
  const uint8_t* end = p->data() + p->len();
  uint32_t sum = 0;
  for (uint16_t i = 0; i < p->len(); i++) sum += p->data()[i];
  auto inside = [&](const void* h, size_t n) {
    if (!h) return;
    const uint8_t* b = static_cast<const uint8_t*>(h);
    KEEL_FUZZ_CHECK(b >= p->data() && b + n <= end);
  };
  inside(p->eth(), sizeof(EthHdr));
  inside(p->vlan(), sizeof(VlanHdr));
  inside(p->ipv4(), sizeof(Ipv4Hdr));
  inside(p->tcp(), sizeof(TcpHdr));
  inside(p->udp(), sizeof(UdpHdr));
  uint16_t plen = 0;
  uint8_t* pl = p->payload(&plen);
  if (pl) {
    inside(pl, plen);
    for (uint16_t i = 0; i < plen; i++) sum += pl[i];
  }
  uint16_t l3 = p->l3_offset(), l4 = p->l4_offset();
  KEEL_FUZZ_CHECK(l3 <= p->len() && l4 <= p->len());
  FlowKey key;
  if (p->GetFlowKey(&key)) KEEL_FUZZ_CHECK(p->ipv4() != nullptr);
  sum += static_cast<uint32_t>(p->malformed());
  return sum;
}

}  // namespace keel::fuzz

#endif  // KEEL_TESTS_FUZZ_FUZZ_UTIL_H_
