/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Decrypt: undoes the encrypt NF. Decrypts the TCP/UDP payload with
 * AES-128-CBC from the configured IV, strips the PKCS#7 padding and shrinks
 * the packet; lengths and checksums follow. A payload that is not a whole
 * number of blocks or whose padding is wrong is dropped and counted.
 * Packets without payload, non-IPv4 packets and IP fragments pass unchanged.
 */
#include <openssl/evp.h>

#include <cstring>
#include <memory>
#include <vector>

#include "keel/nf.h"
#include "payload/payload_util.h"

namespace keel {

class AesDecrypt : public NF {
 public:
  void Init(const Config& config) override {
    config.CheckObject({"key", "iv"});
    std::vector<uint8_t> key = config["key"].Hex(kBlock);
    std::vector<uint8_t> iv = config["iv"].Hex(kBlock);
    std::memcpy(iv_, iv.data(), kBlock);
    ctx_.reset(EVP_CIPHER_CTX_new());
    if (!ctx_ || EVP_DecryptInit_ex(ctx_.get(), EVP_aes_128_cbc(), nullptr, key.data(), iv_) != 1)
      config.Fail("OpenSSL cannot set up AES-128-CBC");
  }

  void ProcessBatch(PacketBatch* batch) override {
    EVP_CIPHER_CTX* ctx = ctx_.get();
    for (Packet* p : *batch) {
      uint16_t len;
      uint8_t* payload = PayloadGet(p, &len);
      if (!payload || len == 0) continue;
      int body = 0, tail = 0;
      if (len % kBlock != 0 || EVP_DecryptInit_ex(ctx, nullptr, nullptr, nullptr, iv_) != 1 ||
          EVP_DecryptUpdate(ctx, payload, &body, payload, len) != 1 ||
          EVP_DecryptFinal_ex(ctx, payload + body, &tail) != 1) {
        bad_padding_drops_++;
        p->Drop();
        continue;
      }
      PayloadResize(p, static_cast<uint16_t>(body + tail));
      PayloadUpdateChecksum(p);
    }
  }

  Json Stats() const override { return {{"bad_padding_drops", bad_padding_drops_}}; }

 private:
  static constexpr size_t kBlock = 16;

  std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)> ctx_{nullptr,
                                                                      EVP_CIPHER_CTX_free};
  uint8_t iv_[kBlock];
  uint64_t bad_padding_drops_ = 0;
};

KEEL_NF(AesDecrypt, "decrypt", "decrypts an AES-128-CBC TCP/UDP payload made by encrypt");
KEEL_NF_ARGS(AesDecrypt, R"json([
  {"name": "key", "required": true, "type": "hex", "bytes": 16, "doc": "AES-128 key, 32 hex digits"},
  {"name": "iv", "required": true, "type": "hex", "bytes": 16, "doc": "CBC initialisation vector, 32 hex digits"}
])json");

}  // namespace keel
