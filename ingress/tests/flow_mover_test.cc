/* SPDX-License-Identifier: Apache-2.0 */
#include "flow_mover.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace keel::ingress {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint16_t kS = 101, kD = 102;
constexpr uint32_t kMove = 7;

Packet P(uintptr_t n) { return reinterpret_cast<Packet>(n); }
FlowKey Flow(uint16_t sport) { return FlowKey{0xC6120001, 0xC6130001, sport, 5001, 17}; }

MoverConfig Config() {
  MoverConfig c;
  c.hold_per_flow = 8;
  c.hold_max = 12;
  c.max_flows = 300;
  c.quiet_ns = 10 * kMs;
  c.idle_quiet_ns = 30 * kMs;
  c.frame_timeout_ns = 200 * kMs;
  c.rule_timeout_ns = 1000 * kMs;
  return c;
}

using Kind = MoveAction::Kind;

std::vector<Kind> Kinds(const MoveActions& a) {
  std::vector<Kind> k;
  for (const MoveAction& x : a) k.push_back(x.kind);
  return k;
}

MoveFrame Decode(const std::vector<uint8_t>& body) {
  MoveFrame f;
  std::string err;
  EXPECT_TRUE(DecodeMoveFrame(body.data(), body.size(), &f, &err)) << err;
  return f;
}

std::vector<uint8_t> Encode(const MoveFrame& f) {
  std::vector<uint8_t> b(kMoveFrameMax);
  b.resize(EncodeMoveFrame(f, b.data(), b.size()));
  EXPECT_FALSE(b.empty());
  return b;
}

/* A NAT-like record of position |pos| for |key|. */
MoveRecord Record(uint8_t pos, const FlowKey& key, uint8_t fill) {
  MoveRecord r;
  r.position = pos;
  r.nf = NfId("nat");
  r.state.key = ToMoveKey(key);
  r.state.len = 8;
  std::fill(r.state.data, r.state.data + 8, fill);
  return r;
}

class FlowMoverTest : public ::testing::Test {
 protected:
  /* Begins moving flow |sport| at |now| and confirms the rule's removal. */
  void BeginRemoved(uint16_t sport, uint64_t now = 0) {
    MoveActions a;
    m.Begin(kMove, Flow(sport), kS, kD, now, &a);
    ASSERT_EQ(Kinds(a), std::vector<Kind>{Kind::kRemoveRule});
    EXPECT_EQ(a[0].key, Flow(sport));
    a.clear();
    m.OnRuleRemoved(Flow(sport), true, now + kMs, &a);
    EXPECT_TRUE(a.empty());
  }
  /* Polls past the quiet time; returns the export frame sent to S. */
  MoveFrame ExportSent(uint16_t sport, uint64_t now) {
    MoveActions a;
    m.Poll(now, &a);
    EXPECT_EQ(Kinds(a), std::vector<Kind>{Kind::kSendFrame});
    if (a.size() != 1) return {};
    EXPECT_EQ(a[0].vlan, kS);
    EXPECT_EQ(a[0].type, inband::Type::kExportState);
    MoveFrame f = Decode(a[0].body);
    EXPECT_EQ(f.kind, MoveKind::kExport);
    EXPECT_EQ(FromMoveKey(f.flow), Flow(sport));
    EXPECT_EQ(FromMoveKey(f.cur), Flow(sport));
    EXPECT_TRUE(f.records.empty());
    return f;
  }
  /* S's positions 0 and 1 export their records into |f|. */
  static MoveFrame ExportedBy(MoveFrame f, uint16_t sport) {
    f.records.push_back(Record(0, Flow(sport), 0xA0));
    f.records.push_back(Record(1, Flow(sport), 0xA1));
    return f;
  }
  FrameVerdict Return(const MoveFrame& f, uint16_t vlan, uint64_t now, MoveActions* a) {
    std::vector<uint8_t> b = Encode(f);
    return m.OnFrame(b.data(), b.size(), vlan, now, a);
  }

  FlowMover m{Config()};
};

