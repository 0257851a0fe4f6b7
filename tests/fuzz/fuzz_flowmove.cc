/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer harness: the flow move frame (keel/flow_move.h, issue 37) as it
 * arrives from the wire, and every library NF's ImportFlow and ExportFlow on
 * the records in it. The decoder must refuse what is not a well-formed frame
 * without reading past the input, and write back byte for byte what it
 * accepts. An accepted frame is then imported as if it came through a chain
 * of all the NFs (each record is routed to the position its position byte
 * names, modulo the chain's length), and the flow it names is exported
 * again, so the NFs' tables neither grow without bound nor crash on values
 * no exporter would write. Input: the frame. */
#include <memory>
#include <string>
#include <vector>

#include "fuzz_nfs.h"
#include "fuzz_util.h"
#include "keel/flow_move.h"
#include "keel/nf.h"

namespace {

struct Position {
  keel::MovePosition pos;
  std::unique_ptr<keel::NF> nf;
};

std::vector<Position>& Chain() {
  static std::vector<Position>* chain = [] {
    auto* v = new std::vector<Position>;
    std::vector<std::pair<std::string, std::string>> nfs(keel::fuzz::NfConfigs().begin(),
                                                         keel::fuzz::NfConfigs().end());
    nfs.push_back({"limiter", R"({"rate_bps":1000000,"burst_bytes":15000,"per_flow":true})"});
    for (const auto& [name, config] : nfs) {
      if (name == "ipv4fwd") continue; /* needs DPDK's EAL; stateless */
      auto index = static_cast<uint8_t>(v->size());
      v->push_back({keel::MovePosition{index, keel::NfId(name)}, keel::MakeNf(name, config)});
    }
    return v;
  }();
  return *chain;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  keel::MoveFrame f;
  std::string err;
  if (!keel::DecodeMoveFrame(data, size, &f, &err)) {
    KEEL_FUZZ_CHECK(!err.empty());
    return 0;
  }
  std::vector<uint8_t> again(keel::kMoveFrameMax);
  KEEL_FUZZ_CHECK(keel::EncodeMoveFrame(f, again.data(), again.size()) == size);
  KEEL_FUZZ_CHECK(std::memcmp(again.data(), data, size) == 0);

  std::vector<Position>& chain = Chain();
  for (keel::MoveRecord& r : f.records) {
    r.position = static_cast<uint8_t>(r.position % chain.size());
    r.nf = chain[r.position].pos.nf;
  }
  f.kind = keel::MoveKind::kImport;
  f.status = keel::MoveStatus::kOk;
  for (Position& p : chain) keel::ImportAt(p.nf.get(), p.pos, &f, &err);

  keel::MoveFrame out;
  out.flow = out.cur = f.flow;
  for (Position& p : chain) keel::ExportAt(p.nf.get(), p.pos, &out);
  KEEL_FUZZ_CHECK(out.EncodedSize() <= keel::kMoveFrameMax);
  for (const keel::MoveRecord& r : f.records) {
    keel::FlowExport rest; /* what the flow's export did not take, so no table fills up */
    chain[r.position].nf->ExportFlow(r.state.key, &rest);
  }
  return 0;
}
