/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers for NF unit tests: build packets byte by byte, run an NF over
 * them the way the runtime does (headroom, tailroom, dropped packets
 * removed) and look at the bytes that come out.
 */
#ifndef KEEL_FUNCTIONS_TESTING_NF_TEST_H_
#define KEEL_FUNCTIONS_TESTING_NF_TEST_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "keel/flow_move.h"
#include "keel/nf.h"

namespace keel {

/* Headroom and slot size the runtime gives each packet (pktbuf.h). */
constexpr uint16_t kTestHeadroom = 128;
constexpr uint16_t kTestSlot = 2048 + 128;

class TestPacket {
 public:
  TestPacket() = default;
  explicit TestPacket(std::vector<uint8_t> bytes) : bytes_(std::move(bytes)) {}
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  std::vector<uint8_t>& bytes() { return bytes_; }

 private:
  std::vector<uint8_t> bytes_;
};

struct L4Spec {
  std::string src_ip;
  std::string dst_ip;
  uint8_t proto = kProtoUdp;
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  std::string payload;
  uint8_t ttl = 64;
  int vlan = -1; /* >= 0: add an 802.1Q tag with this VLAN id */
  uint8_t tcp_flags = 0x18;
};

/* An Ethernet + IPv4 + TCP/UDP (or ICMP) packet with correct checksums.
 * MACs are 02:00:00:00:00:01 -> 02:00:00:00:00:02. */
TestPacket BuildPacket(const L4Spec& spec);
TestPacket UdpPacket(const std::string& src, const std::string& dst, uint16_t sport,
                     uint16_t dport, const std::string& payload);
TestPacket TcpPacket(const std::string& src, const std::string& dst, uint16_t sport,
                     uint16_t dport, const std::string& payload);

struct RunResult {
  std::vector<std::vector<uint8_t>> out; /* bytes of the packets kept, in order */
  int dropped = 0;
};

/* Runs one ProcessBatch over |pkts| (at most kMaxBurst). */
RunResult RunBatch(NF* nf, const std::vector<TestPacket>& pkts);
/* Runs |pkts| through |nfs| in order, as the chain runner does. */
RunResult RunChain(const std::vector<NF*>& nfs, const std::vector<TestPacket>& pkts);

/* A chain instance as a flow move sees it: its NFs and their names. */
struct MoveChain {
  std::vector<NF*> nfs;
  std::vector<std::string> names;
};

/* Moves |flow| (as the ingress sees it) from chain instance |from| to |to|
 * the way the ingress does (issue 37): an export frame through |from|,
 * each position working on its bytes (MoveAt), turned into an import frame
 * through |to|. Returns the frame as it came back; |*err| says why an import was
 * refused. */
MoveFrame MoveFlow(const MoveChain& from, const MoveChain& to, const FlowKey& flow, std::string* err);
/* The 5-tuple of a test flow (host byte order). */
FlowKey TestFlow(const std::string& src, const std::string& dst, uint16_t sport, uint16_t dport,
             uint8_t proto = kProtoUdp);

/* True if the IPv4 header checksum and the TCP/UDP checksum of |bytes| are right. */
bool ChecksumsValid(const std::vector<uint8_t>& bytes);

/* Views |bytes| as a Packet (for reading fields in assertions). */
Packet View(std::vector<uint8_t>* bytes);

uint32_t Ip(const std::string& dotted); /* host byte order */

}  // namespace keel

#define EXPECT_THROW_MSG(stmt, substr)                                          \
  do {                                                                          \
    try {                                                                       \
      stmt;                                                                     \
      ADD_FAILURE() << "expected ConfigError containing: " << (substr);        \
    } catch (const ::keel::ConfigError& e) {                                    \
      EXPECT_NE(std::string(e.what()).find(substr), std::string::npos)          \
          << "message: " << e.what();                                           \
    }                                                                           \
  } while (0)

#endif  // KEEL_FUNCTIONS_TESTING_NF_TEST_H_