TEST_F(FlowMoverTest, AMoveHoldsExportsImportsInstallsThenReleasesInOrderToTheDestination) {
  BeginRemoved(1);
  ASSERT_EQ(m.OnPacket(Flow(1), P(10), 2 * kMs), HoldVerdict::kHeld);
  ASSERT_EQ(m.OnPacket(Flow(1), P(11), 3 * kMs), HoldVerdict::kHeld);
  EXPECT_EQ(m.OnPacket(Flow(2), P(99), 3 * kMs), HoldVerdict::kNotMoving);
  /* Not before the quiet time after the first held packet (2 ms + 10 ms): until then
   * packets that the switch still sent to S may be on their way there. */
  MoveActions a;
  m.Poll(11 * kMs, &a);
  EXPECT_TRUE(a.empty());
  MoveFrame ex = ExportSent(1, 12 * kMs);

  a.clear();
  ASSERT_EQ(Return(ExportedBy(ex, 1), kS, 12 * kMs, &a), FrameVerdict::kTaken);
  ASSERT_EQ(Kinds(a), std::vector<Kind>{Kind::kSendFrame});
  EXPECT_EQ(a[0].vlan, kD);
  EXPECT_EQ(a[0].type, inband::Type::kImportState);
  MoveFrame im = Decode(a[0].body);
  EXPECT_EQ(im.kind, MoveKind::kImport);
  EXPECT_EQ(im.status, MoveStatus::kOk);
  ASSERT_EQ(im.records.size(), 2u);
  EXPECT_EQ(im.records[1].state.data[0], 0xA1);

  ASSERT_EQ(m.OnPacket(Flow(1), P(12), 13 * kMs), HoldVerdict::kHeld);
  a.clear();
  ASSERT_EQ(Return(im, kD, 14 * kMs, &a), FrameVerdict::kTaken);
  ASSERT_EQ(Kinds(a), std::vector<Kind>{Kind::kInstall});
  EXPECT_TRUE(a[0].to_destination);
  EXPECT_EQ(a[0].vlan, kD);
  /* Packets that miss on the ToR until the new rule is in are held too. */
  ASSERT_EQ(m.OnPacket(Flow(1), P(13), 15 * kMs), HoldVerdict::kHeld);

  a.clear();
  m.OnInstalled(Flow(1), true, 16 * kMs, &a);
  ASSERT_EQ(Kinds(a), (std::vector<Kind>{Kind::kRelease, Kind::kResult}));
  EXPECT_EQ(a[0].vlan, kD);
  EXPECT_TRUE(a[0].to_destination);
  EXPECT_EQ(a[0].packets, (std::vector<Packet>{P(10), P(11), P(12), P(13)}));
  EXPECT_EQ(a[1].result.failure, MoveFailure::kNone);
  EXPECT_EQ(a[1].result.move, kMove);
  EXPECT_EQ(a[1].result.pause_ns, 14 * kMs); /* first held (2 ms) -> rule confirmed (16 ms) */
  EXPECT_FALSE(m.active());
  EXPECT_EQ(m.held(), 0u);
  EXPECT_EQ(m.OnPacket(Flow(1), P(14), 17 * kMs), HoldVerdict::kNotMoving);
}

TEST_F(FlowMoverTest, WithoutHeldPacketsTheExportWaitsTheIdleQuietTimeAndThePauseRunsFromTheStart) {
  BeginRemoved(1, 5 * kMs); /* removed at 6 ms */
  MoveActions a;
  m.Poll(35 * kMs, &a);
  EXPECT_TRUE(a.empty());
  MoveFrame ex = ExportSent(1, 36 * kMs);
  ASSERT_EQ(Return(ExportedBy(ex, 1), kS, 37 * kMs, &a), FrameVerdict::kTaken);
  MoveFrame im = Decode(a[0].body);
  a.clear();
  ASSERT_EQ(Return(im, kD, 38 * kMs, &a), FrameVerdict::kTaken);
  a.clear();
  m.OnInstalled(Flow(1), true, 40 * kMs, &a);
  ASSERT_EQ(Kinds(a), (std::vector<Kind>{Kind::kRelease, Kind::kResult}));
  EXPECT_TRUE(a[0].packets.empty());
  EXPECT_EQ(a[1].result.pause_ns, 35 * kMs);
}

