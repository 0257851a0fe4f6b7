/* SPDX-License-Identifier: Apache-2.0 */
/* Position 0's order-preserving handover (issue 34 item 2): the table on its
 * own, the in-band frame format, and the receive side on real mbufs with the
 * race the handover exists for. */
#include "keel/handover.h"

#include <gtest/gtest.h>
#include <rte_mbuf.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "keel/flow_move.h"
#include "keel/handover_rx.h"
#include "keel/inband.h"
#include "keel/port.h"
#include "udp_frame.h"

namespace keel {
namespace {

using P = HandoverTable::Packet;

inband::FlowId Flow(uint16_t sport) { return {0xC6120001, 0xC6130001, sport, 80, 17}; }
P Pkt(uintptr_t i) { return reinterpret_cast<P>(i); }

HandoverConfig Cfg() {
  HandoverConfig c;
  c.max_flows = 8;
  c.hold_per_flow = 4;
  c.hold_max = 6;
  c.timeout = 100;
  c.forget = 1000;
  return c;
}

TEST(HandoverTable, HoldsADirectPacketThatOvertookAllOfItsFlowsFirstOnes) {
  HandoverTable t(Cfg());
  P out[8];
  uint32_t n = 0;
  EXPECT_FALSE(t.active());
  EXPECT_TRUE(t.OnDirect(Flow(1), Pkt(12), 0, out, &n)) << "the flow's first packets are still on their way";
  EXPECT_EQ(t.count(HandoverCount::kDirectFirst), 1u);
  EXPECT_TRUE(t.active());
  t.OnViaIngress(Flow(1), 1); /* they arrive, and pass */
  t.OnViaIngress(Flow(1), 2);
  EXPECT_TRUE(t.OnDirect(Flow(1), Pkt(13), 3, out, &n));
  t.OnMarker(Flow(1), 4, out, &n);
  ASSERT_EQ(n, 2u);
  EXPECT_EQ(out[0], Pkt(12));
  EXPECT_EQ(out[1], Pkt(13));
  EXPECT_FALSE(t.active());
  n = 0;
  EXPECT_FALSE(t.OnDirect(Flow(1), Pkt(14), 5, out, &n)) << "handed over: it passes";
  EXPECT_EQ(t.count(HandoverCount::kDirectFirst), 1u);
}

TEST(HandoverTable, HoldsDirectPacketsUntilTheMarkerThenReleasesThemInOrder) {
  HandoverTable t(Cfg());
  P out[8];
  uint32_t n = 0;
  t.OnViaIngress(Flow(1), 0);
  EXPECT_TRUE(t.OnDirect(Flow(1), Pkt(10), 1, out, &n));
  EXPECT_TRUE(t.OnDirect(Flow(1), Pkt(11), 2, out, &n));
  t.OnViaIngress(Flow(1), 3); /* a late one via the ingress still passes */
  EXPECT_EQ(t.held(), 2u);
  t.OnMarker(Flow(1), 4, out, &n);
  ASSERT_EQ(n, 2u);
  EXPECT_EQ(out[0], Pkt(10));
  EXPECT_EQ(out[1], Pkt(11));
  EXPECT_EQ(t.held(), 0u);
  EXPECT_FALSE(t.active());
  EXPECT_EQ(t.count(HandoverCount::kMarkers), 1u);
  EXPECT_EQ(t.count(HandoverCount::kReleasedMarker), 2u);
  n = 0;
  EXPECT_FALSE(t.OnDirect(Flow(1), Pkt(12), 5, out, &n)) << "after the marker the flow passes";
  t.OnViaIngress(Flow(1), 6);
  EXPECT_EQ(t.count(HandoverCount::kLateViaIngress), 1u);
  EXPECT_FALSE(t.active()) << "a late packet after the marker does not start another hold";
}

TEST(HandoverTable, ReleasesAfterTheTimeoutWhenNoMarkerComesAndCountsIt) {
  HandoverTable t(Cfg());
  P out[8];
  uint32_t n = 0;
  t.OnViaIngress(Flow(1), 0);
  EXPECT_TRUE(t.OnDirect(Flow(1), Pkt(10), 10, out, &n));
  t.Poll(50, out, &n);
  EXPECT_EQ(n, 0u);
  t.Poll(110, out, &n);
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(out[0], Pkt(10));
  EXPECT_EQ(t.count(HandoverCount::kTimeout), 1u);
  EXPECT_EQ(t.count(HandoverCount::kReleasedTimeout), 1u);
  n = 0;
  t.OnMarker(Flow(1), 120, out, &n);
  EXPECT_EQ(t.count(HandoverCount::kMarkerUnknown), 1u) << "a marker after the timeout finds nothing to release";
  t.Poll(5000, out, &n);
  EXPECT_EQ(n, 0u);
  t.OnViaIngress(Flow(1), 5001);
  EXPECT_EQ(t.count(HandoverCount::kLateViaIngress), 0u) << "a forgotten flow starts over";
}

TEST(HandoverTable, APerFlowOverflowReleasesTheFlowInOrderAndCountsIt) {
  HandoverTable t(Cfg());
  P out[8];
  uint32_t n = 0;
  t.OnViaIngress(Flow(1), 0);
  for (uintptr_t i = 0; i < 4; i++) ASSERT_TRUE(t.OnDirect(Flow(1), Pkt(10 + i), 1, out, &n));
  EXPECT_FALSE(t.OnDirect(Flow(1), Pkt(14), 1, out, &n)) << "the fifth goes, behind the four";
  ASSERT_EQ(n, 4u);
  for (uintptr_t i = 0; i < 4; i++) EXPECT_EQ(out[i], Pkt(10 + i));
  EXPECT_EQ(t.count(HandoverCount::kOverflowFlow), 1u);
  EXPECT_EQ(t.count(HandoverCount::kReleasedGiveUp), 4u);
  EXPECT_EQ(t.held(), 0u);
}

TEST(HandoverTable, ATotalOverflowReleasesTheFlowThatFoundNoRoom) {
  HandoverTable t(Cfg());
  P out[8];
  uint32_t n = 0;
  t.OnViaIngress(Flow(1), 0);
  t.OnViaIngress(Flow(2), 0);
  for (uintptr_t i = 0; i < 4; i++) ASSERT_TRUE(t.OnDirect(Flow(1), Pkt(10 + i), 1, out, &n));
  for (uintptr_t i = 0; i < 2; i++) ASSERT_TRUE(t.OnDirect(Flow(2), Pkt(20 + i), 1, out, &n));
  EXPECT_FALSE(t.OnDirect(Flow(2), Pkt(22), 1, out, &n));
  ASSERT_EQ(n, 2u);
  EXPECT_EQ(out[0], Pkt(20));
  EXPECT_EQ(t.count(HandoverCount::kOverflowTotal), 1u);
  EXPECT_EQ(t.held(), 4u) << "the other flow keeps its hold";
}

TEST(HandoverTable, AFullTableLetsAFlowPassAndCountsIt) {
  HandoverConfig c = Cfg();
  c.max_flows = HandoverTable::kWays; /* one bucket */
  c.hold_max = 2 * HandoverTable::kWays;
  HandoverTable t(c);
  P out[8];
  uint32_t n = 0;
  for (uint16_t f = 1; f <= HandoverTable::kWays; f++) {
    t.OnViaIngress(Flow(f), 0);
    ASSERT_TRUE(t.OnDirect(Flow(f), Pkt(f), 0, out, &n));
  }
  const uint16_t next = HandoverTable::kWays + 1;
  t.OnViaIngress(Flow(next), 0);
  EXPECT_EQ(t.count(HandoverCount::kTableFull), 1u);
  EXPECT_FALSE(t.OnDirect(Flow(next), Pkt(next), 0, out, &n));
  EXPECT_EQ(t.count(HandoverCount::kTableFull), 2u);
  /* A flow with nothing held gives its entry up to a new one. */
  t.OnMarker(Flow(1), 1, out, &n);
  t.OnViaIngress(Flow(next + 1), 2);
  EXPECT_EQ(t.count(HandoverCount::kTableFull), 2u);
  EXPECT_TRUE(t.OnDirect(Flow(next + 1), Pkt(next + 1), 3, out, &n));
}

TEST(Inband, AMarkerRoundTripsAndBadOnesAreNamed) {
  uint8_t frame[inband::kMarkerFrameLen];
  const uint8_t dst[6] = {2, 0, 0, 0, 0, 1}, src[6] = {2, 0, 0, 0, 0, 2};
  inband::WriteMarker(frame, dst, src, Flow(7), 0x0102030405060708ull);
  ASSERT_TRUE(inband::IsMarked(frame, sizeof(frame)));
  const uint8_t* p = frame + inband::kPayloadOffset;
  const size_t len = sizeof(frame) - inband::kPayloadOffset;
  inband::FlowId f;
  uint64_t seq = 0;
  ASSERT_EQ(inband::ParseMarker(p, len, &f, &seq), inband::Malformed::kNone);
  EXPECT_TRUE(f == Flow(7));
  EXPECT_EQ(seq, 0x0102030405060708ull);
  EXPECT_EQ(inband::ParseMarker(p, 3, &f, &seq), inband::Malformed::kTruncated);
  EXPECT_EQ(inband::ParseMarker(p, 20, &f, &seq), inband::Malformed::kTruncated);
  frame[inband::kPayloadOffset] = 2;
  EXPECT_EQ(inband::ParseMarker(p, len, &f, &seq), inband::Malformed::kVersion);
  frame[inband::kPayloadOffset] = 1;
  frame[inband::kPayloadOffset + 1] = 2; /* an export frame is no marker */
  EXPECT_EQ(inband::ParseMarker(p, len, &f, &seq), inband::Malformed::kUnknownType);
  frame[inband::kPayloadOffset + 1] = 1;
  frame[inband::kPayloadOffset + 3] = 27;
  EXPECT_EQ(inband::ParseMarker(p, len, &f, &seq), inband::Malformed::kBadLength);
}

/* The body of an export frame for |f| as the ingress sends it: no records yet. */
std::vector<uint8_t> ExportBody(const inband::FlowId& f) {
  MoveFrame m;
  m.kind = MoveKind::kExport;
  m.flow.src_ip = f.src_ip;
  m.flow.dst_ip = f.dst_ip;
  m.flow.src_port = f.src_port;
  m.flow.dst_port = f.dst_port;
  m.flow.proto = f.proto;
  m.cur = m.flow;
  std::vector<uint8_t> b(kMoveFrameMax);
  b.resize(EncodeMoveFrame(m, b.data(), b.size()));
  return b;
}

TEST(Inband, AMoveFrameRoundTripsAndBadOnesAreNamed) {
  const uint8_t dst[6] = {2, 0, 0, 0, 0, 1}, src[6] = {2, 0, 0, 0, 0, 2};
  const std::vector<uint8_t> body = ExportBody(Flow(7));
  ASSERT_EQ(body.size(), inband::kMoveBodyMin);
  uint8_t frame[inband::kMoveFrameMaxLen + 4];
  const size_t len = inband::WriteMoveFrame(frame, sizeof(frame), dst, src, inband::Type::kExportState, body.data(),
                                            body.size());
  ASSERT_EQ(len, inband::kMinFrame) << "a short body is padded to Ethernet's minimum";
  EXPECT_EQ(inband::MarkOffset(frame, len), inband::kMacs) << "the mark outermost";
  inband::Type type;
  size_t at = 0, body_len = 0;
  ASSERT_EQ(inband::ParseMoveFrame(frame, len, &type, &at, &body_len), inband::Malformed::kNone);
  EXPECT_EQ(type, inband::Type::kExportState);
  EXPECT_EQ(at, inband::kPayloadOffset);
  ASSERT_EQ(body_len, body.size());
  MoveFrame back;
  std::string err;
  ASSERT_TRUE(DecodeMoveFrame(frame + at + inband::kHeaderLen, body_len, &back, &err)) << err;
  EXPECT_EQ(back.kind, MoveKind::kExport);
  EXPECT_EQ(back.flow.src_port, 7);

  /* As the ToR hands it back to the ingress: the instance VLAN on top. */
  uint8_t tagged[inband::kMoveFrameMaxLen + 4];
  std::memcpy(tagged, frame, inband::kMacs);
  const uint8_t vlan[4] = {0x81, 0x00, 0x00, 101};
  std::memcpy(tagged + inband::kMacs, vlan, 4);
  std::memcpy(tagged + inband::kMacs + 4, frame + inband::kMacs, len - inband::kMacs);
  ASSERT_EQ(inband::ParseMoveFrame(tagged, len + 4, &type, &at, &body_len), inband::Malformed::kNone);
  EXPECT_EQ(at, inband::kPayloadOffset + 4);
  inband::SetMoveHeader(tagged + at, inband::Type::kImportState, body_len);
  ASSERT_EQ(inband::ParseMoveFrame(tagged, len + 4, &type, &at, &body_len), inband::Malformed::kNone);
  EXPECT_EQ(type, inband::Type::kImportState);

  /* What the writer refuses. */
  EXPECT_EQ(inband::WriteMoveFrame(frame, 59, dst, src, inband::Type::kExportState, body.data(), body.size()), 0u);
  EXPECT_EQ(inband::WriteMoveFrame(frame, sizeof(frame), dst, src, inband::Type::kFlowMarker, body.data(),
                                   body.size()), 0u);
  EXPECT_EQ(inband::WriteMoveFrame(frame, sizeof(frame), dst, src, inband::Type::kImportState, body.data(), 33), 0u);
  std::vector<uint8_t> big(inband::kMoveBodyMax + 1, 0);
  EXPECT_EQ(inband::WriteMoveFrame(frame, sizeof(frame), dst, src, inband::Type::kImportState, big.data(), big.size()),
            0u);
  EXPECT_EQ(inband::WriteMoveFrame(frame, sizeof(frame), dst, src, inband::Type::kImportState, big.data(),
                                   inband::kMoveBodyMax), inband::kMoveFrameMaxLen);

  /* What the parser names. */
  inband::WriteMoveFrame(frame, sizeof(frame), dst, src, inband::Type::kExportState, body.data(), body.size());
  EXPECT_EQ(inband::ParseMoveFrame(frame, inband::kPayloadOffset + 3, &type, &at, &body_len),
            inband::Malformed::kTruncated);
  EXPECT_EQ(inband::ParseMoveFrame(frame, inband::kMoveBodyOffset + 20, &type, &at, &body_len),
            inband::Malformed::kTruncated) << "shorter than its length says";
  frame[inband::kPayloadOffset + 3] = inband::kHeaderLen + 33;
  EXPECT_EQ(inband::ParseMoveFrame(frame, len, &type, &at, &body_len), inband::Malformed::kBadLength);
  inband::Put16(frame + inband::kPayloadOffset + 2, inband::kHeaderLen + inband::kMoveBodyMax + 1);
  EXPECT_EQ(inband::ParseMoveFrame(frame, sizeof(frame), &type, &at, &body_len), inband::Malformed::kBadLength);
  inband::SetMoveHeader(frame + inband::kPayloadOffset, inband::Type::kExportState, body.size());
  frame[inband::kPayloadOffset] = 2;
  EXPECT_EQ(inband::ParseMoveFrame(frame, len, &type, &at, &body_len), inband::Malformed::kVersion);
  frame[inband::kPayloadOffset] = 1;
  frame[inband::kPayloadOffset + 1] = 1;
  EXPECT_EQ(inband::ParseMoveFrame(frame, len, &type, &at, &body_len), inband::Malformed::kUnknownType)
      << "a marker is no move frame";
  frame[inband::kPayloadOffset + 1] = 2;
  frame[inband::kMacs + 4] = 0x08, frame[inband::kMacs + 5] = 0x00;
  EXPECT_EQ(inband::ParseMoveFrame(frame, len, &type, &at, &body_len), inband::Malformed::kNotInband);
  frame[inband::kMacs + 3] = 5; /* VID 0xD05: not the mark */
  EXPECT_EQ(inband::ParseMoveFrame(frame, len, &type, &at, &body_len), inband::Malformed::kNotInband);
}

/* ---- HandoverRx on real mbufs ---- */

std::string pool_err;

rte_mempool* Pool() {
  static rte_mempool* pool = [] {
    std::string prefix = "--file-prefix=keel-handover-test-" + std::to_string(getpid());
    if (!EalInit({"handover_test", "--no-pci", "--no-huge", "-m", "64", "--log-level=error", "--no-telemetry",
                  prefix},
                 &pool_err))
      return static_cast<rte_mempool*>(nullptr);
    return MbufPool("handover_test", 1023, 0, &pool_err);
  }();
  return pool;
}

/* A UDP packet of flow |sport| whose payload's first byte is |seq|; marked
 * as the ingress sends it (inner tag) when |via_ingress|. */
rte_mbuf* Udp(uint16_t sport, uint8_t seq, bool via_ingress) {
  const std::vector<uint8_t> f = UdpFrame(Flow(sport).src_ip, Flow(sport).dst_ip, sport, 80, seq, via_ingress);
  rte_mbuf* m = rte_pktmbuf_alloc(Pool());
  std::memcpy(rte_pktmbuf_append(m, static_cast<uint16_t>(f.size())), f.data(), f.size());
  return m;
}

rte_mbuf* Marker(uint16_t sport) {
  rte_mbuf* m = rte_pktmbuf_alloc(Pool());
  const uint8_t mac[6] = {2, 0, 0, 0, 0, 9};
  inband::WriteMarker(rte_pktmbuf_mtod(m, uint8_t*), mac, mac, Flow(sport), 1);
  rte_pktmbuf_append(m, inband::kMarkerFrameLen);
  return m;
}

/* What came out: (flow, seq) per packet, move frames as (0, -1) where
 * |moves_allowed| (otherwise none may come out), and that no mark is left
 * on any other packet. */
std::vector<std::pair<uint16_t, int>> Drain(HandoverRx* rx, bool moves_allowed = false) {
  std::vector<std::pair<uint16_t, int>> got;
  rte_mbuf* out[32];
  uint32_t moves = 0;
  while (uint16_t k = rx->Take(out, 32, &moves)) {
    for (uint16_t i = 0; i < k; i++) {
      const uint8_t* d = rte_pktmbuf_mtod(out[i], const uint8_t*);
      if (moves & (1u << i)) {
        EXPECT_TRUE(moves_allowed) << "a move frame came out";
        got.emplace_back(0, -1);
      } else {
        EXPECT_EQ(inband::Get16(d + 12), 0x0800) << "a mark or an in-band frame reached the NFs";
        got.emplace_back(inband::Get16(d + 14 + 20), d[14 + 28]);
      }
      rte_pktmbuf_free(out[i]);
    }
  }
  return got;
}

HandoverConfig RxCfg() {
  HandoverConfig c;
  c.timeout = 1'000'000;
  c.forget = 10'000'000;
  return c;
}

TEST(HandoverRx, DirectPacketsThatOvertakeTheIngressComeOutBehindItInFlowOrder) {
  ASSERT_TRUE(Pool()) << pool_err;
  HandoverRx rx(RxCfg());
  /* Flow 2 was set up a while ago (its first packet through the ingress, its marker): it is
   * direct now, all along. */
  std::vector<rte_mbuf*> earlier = {Udp(2, 0, true), Marker(2)};
  rx.Feed(earlier.data(), 2, 1);
  /* Flow 1 sent 0..5. 0 and 1 came through the ingress; its rule went in;
   * 4 and 5 came direct while 2 and 3, sent before them, were still on
   * their way through the ingress (its receive queue, its nap): the race.
   * Then flow 1's marker. */
  std::vector<rte_mbuf*> arrival = {Udp(1, 0, true), Udp(1, 1, true), Udp(2, 1, false), Udp(1, 4, false),
                                    Udp(2, 2, false), Udp(1, 5, false), Udp(1, 2, true), Udp(1, 3, true),
                                    Marker(1), Udp(2, 3, false)};
  rx.Feed(arrival.data(), static_cast<uint16_t>(arrival.size()), 10);
  std::vector<int> flow1;
  std::vector<int> flow2;
  for (auto [flow, seq] : Drain(&rx)) (flow == 1 ? flow1 : flow2).push_back(seq);
  EXPECT_EQ(flow1, (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(flow2, (std::vector<int>{0, 1, 2, 3})) << "a flow not in handover is not held";
  EXPECT_EQ(rx.table().count(HandoverCount::kHeld), 2u);
  EXPECT_EQ(rx.table().count(HandoverCount::kMarkers), 2u);
}

TEST(HandoverRx, DirectPacketsThatOvertakeEveryPacketViaTheIngressWaitForThem) {
  ASSERT_TRUE(Pool()) << pool_err;
  HandoverRx rx(RxCfg());
  /* As measured on the stack: the ToR took the flow's new rule and the source's port before
   * the ingress' port, where 0 and 1 had waited since before the rule was asked for. */
  std::vector<rte_mbuf*> arrival = {Udp(3, 2, false), Udp(3, 3, false), Udp(3, 0, true), Udp(3, 1, true),
                                    Marker(3)};
  rx.Feed(arrival.data(), static_cast<uint16_t>(arrival.size()), 10);
  std::vector<int> got;
  for (auto [flow, seq] : Drain(&rx)) got.push_back(seq);
  EXPECT_EQ(got, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(rx.table().count(HandoverCount::kDirectFirst), 1u);
}

TEST(HandoverRx, AMarkReportedBesideTheFrameIsTakenOffToo) {
  ASSERT_TRUE(Pool()) << pool_err;
  HandoverRx rx(RxCfg());
  rte_mbuf* m = Udp(1, 0, false);
  m->ol_flags |= RTE_MBUF_F_RX_VLAN_STRIPPED | RTE_MBUF_F_RX_VLAN; /* af_packet's auxdata */
  m->vlan_tci = inband::kMarkVid;
  rte_mbuf* in[3] = {m, Udp(1, 2, false), Marker(1)};
  rx.Feed(in, 3, 0);
  rte_mbuf* out[4];
  ASSERT_EQ(rx.Take(out, 4), 2);
  EXPECT_FALSE(out[0]->ol_flags & RTE_MBUF_F_RX_VLAN_STRIPPED);
  EXPECT_EQ(rx.table().count(HandoverCount::kViaIngress), 1u);
  EXPECT_EQ(rx.table().count(HandoverCount::kReleasedMarker), 1u);
  rte_pktmbuf_free(out[0]);
  rte_pktmbuf_free(out[1]);
}

TEST(HandoverRx, NotBehindTheIngressNothingIsHeld) {
  ASSERT_TRUE(Pool()) << pool_err;
  HandoverRx rx(RxCfg());
  rte_mbuf* in[2] = {Udp(4, 0, false), Udp(4, 1, false)};
  rx.Feed(in, 2, 0);
  EXPECT_FALSE(rx.armed());
  EXPECT_EQ(Drain(&rx).size(), 2u) << "no mark has come: a generator or a test, not keel-ingress, sends";
  rte_mbuf* marked = Udp(5, 0, true);
  rx.Feed(&marked, 1, 1);
  EXPECT_TRUE(rx.armed());
  Drain(&rx);
  rte_mbuf* direct = Udp(6, 0, false);
  rx.Feed(&direct, 1, 2);
  EXPECT_EQ(rx.table().held(), 1u) << "behind the ingress, a new flow's direct packet waits for its first ones";
  rte_mbuf* mk = Marker(6);
  rx.Feed(&mk, 1, 3);
  EXPECT_EQ(Drain(&rx).size(), 1u);
}

TEST(HandoverRx, AMalformedMarkerIsDroppedAndCounted) {
  ASSERT_TRUE(Pool()) << pool_err;
  HandoverRx rx(RxCfg());
  rte_mbuf* bad = Marker(1);
  rte_pktmbuf_mtod(bad, uint8_t*)[inband::kPayloadOffset + 3] = 99; /* length */
  rte_mbuf* version = Marker(1);
  rte_pktmbuf_mtod(version, uint8_t*)[inband::kPayloadOffset] = 7;
  rte_mbuf* in[4] = {Udp(1, 0, true), Udp(1, 1, false), bad, version};
  rx.Feed(in, 4, 0);
  EXPECT_EQ(rx.table().count(HandoverCount::kMalformed), 1u);
  EXPECT_EQ(rx.table().count(HandoverCount::kBadVersion), 1u);
  EXPECT_EQ(rx.table().held(), 1u) << "a malformed marker releases nothing";
  rte_mbuf* out[4];
  ASSERT_EQ(rx.Take(out, 4), 1);
  rte_pktmbuf_free(out[0]);
  /* The flow's well-formed marker still ends the hold. */
  rte_mbuf* good = Marker(1);
  rx.Feed(&good, 1, 1);
  ASSERT_EQ(rx.Take(out, 4), 1);
  rte_pktmbuf_free(out[0]);
}

rte_mbuf* MoveMbuf(uint16_t sport) {
  rte_mbuf* m = rte_pktmbuf_alloc(Pool());
  const uint8_t mac[6] = {2, 0, 0, 0, 0, 9};
  const std::vector<uint8_t> body = ExportBody(Flow(sport));
  uint8_t* d = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(m, inband::kMinFrame));
  EXPECT_EQ(inband::WriteMoveFrame(d, inband::kMinFrame, mac, mac, inband::Type::kExportState, body.data(), body.size()),
            inband::kMinFrame);
  return m;
}

TEST(HandoverRx, AMoveFramePassesInItsPlaceStillMarkedAndFlagged) {
  ASSERT_TRUE(Pool()) << pool_err;
  HandoverRx rx(RxCfg());
  rte_mbuf* move = MoveMbuf(1);
  std::vector<uint8_t> sent(rte_pktmbuf_mtod(move, uint8_t*), rte_pktmbuf_mtod(move, uint8_t*) + inband::kMinFrame);
  /* One more whose mark a kernel socket reported beside the frame. */
  rte_mbuf* beside = MoveMbuf(2);
  uint8_t* d = rte_pktmbuf_mtod(beside, uint8_t*);
  std::memmove(d + inband::kTagLen, d, inband::kMacs);
  rte_pktmbuf_adj(beside, inband::kTagLen);
  beside->ol_flags |= RTE_MBUF_F_RX_VLAN_STRIPPED | RTE_MBUF_F_RX_VLAN;
  beside->vlan_tci = inband::kMarkVid;
  rte_mbuf* in[4] = {Udp(1, 0, true), move, Udp(1, 1, true), beside};
  rx.Feed(in, 4, 0);
  rte_mbuf* out[8];
  uint32_t moves = 0;
  ASSERT_EQ(rx.Take(out, 8, &moves), 4);
  EXPECT_EQ(moves, 0b1010u);
  EXPECT_EQ(out[1], move);
  ASSERT_EQ(rte_pktmbuf_data_len(out[1]), inband::kMinFrame);
  EXPECT_EQ(std::vector<uint8_t>(rte_pktmbuf_mtod(out[1], uint8_t*), rte_pktmbuf_mtod(out[1], uint8_t*) + inband::kMinFrame),
            sent) << "the frame as it came, mark and all";
  ASSERT_EQ(rte_pktmbuf_data_len(out[3]), inband::kMinFrame);
  EXPECT_EQ(inband::MarkOffset(rte_pktmbuf_mtod(out[3], uint8_t*), inband::kMinFrame), inband::kMacs)
      << "the mark reported beside the frame is back in it";
  EXPECT_FALSE(out[3]->ol_flags & RTE_MBUF_F_RX_VLAN_STRIPPED);
  EXPECT_EQ(inband::Get16(rte_pktmbuf_mtod(out[0], uint8_t*) + 12), 0x0800) << "packets lose their mark as before";
  EXPECT_EQ(rx.table().count(HandoverCount::kMoveFrames), 2u);
  for (int i = 0; i < 4; i++) rte_pktmbuf_free(out[i]);
  EXPECT_EQ(rx.Take(out, 8, &moves), 0);
  EXPECT_EQ(moves, 0u);
}

TEST(HandoverRx, AMalformedMoveFrameIsDroppedAndCounted) {
  ASSERT_TRUE(Pool()) << pool_err;
  HandoverRx rx(RxCfg());
  rte_mbuf* longer = MoveMbuf(1);
  inband::Put16(rte_pktmbuf_mtod(longer, uint8_t*) + inband::kPayloadOffset + 2, 200); /* more than it has */
  rte_mbuf* short_body = MoveMbuf(1);
  inband::Put16(rte_pktmbuf_mtod(short_body, uint8_t*) + inband::kPayloadOffset + 2, 20);
  rte_mbuf* version = MoveMbuf(1);
  rte_pktmbuf_mtod(version, uint8_t*)[inband::kPayloadOffset] = 9;
  rte_mbuf* in[4] = {longer, short_body, version, Udp(1, 0, true)};
  rx.Feed(in, 4, 0);
  EXPECT_EQ(rx.table().count(HandoverCount::kMalformed), 2u);
  EXPECT_EQ(rx.table().count(HandoverCount::kBadVersion), 1u);
  EXPECT_EQ(rx.table().count(HandoverCount::kMoveFrames), 0u);
  rte_mbuf* out[8];
  uint32_t moves = 0;
  ASSERT_EQ(rx.Take(out, 8, &moves), 1) << "only the packet";
  EXPECT_EQ(moves, 0u);
  rte_pktmbuf_free(out[0]);
}

std::vector<std::pair<uint16_t, int>> DrainWithMoves(HandoverRx* rx) { return Drain(rx, true); }

/* Issue 37: a flow moved back to an instance it had finished a handover on
 * is a new flow there. Its held packets come via the ingress behind the
 * move's IMPORT and its marker follows; its direct packets must wait for
 * that marker, as a new flow's do, not pass as a settled flow's. */
TEST(HandoverRx, AFlowThatComesBackByAMoveWaitsForItsNewMarkerAgain) {
  ASSERT_TRUE(Pool()) << pool_err;
  HandoverRx rx(RxCfg());
  std::vector<rte_mbuf*> before = {Udp(7, 0, true), Marker(7)};
  rx.Feed(before.data(), 2, 1);
  EXPECT_EQ(DrainWithMoves(&rx), (std::vector<std::pair<uint16_t, int>>{{7, 0}}));
  /* It moved away and now comes back: the IMPORT, then a direct packet that overtook the
   * held ones still on their way from the ingress, then those, then the marker. */
  std::vector<rte_mbuf*> back = {MoveMbuf(7), Udp(7, 3, false), Udp(7, 1, true), Udp(7, 2, true), Marker(7)};
  rx.Feed(back.data(), static_cast<uint16_t>(back.size()), 2);
  EXPECT_EQ(DrainWithMoves(&rx), (std::vector<std::pair<uint16_t, int>>{{0, -1}, {7, 1}, {7, 2}, {7, 3}}));
  EXPECT_EQ(rx.table().count(HandoverCount::kLateViaIngress), 0u);
}

/* The source side: what a flow holds at position 0 (direct packets waiting
 * for its marker) leaves before its EXPORT, so that no packet of it reaches
 * an NF after its state was taken away (the NF would make new state: a NAT,
 * a new mapping). */
TEST(HandoverRx, AFlowsHeldPacketsLeaveAheadOfItsExport) {
  ASSERT_TRUE(Pool()) << pool_err;
  HandoverRx rx(RxCfg());
  std::vector<rte_mbuf*> in = {Udp(8, 0, true), Udp(8, 1, false), Udp(9, 0, true), Udp(9, 1, false), MoveMbuf(8)};
  rx.Feed(in.data(), static_cast<uint16_t>(in.size()), 1);
  EXPECT_EQ(DrainWithMoves(&rx), (std::vector<std::pair<uint16_t, int>>{{8, 0}, {9, 0}, {8, 1}, {0, -1}}))
      << "flow 9 is not moving: it keeps its hold";
  EXPECT_EQ(rx.table().count(HandoverCount::kReleasedMove), 1u);
  EXPECT_EQ(rx.table().held(), 1u);
  rte_mbuf* mk = Marker(9);
  rx.Feed(&mk, 1, 2);
  EXPECT_EQ(DrainWithMoves(&rx), (std::vector<std::pair<uint16_t, int>>{{9, 1}}));
}

}  // namespace
}  // namespace keel
