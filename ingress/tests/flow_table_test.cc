/* SPDX-License-Identifier: Apache-2.0 */
#include "flow_table.h"

#include <gtest/gtest.h>

namespace keel::ingress {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr DropReason kOk = DropReason::kCount;

/* Packets are opaque to the table: number them. */
Packet P(uintptr_t n) { return reinterpret_cast<Packet>(n); }
FlowKey Flow(uint16_t sport) { return FlowKey{0xC6120001, 0xC6130001, sport, 5001, 17}; }

FlowTableConfig Config() {
  FlowTableConfig c;
  c.hold_per_flow = 4;
  c.hold_max = 6;
  c.max_flows = 3;
  c.hold_timeout_ns = 100 * kMs;
  c.retry_backoff_ns = 50 * kMs;
  c.retire_ns = 200 * kMs;
  return c;
}

class FlowTableTest : public ::testing::Test {
 protected:
  /* Starts flow |sport| with packet |pkt| at |now|; returns its request id. */
  uint64_t Start(uint16_t sport, uintptr_t pkt, uint64_t now = 0) {
    EXPECT_EQ(t.OnPacket(Flow(sport), P(pkt), now).verdict, Verdict::kUnknown);
    PacketVerdict first;
    uint64_t id = t.Start(Flow(sport), P(pkt), now, &first);
    EXPECT_EQ(first.verdict, Verdict::kHeld);
    return id;
  }
  Resolution Resolve(uint16_t sport, uint64_t id, DropReason why, uint64_t now, std::vector<Packet>* out,
                     uint16_t vlan = 0) {
    uint64_t since;
    return t.Resolve(Flow(sport), id, why, vlan, now, out, &since);
  }

