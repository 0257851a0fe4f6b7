/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/flow_move.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <tuple>

namespace keel {
namespace {

/* An NF whose only state is its flow table: the default ExportFlow and
 * ImportFlow hand it over. */
class TableNf : public NF {
 public:
  void Init(const Config&) override {}
  void ProcessBatch(PacketBatch*) override {}
};

/* An NF that files a flow under |keys| keys of |len| bytes each. */
class WideNf : public TableNf {
 public:
  WideNf(int keys, uint8_t len) : keys_(keys), len_(len) {}
  FlowKey Key(const FlowKey& flow, int i) const {
    FlowKey k = flow;
    k.src_port = static_cast<uint16_t>(flow.src_port + i);
    return k;
  }
  void Fill(const FlowKey& flow) {
    uint8_t v[kMaxStateValue];
    for (int i = 0; i < keys_; i++) {
      std::memset(v, i, sizeof v);
      ASSERT_TRUE(state().Update(Key(flow, i), v, len_));
    }
  }
  void ExportFlow(const FlowKey& flow, FlowExport* out) override {
    StateRecord r;
    for (int i = 0; i < keys_; i++)
      if (state().Take(Key(flow, i), &r)) out->records.push_back(r);
  }

 private:
  int keys_;
  uint8_t len_;
};

FlowKey Key(uint32_t src, uint32_t dst, uint16_t sport, uint16_t dport) {
  return FlowKey{src, dst, sport, dport, kProtoUdp};
}

const FlowKey kFlow = Key(0x0a000001, 0xcb007105, 1234, 53);

StateRecord Value(const FlowKey& k, uint8_t len, uint8_t fill) {
  StateRecord r;
  r.key = k;
  r.len = len;
  std::memset(r.data, fill, len);
  return r;
}

MoveFrame SampleFrame() {
  MoveFrame f;
  f.kind = MoveKind::kImport;
  f.flow = kFlow;
  f.cur = Key(0xc6336401, 0xcb007105, 1001, 53);
  f.records.push_back(MoveRecord{0, NfId("nat"), Value(kFlow, 8, 0xab)});
  f.records.push_back(MoveRecord{0, NfId("nat"), Value(kFlow.Reverse(), 8, 0xcd)});
  f.records.push_back(MoveRecord{2, NfId("monitor"), Value(kFlow, 0, 0)});
  f.records.push_back(MoveRecord{3, NfId("x"), Value(kFlow, kMaxStateValue, 0x11)});
  return f;
}

std::vector<uint8_t> Encode(const MoveFrame& f) {
  std::vector<uint8_t> buf(kMoveFrameMax);
  buf.resize(EncodeMoveFrame(f, buf.data(), buf.size()));
  return buf;
}

bool SameRecord(const MoveRecord& a, const MoveRecord& b) {
  return a.position == b.position && a.nf == b.nf && a.state.key == b.state.key && a.state.len == b.state.len &&
         std::memcmp(a.state.data, b.state.data, a.state.len) == 0;
}

std::string DecodeError(std::vector<uint8_t> bytes) {
  MoveFrame f;
  std::string err;
  EXPECT_FALSE(DecodeMoveFrame(bytes.data(), bytes.size(), &f, &err));
  return err;
}

TEST(FlowMove, AFrameSurvivesTheWire) {
  MoveFrame f = SampleFrame();
  std::vector<uint8_t> bytes = Encode(f);
  ASSERT_EQ(bytes.size(), kMoveHeaderBytes + 4 * kMoveRecordBytes + 8 + 8 + 0 + kMaxStateValue);
  EXPECT_EQ(bytes[0], 'K');
  EXPECT_EQ(bytes[2], 1) << "version";
  EXPECT_EQ(bytes[8], 0x0a) << "addresses big-endian";
  MoveFrame g;
  std::string err;
  ASSERT_TRUE(DecodeMoveFrame(bytes.data(), bytes.size(), &g, &err)) << err;
  EXPECT_EQ(g.kind, MoveKind::kImport);
  EXPECT_EQ(g.status, MoveStatus::kOk);
  EXPECT_TRUE(g.flow == f.flow);
  EXPECT_TRUE(g.cur == f.cur);
  ASSERT_EQ(g.records.size(), f.records.size());
  for (size_t i = 0; i < f.records.size(); i++) EXPECT_TRUE(SameRecord(g.records[i], f.records[i])) << i;
}

TEST(FlowMove, SixteenRecordsOfTheLargestValueFitAndSeventeenDoNot) {
  EXPECT_EQ(kMoveMaxRecords, 16u);
  MoveFrame f;
  for (size_t i = 0; i < kMoveMaxRecords; i++) f.records.push_back(MoveRecord{0, 1, Value(kFlow, kMaxStateValue, 1)});
  EXPECT_LE(Encode(f).size(), kMoveFrameMax);
  EXPECT_GT(Encode(f).size(), 0u);
  f.records.push_back(MoveRecord{0, 1, Value(kFlow, kMaxStateValue, 1)});
  EXPECT_EQ(Encode(f).size(), 0u) << "a frame over 1400 bytes is not written";
  uint8_t small[40];
  EXPECT_EQ(EncodeMoveFrame(SampleFrame(), small, sizeof small), 0u) << "nor one over the buffer";
}

TEST(FlowMove, DecodingNamesWhatIsWrong) {
  std::vector<uint8_t> good = Encode(SampleFrame());
  EXPECT_NE(DecodeError({good.begin(), good.begin() + 33}).find("shorter than the 34-byte header"), std::string::npos);
  std::vector<uint8_t> b = good;
  b.resize(kMoveFrameMax + 1);
  EXPECT_NE(DecodeError(b).find("longer than 1400"), std::string::npos);
  /* One byte changed: where, to what, and what the decoder says. */
  for (auto [at, value, want] : {
           std::tuple{size_t{1}, uint8_t{'X'}, "bad magic"},
           {2, 2, "version 2, expected 1"},
           {3, 3, "kind 3"},
           {4, 4, "unknown status 4"},
           {7, 1, "reserved"},
           {6, 5, "record 4 is cut short"},
           {6, 3, "83 bytes after the last record"},
           {kMoveHeaderBytes + kMoveRecordBytes - 1, kMaxStateValue + 1, "65-byte value"},
       }) {
    b = good;
    b[at] = value;
    EXPECT_NE(DecodeError(b).find(want), std::string::npos) << "byte " << at << " = " << int{value};
  }
  b = good;
  b.pop_back();
  EXPECT_NE(DecodeError(b).find("record 3's value is cut short"), std::string::npos);
}

/* Garbage, and valid frames with bytes changed, never crash the decoder,
 * and what it accepts it writes back byte for byte. */
TEST(FlowMove, RandomBytesNeverCrashTheDecoder) {
  std::mt19937 rng(37);
  std::vector<uint8_t> good = Encode(SampleFrame());
  size_t accepted = 0;
  for (int i = 0; i < 200000; i++) {
    std::vector<uint8_t> b;
    if (i % 2) {
      b.resize(rng() % (kMoveFrameMax + 64));
      for (uint8_t& x : b) x = static_cast<uint8_t>(rng());
      if (b.size() >= 3 && i % 4 == 1) b[0] = 'K', b[1] = 'M', b[2] = 1;
    } else {
      b = good;
      for (int n = 1 + rng() % 4; n > 0; n--) b[rng() % b.size()] = static_cast<uint8_t>(rng());
      if (rng() % 4 == 0) b.resize(rng() % (b.size() + 1));
    }
    MoveFrame f;
    std::string err;
    if (!DecodeMoveFrame(b.data(), b.size(), &f, &err)) {
      EXPECT_FALSE(err.empty());
      continue;
    }
    accepted++;
    ASSERT_EQ(Encode(f), b) << "input " << i;
  }
  EXPECT_GT(accepted, 0u) << "some mutations stay valid";
}

TEST(FlowMove, TheDefaultExportTakesTheFlowBothWaysAndForgetsItInTheStore) {
  TableNf s, d;
  s.state().set_mirrored(true);
  d.state().set_mirrored(true);
  FlowKey other = Key(0x0a000002, 0xcb007105, 1234, 53);
  ASSERT_TRUE(s.state().Update(kFlow, Value(kFlow, 4, 1).data, 4));
  ASSERT_TRUE(s.state().Update(kFlow.Reverse(), Value(kFlow, 6, 2).data, 6));
  ASSERT_TRUE(s.state().Update(other, Value(other, 4, 3).data, 4));
  std::vector<StateRecord> out, pulled;
  std::vector<FlowKey> pulls;
  s.state().Sync(true);
  s.state().Exchange(&out, &pulls, &pulled);

  MoveFrame f;
  f.flow = f.cur = kFlow;
  ExportAt(&s, MovePosition{1, NfId("t")}, &f);
  ASSERT_EQ(f.status, MoveStatus::kOk);
  ASSERT_EQ(f.records.size(), 2u);
  EXPECT_TRUE(f.records[0].state.key == kFlow);
  EXPECT_TRUE(f.records[1].state.key == kFlow.Reverse());
  EXPECT_EQ(f.records[1].position, 1u);
  EXPECT_EQ(f.records[1].nf, NfId("t"));
  EXPECT_TRUE(f.cur == kFlow) << "an NF that rewrites nothing leaves the flow as it is";
  EXPECT_EQ(s.state().size(), 1u) << "the other flow stays";
  out.clear();
  s.state().Sync(true);
  s.state().Exchange(&out, &pulls, &pulled);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].len + out[1].len, 0) << "both deleted from the store";

