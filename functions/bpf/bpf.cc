/* SPDX-License-Identifier: Apache-2.0 */
/*
 * BPF: classifies packets with pcap-filter expressions (Lemur's Match NF,
 * Galleon's BPF test NF). With action "pass" a packet that matches any
 * filter passes and the others are dropped; with action "drop" a packet
 * that matches any filter is dropped and the others pass. Filters are
 * compiled by libpcap for Ethernet (DLT_EN10MB) and run on the frame bytes
 * with bpf_filter.
 *
 * libpcap's interpreter costs tens of cycles per instruction, so bpf_filter
 * runs only where it may accept. Each program has a guard: the loads and
 * tests that every accepting run passes before the program first branches
 * two ways, e.g. the EtherType and destination address of "dst host A and
 * udp port N". A packet that fails the guard is one the program rejects.
 * The field most guards test for equality (the destination address above)
 * indexes the programs by the value they require, so a packet is only
 * tried against the programs that want its value of that field and those
 * that do not test it. As the verdict is "any filter matches", the order in
 * which filters are tried does not change it.
 */
#include <pcap/pcap.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "keel/nf.h"

namespace keel {
namespace {

/* A big-endian load of |size| (1, 2 or 4) bytes at |off| of the frame. */
struct Field {
  uint32_t off = 0;
  uint32_t size = 0;

  bool operator<(const Field& o) const { return off != o.off ? off < o.off : size < o.size; }

  /* False if the field lies past |len|, which makes bpf_filter reject. */
  bool Load(const uint8_t* d, uint32_t len, uint32_t* v) const {
    if (off + size > len) return false;
    const uint8_t* b = d + off;
    *v = size == 1 ? b[0]
       : size == 2 ? uint32_t{b[0]} << 8 | b[1]
                   : uint32_t{b[0]} << 24 | uint32_t{b[1]} << 16 | uint32_t{b[2]} << 8 | b[3];
    return true;
  }
};

/* One test of a guard: (field & mask) == value must be |equal|. */
struct GuardTest {
  Field field;
  uint32_t mask;
  uint32_t value;
  bool equal;

  bool Passes(const uint8_t* d, uint32_t len) const {
    uint32_t v;
    return field.Load(d, len, &v) && ((v & mask) == value) == equal;
  }
};

struct Program {
  bpf_program bpf;
  std::vector<GuardTest> guard;
};

bool IsReject(const bpf_program& p, uint32_t pc) {
  return pc < p.bf_len && p.bf_insns[pc].code == (BPF_RET | BPF_K) && p.bf_insns[pc].k == 0;
}

/* The guard of |p|: follows the program from its entry while it is a chain
 * of absolute loads and jumps with one side that rejects. */
std::vector<GuardTest> ExtractGuard(const bpf_program& p) {
  std::vector<GuardTest> guard;
  Field a;
  uint32_t pc = 0;
  while (pc < p.bf_len) {
    const bpf_insn& in = p.bf_insns[pc];
    if (BPF_CLASS(in.code) == BPF_LD && BPF_MODE(in.code) == BPF_ABS && in.k < 0x10000) {
      uint16_t sz = BPF_SIZE(in.code);
      a = {in.k, sz == BPF_W ? 4u : sz == BPF_H ? 2u : sz == BPF_B ? 1u : 0u};
      if (a.size == 0) break;
      pc++;
      continue;
    }
    bool jeq = in.code == (BPF_JMP | BPF_JEQ | BPF_K);
    bool jset = in.code == (BPF_JMP | BPF_JSET | BPF_K);
    if (a.size == 0 || !(jeq || jset)) break;
    uint32_t t = pc + 1 + in.jt, f = pc + 1 + in.jf;
    bool t_rejects = IsReject(p, t);
    if (t_rejects == IsReject(p, f)) break;
    /* jeq is true when A == k, jset when (A & k) != 0. */
    if (jeq)
      guard.push_back({a, ~uint32_t{0}, in.k, !t_rejects});
    else
      guard.push_back({a, in.k, 0, t_rejects});
    pc = t_rejects ? f : t;
  }
  return guard;
}

/* The value |g| requires of |f|, if it is an exact equality test on it. */
bool RequiredValue(const std::vector<GuardTest>& g, const Field& f, uint32_t* v) {
  for (const GuardTest& t : g) {
    if (t.field.off == f.off && t.field.size == f.size && t.mask == ~uint32_t{0} && t.equal) {
      *v = t.value;
      return true;
    }
  }
  return false;
}

class Bpf : public NF {
 public:
  ~Bpf() override {
    for (Program& p : progs_) pcap_freecode(&p.bpf);
  }

