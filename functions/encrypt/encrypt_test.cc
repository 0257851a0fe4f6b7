/* SPDX-License-Identifier: Apache-2.0 */
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <random>

#include "payload/payload_testing.h"

namespace keel {
namespace {

/* NIST SP 800-38A, F.2.1 CBC-AES128.Encrypt. */
const char* kConfig =
    R"({"key":"2b7e151628aed2a6abf7158809cf4f3c","iv":"000102030405060708090a0b0c0d0e0f"})";
const std::vector<uint8_t> kKey = {0x2b, 0x7e, 0x15, 0x16, 0x28, 0xae, 0xd2, 0xa6,
                                   0xab, 0xf7, 0x15, 0x88, 0x09, 0xcf, 0x4f, 0x3c};
const std::vector<uint8_t> kIv = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

std::vector<uint8_t> Hex(const std::string& s) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i < s.size(); i += 2) out.push_back(uint8_t(std::stoi(s.substr(i, 2), 0, 16)));
  return out;
}

/* AES-128-CBC with PKCS#7 padding in one go, on a fresh context. */
std::vector<uint8_t> OneShotEncrypt(const std::vector<uint8_t>& in) {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  std::vector<uint8_t> out(in.size() + 16);
  int n = 0, f = 0;
  EXPECT_EQ(EVP_EncryptInit_ex(ctx, EVP_aes_128_cbc(), nullptr, kKey.data(), kIv.data()), 1);
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

TEST(Encrypt, MatchesNistVector) {
  auto nf = MakeNf("encrypt", kConfig);
  std::vector<uint8_t> plain = Hex(
      "6bc1bee22e409f96e93d7e117393172aae2d8a571e03ac9c9eb76fac45af8e51"
      "30c81c46a35ce411e5fbc1191a0a52eff69f2445df4f9b17ad2b417be66c3710");
  RunResult r = RunBatch(nf.get(), {L4Packet(kProtoUdp, plain)});
  ASSERT_EQ(r.out.size(), 1u);
  std::vector<uint8_t> cipher = PayloadOf(r.out[0]);
  ASSERT_EQ(cipher.size(), 80u);
  EXPECT_EQ(std::vector<uint8_t>(cipher.begin(), cipher.begin() + 64),
            Hex("7649abac8119b246cee98e9b12e9197d5086cb9b507219ee95db113a917678b2"
                "73bed6b8e3c1743b7116e69e222295163ff1caa1681fac09120eca307586e1a7"));
}

TEST(Encrypt, MatchesOneShotEvpForEveryLength) {
  auto nf = MakeNf("encrypt", kConfig);
  std::vector<TestPacket> in, want;
  for (uint8_t proto : {kProtoUdp, kProtoTcp}) {
    for (size_t len : {1, 15, 16, 17, 31, 1400}) {
      std::vector<uint8_t> plain = RandomBytes(len, uint32_t(len * proto));
      in.push_back(L4Packet(proto, plain));
      want.push_back(L4Packet(proto, OneShotEncrypt(plain)));
    }
  }
  RunResult r = RunBatch(nf.get(), in);
  ASSERT_EQ(r.out.size(), in.size());
  for (size_t i = 0; i < in.size(); i++) {
    EXPECT_EQ(r.out[i], want[i].bytes()) << i;
    EXPECT_TRUE(ChecksumsValid(r.out[i])) << i;
  }
  EXPECT_EQ(nf->Stats(), Json({{"tailroom_drops", 0}}));
}

TEST(Encrypt, GrowsPayloadByPaddingAndFixesLengths) {
  auto nf = MakeNf("encrypt", kConfig);
  RunResult r = RunBatch(nf.get(), {L4Packet(kProtoUdp, RandomBytes(17, 1))});
  ASSERT_EQ(r.out.size(), 1u);
  Packet p = View(&r.out[0]);
  ASSERT_NE(p.udp(), nullptr);
  EXPECT_EQ(ntohs(p.ipv4()->total_length), 20 + 8 + 32);
  EXPECT_EQ(ntohs(p.udp()->length), 8 + 32);
  EXPECT_EQ(r.out[0].size(), 14u + 20 + 8 + 32);
}

TEST(Encrypt, CutsEthernetTrailer) {
  auto nf = MakeNf("encrypt", kConfig);
  std::vector<uint8_t> plain = {'a', 'b', 'c', 'd', 'e'};
  std::vector<uint8_t> padded = L4Packet(kProtoUdp, plain).bytes();
  padded.resize(60, 0);
  RunResult r = RunTight(nf.get(), padded, 0);
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], L4Packet(kProtoUdp, OneShotEncrypt(plain)).bytes());
}