  f.kind = MoveKind::kImport;
  std::string err;
  ImportAt(&d, MovePosition{0, NfId("u")}, &f, &err);
  EXPECT_EQ(d.state().size(), 0u) << "records of another position are not this one's";
  ImportAt(&d, MovePosition{1, NfId("t")}, &f, &err);
  ASSERT_EQ(f.status, MoveStatus::kOk) << err;
  uint8_t v[8];
  ASSERT_TRUE(d.state().Read(kFlow.Reverse(), v, 6));
  EXPECT_EQ(v[5], 2);
  out.clear();
  d.state().Sync(true);
  d.state().Exchange(&out, &pulls, &pulled);
  EXPECT_EQ(out.size(), 2u) << "written to the destination's store";
}

TEST(FlowMove, RecordsOfAnotherNfAreRefused) {
  TableNf d;
  MoveFrame f = SampleFrame();
  std::string err;
  ImportAt(&d, MovePosition{0, NfId("lb")}, &f, &err);
  EXPECT_EQ(f.status, MoveStatus::kRefused);
  EXPECT_NE(err.find("another NF"), std::string::npos);
  EXPECT_EQ(d.state().size(), 0u);
  /* A failed frame passes later positions untouched. */
  ImportAt(&d, MovePosition{2, NfId("monitor")}, &f, &err);
  EXPECT_EQ(d.state().size(), 0u);
}

