/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/stats_file.h"

#include "keel/chain_sched.h"

#include <pthread.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>

namespace keel {

/* How often the service thread looks at its stop flag. */
static constexpr auto kPoll = std::chrono::milliseconds(10);

Json PortJson(const PortCounters& c) {
  return {{"rx_packets", c.rx_packets.Get()},
          {"rx_bytes", c.rx_bytes.Get()},
          {"rx_malformed", c.rx_malformed.Get()},
          {"tx_packets", c.tx_packets.Get()},
          {"tx_bytes", c.tx_bytes.Get()},
          {"tx_dropped", c.tx_dropped.Get()},
          {"tx_too_long", c.tx_too_long.Get()},
          {"copied", c.copied.Get()},
          {"copy_dropped", c.copy_dropped.Get()},
          {"rx_queue_len", c.rx_queue_len_known.Get() ? Json(c.rx_queue_len.Get()) : Json(nullptr)}};
}

Json CyclesJson(const uint64_t* row) {
  static const char* const kNames[KEEL_CYCLES_KINDS] = {"rx", "rx_idle", "nf",   "copy_in", "view",    "copy_out",
                                                        "tx", "sojourn", "busy", "handoff", "turns"};
  Json j = Json::object();
  for (int i = 0; i < KEEL_CYCLES_KINDS; i++) j[kNames[i]] = __atomic_load_n(&row[i], __ATOMIC_RELAXED);
  return j;
}

StatsFile::StatsFile(std::string path, int interval_ms, std::function<Json()> report)
    : path_(std::move(path)), interval_ms_(interval_ms), report_(std::move(report)) {}

void StatsFile::Start() {
  if (path_.empty() || thread_.joinable()) return;
  pid_t packet_tid = gettid();
  thread_ = std::thread([this, packet_tid] { Loop(packet_tid); });
  pthread_setname_np(thread_.native_handle(), "keel-stats");
  MoveOffCore(thread_.native_handle(), PinnedCore(packet_tid));
}

void StatsFile::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void StatsFile::Loop(pid_t packet_tid) {
  int core = PinnedCore(packet_tid);
  auto next = std::chrono::steady_clock::now();
  while (!stop_.load()) {
    auto now = std::chrono::steady_clock::now();
    if (now >= next) {
      FollowOffCore(packet_tid, &core);
      Write(report_());
      next = now + std::chrono::milliseconds(interval_ms_);
    }
    std::this_thread::sleep_for(kPoll);
  }
}

void StatsFile::Write(const Json& j) const {
  if (path_.empty()) return;
  std::string tmp = path_ + ".tmp";
  {
    std::ofstream f(tmp);
    f << j.dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "keel: cannot write %s\n", tmp.c_str());
      return;
    }
  }
  std::rename(tmp.c_str(), path_.c_str());
}

}  // namespace keel
