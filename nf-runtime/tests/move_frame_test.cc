/* SPDX-License-Identifier: Apache-2.0 */
/* A flow move's control frames through a chain instance (issue 37, steps 4
 * and 6 of the move protocol): position 0 recognises an EXPORT_STATE or
 * IMPORT_STATE frame, every position runs MoveAt on it in the chain buffer
 * instead of its NF, and the instance sends it out again, marked. Real NFs
 * (monitor, then NAT) over a loopback net_ring port, each position its own
 * engine over the chain buffer as its own keel-nf process has, or the whole
 * chain in one engine as keel-chain runs it. */
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "keel/chain.h"
#include "keel/engine.h"
#include "keel/flow_move.h"
#include "keel/inband.h"
#include "keel/port.h"
#include "udp_frame.h"

namespace keel {
namespace {

constexpr uint16_t kPort = 0;
constexpr uint32_t kExternalIp = 0xC6126401; /* 198.18.100.1 */
const char* const kNatConfig = R"({"external_ip":"198.18.100.1","port_range":[20000,20010]})";
const std::vector<NfSpec> kChain = {{"monitor", ""}, {"nat", kNatConfig}};

std::string setup_err;

rte_mempool* Pool() {
  static rte_mempool* pool = []() -> rte_mempool* {
    std::string prefix = "--file-prefix=keel-move-frame-test-" + std::to_string(getpid());
    if (!EalInit({"move_frame_test", "--no-pci", "--no-huge", "-m", "128", "--log-level=error", "--no-telemetry",
                  "--vdev=net_ring0", prefix},
                 &setup_err))
      return nullptr;
    rte_mempool* p = MbufPool("move_frame_test", 1023, 0, &setup_err);
    if (p && !PortInit(kPort, p, &setup_err)) return nullptr;
    return p;
  }();
  return pool;
}

FlowKey Flow(uint16_t sport) {
  FlowKey k;
  k.src_ip = 0xC6120001; /* 198.18.0.1 */
  k.dst_ip = 0xC6130001; /* 198.19.0.1 */
  k.src_port = sport;
  k.dst_port = 53;
  k.proto = 17;
  return k;
}

/* A UDP packet of |k| whose payload's first byte is |seq|, marked as the
 * ingress sends it: every packet here comes via the ingress, so position
 * 0's handover (handover.h) holds none (a flow's direct packets wait for
 * its marker once the instance has seen a marked frame). */
rte_mbuf* Udp(const FlowKey& k, uint8_t seq, bool marked = true) {
  const std::vector<uint8_t> f = UdpFrame(k.src_ip, k.dst_ip, k.src_port, k.dst_port, seq, marked);
  rte_mbuf* m = rte_pktmbuf_alloc(Pool());
  std::memcpy(rte_pktmbuf_append(m, static_cast<uint16_t>(f.size())), f.data(), f.size());
  return m;
}

/* A move frame of |type| with body |body|, as the ingress sends it. */
rte_mbuf* Frame(inband::Type type, const std::vector<uint8_t>& body) {
  const uint8_t mac[6] = {2, 0, 0, 0, 0, 9};
  uint8_t f[inband::kMoveFrameMaxLen];
  const size_t len = inband::WriteMoveFrame(f, sizeof(f), mac, mac, type, body.data(), body.size());
  EXPECT_GT(len, 0u);
  rte_mbuf* m = rte_pktmbuf_alloc(Pool());
  std::memcpy(rte_pktmbuf_append(m, static_cast<uint16_t>(len)), f, len);
  return m;
}

std::vector<uint8_t> Body(const MoveFrame& m) {
  std::vector<uint8_t> b(kMoveFrameMax);
  b.resize(EncodeMoveFrame(m, b.data(), b.size()));
  return b;
}

MoveFrame ExportOf(const FlowKey& f) {
  MoveFrame m;
  m.kind = MoveKind::kExport;
  m.flow = m.cur = f;
  return m;
}

/* What left the instance. */
struct Sent {
  std::vector<std::vector<uint8_t>> frames;
  bool IsMove(size_t i) const {
    inband::Type t;
    size_t at, n;
    return inband::ParseMoveFrame(frames[i].data(), frames[i].size(), &t, &at, &n) == inband::Malformed::kNone;
  }
  /* The move frame at |i|: decoded, its in-band type in |*type|. */
  MoveFrame Move(size_t i, inband::Type* type = nullptr) const {
    inband::Type t = inband::Type::kFlowMarker;
    size_t at = 0, n = 0;
    MoveFrame m;
    std::string err;
    EXPECT_EQ(inband::ParseMoveFrame(frames[i].data(), frames[i].size(), &t, &at, &n), inband::Malformed::kNone);
    EXPECT_EQ(at, inband::kPayloadOffset) << "it leaves marked outermost";
    EXPECT_TRUE(DecodeMoveFrame(frames[i].data() + at + inband::kHeaderLen, n, &m, &err)) << err;
    if (type) *type = t;
    return m;
  }
  /* The UDP packet at |i|: its source and destination as the NAT left them. */
  FlowKey Udp(size_t i) const {
    const uint8_t* ip = frames[i].data() + 14;
    EXPECT_EQ(inband::Get16(frames[i].data() + 12), 0x0800);
    FlowKey k;
    k.src_ip = inband::Get32(ip + 12);
    k.dst_ip = inband::Get32(ip + 16);
    k.src_port = inband::Get16(ip + 20);
    k.dst_port = inband::Get16(ip + 22);
    k.proto = ip[9];
    return k;
  }
};

/* How an instance runs its chain: one engine per position over the chain
 * buffer, as keel-nf's processes; the whole chain in one engine over it, as
 * keel-chain; or in one engine on the NIC's buffers, as a one-NF keel-nf. */
enum class Shape { kPositions, kOneProcess, kNoBuffer };

/* A chain instance on the loopback port. */
class Instance {
 public:
  explicit Instance(const std::string& name, Shape shape = Shape::kPositions,
                    const std::vector<NfSpec>& specs = kChain)
      : one_process_(shape != Shape::kPositions), buffered_(shape != Shape::kNoBuffer) {
    path_ = "/dev/shm/keel-move-frame-test-" + name + "-" + std::to_string(getpid());
    unlink(path_.c_str());
    std::string err;
    if (buffered_) {
      buf_ = PktBuf::Create(path_, kMaxBurst * 4, &err);
      EXPECT_TRUE(buf_) << err;
    }
    const size_t positions = one_process_ ? 1 : specs.size();
    for (size_t k = 0; k < positions; k++) {
      chains_.push_back(one_process_ ? std::make_unique<Chain>(specs) : std::make_unique<Chain>(std::vector{specs[k]}));
      if (k > 0) maps_.push_back(PktBuf::Open(path_, &err));
      EngineOptions o;
      o.position = static_cast<int>(k);
      o.of = static_cast<int>(positions);
      o.rx_port = o.tx_port = kPort;
      o.copy_in = buffered_;
      o.head_nfs = buffered_ ? 1 : specs.size();
      cycles_.push_back(std::make_unique<uint64_t[]>(KEEL_CYCLES_KINDS));
      engines_.push_back(std::make_unique<Engine>(chains_.back().get(), k ? nullptr : Pool(),
                                                  k ? maps_.back().get() : buf_.get(), cycles_.back().get(), o));
    }
  }
  ~Instance() {
    engines_.clear();
    maps_.clear();
    buf_.reset();
  }

