/* SPDX-License-Identifier: Apache-2.0 */
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "testing/nf_test.h"

namespace keel {
namespace {

constexpr const char* kConfig = R"({"blocklist":["example.com/ads","tracker.net",
    "Shop.Example.com:8080/cart","example.com/x/y","news.org/"]})";

TestPacket Http(const std::string& payload) {
  return TcpPacket("10.0.0.1", "10.0.0.2", 40000, 80, payload);
}

std::string Get(const std::string& path, const std::string& host) {
  return "GET " + path + " HTTP/1.1\r\nUser-Agent: test\r\nHost: " + host +
         "\r\nAccept: */*\r\n\r\n";
}

/* Runs each payload as its own TCP packet; returns which ones passed. */
std::vector<bool> Passed(NF* nf, const std::vector<TestPacket>& pkts) {
  std::vector<bool> out;
  for (const TestPacket& p : pkts) {
    RunResult r = RunBatch(nf, {p});
    EXPECT_EQ(r.out.size() + r.dropped, 1u);
    if (r.out.size() == 1) {
      EXPECT_EQ(r.out[0], p.bytes()) << "urlfilter must not modify packets";
    }
    out.push_back(r.out.size() == 1);
  }
  return out;
}

std::vector<bool> PassedHttp(NF* nf, const std::vector<std::string>& payloads) {
  std::vector<TestPacket> pkts;
  for (const std::string& s : payloads) pkts.push_back(Http(s));
  return Passed(nf, pkts);
}

TEST(UrlFilter, BlocksHostPlusPathPrefix) {
  auto nf = MakeNf("urlfilter", kConfig);
  EXPECT_EQ(PassedHttp(nf.get(), {
                Get("/ads", "example.com"),
                Get("/ads/banner.png", "example.com"),
                Get("/adsense?q=1", "example.com"),
                Get("/news/ads", "example.com"),
                Get("/", "example.com"),
                Get("/x/y/z", "example.com"),
                Get("/x/z", "example.com"),
                Get("/ads", "example.org"),
                Get("/ads", "www.example.com"),
                Get("/ads", "example.com.evil.net"),
            }),
            (std::vector<bool>{false, false, false, true, true, false, true, true, true, true}));
}

TEST(UrlFilter, EntryWithoutSlashBlocksWholeHost) {
  auto nf = MakeNf("urlfilter", kConfig);
  EXPECT_EQ(PassedHttp(nf.get(), {
                Get("/", "tracker.net"),
                Get("/pixel.gif?id=3", "tracker.net"),
                Get("/", "sub.tracker.net"),
                Get("/", "tracker.network"),
            }),
            (std::vector<bool>{false, false, true, true}));
}

TEST(UrlFilter, HostIsCaseInsensitiveAndPort80IsIgnored) {
  auto nf = MakeNf("urlfilter", kConfig);
  EXPECT_EQ(PassedHttp(nf.get(), {
                Get("/ads", "EXAMPLE.Com"),
                Get("/ads", "example.com:80"),
                Get("/ads", "example.com:8080"),
                "GET /ads HTTP/1.1\r\nhOsT:\t example.com \t\r\n\r\n",
                Get("/ADS", "example.com"),
                Get("/cart/1", "shop.example.com:8080"),
                Get("/cart/1", "shop.example.com"),
            }),
            (std::vector<bool>{false, false, true, false, true, false, true}));
}