TEST_F(FlowMoverTest, APacketDuringTheIdleQuietTimeBringsTheExportForward) {
  BeginRemoved(1); /* removed at 1 ms: with no packet, the export would go at 31 ms */
  ASSERT_EQ(m.OnPacket(Flow(1), P(10), 5 * kMs), HoldVerdict::kHeld);
  MoveActions a;
  m.Poll(14 * kMs, &a);
  EXPECT_TRUE(a.empty());
  ExportSent(1, 15 * kMs);
}

TEST_F(FlowMoverTest, APacketHeldBeforeTheRemovalIsConfirmedCountsFromTheConfirmation) {
  MoveActions a;
  m.Begin(kMove, Flow(1), kS, kD, 0, &a);
  ASSERT_EQ(m.OnPacket(Flow(1), P(10), 2 * kMs), HoldVerdict::kHeld);
  a.clear();
  m.OnRuleRemoved(Flow(1), true, 4 * kMs, &a);
  m.Poll(13 * kMs, &a);
  EXPECT_TRUE(a.empty());
  ExportSent(1, 14 * kMs);
}

TEST_F(FlowMoverTest, AfterAStallTheQuietTimeWaitsForThePacketsStillInThePortsRing) {
  BeginRemoved(1); /* removed at 1 ms: with no packet, the export would go at 31 ms */
  /* The lcore was not scheduled from 2 ms to 40 ms; its first read after the stall
   * began at 40 ms but did not empty the ring, where F's first held packet (the switch
   * let go of F at 3 ms) still waits: every frame before 2 ms has been read. Exporting
   * now would go ahead of packets the switch sent to S just before it let go. */
  MoveActions a;
  m.Poll(40 * kMs, 2 * kMs, &a);
  EXPECT_TRUE(a.empty());
  /* The next read finds the packet: the quiet time runs from there. */
  ASSERT_EQ(m.OnPacket(Flow(1), P(10), 41 * kMs), HoldVerdict::kHeld);
  m.Poll(41 * kMs, 41 * kMs, &a);
  EXPECT_TRUE(a.empty());
  m.Poll(51 * kMs, 50 * kMs, &a);
  EXPECT_TRUE(a.empty());
  ExportSent(1, 51 * kMs);
}

class ExportFailsTest : public FlowMoverTest, public ::testing::WithParamInterface<MoveStatus> {};

TEST_P(ExportFailsTest, TheRecordsGoBackThroughTheSourceAndTheFlowStaysThere) {
  BeginRemoved(1);
  ASSERT_EQ(m.OnPacket(Flow(1), P(10), 2 * kMs), HoldVerdict::kHeld);
  MoveFrame ex = ExportSent(1, 12 * kMs);
  /* Position 0 gave its records up; position 1 failed. */
  ex.records.push_back(Record(0, Flow(1), 0xA0));
  ex.status = GetParam();
  ex.failed_position = 1;
  MoveActions a;
  ASSERT_EQ(Return(ex, kS, 12 * kMs, &a), FrameVerdict::kTaken);
  ASSERT_EQ(Kinds(a), std::vector<Kind>{Kind::kSendFrame});
  EXPECT_EQ(a[0].vlan, kS);
  EXPECT_EQ(a[0].type, inband::Type::kImportState);
  MoveFrame back = Decode(a[0].body);
  EXPECT_EQ(back.kind, MoveKind::kImport);
  EXPECT_EQ(back.status, MoveStatus::kOk); /* or S's positions would skip it */
  EXPECT_EQ(back.failed_position, 0);
  ASSERT_EQ(back.records.size(), 1u);
  EXPECT_EQ(back.records[0].state.data[0], 0xA0);

  ASSERT_EQ(m.OnPacket(Flow(1), P(11), 13 * kMs), HoldVerdict::kHeld);
  a.clear();
  ASSERT_EQ(Return(back, kS, 14 * kMs, &a), FrameVerdict::kTaken);
  ASSERT_EQ(Kinds(a), (std::vector<Kind>{Kind::kRelease, Kind::kResult}));
  EXPECT_EQ(a[0].vlan, kS);
  EXPECT_FALSE(a[0].to_destination); /* the rule to S goes in after the packets */
  EXPECT_EQ(a[0].packets, (std::vector<Packet>{P(10), P(11)}));
  const MoveFailure want = GetParam() == MoveStatus::kGlobal ? MoveFailure::kGlobal : MoveFailure::kNoRoom;
  EXPECT_EQ(a[1].result.failure, want);
  EXPECT_EQ(a[1].result.pause_ns, 12 * kMs);
  EXPECT_EQ(m.restores_failed(), 0u);
  EXPECT_FALSE(m.active());
}

