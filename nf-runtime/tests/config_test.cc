/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/config.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

namespace keel {
namespace {

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Config, TypedAccessors) {
  Json j = Config::ParseText(
      R"({"ip":"198.18.0.1","net":"198.18.7.9/16","mac":"aa:bb:cc:dd:ee:0f","n":7,
          "p":"10-20","q":80,"b":true,"hex":"00ff10","list":[1,2]})", "t");
  Config c(j, "nf");
  EXPECT_EQ(c["ip"].Ipv4(), 0xc6120001u);
  Ipv4Prefix net = c["net"].Cidr();
  EXPECT_EQ(net.addr, 0xc6120000u);
  EXPECT_EQ(net.len, 16);
  EXPECT_TRUE(net.Contains(0xc612ffffu));
  EXPECT_FALSE(net.Contains(0xc6130000u));
  uint8_t mac[6];
  c["mac"].Mac(mac);
  EXPECT_EQ(mac[5], 0x0f);
  EXPECT_EQ(c["n"].Int(0, 10), 7);
  EXPECT_EQ(c["p"].Ports().lo, 10);
  EXPECT_EQ(c["p"].Ports().hi, 20);
  EXPECT_EQ(c["q"].Ports().hi, 80);
  EXPECT_TRUE(c["b"].Bool());
  EXPECT_EQ(c["hex"].Hex(3), (std::vector<uint8_t>{0x00, 0xff, 0x10}));
  EXPECT_EQ(c["list"].Array().size(), 2u);
  EXPECT_EQ(c["list"].Array()[1].path(), "nf.list[1]");
  EXPECT_FALSE(c.Get("absent").has_value());
  Ipv4Prefix any = Config(Json("0.0.0.0/0"), "x").Cidr();
  EXPECT_TRUE(any.Contains(0xffffffffu));
}

TEST(Config, ErrorsNameTheFieldAndTheProblem) {
  Json j = Config::ParseText(R"({"rules":[{"dst_ip":"198.18.0.0/33","port":"9-1","n":1.5}]})", "t");
  Config rule = Config(j, "acl")["rules"].Array()[0];
  EXPECT_EQ(ErrorOf([&] { rule["dst_ip"].Cidr(); }),
            "acl.rules[0].dst_ip: '198.18.0.0/33' is not an IPv4 CIDR");
  EXPECT_EQ(ErrorOf([&] { rule["port"].Ports(); }),
            "acl.rules[0].port: '9-1' is not a port range lo-hi with lo <= hi <= 65535");
  EXPECT_EQ(ErrorOf([&] { rule["n"].Int(0, 5); }), "acl.rules[0].n: expected an integer, got 1.5");
  EXPECT_EQ(ErrorOf([&] { rule["src_ip"]; }), "acl.rules[0].src_ip: missing");
  EXPECT_EQ(ErrorOf([&] { rule.CheckObject({"dst_ip", "port"}); }), "acl.rules[0].n: unknown field");
  EXPECT_EQ(ErrorOf([&] { Config(Json(5), "x").Hex(1); }), "x: expected a string, got number");
  EXPECT_EQ(ErrorOf([&] { Config(Json("zz"), "x").Hex(1); }), "x: 'z' is not a hex digit");
  EXPECT_EQ(ErrorOf([&] { Config(Json("aa:bb"), "x").Mac(nullptr); }),
            "x: 'aa:bb' is not a MAC address (aa:bb:cc:dd:ee:ff)");
  EXPECT_EQ(ErrorOf([&] { Config::ParseText("{\"a\":", "nat"); }).rfind("nat: bad JSON", 0), 0u);
}

// Found by fuzz_config: a number out of double's range made nlohmann::json
// throw out_of_range, which no caller catches (keel-nf ended in terminate).
TEST(Config, NumberOutOfRangeIsAConfigError) {
  EXPECT_EQ(ErrorOf([&] { Config::ParseText("{\"vlan\":1e400}", "tunnel"); })
                .rfind("tunnel: bad JSON", 0),
            0u);
}

TEST(Config, SecretsAreReadFromTheSecretsDirectoryWhereverTheyAppear) {
  char tmpl[] = "/tmp/keel-secrets-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  std::ofstream(dir + "/aes-key") << "000102030405060708090a0b0c0d0e0f\n";
  std::ofstream(dir + "/token") << "s3cret";
  Json j = Config::ParseText(
      R"({"key":{"secret":"aes-key"},"iv":"00","list":[{"t":{"secret":"token"}}],"obj":{"secret":"x","more":1}})", "t");
  Json r = ResolveSecrets(j, dir, "encrypt");
  EXPECT_EQ(r["key"], "000102030405060708090a0b0c0d0e0f");  // one trailing newline dropped
  EXPECT_EQ(r["list"][0]["t"], "s3cret");
  EXPECT_EQ(r["iv"], "00");
  EXPECT_EQ(r["obj"]["secret"], "x");  // not a reference: more than the one key
  EXPECT_EQ(ErrorOf([&] { ResolveSecrets(Config::ParseText(R"({"k":{"secret":"gone"}})", "t"), dir, "encrypt"); }),
            "encrypt.k: secret 'gone' is not mounted at " + dir +
                "/gone (faas-cli secret create gone, and list it under the chain's secrets in stack.yml)");
  for (const char* bad : {R"({"k":{"secret":"../etc/passwd"}})", R"({"k":{"secret":"a/b"}})", R"({"k":{"secret":7}})",
                          R"({"k":{"secret":".."}})"})
    EXPECT_NE(ErrorOf([&] { ResolveSecrets(Config::ParseText(bad, "t"), dir, "nf"); }).find("a secret's name is"),
              std::string::npos)
        << bad;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace keel