  void Init(const Config& config) override {
    config.CheckObject({"filters", "action"});
    if (auto c = config.Get("action")) {
      std::string a = c->String();
      if (a != "pass" && a != "drop") c->Fail("'" + a + "' is not pass or drop");
      drop_on_match_ = a == "drop";
    }
    std::unique_ptr<pcap_t, decltype(&pcap_close)> dead(pcap_open_dead(DLT_EN10MB, 65535),
                                                        &pcap_close);
    if (!dead) config.Fail("libpcap cannot open a dead handle");
    std::vector<Config> filters = config["filters"].Array();
    progs_.reserve(filters.size());
    for (const Config& f : filters) {
      std::string expr = f.String();
      Program prog;
      if (pcap_compile(dead.get(), &prog.bpf, expr.c_str(), 1, PCAP_NETMASK_UNKNOWN) != 0)
        f.Fail("'" + expr + "' does not compile: " + pcap_geterr(dead.get()));
      prog.guard = ExtractGuard(prog.bpf);
      progs_.push_back(std::move(prog));
    }
    BuildIndex();
  }

  void ProcessBatch(PacketBatch* batch) override {
    for (Packet* p : *batch)
      if (Matches(p->data(), p->len()) == drop_on_match_) p->Drop();
  }

  /* How the filters are indexed: {"index_offset":N,"index_size":N,
   * "indexed_filters":N}, offset and size 0 when there is no index. */
  Json Stats() const override {
    size_t indexed = progs_.size() - unindexed_.size();
    return {{"index_offset", key_.off}, {"index_size", key_.size}, {"indexed_filters", indexed}};
  }

 private:
  /* Picks the field whose index leaves the fewest programs to try in the
   * worst case (the unindexed ones plus the largest bucket) and buckets the
   * programs that require a value of it. */
  void BuildIndex() {
    std::map<Field, std::map<uint32_t, size_t>> buckets;
    for (const Program& p : progs_)
      for (const GuardTest& t : p.guard)
        if (t.mask == ~uint32_t{0} && t.equal) buckets[t.field];
    for (auto& [field, by_value] : buckets)
      for (const Program& p : progs_) {
        uint32_t v;
        if (RequiredValue(p.guard, field, &v)) by_value[v]++;
      }
    size_t best = progs_.size();
    for (const auto& [field, by_value] : buckets) {
      size_t indexed = 0, largest = 0;
      for (const auto& [v, n] : by_value) {
        indexed += n;
        largest = std::max(largest, n);
      }
      size_t cost = progs_.size() - indexed + largest;
      if (cost < best) {
        best = cost;
        key_ = field;
      }
    }
    for (uint32_t i = 0; i < progs_.size(); i++) {
      uint32_t v;
      if (key_.size != 0 && RequiredValue(progs_[i].guard, key_, &v))
        index_[v].push_back(i);
      else
        unindexed_.push_back(i);
    }
  }

  bool Accepts(uint32_t i, const uint8_t* d, uint32_t len) const {
    const Program& p = progs_[i];
    for (const GuardTest& t : p.guard)
      if (!t.Passes(d, len)) return false;
    return bpf_filter(p.bpf.bf_insns, d, len, len) != 0;
  }

  bool Matches(const uint8_t* d, uint32_t len) const {
    uint32_t v;
    if (key_.size != 0 && key_.Load(d, len, &v)) {
      auto it = index_.find(v);
      if (it != index_.end())
        for (uint32_t i : it->second)
          if (Accepts(i, d, len)) return true;
    }
    for (uint32_t i : unindexed_)
      if (Accepts(i, d, len)) return true;
    return false;
  }

  std::vector<Program> progs_;
  bool drop_on_match_ = false;
  Field key_;
  std::unordered_map<uint32_t, std::vector<uint32_t>> index_;
  std::vector<uint32_t> unindexed_;
};

}  // namespace

KEEL_NF(Bpf, "bpf", "pcap-filter classifier: passes or drops packets that match any filter");
KEEL_NF_ARGS(Bpf, R"json([
  {"name": "filters", "required": true, "type": "array", "items": {"type": "string"},
   "doc": "pcap-filter expressions; a packet matches if any of them matches"},
  {"name": "action", "type": "string", "enum": ["pass", "drop"], "default": "pass",
   "doc": "what happens to matching packets; the others get the opposite"}
])json");

}  // namespace keel