  FlowTable t{Config()};
};

TEST_F(FlowTableTest, HoldsThenReleasesInOrderThenForwards) {
  uint64_t id = Start(1, 10);
  for (uintptr_t p = 11; p <= 13; p++) EXPECT_EQ(t.OnPacket(Flow(1), P(p), kMs).verdict, Verdict::kHeld);
  EXPECT_EQ(t.held(), 4u);
  std::vector<Packet> out;
  ASSERT_EQ(Resolve(1, id, kOk, 5 * kMs, &out), Resolution::kReleased);
  EXPECT_EQ(out, (std::vector<Packet>{P(10), P(11), P(12), P(13)}));
  EXPECT_EQ(t.held(), 0u);
  EXPECT_EQ(t.held_max(), 4u);
  PacketVerdict later = t.OnPacket(Flow(1), P(14), 6 * kMs);
  EXPECT_EQ(later.verdict, Verdict::kForward);
  EXPECT_EQ(later.vlan, 0);
}

TEST_F(FlowTableTest, AForwardingFlowKeepsTheVlanItsDecisionGave) {
  uint64_t a = Start(1, 10);
  uint64_t b = Start(2, 20);
  std::vector<Packet> out;
  ASSERT_EQ(Resolve(1, a, kOk, kMs, &out, 117), Resolution::kReleased);
  ASSERT_EQ(Resolve(2, b, kOk, kMs, &out), Resolution::kReleased);
  PacketVerdict v1 = t.OnPacket(Flow(1), P(11), 2 * kMs);
  PacketVerdict v2 = t.OnPacket(Flow(2), P(21), 2 * kMs);
  EXPECT_EQ(v1.verdict, Verdict::kForward);
  EXPECT_EQ(v1.vlan, 117);
  EXPECT_EQ(v2.verdict, Verdict::kForward);
  EXPECT_EQ(v2.vlan, 0);
}

TEST_F(FlowTableTest, PerFlowOverflowDropsOnlyThatFlowsPackets) {
  Start(1, 10);
  for (uintptr_t p = 11; p <= 13; p++) t.OnPacket(Flow(1), P(p), 0);
  PacketVerdict v = t.OnPacket(Flow(1), P(14), 0);
  EXPECT_EQ(v.verdict, Verdict::kDrop);
  EXPECT_EQ(v.reason, DropReason::kBufferFull);
  /* Another flow still has room. */
  Start(2, 20);
  EXPECT_EQ(t.OnPacket(Flow(2), P(21), 0).verdict, Verdict::kHeld);
}

TEST_F(FlowTableTest, GlobalOverflowAndSlotsComeBack) {
  uint64_t a = Start(1, 10);
  for (uintptr_t p = 11; p <= 13; p++) t.OnPacket(Flow(1), P(p), 0);
  uint64_t b = Start(2, 20);
  EXPECT_EQ(t.OnPacket(Flow(2), P(21), 0).verdict, Verdict::kHeld);
  EXPECT_EQ(t.held(), 6u);
  /* The pool is empty: a new flow's first packet is dropped, its setup still starts. */
  PacketVerdict first;
  uint64_t c = t.Start(Flow(3), P(30), 0, &first);
  EXPECT_NE(c, 0u);
  EXPECT_EQ(first.verdict, Verdict::kDrop);
  EXPECT_EQ(first.reason, DropReason::kBufferFull);
  std::vector<Packet> out;
  Resolve(1, a, kOk, kMs, &out);
  EXPECT_EQ(t.OnPacket(Flow(3), P(31), kMs).verdict, Verdict::kHeld);
  out.clear();
  Resolve(2, b, kOk, kMs, &out);
  EXPECT_EQ(out, (std::vector<Packet>{P(20), P(21)}));
}

TEST_F(FlowTableTest, InterleavedFlowsKeepTheirOwnOrder) {
  uint64_t a = Start(1, 100), b = Start(2, 200);
  t.OnPacket(Flow(2), P(201), 0);
  t.OnPacket(Flow(1), P(101), 0);
  t.OnPacket(Flow(2), P(202), 0);
  std::vector<Packet> out;
  Resolve(2, b, kOk, kMs, &out);
  EXPECT_EQ(out, (std::vector<Packet>{P(200), P(201), P(202)}));
  out.clear();
  Resolve(1, a, kOk, kMs, &out);
  EXPECT_EQ(out, (std::vector<Packet>{P(100), P(101)}));
}

TEST_F(FlowTableTest, FailureDropsHeldThenBacksOffThenRetries) {
  uint64_t id = Start(1, 10);
  t.OnPacket(Flow(1), P(11), 0);
  std::vector<Packet> out;
  ASSERT_EQ(Resolve(1, id, DropReason::kAssignFailed, 10 * kMs, &out), Resolution::kFailed);
  EXPECT_EQ(out, (std::vector<Packet>{P(10), P(11)}));
  EXPECT_EQ(t.held(), 0u);
  PacketVerdict v = t.OnPacket(Flow(1), P(12), 20 * kMs);
  EXPECT_EQ(v.verdict, Verdict::kDrop);
  EXPECT_EQ(v.reason, DropReason::kAssignFailed);
  /* After the backoff the flow may try again, with a new request id. */
  uint64_t again = Start(1, 13, 61 * kMs);
  EXPECT_NE(again, id);
}

TEST_F(FlowTableTest, TimeoutDropsHeldPackets) {
  uint64_t id = Start(1, 10);
  std::vector<Packet> dropped;
  t.Expire(99 * kMs, &dropped);
  EXPECT_TRUE(dropped.empty());
  t.Expire(100 * kMs, &dropped);
  EXPECT_EQ(dropped, std::vector<Packet>{P(10)});
  EXPECT_EQ(t.OnPacket(Flow(1), P(11), 101 * kMs).reason, DropReason::kTimeout);
  /* The late decision is stale: nothing is released. */
  std::vector<Packet> out;
  EXPECT_EQ(Resolve(1, id, kOk, 120 * kMs, &out), Resolution::kStale);
  EXPECT_TRUE(out.empty());
}

TEST_F(FlowTableTest, QuietFlowsRetireAndBackoffsEnd) {
  uint64_t a = Start(1, 10), b = Start(2, 20);
  std::vector<Packet> out;
  Resolve(1, a, kOk, 0, &out);
  Resolve(2, b, DropReason::kInstallFailed, 0, &out);
  t.OnPacket(Flow(1), P(11), 100 * kMs);
  t.Expire(150 * kMs, &out);
  EXPECT_EQ(t.flows(), 1u); /* the backoff is over; the forwarding flow saw a packet 50 ms ago */
  t.Expire(300 * kMs, &out);
  EXPECT_EQ(t.flows(), 0u);
  EXPECT_EQ(t.OnPacket(Flow(1), P(12), 301 * kMs).verdict, Verdict::kUnknown);
}

TEST_F(FlowTableTest, FullTableRefusesNewFlows) {
  Start(1, 10);
  Start(2, 20);
  Start(3, 30);
  PacketVerdict first;
  EXPECT_EQ(t.Start(Flow(4), P(40), 0, &first), 0u);
}

TEST_F(FlowTableTest, StaleOrUnknownDecisionsChangeNothing) {
  uint64_t id = Start(1, 10);
  std::vector<Packet> out;
  EXPECT_EQ(Resolve(1, id + 7, kOk, 0, &out), Resolution::kStale);
  EXPECT_EQ(Resolve(9, id, kOk, 0, &out), Resolution::kStale);
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(t.held(), 1u);
}

TEST_F(FlowTableTest, AFlowIsSettlingUntilItsMarkerWent) {
  EXPECT_FALSE(t.Settling(Flow(1)));
  uint64_t id = Start(1, 10);
  EXPECT_TRUE(t.Settling(Flow(1)));
  std::vector<Packet> out;
  ASSERT_EQ(Resolve(1, id, kOk, kMs, &out, 117), Resolution::kReleased);
  EXPECT_TRUE(t.Settling(Flow(1))); /* its rule is on the way */
  ASSERT_TRUE(t.Installed(Flow(1), id, 2 * kMs));
  EXPECT_TRUE(t.Settling(Flow(1))); /* its marker is due */
  uint16_t vlan = 0;
  /* asked with a time before the install (the lcore's last full read of its port began then) */
  EXPECT_EQ(t.MarkerState(Flow(1), id, kMs, 10 * kMs, &vlan), MarkerDue::kWait);
  EXPECT_EQ(t.MarkerState(Flow(1), id, 11 * kMs, 10 * kMs, &vlan), MarkerDue::kWait);
  ASSERT_EQ(t.MarkerState(Flow(1), id, 20 * kMs, 10 * kMs, &vlan), MarkerDue::kDue);
  EXPECT_FALSE(t.Settling(Flow(1)));
}

TEST_F(FlowTableTest, AnAdoptedFlowForwardsToItsNewInstanceAndGetsItsMarker) {
  uint64_t id = Start(1, 10);
  std::vector<Packet> out;
  ASSERT_EQ(Resolve(1, id, kOk, kMs, &out, 117), Resolution::kReleased);
  /* Moved to the instance tagged 118, its rule in already. */
  uint64_t moved = t.Adopt(Flow(1), 118, true, 5 * kMs);
  EXPECT_NE(moved, id);
  PacketVerdict v = t.OnPacket(Flow(1), P(11), 6 * kMs);
  EXPECT_EQ(v.verdict, Verdict::kForward);
  EXPECT_EQ(v.vlan, 118);
  EXPECT_FALSE(v.after_marker);
  uint16_t vlan = 0;
  /* The old setup's marker is gone; the new one's comes once the flow is quiet. */
  EXPECT_EQ(t.MarkerState(Flow(1), id, 30 * kMs, 10 * kMs, &vlan), MarkerDue::kGone);
  EXPECT_EQ(t.MarkerState(Flow(1), moved, 10 * kMs, 10 * kMs, &vlan), MarkerDue::kWait);
  ASSERT_EQ(t.MarkerState(Flow(1), moved, 16 * kMs, 10 * kMs, &vlan), MarkerDue::kDue);
  EXPECT_EQ(vlan, 118);
  /* Back on its old instance, the rule to come: no marker until it is in. */
  uint64_t back = t.Adopt(Flow(1), 117, false, 20 * kMs);
  EXPECT_EQ(t.MarkerState(Flow(1), back, 40 * kMs, 10 * kMs, &vlan), MarkerDue::kGone);
  ASSERT_TRUE(t.Installed(Flow(1), back, 41 * kMs));
  ASSERT_EQ(t.MarkerState(Flow(1), back, 52 * kMs, 10 * kMs, &vlan), MarkerDue::kDue);
  EXPECT_EQ(vlan, 117);
}

}  // namespace
}  // namespace keel::ingress