TEST(Encrypt, PassesPacketsWithoutPayload) {
  auto nf = MakeNf("encrypt", kConfig);
  L4Spec icmp;
  icmp.src_ip = "10.0.0.1";
  icmp.dst_ip = "10.0.0.2";
  icmp.proto = kProtoIcmp;
  icmp.payload = "ping";
  std::vector<uint8_t> arp(60, 0);
  arp[12] = 0x08;
  arp[13] = 0x06;
  std::vector<uint8_t> fragment = L4Packet(kProtoUdp, RandomBytes(40, 2)).bytes();
  fragment[14 + 6] = 0x20; /* more fragments */
  Ipv4UpdateChecksum(reinterpret_cast<Ipv4Hdr*>(fragment.data() + 14));
  for (const auto& in : {L4Packet(kProtoUdp, {}).bytes(), L4Packet(kProtoTcp, {}).bytes(),
                         BuildPacket(icmp).bytes(), arp, fragment}) {
    RunResult r = RunTight(nf.get(), in, 0);
    ASSERT_EQ(r.out.size(), 1u);
    EXPECT_EQ(r.out[0], in);
  }
}

TEST(Encrypt, PassesTruncatedPacketsUnchanged) {
  auto nf = MakeNf("encrypt", kConfig);
  std::vector<uint8_t> full = L4Packet(kProtoTcp, RandomBytes(20, 3)).bytes();
  for (size_t n = 0; n < full.size(); n++) {
    std::vector<uint8_t> in(full.begin(), full.begin() + n);
    RunResult r = RunTight(nf.get(), in, 64);
    ASSERT_EQ(r.out.size(), 1u) << n;
    EXPECT_EQ(r.out[0], in) << n;
  }
}

TEST(Encrypt, DropsWhatOutgrowsTheTailroom) {
  auto nf = MakeNf("encrypt", kConfig);
  std::vector<uint8_t> plain = RandomBytes(17, 4);
  std::vector<uint8_t> in = L4Packet(kProtoUdp, plain).bytes();
  RunResult r = RunTight(nf.get(), in, 14);
  EXPECT_EQ(r.out.size(), 0u);
  EXPECT_EQ(r.dropped, 1);
  EXPECT_EQ(nf->Stats(), Json({{"tailroom_drops", 1}}));
  r = RunTight(nf.get(), in, 15);
  ASSERT_EQ(r.out.size(), 1u);
  EXPECT_EQ(r.out[0], L4Packet(kProtoUdp, OneShotEncrypt(plain)).bytes());
}

TEST(Encrypt, RejectsBadConfig) {
  const std::string iv = R"("iv":"000102030405060708090a0b0c0d0e0f")";
  EXPECT_THROW_MSG(MakeNf("encrypt", R"({"key":"2b7e151628aed2a6abf7158809cf4f3",)" + iv + "}"),
                   "encrypt.key: expected 32 hex digits, got 31");
  EXPECT_THROW_MSG(MakeNf("encrypt", R"({"key":"2b7e151628aed2a6abf7158809cf4f3c00",)" + iv + "}"),
                   "encrypt.key: expected 32 hex digits, got 34");
  EXPECT_THROW_MSG(MakeNf("encrypt", R"({"key":"2b7e151628aed2a6abf7158809cf4f3g",)" + iv + "}"),
                   "encrypt.key: 'g' is not a hex digit");
  EXPECT_THROW_MSG(MakeNf("encrypt", R"({"key":"2b7e151628aed2a6abf7158809cf4f3c","iv":"zz"})"),
                   "encrypt.iv: expected 32 hex digits, got 2");
  EXPECT_THROW_MSG(MakeNf("encrypt", R"({"key":"2b7e151628aed2a6abf7158809cf4f3c"})"),
                   "encrypt.iv: missing");
  EXPECT_THROW_MSG(MakeNf("encrypt", R"({"key":16,)" + iv + "}"),
                   "encrypt.key: expected a string, got number");
  EXPECT_THROW_MSG(MakeNf("encrypt", R"({"cipher":"aes"})"), "encrypt.cipher: unknown field");
}

}  // namespace
}  // namespace keel
