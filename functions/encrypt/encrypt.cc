/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Encrypt (Lemur's AES-CBC): encrypts the TCP/UDP payload with AES-128-CBC
 * and PKCS#7 padding, so the payload grows by 1 to 16 bytes; lengths and
 * checksums follow. Every packet starts from the configured IV, so equal
 * payloads give equal ciphertexts. Packets without payload, non-IPv4 packets
 * and IP fragments pass unchanged; packets that would outgrow the tailroom
 * are dropped and counted. The decrypt NF undoes it.
 */
#include <openssl/evp.h>

#include <cstring>
#include <memory>
#include <vector>

#include "keel/nf.h"
#include "payload/payload_util.h"

namespace keel {

class AesEncrypt : public NF {
 public:
  void Init(const Config& config) override {
    config.CheckObject({"key", "iv"});
    std::vector<uint8_t> key = config["key"].Hex(kBlock);
    std::vector<uint8_t> iv = config["iv"].Hex(kBlock);
    std::memcpy(iv_, iv.data(), kBlock);
    ctx_.reset(EVP_CIPHER_CTX_new());
    if (!ctx_ || EVP_EncryptInit_ex(ctx_.get(), EVP_aes_128_cbc(), nullptr, key.data(), iv_) != 1)
      config.Fail("OpenSSL cannot set up AES-128-CBC");
  }

  void ProcessBatch(PacketBatch* batch) override {
    EVP_CIPHER_CTX* ctx = ctx_.get();
    for (Packet* p : *batch) {
      uint16_t len;
      uint8_t* payload = PayloadGet(p, &len);
      if (!payload || len == 0) continue;
      uint16_t padded = static_cast<uint16_t>((len / kBlock + 1) * kBlock);
      if (!PayloadResize(p, padded)) {
        tailroom_drops_++;
        p->Drop();
        continue;
      }
      int body = 0, tail = 0;
      if (EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, iv_) != 1 ||
          EVP_EncryptUpdate(ctx, payload, &body, payload, len) != 1 ||
          EVP_EncryptFinal_ex(ctx, payload + body, &tail) != 1) {
        p->Drop();
        continue;
      }
      PayloadUpdateChecksum(p);
    }
  }

  Json Stats() const override { return {{"tailroom_drops", tailroom_drops_}}; }

 private:
  static constexpr size_t kBlock = 16;

  std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)> ctx_{nullptr,
                                                                      EVP_CIPHER_CTX_free};
  uint8_t iv_[kBlock];
  uint64_t tailroom_drops_ = 0;
};

KEEL_NF(AesEncrypt, "encrypt", "encrypts the TCP/UDP payload with AES-128-CBC (PKCS#7 padding)");
KEEL_NF_ARGS(AesEncrypt, R"json([
  {"name": "key", "required": true, "type": "hex", "bytes": 16, "doc": "AES-128 key, 32 hex digits"},
  {"name": "iv", "required": true, "type": "hex", "bytes": 16, "doc": "CBC initialisation vector, 32 hex digits"}
])json");

}  // namespace keel