INSTANTIATE_TEST_SUITE_P(GlobalAndNoRoom, ExportFailsTest,
                         ::testing::Values(MoveStatus::kGlobal, MoveStatus::kNoRoom));

TEST_F(FlowMoverTest, ARefusedImportIsTakenBackFromTheDestinationAndTheSourceGetsItsRecords) {
  BeginRemoved(1);
  ASSERT_EQ(m.OnPacket(Flow(1), P(10), 2 * kMs), HoldVerdict::kHeld);
  MoveFrame ex = ExportSent(1, 12 * kMs);
  MoveActions a;
  ASSERT_EQ(Return(ExportedBy(ex, 1), kS, 12 * kMs, &a), FrameVerdict::kTaken);
  MoveFrame im = Decode(a[0].body);
  im.status = MoveStatus::kRefused;
  im.failed_position = 1;
  a.clear();
  ASSERT_EQ(Return(im, kD, 13 * kMs, &a), FrameVerdict::kTaken);
  /* An export through D takes back what position 0 imported. */
  ASSERT_EQ(Kinds(a), std::vector<Kind>{Kind::kSendFrame});
  EXPECT_EQ(a[0].vlan, kD);
  EXPECT_EQ(a[0].type, inband::Type::kExportState);
  MoveFrame take = Decode(a[0].body);
  EXPECT_TRUE(take.records.empty());
  take.records.push_back(Record(0, Flow(1), 0xA0));
  a.clear();
  ASSERT_EQ(Return(take, kD, 14 * kMs, &a), FrameVerdict::kTaken);
  /* S gets all it gave, once. */
  ASSERT_EQ(Kinds(a), std::vector<Kind>{Kind::kSendFrame});
  EXPECT_EQ(a[0].vlan, kS);
  MoveFrame back = Decode(a[0].body);
  EXPECT_EQ(back.kind, MoveKind::kImport);
  EXPECT_EQ(back.status, MoveStatus::kOk);
  ASSERT_EQ(back.records.size(), 2u);
  EXPECT_EQ(back.records[0].state.data[0], 0xA0);
  EXPECT_EQ(back.records[1].state.data[0], 0xA1);
  a.clear();
  ASSERT_EQ(Return(back, kS, 15 * kMs, &a), FrameVerdict::kTaken);
  ASSERT_EQ(Kinds(a), (std::vector<Kind>{Kind::kRelease, Kind::kResult}));
  EXPECT_EQ(a[0].vlan, kS);
  EXPECT_EQ(a[0].packets, std::vector<Packet>{P(10)});
  EXPECT_EQ(a[1].result.failure, MoveFailure::kRefused);
}

TEST_F(FlowMoverTest, ARuleToTheDestinationThatFailsMovesTheStateBack) {
  BeginRemoved(1);
  MoveFrame ex = ExportSent(1, 31 * kMs);
  MoveActions a;
  ASSERT_EQ(Return(ExportedBy(ex, 1), kS, 32 * kMs, &a), FrameVerdict::kTaken);
  MoveFrame im = Decode(a[0].body);
  a.clear();
  ASSERT_EQ(Return(im, kD, 33 * kMs, &a), FrameVerdict::kTaken);
  ASSERT_EQ(m.OnPacket(Flow(1), P(10), 34 * kMs), HoldVerdict::kHeld);
  a.clear();
  m.OnInstalled(Flow(1), false, 35 * kMs, &a);
  ASSERT_EQ(Kinds(a), std::vector<Kind>{Kind::kSendFrame});
  EXPECT_EQ(a[0].vlan, kD);
  MoveFrame take = Decode(a[0].body);
  a.clear();
  ASSERT_EQ(Return(ExportedBy(take, 1), kD, 36 * kMs, &a), FrameVerdict::kTaken);
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a[0].vlan, kS);
  MoveFrame back = Decode(a[0].body);
  a.clear();
  ASSERT_EQ(Return(back, kS, 37 * kMs, &a), FrameVerdict::kTaken);
  ASSERT_EQ(Kinds(a), (std::vector<Kind>{Kind::kRelease, Kind::kResult}));
  EXPECT_EQ(a[0].vlan, kS);
  EXPECT_EQ(a[0].packets, std::vector<Packet>{P(10)});
  EXPECT_EQ(a[1].result.failure, MoveFailure::kRule);
}