  /* Sends |in| to the instance, runs each position's turn and returns what
   * the instance sent. */
  Sent Turn(std::vector<rte_mbuf*> in) {
    Sent s;
    EXPECT_EQ(rte_eth_tx_burst(kPort, 0, in.data(), static_cast<uint16_t>(in.size())), in.size());
    engines_[0]->Head(1); /* without a chain buffer, the head sends */
    if (buffered_) {
      if (one_process_)
        engines_[0]->InPlace(1, 1);
      else
        for (size_t k = 1; k < engines_.size(); k++) engines_[k]->InPlace(static_cast<uint16_t>(k), 0);
      engines_[0]->Egress();
    }
    rte_mbuf* out[64];
    const uint16_t n = rte_eth_rx_burst(kPort, 0, out, 64);
    for (uint16_t i = 0; i < n; i++) {
      const uint8_t* d = rte_pktmbuf_mtod(out[i], const uint8_t*);
      s.frames.emplace_back(d, d + rte_pktmbuf_pkt_len(out[i]));
    }
    rte_pktmbuf_free_bulk(out, n);
    return s;
  }

  /* The NF at chain place |i|. */
  NF* nf(size_t i) { return one_process_ ? chains_[0]->nf(i) : chains_[i]->nf(0); }
  /* The statistics of the process that runs chain place |i|, and of its NF. */
  Json stats(size_t i) { return engines_[one_process_ ? 0 : i]->StatsJson(); }
  Json nf_stats(size_t i) { return stats(i)["nfs"][one_process_ ? i : 0]; }

