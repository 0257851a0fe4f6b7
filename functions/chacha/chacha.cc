/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ChaCha (Lemur's ChaCha): XORs the TCP/UDP payload with the ChaCha20
 * keystream (RFC 8439) of the configured key and nonce, block counter 0 at
 * the first payload byte of every packet. The length does not change and
 * applying the NF twice restores the payload; checksums follow. Packets
 * without payload, non-IPv4 packets and IP fragments pass unchanged.
 */
#include <openssl/evp.h>

#include <cstring>
#include <memory>
#include <vector>

#include "keel/nf.h"
#include "payload/payload_util.h"

namespace keel {

class ChaCha : public NF {
 public:
  void Init(const Config& config) override {
    config.CheckObject({"key", "nonce"});
    std::vector<uint8_t> key = config["key"].Hex(32);
    std::vector<uint8_t> nonce = config["nonce"].Hex(12);
    /* OpenSSL's IV: 32-bit little-endian block counter, then the nonce. */
    std::memset(iv_, 0, 4);
    std::memcpy(iv_ + 4, nonce.data(), nonce.size());
    ctx_.reset(EVP_CIPHER_CTX_new());
    if (!ctx_ || EVP_EncryptInit_ex(ctx_.get(), EVP_chacha20(), nullptr, key.data(), iv_) != 1)
      config.Fail("OpenSSL cannot set up ChaCha20");
  }

  void ProcessBatch(PacketBatch* batch) override {
    EVP_CIPHER_CTX* ctx = ctx_.get();
    for (Packet* p : *batch) {
      uint16_t len;
      uint8_t* payload = PayloadGet(p, &len);
      if (!payload || len == 0) continue;
      int out = 0;
      if (EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, iv_) != 1 ||
          EVP_EncryptUpdate(ctx, payload, &out, payload, len) != 1) {
        p->Drop();
        continue;
      }
      PayloadUpdateChecksum(p);
    }
  }

 private:
  std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)> ctx_{nullptr,
                                                                      EVP_CIPHER_CTX_free};
  uint8_t iv_[16];
};

KEEL_NF(ChaCha, "chacha", "XORs the TCP/UDP payload with a ChaCha20 keystream (RFC 8439)");
KEEL_NF_ARGS(ChaCha, R"json([
  {"name": "key", "required": true, "type": "hex", "bytes": 32, "doc": "ChaCha20 key, 64 hex digits"},
  {"name": "nonce", "required": true, "type": "hex", "bytes": 12, "doc": "ChaCha20 nonce, 24 hex digits"}
])json");

}  // namespace keel