TEST(FlowMove, AFullTableRefusesTheImportAndKeepsWhatItHad) {
  TableNf d;
  d.state().set_limits(FlowLimits{2, 0});
  FlowKey held = Key(9, 9, 9, 9);
  ASSERT_TRUE(d.state().Update(held, Value(held, 1, 7).data, 1));
  ASSERT_TRUE(d.state().Update(kFlow, Value(kFlow, 1, 7).data, 1));
  MoveFrame f;
  f.kind = MoveKind::kImport;
  f.records.push_back(MoveRecord{0, NfId("t"), Value(kFlow, 2, 5)});
  f.records.push_back(MoveRecord{0, NfId("t"), Value(kFlow.Reverse(), 2, 5)});
  std::string err;
  ImportAt(&d, MovePosition{0, NfId("t")}, &f, &err);
  EXPECT_EQ(f.status, MoveStatus::kRefused);
  EXPECT_NE(err.find("flow table full"), std::string::npos) << err;
  StateRecord r;
  ASSERT_TRUE(d.state().Peek(kFlow, &r));
  EXPECT_EQ(r.len, 1u) << "the overwritten value is back";
  EXPECT_EQ(r.data[0], 7);
  EXPECT_TRUE(d.state().Peek(held, &r));
  EXPECT_FALSE(d.state().Peek(kFlow.Reverse(), &r));
}