TEST(UrlFilter, EveryMethodIsChecked) {
  auto nf = MakeNf("urlfilter", kConfig);
  std::vector<std::string> reqs;
  for (const char* m : {"GET", "POST", "HEAD", "PUT", "DELETE", "OPTIONS", "PATCH", "CONNECT"})
    reqs.push_back(std::string(m) + " /ads HTTP/1.1\r\nHost: example.com\r\n\r\n");
  reqs.push_back("get /ads HTTP/1.1\r\nHost: example.com\r\n\r\n");
  reqs.push_back("GETS /ads HTTP/1.1\r\nHost: example.com\r\n\r\n");
  reqs.push_back("TRACE /ads HTTP/1.1\r\nHost: example.com\r\n\r\n");
  reqs.push_back("HTTP/1.1 200 OK\r\nHost: example.com\r\n\r\n");
  EXPECT_EQ(PassedHttp(nf.get(), reqs),
            (std::vector<bool>{false, false, false, false, false, false, false, false,
                               true, true, true, true}));
}

TEST(UrlFilter, AbsoluteTargetOverridesHostHeader) {
  auto nf = MakeNf("urlfilter", kConfig);
  EXPECT_EQ(PassedHttp(nf.get(), {
                "GET http://example.com/ads/1 HTTP/1.1\r\nHost: other.org\r\n\r\n",
                "GET HTTP://Example.COM:80/ads HTTP/1.1\r\n\r\n",
                "GET http://other.org/ads HTTP/1.1\r\nHost: example.com\r\n\r\n",
                "GET http://tracker.net HTTP/1.1\r\n\r\n",
                "GET http://tracker.net?x=1 HTTP/1.1\r\n\r\n",
                "GET http://news.org HTTP/1.1\r\n\r\n", /* path "/" */
                "GET http://news.org?x HTTP/1.1\r\n\r\n",
            }),
            (std::vector<bool>{false, false, true, false, false, false, true}));
}

TEST(UrlFilter, RequestSplitBeforeHostPasses) {
  auto nf = MakeNf("urlfilter", kConfig);
  EXPECT_EQ(PassedHttp(nf.get(), {
                "GET /ads HTTP/1.1\r\nUser-Agent: test\r\n",
                "Host: example.com\r\n\r\n",
            }),
            (std::vector<bool>{true, true}));
}

TEST(UrlFilter, RequestCutShortMatchesWhatIsPresent) {
  auto nf = MakeNf("urlfilter", kConfig);
  EXPECT_EQ(PassedHttp(nf.get(), {
                "GET /ads HTTP/1.1\r\nHost: example.com",   /* host line without CRLF */
                "GET /ads HTTP/1.1\r\nHost: examp",         /* host cut */
                "GET /ads HTTP/1.1\r\nHo",                  /* header name cut */
                "GET /ads HTTP/1.1\r\n",                    /* no headers */
                "GET /ad",                                  /* request line cut */
                "GET http://example.com/ads",               /* absolute target, no version */
                "GET http://example.com/ad",                /* ... cut inside the prefix */
                "GET ",
                "GET /ads HTTP/1.1\nHost: example.com\n\n", /* bare LF line ends */
                "GET /ads HTTP/1.1\r\n\r\nHost: example.com\r\n", /* Host in the body */
                "GET /ads HTTP/1.1\r\nHost:\r\n\r\n",
            }),
            (std::vector<bool>{false, true, true, true, true, false, true, true, false, true,
                               true}));
}

TEST(UrlFilter, ReadsOnlyTheIpPayload) {
  auto nf = MakeNf("urlfilter", kConfig);
  /* The Host header lies in the frame's trailer, past the IPv4 total length. */
  TestPacket p = Http("GET /ads HTTP/1.1\r\n");
  std::string trailer = "Host: example.com\r\n\r\n";
  p.bytes().insert(p.bytes().end(), trailer.begin(), trailer.end());
  TestPacket whole = Http("GET /ads HTTP/1.1\r\nHost: example.com\r\n\r\n");
  EXPECT_EQ(Passed(nf.get(), {p, whole}), (std::vector<bool>{true, false}));
}

