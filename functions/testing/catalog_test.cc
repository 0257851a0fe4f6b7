/* SPDX-License-Identifier: Apache-2.0 */
/* The NF catalogue (KEEL_NF_ARGS, keel-nf --list --json) against the NFs'
 * Init: every library NF declares its arguments, the declared names are the
 * ones Init accepts, required ones are required, and a configuration built
 * from the schema is accepted. */
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

#include "keel/nf.h"
#include "testing/nf_test.h"

namespace keel {
namespace {

/* A configuration every library NF accepts (its required arguments at least). */
const std::map<std::string, std::string> kValid = {
    {"acl", R"({"rules":[{"dst_ip":"198.18.0.0/15","proto":"udp","dst_port":"1-1024","drop":false}]})"},
    {"bpf", R"({"filters":["udp port 53"],"action":"drop"})"},
    {"chacha", R"({"key":")" + std::string(64, 'a') + R"(","nonce":")" + std::string(24, '0') + "\"}"},
    {"decrypt", R"({"key":"000102030405060708090a0b0c0d0e0f","iv":"000102030405060708090a0b0c0d0e0f"})"},
    {"dedup", R"({"chunk_bytes":64})"},
    {"detunnel", "{}"},
    {"encrypt", R"({"key":"000102030405060708090a0b0c0d0e0f","iv":"000102030405060708090a0b0c0d0e0f"})"},
    {"ipv4fwd", R"({"routes":[{"prefix":"198.18.0.0/15","dst_mac":"02:00:00:00:00:01","port":0}]})"},
    {"lb", R"({"backends":["198.18.0.1","198.18.0.2"]})"},
    {"limiter", R"({"rate_bps":1000000000,"burst_bytes":15000})"},
    {"macswap", "{}"},
    {"monitor", "{}"},
    {"nat", R"({"external_ip":"198.18.100.1","port_range":[1024,65535]})"},
    {"rededup", R"({"cache_entries":16})"},
    {"stamp", R"({"index":3,"stall_ns":0})"},
    {"tunnel", R"({"vlan":7})"},
    {"urlfilter", R"({"blocklist":["example.com/ads","tracker.net"]})"},
};

const Json& Catalog() {
  static const Json catalog = CatalogJson();
  return catalog;
}

TEST(Catalog, ListsEveryLibraryNfWithWellFormedArgumentSchemas) {
  ASSERT_EQ(Catalog()["version"], 1);
  std::set<std::string> names;
  for (const Json& nf : Catalog()["nfs"]) {
    std::string name = nf["name"];
    names.insert(name);
    EXPECT_FALSE(nf["help"].get<std::string>().empty()) << name;
    EXPECT_EQ(CheckArgSchemas(nf["args"]), "") << name;
    EXPECT_FALSE(nf.contains("loaded_from")) << name;
  }
  std::set<std::string> want;
  for (const auto& [name, config] : kValid) want.insert(name);
  EXPECT_EQ(names, want);
}

/* Whether each NF's flows can move with their state (issue 37), as the
 * gateway reads it from the catalogue and keel-nf decides it. */
TEST(Catalog, DeclaresWhichNfsKeepGlobalState) {
  std::map<std::string, std::string> scope;
  for (const Json& nf : Catalog()["nfs"]) {
    std::string name = nf["name"];
    ASSERT_TRUE(nf.contains("state")) << name;
    if (nf["state"] != Json{{"scope", "per-flow"}}) {
      EXPECT_EQ(CheckStateDecl(nf["state"], nf["args"]), "") << name;
    }
    scope[name] = nf["state"]["scope"];
  }
  for (const char* global : {"dedup", "rededup", "limiter"}) EXPECT_EQ(scope[global], "global") << global;
  for (const char* per_flow : {"nat", "lb", "monitor", "acl", "macswap"}) EXPECT_EQ(scope[per_flow], "per-flow") << per_flow;
  for (const auto& [name, config] : kValid)
    EXPECT_EQ(MakeNf(name, config)->movable(), scope[name] == "per-flow") << name;
  EXPECT_TRUE(MakeNf("limiter", R"({"rate_bps":8000,"burst_bytes":1500,"per_flow":true})")->movable());
}

TEST(Catalog, DeclaredNamesAreTheOnesInitAccepts) {
  for (const Json& nf : Catalog()["nfs"]) {
    std::string name = nf["name"];
    EXPECT_THROW_MSG(MakeNf(name, R"({"no_such_arg":1})"), name + ".no_such_arg: unknown field");
    for (const Json& arg : nf["args"]) {
      /* A null value is wrong for every type, so Init complains about the
       * value, not about an unknown field. */
      Json config = Json::parse(kValid.at(name));
      config[arg["name"].get<std::string>()] = nullptr;
      std::string path = name + "." + arg["name"].get<std::string>();
      try {
        MakeNf(name, config.dump());
        ADD_FAILURE() << path << ": null accepted";
      } catch (const ConfigError& e) {
        std::string msg = e.what();
        EXPECT_EQ(msg.find(path), 0u) << msg;
        EXPECT_EQ(msg.find("unknown field"), std::string::npos) << msg;
      }
    }
  }
}

TEST(Catalog, RequiredArgumentsAreRequiredAndTheValidConfigurationsPass) {
  for (const Json& nf : Catalog()["nfs"]) {
    std::string name = nf["name"];
    EXPECT_NO_THROW(MakeNf(name, kValid.at(name))) << name;
    for (const Json& arg : nf["args"]) {
      Json config = Json::parse(kValid.at(name));
      std::string arg_name = arg["name"];
      bool required = arg.value("required", false);
      config.erase(arg_name);
      if (required) {
        EXPECT_THROW_MSG(MakeNf(name, config.dump()), name + "." + arg_name + ": missing");
      } else {
        EXPECT_NO_THROW(MakeNf(name, config.dump())) << name << " without " << arg_name;
      }
    }
  }
}

TEST(Catalog, MalformedSchemasAreNamed) {
  EXPECT_EQ(CheckArgSchemas(Json::parse(R"([{"name":"x","type":"integer","doc":"d"}])")), "");
  EXPECT_EQ(CheckArgSchemas(Json::parse(R"([{"name":"x","type":"float","doc":"d"}])")).find("[0] (x): 'type'"), 0u);
  EXPECT_EQ(CheckArgSchemas(Json::parse(R"([{"name":"x","type":"integer"}])")), "[0] (x): 'doc' (one line) is missing");
  EXPECT_EQ(CheckArgSchemas(Json::parse(R"([{"name":"x","type":"string","minimum":1,"doc":"d"}])")),
            "[0] (x): 'minimum' is for type integer");
  EXPECT_EQ(CheckArgSchemas(Json::parse(R"([{"name":"x","type":"array","doc":"d","items":{"type":"hex"}}])")),
            "[0] (x).items: type hex needs 'bytes'");
}

}  // namespace
}  // namespace keel