TEST(FlowMove, AFlowWhoseStateDoesNotFitFailsAndStaysWhereItWas) {
  WideNf fits(16, kMaxStateValue), wide(17, kMaxStateValue);
  fits.Fill(kFlow);
  wide.Fill(kFlow);
  MoveFrame f;
  f.flow = f.cur = kFlow;
  ExportAt(&fits, MovePosition{0, 1}, &f);
  ASSERT_EQ(f.status, MoveStatus::kOk);
  EXPECT_EQ(f.records.size(), 16u);
  EXPECT_EQ(fits.state().size(), 0u);

  f = MoveFrame{};
  f.flow = f.cur = kFlow;
  ExportAt(&wide, MovePosition{4, 1}, &f);
  EXPECT_EQ(f.status, MoveStatus::kNoRoom);
  EXPECT_EQ(f.failed_position, 4u);
  EXPECT_TRUE(f.records.empty()) << "nothing truncated into the frame";
  EXPECT_EQ(wide.state().size(), 17u) << "the NF keeps the flow";
  EXPECT_GT(Encode(f).size(), 0u) << "the failed frame still goes back to the ingress";
}

TEST(FlowMove, StateDeclarations) {
  Json args = Json::parse(R"([{"name": "per_flow", "type": "boolean", "default": false, "doc": "d"}])");
  auto problem = [&](const char* decl) { return CheckStateDecl(Json::parse(decl), args); };
  EXPECT_EQ(problem(R"({"scope": "per-flow", "doc": "x"})"), "");
  EXPECT_EQ(problem(R"({"scope": "global", "doc": "x", "per_flow_if": {"per_flow": true}})"), "");
  for (auto [decl, want] : {
           std::pair{R"({"scope": "mine", "doc": "x"})", "'scope' must be"},
           {R"({"scope": "global"})", "'doc'"},
           {R"({"scope": "global", "doc": "x", "when": 1})", "unknown key 'when'"},
           {R"({"scope": "global", "doc": "x", "per_flow_if": {"rate": 1}})", "'rate', which is not an argument"},
           {R"({"scope": "per-flow", "doc": "x", "per_flow_if": {"per_flow": true}})", "for scope global"},
       })
    EXPECT_NE(problem(decl).find(want), std::string::npos) << decl << ": " << problem(decl);

  Json cond = Json::parse(R"({"scope": "global", "doc": "x", "per_flow_if": {"per_flow": true}})");
  EXPECT_TRUE(StateMovable(Json::parse(R"({"scope": "per-flow"})"), args, Json::object()));
  EXPECT_FALSE(StateMovable(Json::parse(R"({"scope": "global", "doc": "x"})"), args, Json::object()));
  EXPECT_FALSE(StateMovable(cond, args, Json::object())) << "the default is false";
  EXPECT_FALSE(StateMovable(cond, args, Json::parse(R"({"per_flow": false})")));
  EXPECT_TRUE(StateMovable(cond, args, Json::parse(R"({"per_flow": true})")));
}

