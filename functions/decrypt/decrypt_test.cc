/* SPDX-License-Identifier: Apache-2.0 */
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <random>

#include "payload/payload_testing.h"

namespace keel {
namespace {

const char* kConfig =
    R"({"key":"000102030405060708090a0b0c0d0e0f","iv":"f0e0d0c0b0a090807060504030201000"})";
const std::vector<uint8_t> kKey = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
const std::vector<uint8_t> kIv = {0xf0, 0xe0, 0xd0, 0xc0, 0xb0, 0xa0, 0x90, 0x80,
                                  0x70, 0x60, 0x50, 0x40, 0x30, 0x20, 0x10, 0x00};

/* AES-128-CBC in one go on a fresh context; |pad| selects PKCS#7 padding
 * (without it, |in| must be whole blocks). */
std::vector<uint8_t> OneShotEncrypt(const std::vector<uint8_t>& in, bool pad = true) {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  std::vector<uint8_t> out(in.size() + 16);
  int n = 0, f = 0;
  EXPECT_EQ(EVP_EncryptInit_ex(ctx, EVP_aes_128_cbc(), nullptr, kKey.data(), kIv.data()), 1);
  EVP_CIPHER_CTX_set_padding(ctx, pad ? 1 : 0);
  EXPECT_EQ(EVP_EncryptUpdate(ctx, out.data(), &n, in.data(), int(in.size())), 1);
  EXPECT_EQ(EVP_EncryptFinal_ex(ctx, out.data() + n, &f), 1);
  EVP_CIPHER_CTX_free(ctx);
  out.resize(size_t(n + f));
  return out;
}

std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = uint8_t(rng());
  return b;
}

TEST(Decrypt, DecryptsOneShotCiphertext) {
  auto nf = MakeNf("decrypt", kConfig);
  std::vector<TestPacket> in, want;
  for (uint8_t proto : {kProtoUdp, kProtoTcp}) {
    for (size_t len : {0, 1, 15, 16, 17, 1400}) {
      std::vector<uint8_t> plain = RandomBytes(len, uint32_t(len + proto));
      in.push_back(L4Packet(proto, OneShotEncrypt(plain)));
      want.push_back(L4Packet(proto, plain));
    }
  }
  RunResult r = RunBatch(nf.get(), in);
  ASSERT_EQ(r.out.size(), in.size());
  for (size_t i = 0; i < in.size(); i++) {
    EXPECT_EQ(r.out[i], want[i].bytes()) << i;
    EXPECT_TRUE(ChecksumsValid(r.out[i])) << i;
  }
  EXPECT_EQ(nf->Stats(), Json({{"bad_padding_drops", 0}}));
}

TEST(Decrypt, UndoesEncryptByteForByte) {
  auto enc = MakeNf("encrypt", kConfig);
  auto dec = MakeNf("decrypt", kConfig);
  std::vector<TestPacket> in;
  for (uint8_t proto : {kProtoUdp, kProtoTcp})
    for (size_t len : {0, 1, 15, 16, 17, 1400}) in.push_back(L4Packet(proto, RandomBytes(len, 9)));
  RunResult mid = RunBatch(enc.get(), in);
  ASSERT_EQ(mid.out.size(), in.size());
  std::vector<TestPacket> encrypted;
  for (size_t i = 0; i < in.size(); i++) {
    EXPECT_TRUE(ChecksumsValid(mid.out[i])) << i;
    if (PayloadOf(in[i].bytes()).empty()) {
      EXPECT_EQ(mid.out[i], in[i].bytes()) << i;
    } else {
      EXPECT_NE(PayloadOf(mid.out[i]), PayloadOf(in[i].bytes())) << i;
    }
    encrypted.emplace_back(mid.out[i]);
  }
  RunResult r = RunBatch(dec.get(), encrypted);
  ASSERT_EQ(r.out.size(), in.size());
  for (size_t i = 0; i < in.size(); i++) EXPECT_EQ(r.out[i], in[i].bytes()) << i;
}

TEST(Decrypt, DropsPartialBlocksAndBadPadding) {
  auto nf = MakeNf("decrypt", kConfig);
  std::vector<uint8_t> last_zero(16, 7), last_17(16, 17), inconsistent(32, 3);
  last_zero[15] = 0;
  inconsistent[31] = 4; /* claims 4 bytes of padding, but they read 3 3 3 4 */
  std::vector<TestPacket> bad = {
      L4Packet(kProtoUdp, RandomBytes(15, 1)),
      L4Packet(kProtoTcp, RandomBytes(33, 2)),
      L4Packet(kProtoUdp, OneShotEncrypt(last_zero, false)),
      L4Packet(kProtoUdp, OneShotEncrypt(last_17, false)),
      L4Packet(kProtoTcp, OneShotEncrypt(inconsistent, false)),
  };
  RunResult r = RunBatch(nf.get(), bad);
  EXPECT_EQ(r.out.size(), 0u);
  EXPECT_EQ(r.dropped, 5);
  EXPECT_EQ(nf->Stats(), Json({{"bad_padding_drops", 5}}));
}

TEST(Decrypt, AcceptsAWholeBlockOfPadding) {
  auto nf = MakeNf("decrypt", kConfig);
  std::vector<uint8_t> block(16, 16);
  RunResult r = RunBatch(nf.get(), {L4Packet(kProtoUdp, OneShotEncrypt(block, false))});
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], L4Packet(kProtoUdp, {}).bytes());
}

TEST(Decrypt, PassesPacketsWithoutPayloadAndTruncatedOnes) {
  auto nf = MakeNf("decrypt", kConfig);
  std::vector<uint8_t> arp(60, 0);
  arp[12] = 0x08;
  arp[13] = 0x06;
  std::vector<uint8_t> full = L4Packet(kProtoUdp, OneShotEncrypt(RandomBytes(20, 5))).bytes();
  std::vector<std::vector<uint8_t>> ins = {L4Packet(kProtoUdp, {}).bytes(), arp};
  for (size_t n = 0; n < full.size(); n++) ins.emplace_back(full.begin(), full.begin() + n);
  for (const auto& in : ins) {
    RunResult r = RunTight(nf.get(), in, 0);
    ASSERT_EQ(r.out.size(), 1u) << in.size();
    EXPECT_EQ(r.out[0], in) << in.size();
  }
}

TEST(Decrypt, RejectsBadConfig) {
  EXPECT_THROW_MSG(MakeNf("decrypt", R"({"key":"00","iv":"00"})"),
                   "decrypt.key: expected 32 hex digits, got 2");
  EXPECT_THROW_MSG(MakeNf("decrypt", R"({"key":"000102030405060708090a0b0c0d0e0f",)"
                                     R"("iv":"x0e0d0c0b0a090807060504030201000"})"),
                   "decrypt.iv: 'x' is not a hex digit");
  EXPECT_THROW_MSG(MakeNf("decrypt", R"({"iv":"f0e0d0c0b0a090807060504030201000"})"),
                   "decrypt.key: missing");
  EXPECT_THROW_MSG(MakeNf("decrypt", R"({"mode":"cbc"})"), "decrypt.mode: unknown field");
}

}  // namespace
}  // namespace keel
