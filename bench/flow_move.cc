/* SPDX-License-Identifier: Apache-2.0 */
/*
 * keel-flowmove-bench: what moving one NAT flow's state costs a chain
 * position (issue 37), in TSC cycles on this machine. NAT instance A
 * translates --flows UDP flows (through ProcessBatch, its flow table
 * mirrored as with Redis on); then each flow moves to a fresh instance B:
 *
 *   export: what A's position does with the export frame (MoveAt): decode
 *           it, ExportAt (NAT's ExportFlow takes both keys of the mapping
 *           and forgets them), encode it;
 *   import: what B's position does with the import frame (MoveAt): decode
 *           it, ImportAt (NAT's ImportFlow checks and puts both keys), encode it.
 *
 * ExportAt and ImportAt alone are timed too (nf_*). The mirror hand-over
 * (FlowState::Sync) runs between moves, untimed, as it runs between batches.
 * Percentiles over every move of every round; rdtsc pairs included.
 *
 * Usage: keel-flowmove-bench [--out FILE] [--flows N] [--rounds N]
 */
#include <arpa/inet.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "keel/flow_move.h"
#include "keel/monitor.h"
#include "keel/nf.h"

namespace {

constexpr uint16_t kHeadroom = 128;
constexpr char kNatConfig[] = R"({"external_ip":"198.18.100.1","port_range":[1024,65535]})";

/* A 42-byte Ethernet/IPv4/UDP frame of flow |i| (checksums left zero: NAT
 * patches them incrementally and nothing here checks them). */
std::vector<uint8_t> Frame(uint32_t i) {
  std::vector<uint8_t> f(kHeadroom + 42, 0);
  uint8_t* p = f.data() + kHeadroom;
  p[12] = 0x08;
  p[14] = 0x45;
  p[17] = 28; /* total length */
  p[22] = 64;
  p[23] = keel::kProtoUdp;
  uint32_t src = htonl(0xc6120000u | (i >> 12)), dst = htonl(0xc6130001u);
  std::memcpy(p + 26, &src, 4);
  std::memcpy(p + 30, &dst, 4);
  uint16_t sport = htons(static_cast<uint16_t>(10000 + (i & 0xfff))), dport = htons(53), ulen = htons(8);
  std::memcpy(p + 34, &sport, 2);
  std::memcpy(p + 36, &dport, 2);
  std::memcpy(p + 38, &ulen, 2);
  return f;
}

keel::FlowKey KeyOf(uint32_t i) {
  keel::FlowKey k;
  k.src_ip = 0xc6120000u | (i >> 12);
  k.dst_ip = 0xc6130001u;
  k.src_port = static_cast<uint16_t>(10000 + (i & 0xfff));
  k.dst_port = 53;
  k.proto = keel::kProtoUdp;
  return k;
}

void Drain(keel::NF* nf) {
  std::vector<keel::StateRecord> dirty, pulled;
  std::vector<keel::FlowKey> pulls;
  nf->state().Sync(true);
  nf->state().Exchange(&dirty, &pulls, &pulled);
}

double Pct(std::vector<uint64_t> v, double p) {
  std::sort(v.begin(), v.end());
  return static_cast<double>(v[static_cast<size_t>(p * static_cast<double>(v.size() - 1))]);
}

[[noreturn]] void Fail(const std::string& why) {
  std::fprintf(stderr, "keel-flowmove-bench: %s\n", why.c_str());
  std::exit(1);
}

}  // namespace

