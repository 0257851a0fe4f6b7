/* SPDX-License-Identifier: Apache-2.0 */
#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <random>

#include "payload/payload_testing.h"

namespace keel {
namespace {

using Bytes = std::vector<uint8_t>;

/* RFC 8439 §2.4.2: key 00..1f, nonce 00:00:00:00:00:00:00:4a:00:00:00:00. */
const char* kConfig =
    R"({"key":"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",)"
    R"("nonce":"000000000000004a00000000"})";

Bytes Hex(const std::string& s) {
  Bytes out;
  for (size_t i = 0; i < s.size(); i += 2) out.push_back(uint8_t(std::stoi(s.substr(i, 2), 0, 16)));
  return out;
}

Bytes RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  Bytes b(n);
  for (auto& x : b) x = uint8_t(rng());
  return b;
}

/* ChaCha20 of |in| in one go on a fresh context, block counter 0. */
Bytes OneShot(const Bytes& key, const Bytes& nonce, const Bytes& in) {
  Bytes iv(4, 0);
  iv.insert(iv.end(), nonce.begin(), nonce.end());
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  Bytes out(in.size());
  int n = 0;
  EXPECT_EQ(EVP_EncryptInit_ex(ctx, EVP_chacha20(), nullptr, key.data(), iv.data()), 1);
  EXPECT_EQ(EVP_EncryptUpdate(ctx, out.data(), &n, in.data(), int(in.size())), 1);
  EVP_CIPHER_CTX_free(ctx);
  return out;
}

TEST(ChaCha, MatchesRfc8439KeystreamBlockZero) {
  auto nf = MakeNf("chacha", R"({"key":")" + std::string(64, '0') + R"(","nonce":")" +
                                 std::string(24, '0') + R"("})");
  RunResult r = RunBatch(nf.get(), {L4Packet(kProtoUdp, Bytes(64, 0))});
  ASSERT_EQ(r.out.size(), 1u);
  Bytes keystream = Hex(
      "76b8e0ada0f13d90405d6ae55386bd28bdd219b8a08ded1aa836efcc8b770dc7"
      "da41597c5157488d7724e03fb8d84a376a43b8f41518a11cc387b669b2ee6586");
  EXPECT_EQ(r.out[0], L4Packet(kProtoUdp, keystream).bytes());
}

TEST(ChaCha, MatchesRfc8439SunscreenFromBlockOne) {
  auto nf = MakeNf("chacha", kConfig);
  const std::string text =
      "Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the "
      "future, sunscreen would be it.";
  Bytes plain(64, 0); /* block 0, so the text starts at counter 1 */
  plain.insert(plain.end(), text.begin(), text.end());
  RunResult r = RunBatch(nf.get(), {L4Packet(kProtoTcp, plain)});
  ASSERT_EQ(r.out.size(), 1u);
  Bytes out = PayloadOf(r.out[0]);
  ASSERT_EQ(out.size(), plain.size());
  EXPECT_EQ(Bytes(out.begin() + 64, out.begin() + 96),
            Hex("6e2e359a2568f98041ba0728dd0d6981e97e7aec1d4360c20a27afccfd9fae0b"));
  EXPECT_TRUE(ChecksumsValid(r.out[0]));
}

TEST(ChaCha, MatchesOneShotEvpAndRestoresWhenAppliedTwice) {
  auto nf = MakeNf("chacha", kConfig);
  Bytes key = Hex("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f");
  Bytes nonce = Hex("000000000000004a00000000");
  std::vector<TestPacket> in, want;
  for (uint8_t proto : {kProtoUdp, kProtoTcp}) {
    for (size_t len : {0, 1, 15, 64, 65, 1400}) {
      Bytes plain = RandomBytes(len, uint32_t(len + proto));
      in.push_back(L4Packet(proto, plain));
      want.push_back(L4Packet(proto, OneShot(key, nonce, plain)));
    }
  }
  RunResult once = RunBatch(nf.get(), in);
  ASSERT_EQ(once.out.size(), in.size());
  std::vector<TestPacket> again;
  for (size_t i = 0; i < in.size(); i++) {
    EXPECT_EQ(once.out[i], want[i].bytes()) << i;
    EXPECT_TRUE(ChecksumsValid(once.out[i])) << i;
    again.emplace_back(once.out[i]);
  }
  RunResult twice = RunBatch(nf.get(), again);
  ASSERT_EQ(twice.out.size(), in.size());
  for (size_t i = 0; i < in.size(); i++) EXPECT_EQ(twice.out[i], in[i].bytes()) << i;
}

TEST(ChaCha, LeavesEthernetTrailerAndOtherPacketsAlone) {
  auto nf = MakeNf("chacha", kConfig);
  Bytes padded = L4Packet(kProtoUdp, {'a', 'b'}).bytes();
  size_t frame = padded.size();
  padded.resize(60, 0x5a);
  RunResult r = RunTight(nf.get(), padded, 0);
  ASSERT_EQ(r.out.size(), 1u);
  ASSERT_EQ(r.out[0].size(), 60u);
  EXPECT_EQ(Bytes(r.out[0].begin() + frame, r.out[0].end()),
            Bytes(60 - frame, 0x5a));
  EXPECT_NE(PayloadOf(r.out[0]), Bytes({'a', 'b'}));
  EXPECT_TRUE(ChecksumsValid(r.out[0]));

  Bytes arp(60, 0);
  arp[12] = 0x08;
  arp[13] = 0x06;
  Bytes full = L4Packet(kProtoTcp, RandomBytes(10, 1)).bytes();
  std::vector<Bytes> ins = {L4Packet(kProtoTcp, {}).bytes(), arp};
  for (size_t n = 0; n < full.size(); n++) ins.emplace_back(full.begin(), full.begin() + n);
  for (const auto& in : ins) {
    RunResult o = RunTight(nf.get(), in, 0);
    ASSERT_EQ(o.out.size(), 1u) << in.size();
    EXPECT_EQ(o.out[0], in) << in.size();
  }
}

TEST(ChaCha, RejectsBadConfig) {
  auto config = [](const std::string& key, const std::string& nonce) {
    return Json{{"key", key}, {"nonce", nonce}}.dump();
  };
  const std::string key(64, 'a'), nonce(24, 'b');
  EXPECT_THROW_MSG(MakeNf("chacha", config(key.substr(1), nonce)),
                   "chacha.key: expected 64 hex digits, got 63");
  EXPECT_THROW_MSG(MakeNf("chacha", config(key, nonce + "00")),
                   "chacha.nonce: expected 24 hex digits, got 26");
  EXPECT_THROW_MSG(MakeNf("chacha", config(key, nonce.substr(1) + "?")),
                   "chacha.nonce: '?' is not a hex digit");
  EXPECT_THROW_MSG(MakeNf("chacha", Json{{"key", key}}.dump()), "chacha.nonce: missing");
  EXPECT_THROW_MSG(MakeNf("chacha", Json{{"key", key}, {"nonce", nonce}, {"counter", 1}}.dump()),
                   "chacha.counter: unknown field");
}

}  // namespace
}  // namespace keel
