/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/port_wake.h"

#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include <gtest/gtest.h>

namespace keel {
namespace {

bool Has(const std::vector<int>& v, int fd) { return std::find(v.begin(), v.end(), fd) != v.end(); }

TEST(PortWake, FindsThePacketSocketsAndNoOther) {
  int udp = socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(udp, 0);
  int pkt = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
  if (pkt < 0) {
    close(udp);
    GTEST_SKIP() << "AF_PACKET sockets need CAP_NET_RAW (run as root)";
  }
  std::vector<int> fds = FindPortWakeFds();
  EXPECT_TRUE(Has(fds, pkt));
  EXPECT_FALSE(Has(fds, udp));
  close(pkt);
  EXPECT_FALSE(Has(FindPortWakeFds(), pkt));
  close(udp);
}

/* What the ingress relies on: a socket with a PACKET_RX_RING, as DPDK's
 * net_af_packet sets up, polls readable once a frame is in its ring. On
 * loopback, for one UDP datagram to a port of its own. */
TEST(PortWake, AnRxRingSocketPollsReadableWhenAFrameArrives) {
  int pkt = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_IP));
  if (pkt < 0) GTEST_SKIP() << "AF_PACKET sockets need CAP_NET_RAW (run as root)";
  int v = TPACKET_V2;
  ASSERT_EQ(setsockopt(pkt, SOL_PACKET, PACKET_VERSION, &v, sizeof v), 0);
  tpacket_req req{};
  req.tp_block_size = 4096;
  req.tp_frame_size = 2048;
  req.tp_block_nr = 8;
  req.tp_frame_nr = 16;
  ASSERT_EQ(setsockopt(pkt, SOL_PACKET, PACKET_RX_RING, &req, sizeof req), 0);
  void* ring = mmap(nullptr, req.tp_block_size * req.tp_block_nr, PROT_READ | PROT_WRITE, MAP_SHARED, pkt, 0);
  ASSERT_NE(ring, MAP_FAILED);
  sockaddr_ll ll{};
  ll.sll_family = AF_PACKET;
  ll.sll_protocol = htons(ETH_P_IP);
  ll.sll_ifindex = static_cast<int>(if_nametoindex("lo"));
  ASSERT_EQ(bind(pkt, reinterpret_cast<sockaddr*>(&ll), sizeof ll), 0);

  int rx = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(rx, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t alen = sizeof a;
  ASSERT_EQ(getsockname(rx, reinterpret_cast<sockaddr*>(&a), &alen), 0);
  int tx = socket(AF_INET, SOCK_DGRAM, 0);
  const char msg[] = "keel port wake";
  ASSERT_EQ(sendto(tx, msg, sizeof msg, 0, reinterpret_cast<sockaddr*>(&a), sizeof a),
            static_cast<ssize_t>(sizeof msg));

  pollfd p{pkt, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 2000), 1);
  EXPECT_TRUE(p.revents & POLLIN);
  auto* hdr = static_cast<tpacket2_hdr*>(ring);
  EXPECT_TRUE(hdr->tp_status & TP_STATUS_USER);
  munmap(ring, req.tp_block_size * req.tp_block_nr);
  close(tx);
  close(rx);
  close(pkt);
}

}  // namespace
}  // namespace keel