int main(int argc, char** argv) {
  std::string out;
  int flows = 20000, rounds = 5;
  for (int i = 1; i < argc; i++) {
    if (!std::strcmp(argv[i], "--out") && i + 1 < argc) {
      out = argv[++i];
    } else if (!std::strcmp(argv[i], "--flows") && i + 1 < argc) {
      flows = std::clamp(std::atoi(argv[++i]), 1, 60000);
    } else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: keel-flowmove-bench [--out FILE] [--flows N] [--rounds N]\n");
      return 2;
    }
  }
  const keel::MovePosition pos{0, keel::NfId("nat")};
  std::vector<uint64_t> exp, imp, nf_exp, nf_imp;
  size_t frame_bytes = 0;
  for (int r = 0; r < rounds; r++) {
    auto a = keel::MakeNf("nat", kNatConfig), b = keel::MakeNf("nat", kNatConfig);
    a->state().set_mirrored(true);
    b->state().set_mirrored(true);
    for (int i = 0; i < flows; i++) {
      std::vector<uint8_t> f = Frame(static_cast<uint32_t>(i));
      keel::Packet p;
      p.Reset(f.data(), kHeadroom, 42, static_cast<uint16_t>(f.size()));
      keel::PacketBatch batch;
      batch.Add(&p);
      a->ProcessBatch(&batch);
      if (p.dropped()) Fail("NAT dropped flow " + std::to_string(i));
    }
    Drain(a.get());
    uint8_t buf[keel::kMoveFrameMax];
    std::string err;
    for (int i = 0; i < flows; i++) {
      keel::MoveFrame f;
      f.flow = f.cur = KeyOf(static_cast<uint32_t>(i));
      size_t n = keel::EncodeMoveFrame(f, buf, sizeof buf);

      uint64_t t0 = keel::Rdtsc();
      if (!keel::DecodeMoveFrame(buf, n, &f, &err)) Fail(err);
      uint64_t t1 = keel::Rdtsc();
      keel::ExportAt(a.get(), pos, &f);
      uint64_t t2 = keel::Rdtsc();
      n = keel::EncodeMoveFrame(f, buf, sizeof buf);
      uint64_t t3 = keel::Rdtsc();
      if (f.status != keel::MoveStatus::kOk || f.records.size() != 2 || !n) Fail("export of flow " + std::to_string(i) + " failed");
      exp.push_back(t3 - t0);
      nf_exp.push_back(t2 - t1);
      frame_bytes = n;
      buf[3] = static_cast<uint8_t>(keel::MoveKind::kImport);

      t0 = keel::Rdtsc();
      if (!keel::DecodeMoveFrame(buf, n, &f, &err)) Fail(err);
      t1 = keel::Rdtsc();
      keel::ImportAt(b.get(), pos, &f, &err);
      t2 = keel::Rdtsc();
      n = keel::EncodeMoveFrame(f, buf, sizeof buf);
      t3 = keel::Rdtsc();
      if (f.status != keel::MoveStatus::kOk || !n) Fail("import of flow " + std::to_string(i) + ": " + err);
      imp.push_back(t3 - t0);
      nf_imp.push_back(t2 - t1);
      if (i % 32 == 31) {
        Drain(a.get());
        Drain(b.get());
      }
    }
    if (a->state().size() != 0 || b->state().size() != 2 * static_cast<size_t>(flows))
      Fail("after the moves A holds " + std::to_string(a->state().size()) + " keys, B " +
           std::to_string(b->state().size()));
  }
  uint64_t t0 = keel::Rdtsc(), t1 = t0;
  for (int i = 0; i < 1000; i++) t1 = keel::Rdtsc();
  const double hz = static_cast<double>(keel::TscHz());
  auto us = [hz](double cycles) { return cycles * 1e6 / hz; };
  keel::Json j = {
      {"method", std::to_string(flows) + " NAT flows a round moved one by one from instance A to a fresh B, " +
                     std::to_string(rounds) + " rounds; export = decode + ExportAt + encode at A's position, "
                     "import = decode + ImportAt + encode at B's; nf_* = ExportAt / ImportAt alone; "
                     "flow tables mirrored (hand-over untimed); rdtsc pairs included"},
      {"tsc_hz", keel::TscHz()},
      {"rdtsc_cycles", static_cast<double>(t1 - t0) / 1000.0},
      {"moves", exp.size()},
      {"nat_records_per_flow", 2},
      {"frame_bytes", frame_bytes},
      {"frame_max_bytes", keel::kMoveFrameMax},
      {"records_per_frame_max_64B", keel::kMoveMaxRecords},
      {"flows_per_frame", 1},
      {"export_cycles_p50", Pct(exp, 0.5)},
      {"export_cycles_p99", Pct(exp, 0.99)},
      {"import_cycles_p50", Pct(imp, 0.5)},
      {"import_cycles_p99", Pct(imp, 0.99)},
      {"nf_export_cycles_p50", Pct(nf_exp, 0.5)},
      {"nf_import_cycles_p50", Pct(nf_imp, 0.5)},
      {"export_us_p50", us(Pct(exp, 0.5))},
      {"import_us_p50", us(Pct(imp, 0.5))},
  };
  std::printf("%s\n", j.dump(2).c_str());
  if (!out.empty()) std::ofstream(out) << j.dump(2) << "\n";
  return 0;
}