TEST_F(FlowMoverTest, ARuleThatCannotBeRemovedEndsTheMoveAtOnce) {
  MoveActions a;
  m.Begin(kMove, Flow(1), kS, kD, 0, &a);
  ASSERT_EQ(m.OnPacket(Flow(1), P(10), kMs), HoldVerdict::kHeld);
  a.clear();
  m.OnRuleRemoved(Flow(1), false, 2 * kMs, &a);
  ASSERT_EQ(Kinds(a), (std::vector<Kind>{Kind::kRelease, Kind::kResult}));
  EXPECT_EQ(a[0].vlan, kS);
  EXPECT_EQ(a[0].packets, std::vector<Packet>{P(10)});
  EXPECT_EQ(a[1].result.failure, MoveFailure::kRule);
  a.clear();
  m.Poll(500 * kMs, &a);
  EXPECT_TRUE(a.empty()); /* no export ever */
}

TEST_F(FlowMoverTest, AnUnansweredRemovalTimesOut) {
  MoveActions a;
  m.Begin(kMove, Flow(1), kS, kD, 0, &a);
  a.clear();
  m.Poll(999 * kMs, &a);
  EXPECT_TRUE(a.empty());
  m.Poll(1000 * kMs, &a);
  ASSERT_EQ(Kinds(a), (std::vector<Kind>{Kind::kRelease, Kind::kResult}));
  EXPECT_EQ(a[1].result.failure, MoveFailure::kRule);
  /* The answer that comes after all changes nothing. */
  a.clear();
  m.OnRuleRemoved(Flow(1), true, 1001 * kMs, &a);
  EXPECT_TRUE(a.empty());
}

TEST_F(FlowMoverTest, ALostExportTimesOutAndTheFlowGoesBackToTheSource) {
  BeginRemoved(1);
  ASSERT_EQ(m.OnPacket(Flow(1), P(10), 2 * kMs), HoldVerdict::kHeld);
  MoveFrame ex = ExportSent(1, 12 * kMs);
  MoveActions a;
  m.Poll(211 * kMs, &a);
  EXPECT_TRUE(a.empty());
  m.Poll(212 * kMs, &a);
  ASSERT_EQ(Kinds(a), (std::vector<Kind>{Kind::kRelease, Kind::kResult}));
  EXPECT_EQ(a[0].vlan, kS);
  EXPECT_EQ(a[0].packets, std::vector<Packet>{P(10)});
  EXPECT_EQ(a[1].result.failure, MoveFailure::kTimeout);
  /* The export that comes back late finds no move: counted, not acted on. */
  a.clear();
  EXPECT_EQ(Return(ExportedBy(ex, 1), kS, 300 * kMs, &a), FrameVerdict::kUnknownFlow);
  EXPECT_TRUE(a.empty());
}

TEST_F(FlowMoverTest, ALostImportGivesTheSourceItsRecordsBack) {
  BeginRemoved(1);
  MoveFrame ex = ExportSent(1, 31 * kMs);
  MoveActions a;
  ASSERT_EQ(Return(ExportedBy(ex, 1), kS, 32 * kMs, &a), FrameVerdict::kTaken);
  a.clear();
  m.Poll(231 * kMs, &a);
  EXPECT_TRUE(a.empty());
  m.Poll(232 * kMs, &a);
  ASSERT_EQ(Kinds(a), std::vector<Kind>{Kind::kSendFrame});
  EXPECT_EQ(a[0].vlan, kS);
  MoveFrame back = Decode(a[0].body);
  EXPECT_EQ(back.kind, MoveKind::kImport);
  EXPECT_EQ(back.records.size(), 2u);
  a.clear();
  ASSERT_EQ(Return(back, kS, 233 * kMs, &a), FrameVerdict::kTaken);
  ASSERT_EQ(Kinds(a), (std::vector<Kind>{Kind::kRelease, Kind::kResult}));
  EXPECT_EQ(a[1].result.failure, MoveFailure::kTimeout);
  EXPECT_EQ(m.restores_failed(), 0u);
}