TEST(UrlFilter, NonTcpAndMalformedPass) {
  auto nf = MakeNf("urlfilter", kConfig);
  std::string req = Get("/ads", "example.com");
  TestPacket tcp = Http(req);
  std::vector<uint8_t> cut_tcp(tcp.bytes().begin(), tcp.bytes().begin() + 14 + 20 + 10);
  cut_tcp[14 + 2] = 0;
  cut_tcp[14 + 3] = 30; /* IPv4 total length covers half a TCP header */
  std::vector<uint8_t> arp(60, 0);
  arp[12] = 0x08;
  arp[13] = 0x06;
  TestPacket frag = Http(req);
  frag.bytes()[14 + 6] = 0x00;
  frag.bytes()[14 + 7] = 0x10; /* non-first fragment: no TCP header */
  EXPECT_EQ(Passed(nf.get(), {UdpPacket("10.0.0.1", "10.0.0.2", 40000, 80, req),
                              TestPacket(cut_tcp), TestPacket(arp),
                              TestPacket(std::vector<uint8_t>(3, 'G')), frag, Http("")}),
            (std::vector<bool>{true, true, true, true, true, true}));
}

TEST(UrlFilter, BatchDropsOnlyBlockedRequests) {
  auto nf = MakeNf("urlfilter", kConfig);
  std::vector<TestPacket> pkts = {Http(Get("/", "a.org")), Http(Get("/ads", "example.com")),
                                  Http(Get("/b", "a.org")), Http(Get("/", "tracker.net"))};
  RunResult r = RunBatch(nf.get(), pkts);
  EXPECT_EQ(r.dropped, 2);
  ASSERT_EQ(r.out.size(), 2u);
  EXPECT_EQ(r.out[0], pkts[0].bytes());
  EXPECT_EQ(r.out[1], pkts[2].bytes());
}

TEST(UrlFilter, EmptyBlocklistPassesEverything) {
  auto nf = MakeNf("urlfilter", R"({"blocklist":[]})");
  EXPECT_EQ(PassedHttp(nf.get(), {Get("/ads", "example.com")}), std::vector<bool>{true});
}

TEST(UrlFilter, ConfigErrors) {
  EXPECT_THROW_MSG(MakeNf("urlfilter", "{}"), "urlfilter.blocklist: missing");
  EXPECT_THROW_MSG(MakeNf("urlfilter", R"({"blocklist":"a.com"})"),
                   "urlfilter.blocklist: expected an array, got string");
  EXPECT_THROW_MSG(MakeNf("urlfilter", R"({"blocklist":[],"allow":[]})"),
                   "urlfilter.allow: unknown field");
  EXPECT_THROW_MSG(MakeNf("urlfilter", R"({"blocklist":["a.com",1]})"),
                   "urlfilter.blocklist[1]: expected a string, got number");
  EXPECT_THROW_MSG(MakeNf("urlfilter", R"({"blocklist":[""]})"),
                   "urlfilter.blocklist[0]: '' is not host[:port][/path-prefix]");
  EXPECT_THROW_MSG(MakeNf("urlfilter", R"({"blocklist":["/ads"]})"),
                   "urlfilter.blocklist[0]: '/ads' is not host[:port][/path-prefix]");
  EXPECT_THROW_MSG(MakeNf("urlfilter", R"({"blocklist":["http://a.com/x"]})"),
                   "urlfilter.blocklist[0]: 'http://a.com/x' is not host[:port][/path-prefix]");
  EXPECT_THROW_MSG(MakeNf("urlfilter", R"({"blocklist":["a b.com"]})"),
                   "urlfilter.blocklist[0]: 'a b.com' is not host[:port][/path-prefix]");
  EXPECT_THROW_MSG(MakeNf("urlfilter", R"({"blocklist":["a.com:"]})"),
                   "urlfilter.blocklist[0]: 'a.com:' is not host[:port][/path-prefix]");
  EXPECT_THROW_MSG(MakeNf("urlfilter", Json{{"blocklist", {std::string(256, 'a')}}}.dump()),
                   "is not host[:port][/path-prefix]");
}

}  // namespace
}  // namespace keel
