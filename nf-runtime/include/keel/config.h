/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Typed, validated access to an NF's JSON configuration. Every accessor that
 * finds a problem throws ConfigError with the path of the bad field, e.g.
 * "rules[2].dst_ip: '198.18.0.0/33' is not an IPv4 CIDR".
 */
#ifndef KEEL_CONFIG_H_
#define KEEL_CONFIG_H_

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace keel {

using Json = nlohmann::json;

class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/* An IPv4 prefix in host byte order; mask is 0 for /0. */
struct Ipv4Prefix {
  uint32_t addr = 0;
  uint8_t len = 0;
  uint32_t mask() const { return len == 0 ? 0 : ~uint32_t{0} << (32 - len); }
  bool Contains(uint32_t ip) const { return (ip & mask()) == (addr & mask()); }
};

struct PortRange {
  uint16_t lo = 0;
  uint16_t hi = 65535;
  bool Contains(uint16_t p) const { return p >= lo && p <= hi; }
};

/*
 * Secrets. An argument written {"secret": "NAME"} (in a chain: key={'secret': 'NAME'}) takes
 * the contents of the file NAME in the secrets directory, with one trailing newline removed:
 * the value of `faas-cli secret create NAME`, which keel-agent mounts read-only where
 * OpenFaaS mounts a function's secrets. The value never appears in the chain, its
 * annotations or the NF's command line.
 */
inline constexpr const char* kDefaultSecretsDir = "/var/openfaas/secrets";
/* Where MakeNf reads secrets (keel-nf --secrets); kDefaultSecretsDir unless set. */
void SetSecretsDir(const std::string& dir);
const std::string& SecretsDir();
/* |v| with every {"secret": NAME} object replaced by the secret's value read from |dir|;
 * throws ConfigError("<path>: secret 'NAME' ...") for a bad name or an unreadable file. */
Json ResolveSecrets(const Json& v, const std::string& dir, const std::string& path);

/* One JSON value together with its path inside the NF's configuration. */
class Config {
 public:
  Config(const Json& value, std::string path) : v_(&value), path_(std::move(path)) {}

  /* Parses |text| as JSON; throws ConfigError naming |what| on bad syntax. */
  static Json ParseText(const std::string& text, const std::string& what);

  const std::string& path() const { return path_; }
  const Json& json() const { return *v_; }

  /* Fails unless this is an object whose keys are all in |allowed|. */
  void CheckObject(std::initializer_list<const char*> allowed) const;
  bool Has(const char* key) const;
  /* A required member of an object. */
  Config operator[](const char* key) const;
  /* An optional member; nullopt when absent. */
  std::optional<Config> Get(const char* key) const;
  /* Elements of an array. */
  std::vector<Config> Array() const;

  std::string String() const;
  int64_t Int(int64_t lo, int64_t hi) const;
  bool Bool() const;
  /* "A.B.C.D" in host byte order. */
  uint32_t Ipv4() const;
  /* "A.B.C.D/N" or a bare address (/32). */
  Ipv4Prefix Cidr() const;
  /* "aa:bb:cc:dd:ee:ff". */
  void Mac(uint8_t out[6]) const;
  /* A hex string of exactly |nbytes| bytes. */
  std::vector<uint8_t> Hex(size_t nbytes) const;
  /* A port number N or a range "lo-hi". */
  PortRange Ports() const;

  /* Throws ConfigError("<path>: <msg>"). */
  [[noreturn]] void Fail(const std::string& msg) const;

 private:
  const Json* v_;
  std::string path_;
};

}  // namespace keel

#endif  // KEEL_CONFIG_H_