TEST_F(FlowMoverTest, ARestoreThatDoesNotComeBackStillReleasesTheFlowAndIsCounted) {
  BeginRemoved(1);
  ASSERT_EQ(m.OnPacket(Flow(1), P(10), 2 * kMs), HoldVerdict::kHeld);
  MoveFrame ex = ExportSent(1, 12 * kMs);
  ex.status = MoveStatus::kGlobal;
  MoveActions a;
  ASSERT_EQ(Return(ex, kS, 12 * kMs, &a), FrameVerdict::kTaken);
  a.clear();
  m.Poll(212 * kMs, &a);
  ASSERT_EQ(Kinds(a), (std::vector<Kind>{Kind::kRelease, Kind::kResult}));
  EXPECT_EQ(a[0].packets, std::vector<Packet>{P(10)});
  EXPECT_EQ(a[1].result.failure, MoveFailure::kGlobal);
  EXPECT_EQ(m.restores_failed(), 1u);
}

TEST_F(FlowMoverTest, DuplicateWrongAndStrayFramesAreNotTaken) {
  BeginRemoved(1);
  MoveFrame ex = ExportSent(1, 31 * kMs);
  MoveFrame exported = ExportedBy(ex, 1);
  MoveActions a;
  /* From D, or an import, while the export through S is out. */
  EXPECT_EQ(Return(exported, kD, 32 * kMs, &a), FrameVerdict::kUnexpected);
  MoveFrame as_import = exported;
  as_import.kind = MoveKind::kImport;
  EXPECT_EQ(Return(as_import, kS, 32 * kMs, &a), FrameVerdict::kUnexpected);
  EXPECT_TRUE(a.empty());
  ASSERT_EQ(Return(exported, kS, 32 * kMs, &a), FrameVerdict::kTaken);
  ASSERT_EQ(a.size(), 1u);
  /* The same export again (a duplicate) while the import is out. */
  a.clear();
  EXPECT_EQ(Return(exported, kS, 33 * kMs, &a), FrameVerdict::kUnexpected);
  /* A frame for a flow that is not moving; bytes that are no frame. */
  MoveFrame other;
  other.flow = other.cur = ToMoveKey(Flow(2));
  EXPECT_EQ(Return(other, kS, 33 * kMs, &a), FrameVerdict::kUnknownFlow);
  const uint8_t junk[40] = {'K', 'M', 9};
  EXPECT_EQ(m.OnFrame(junk, sizeof(junk), kS, 33 * kMs, &a), FrameVerdict::kMalformed);
  EXPECT_TRUE(a.empty());
  /* A frame whose VLAN was not seen (0) is taken by its kind. */
  MoveFrame im = exported;
  im.kind = MoveKind::kImport;
  ASSERT_EQ(Return(im, 0, 34 * kMs, &a), FrameVerdict::kTaken);
  EXPECT_EQ(Kinds(a), std::vector<Kind>{Kind::kInstall});
}

TEST_F(FlowMoverTest, AFlowMovingAlreadyIsBusy) {
  MoveActions a;
  m.Begin(kMove, Flow(1), kS, kD, 0, &a);
  a.clear();
  m.Begin(kMove + 1, Flow(1), kS, kD, kMs, &a);
  ASSERT_EQ(Kinds(a), std::vector<Kind>{Kind::kResult});
  EXPECT_EQ(a[0].result.failure, MoveFailure::kBusy);
  EXPECT_EQ(a[0].result.move, kMove + 1);
  EXPECT_EQ(m.flows(), 1u);
}

TEST_F(FlowMoverTest, HoldsAreBoundedPerFlowAndInAll) {
  BeginRemoved(1);
  BeginRemoved(2);
  for (uintptr_t p = 0; p < 8; p++) ASSERT_EQ(m.OnPacket(Flow(1), P(100 + p), 2 * kMs), HoldVerdict::kHeld);
  EXPECT_EQ(m.OnPacket(Flow(1), P(108), 2 * kMs), HoldVerdict::kFull);
  for (uintptr_t p = 0; p < 4; p++) ASSERT_EQ(m.OnPacket(Flow(2), P(200 + p), 2 * kMs), HoldVerdict::kHeld);
  EXPECT_EQ(m.OnPacket(Flow(2), P(204), 2 * kMs), HoldVerdict::kFull);
  EXPECT_EQ(m.held(), 12u);
}