 private:
  std::string path_;
  bool one_process_;
  bool buffered_;
  std::unique_ptr<PktBuf> buf_;
  std::vector<std::unique_ptr<PktBuf>> maps_;
  std::vector<std::unique_ptr<Chain>> chains_;
  std::vector<std::unique_ptr<uint64_t[]>> cycles_;
  std::vector<std::unique_ptr<Engine>> engines_;
};

/* The flow moves from an instance of one shape to a fresh one of |to_one_process|'s. */
void MoveTheFlowWithItsNatMapping(bool from_one_process, bool to_one_process) {
  ASSERT_TRUE(Pool()) << setup_err;
  const FlowKey f = Flow(5000), other = Flow(5001);
  Instance src("src", from_one_process ? Shape::kOneProcess : Shape::kPositions);
  /* Another flow takes the NAT's first port: f's mapping is one a fresh NAT would not give. */
  Sent s = src.Turn({Udp(other, 0), Udp(f, 1), Udp(f, 2)});
  ASSERT_EQ(s.frames.size(), 3u);
  const FlowKey mapped = s.Udp(1);
  EXPECT_EQ(mapped.src_ip, kExternalIp);
  EXPECT_EQ(mapped.src_port, 20001);
  EXPECT_EQ(s.Udp(2).src_port, 20001);

  /* The export behind the flow's last packets, another flow's packet behind it. */
  const FlowKey late = Flow(5002);
  s = src.Turn({Udp(f, 3), Frame(inband::Type::kExportState, Body(ExportOf(f))), Udp(late, 4)});
  ASSERT_EQ(s.frames.size(), 3u) << "the frame comes out, in its place";
  EXPECT_EQ(s.Udp(0).src_port, 20001) << "the flow's packet ahead of the frame was translated before the export";
  ASSERT_TRUE(s.IsMove(1));
  EXPECT_EQ(s.Udp(2).src_port, 20000 + 2) << "the packet behind it passed the NAT after it";
  inband::Type type;
  MoveFrame exported = s.Move(1, &type);
  EXPECT_EQ(type, inband::Type::kExportState);
  EXPECT_EQ(exported.kind, MoveKind::kExport);
  EXPECT_EQ(exported.status, MoveStatus::kOk);
  EXPECT_TRUE(exported.flow == f);
  EXPECT_TRUE(exported.cur == mapped) << "the flow as the position after the NAT sees it";
  size_t monitor = 0, nat = 0;
  for (const MoveRecord& r : exported.records) {
    if (r.position == 0) {
      EXPECT_EQ(r.nf, NfId("monitor"));
      monitor++;
    } else {
      EXPECT_EQ(r.position, 1);
      EXPECT_EQ(r.nf, NfId("nat"));
      nat++;
    }
  }
  EXPECT_EQ(monitor, 1u) << "the monitor's counters of the flow";
  EXPECT_EQ(nat, 2u) << "both keys of the NAT's mapping";
  StateRecord gone;
  EXPECT_FALSE(src.nf(1)->state().Peek(f, &gone)) << "the source's NAT forgot the flow";
  EXPECT_EQ(src.nf_stats(1)["moves"]["exports"], 1);
  EXPECT_EQ(src.nf_stats(0)["moves"]["exports"], 1);
  EXPECT_EQ(src.nf_stats(1)["packets_in"], 5) << "the NAT never saw the frame";
  EXPECT_EQ(src.stats(0)["handover"]["move_frames"], 1);

  /* The ingress turns it into an import for the destination. */
  MoveFrame import = exported;
  import.kind = MoveKind::kImport;
  Instance dst("dst", to_one_process ? Shape::kOneProcess : Shape::kPositions);
  s = dst.Turn({Frame(inband::Type::kImportState, Body(import))});
  ASSERT_EQ(s.frames.size(), 1u);
  MoveFrame imported = s.Move(0, &type);
  EXPECT_EQ(type, inband::Type::kImportState);
  EXPECT_EQ(imported.status, MoveStatus::kOk);
  EXPECT_EQ(imported.records.size(), exported.records.size());
  EXPECT_EQ(dst.nf_stats(1)["moves"]["imports"], 1);

  /* The held packet, released to the destination by the ingress: the same mapping. */
  s = dst.Turn({Udp(f, 4)});
  ASSERT_EQ(s.frames.size(), 1u);
  EXPECT_TRUE(s.Udp(0) == mapped) << "translated exactly as on the source";
  /* A reply finds its way back. */
  FlowKey reply = mapped.Reverse();
  s = dst.Turn({Udp(reply, 5)});
  ASSERT_EQ(s.frames.size(), 1u);
  EXPECT_EQ(s.Udp(0).dst_ip, f.src_ip);
  EXPECT_EQ(s.Udp(0).dst_port, f.src_port);
}

TEST(MoveFrame, AFlowLeavesWithItsNatMappingAndTheDestinationTranslatesAsBefore) {
  MoveTheFlowWithItsNatMapping(false, false);
}

TEST(MoveFrame, KeelChainAndKeelNfInstancesExchangeFlows) {
  MoveTheFlowWithItsNatMapping(true, false);
  MoveTheFlowWithItsNatMapping(false, true);
}

TEST(MoveFrame, ARefusedImportIsReportedInTheFrameAndTheInstanceKeepsItsOwn) {
  ASSERT_TRUE(Pool()) << setup_err;
  const FlowKey f = Flow(6000);
  Instance src("src");
  Sent s = src.Turn({Udp(f, 1)});
  s = src.Turn({Frame(inband::Type::kExportState, Body(ExportOf(f)))});
  ASSERT_EQ(s.frames.size(), 1u);
  MoveFrame m = s.Move(0);
  m.kind = MoveKind::kImport;
  /* The destination gave the port to a flow of its own. */
  Instance dst("dst");
  s = dst.Turn({Udp(Flow(6001), 1)});
  ASSERT_EQ(s.Udp(0).src_port, 20000);
  s = dst.Turn({Frame(inband::Type::kImportState, Body(m))});
  ASSERT_EQ(s.frames.size(), 1u);
  MoveFrame refused = s.Move(0);
  EXPECT_EQ(refused.status, MoveStatus::kRefused);
  EXPECT_EQ(refused.failed_position, 1);
  EXPECT_EQ(dst.nf_stats(1)["moves"]["failed"], 1);
  StateRecord own;
  ASSERT_TRUE(dst.nf(1)->state().Peek(Flow(6001), &own)) << "its own mapping stays";
}

TEST(MoveFrame, MalformedFramesAreDroppedAndCountedWherever) {
  ASSERT_TRUE(Pool()) << setup_err;
  Instance in("bad");
  const FlowKey f = Flow(7000);
  in.Turn({Udp(f, 1)});
  /* Not a flow_move frame: bad magic. */
  std::vector<uint8_t> garbage = Body(ExportOf(f));
  garbage[0] = 'X';
  /* Records cut short: the count says one more than there is. */
  MoveFrame withrec = ExportOf(f);
  withrec.records.push_back(MoveRecord{0, NfId("monitor"), {}});
  std::vector<uint8_t> cut = Body(withrec);
  cut[6] = 2;
  /* In-band length longer than the frame: position 0's receive drops it. */
  rte_mbuf* longer = Frame(inband::Type::kExportState, Body(ExportOf(f)));
  inband::Put16(rte_pktmbuf_mtod(longer, uint8_t*) + inband::kPayloadOffset + 2, 1000);
  Sent s = in.Turn({Frame(inband::Type::kExportState, garbage), Frame(inband::Type::kImportState, cut), longer,
                    Udp(f, 2)});
  ASSERT_EQ(s.frames.size(), 1u) << "only the packet";
  EXPECT_FALSE(s.IsMove(0));
  EXPECT_EQ(in.stats(0)["moves"]["malformed"], 2);
  EXPECT_EQ(in.stats(0)["handover"]["inband_malformed"], 1);
  StateRecord still;
  EXPECT_TRUE(in.nf(1)->state().Peek(f, &still)) << "nothing was exported";
  EXPECT_EQ(in.nf_stats(1)["moves"]["exports"], 0);
  EXPECT_EQ(in.nf_stats(1)["packets_in"], 2) << "no frame reached the NAT";
}

TEST(MoveFrame, AOneNfInstanceMovesTheFlowAtItsHead) {
  /* keel-nf alone (a one-NF chain): no chain buffer, the head sends. */
  ASSERT_TRUE(Pool()) << setup_err;
  const FlowKey f = Flow(8000);
  Instance in("solo", Shape::kNoBuffer, {{"nat", kNatConfig}});
  Sent s = in.Turn({Udp(f, 1)});
  ASSERT_EQ(s.frames.size(), 1u);
  const FlowKey mapped = s.Udp(0);
  s = in.Turn({Frame(inband::Type::kExportState, Body(ExportOf(f)))});
  ASSERT_EQ(s.frames.size(), 1u);
  MoveFrame m = s.Move(0);
  EXPECT_EQ(m.records.size(), 2u);
  EXPECT_TRUE(m.cur == mapped);
  StateRecord gone;
  EXPECT_FALSE(in.nf(0)->state().Peek(f, &gone));
  EXPECT_EQ(in.nf_stats(0)["moves"]["exports"], 1);
}

}  // namespace
}  // namespace keel