TEST(FlowMove, APositionWorksOnTheFrameInPlace) {
  TableNf s, d;
  ASSERT_TRUE(s.state().Update(kFlow, Value(kFlow, 8, 9).data, 8));
  MoveFrame f;
  f.flow = f.cur = kFlow;
  uint8_t buf[kMoveFrameMax];
  size_t len = EncodeMoveFrame(f, buf, sizeof buf);
  std::string err;
  ASSERT_TRUE(MoveAt(&s, MovePosition{0, 7}, buf, &len, &err)) << err;
  EXPECT_EQ(len, kMoveHeaderBytes + kMoveRecordBytes + 8);
  EXPECT_EQ(s.state().size(), 0u);
  buf[3] = static_cast<uint8_t>(MoveKind::kImport);
  ASSERT_TRUE(MoveAt(&d, MovePosition{0, 7}, buf, &len, &err)) << err;
  EXPECT_EQ(d.state().size(), 1u);
  ASSERT_TRUE(MoveAt(&d, MovePosition{0, 8}, buf, &len, &err)) << "a refusal travels in the frame";
  ASSERT_TRUE(DecodeMoveFrame(buf, len, &f, &err));
  EXPECT_EQ(f.status, MoveStatus::kRefused);
  buf[0] = 'X';
  EXPECT_FALSE(MoveAt(&d, MovePosition{0, 7}, buf, &len, &err)) << "not a frame: the caller drops it";
  EXPECT_NE(err.find("bad magic"), std::string::npos);
}

TEST(FlowMove, AFailedExportGoesBackAsAnImportThatMakesTheSourceWhole) {
  /* Position 0 hands its records over, position 1 keeps global state: the
   * export fails there; the ingress sends the frame back as an import. */
  TableNf s0, s1;
  ASSERT_TRUE(s0.state().Update(kFlow, Value(kFlow, 8, 3).data, 8));
  MoveFrame f;
  f.flow = f.cur = kFlow;
  std::vector<uint8_t> body = Encode(f);
  const uint8_t mac[6] = {2, 0, 0, 0, 0, 1};
  uint8_t frame[inband::kMoveFrameMaxLen];
  ASSERT_GT(inband::WriteMoveFrame(frame, sizeof frame, mac, mac, inband::Type::kExportState, body.data(), body.size()),
            0u);
  inband::Type type;
  size_t at = 0, n = 0;
  ASSERT_EQ(inband::ParseMoveFrame(frame, sizeof frame, &type, &at, &n), inband::Malformed::kNone);
  uint8_t* b = frame + at + inband::kHeaderLen;
  std::string err;
  ASSERT_TRUE(MoveAt(&s0, MovePosition{0, 7}, b, &n, &err)) << err;
  inband::SetMoveHeader(frame + at, type, n); /* as the instance does */
  b[kMoveStatusAt] = static_cast<uint8_t>(MoveStatus::kGlobal); /* as position 1 would set it */
  b[kMoveFailedAt] = 1;
  EXPECT_EQ(s0.state().size(), 0u);

  SetMoveLeg(frame + at, MoveKind::kImport);
  ASSERT_EQ(inband::ParseMoveFrame(frame, sizeof frame, &type, &at, &n), inband::Malformed::kNone);
  EXPECT_EQ(type, inband::Type::kImportState);
  ASSERT_TRUE(DecodeMoveFrame(b, n, &f, &err)) << err;
  EXPECT_EQ(f.kind, MoveKind::kImport);
  EXPECT_EQ(f.status, MoveStatus::kOk);
  EXPECT_EQ(f.failed_position, 0u);
  EXPECT_EQ(f.records.size(), 1u) << "the records stay";
  ASSERT_TRUE(MoveAt(&s0, MovePosition{0, 7}, b, &n, &err)) << err;
  StateRecord back;
  ASSERT_TRUE(s0.state().Peek(kFlow, &back)) << "position 0 took its state back";
  EXPECT_EQ(std::memcmp(back.data, Value(kFlow, 8, 3).data, 8), 0);

  SetMoveLeg(frame + at, MoveKind::kExport);
  ASSERT_EQ(inband::ParseMoveFrame(frame, sizeof frame, &type, &at, &n), inband::Malformed::kNone);
  EXPECT_EQ(type, inband::Type::kExportState);
  EXPECT_EQ(b[kMoveKindAt], static_cast<uint8_t>(MoveKind::kExport));
}

}  // namespace
}  // namespace keel