/* Many flows at once, their frames coming back out of order, packets of
 * every flow arriving throughout: each flow ends once, with every packet it
 * held, in arrival order, on the side its result names. */
TEST_F(FlowMoverTest, ABatchOfFlowsEachEndsOnceWithItsPacketsInOrder) {
  MoverConfig c = Config();
  c.hold_per_flow = 64;
  c.hold_max = 64 * 200;
  FlowMover big(c);
  constexpr uint16_t kFlows = 200;
  MoveActions a;
  for (uint16_t i = 0; i < kFlows; i++) big.Begin(kMove, Flow(i), kS, kD, 0, &a);
  ASSERT_EQ(a.size(), kFlows);
  std::vector<std::vector<Packet>> sent(kFlows);
  uintptr_t next = 1;
  auto traffic = [&](uint64_t now) {
    for (uint16_t i = 0; i < kFlows; i++) {
      if (!big.moving(Flow(i))) continue;
      Packet p = P(next++);
      if (big.OnPacket(Flow(i), p, now) == HoldVerdict::kHeld) sent[i].push_back(p);
    }
  };
  std::vector<std::vector<Packet>> released(kFlows);
  std::vector<int> results(kFlows, 0);
  std::vector<MoveFailure> failure(kFlows);
  std::vector<uint16_t> side(kFlows);
  std::vector<std::vector<uint8_t>> frames;
  uint64_t now = kMs;
  auto take = [&](MoveActions* acts) {
    for (MoveAction& x : *acts) {
      const uint16_t i = x.key.src_port;
      switch (x.kind) {
        case Kind::kSendFrame: {
          MoveFrame f = Decode(x.body);
          if (f.kind == MoveKind::kExport) f = ExportedBy(f, i);
          if (i % 10 == 3 && f.kind == MoveKind::kImport && x.vlan == kD) f.status = MoveStatus::kRefused;
          frames.push_back(Encode(f));
          break;
        }
        case Kind::kInstall:
          big.OnInstalled(x.key, i % 10 != 7, now, &a);
          break;
        case Kind::kRelease:
          released[i] = x.packets;
          side[i] = x.vlan;
          break;
        case Kind::kResult:
          results[i]++;
          failure[i] = x.result.failure;
          break;
        default:
          break;
      }
    }
    acts->clear();
  };
  a.clear();
  for (uint16_t i = 0; i < kFlows; i++) big.OnRuleRemoved(Flow(i), true, now, &a);
  for (int round = 0; round < 20 && big.active(); round++) {
    now += 5 * kMs;
    traffic(now);
    big.Poll(now, &a);
    /* Installs answer into |a| while it is walked: take what they add too. */
    for (size_t guard = 0; !a.empty() && guard < 10; guard++) {
      MoveActions batch;
      batch.swap(a);
      take(&batch);
    }
    /* Frames come back in reverse order of sending. */
    std::vector<std::vector<uint8_t>> back;
    back.swap(frames);
    std::reverse(back.begin(), back.end());
    for (const auto& b : back) {
      ASSERT_EQ(big.OnFrame(b.data(), b.size(), 0, now, &a), FrameVerdict::kTaken);
    }
    traffic(now + kMs);
    for (size_t guard = 0; !a.empty() && guard < 10; guard++) {
      MoveActions batch;
      batch.swap(a);
      take(&batch);
    }
  }
  EXPECT_FALSE(big.active());
  EXPECT_EQ(big.held(), 0u);
  for (uint16_t i = 0; i < kFlows; i++) {
    ASSERT_EQ(results[i], 1) << "flow " << i;
    EXPECT_EQ(released[i], sent[i]) << "flow " << i;
    EXPECT_FALSE(sent[i].empty());
    const MoveFailure want = i % 10 == 3 ? MoveFailure::kRefused : i % 10 == 7 ? MoveFailure::kRule : MoveFailure::kNone;
    EXPECT_EQ(failure[i], want) << "flow " << i;
    EXPECT_EQ(side[i], want == MoveFailure::kNone ? kD : kS) << "flow " << i;
  }
}

}  // namespace
}  // namespace keel::ingress
