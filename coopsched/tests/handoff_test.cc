// SPDX-License-Identifier: Apache-2.0
// cs_handoff_measure's probe processes (Galleon eq. 1's T_ctx, measured at start-up) never
// outlive keel-coopsched: killed mid-probe, it once left a child spinning at SCHED_FIFO on the
// managed core with the core lock open, and the next keel-coopsched refused to start. Needs root
// (SCHED_FIFO) and two cores.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "cs-handoff.h"

namespace {

std::vector<pid_t> Children(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  std::vector<pid_t> out;
  for (pid_t c; f >> c;) out.push_back(c);
  return out;
}

// Gone, a zombie, or with SIGKILL pending: the parent-death signal is queued the moment the
// parent dies, but a child starved on its core by higher-priority SCHED_FIFO work only acts on
// it once it runs again.
bool Dying(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  if (!f.is_open()) return true;  // no such process
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("State:", 0) == 0 && line.find('Z') != std::string::npos) return true;
    if (line.rfind("SigPnd:", 0) == 0 || line.rfind("ShdPnd:", 0) == 0) {
      unsigned long long mask = std::stoull(line.substr(line.find(':') + 1), nullptr, 16);
      if (mask & (1ULL << (SIGKILL - 1))) return true;
    }
  }
  return false;
}

// Dying within |limit|: a child caught between taking its SIGKILL and becoming a zombie shows
// neither for that moment (CI once saw it), so it is looked at again until the limit.
bool DiesWithin(pid_t pid, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!Dying(pid)) {
    if (std::chrono::steady_clock::now() >= end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

TEST(Handoff, ProbeChildrenDieWithTheirParentAndKeepNoneOfItsDescriptors) {
  if (geteuid() != 0) GTEST_SKIP() << "the probe makes its processes SCHED_FIFO: needs root";
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  if (cpus < 2) GTEST_SKIP() << "needs two cores (the probe takes one)";
  // The write end stands for what keel-coopsched holds open (its core lock): it must close
  // everywhere when the parent dies.
  // Orphaned probe children come to this process (not to init), which reaps them at the end.
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  pid_t parent = fork();
  ASSERT_GE(parent, 0);
  if (parent == 0) {
    close(p[0]);
    cs_error err{};
    cs_handoff_measure(static_cast<int>(cpus - 1), 1, &err);
    pause();
    _exit(0);
  }
  close(p[1]);
  // Kill the parent while both probe children exist (the probe runs tens of milliseconds).
  std::vector<pid_t> kids;
  for (int i = 0; i < 20000 && kids.size() < 2; i++) {
    kids = Children(parent);
    if (kids.size() < 2) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  kill(parent, SIGKILL);
  waitpid(parent, nullptr, 0);
  ASSERT_EQ(kids.size(), 2u) << "never saw the probe's two children";
  pollfd pfd{p[0], POLLIN, 0};
  int ready = poll(&pfd, 1, 2000);
  char c;
  ssize_t got = ready == 1 ? read(p[0], &c, 1) : -1;
  close(p[0]);
  EXPECT_EQ(ready, 1) << "a probe child outlived its parent, holding the parent's descriptors";
  EXPECT_EQ(got, 0);
  for (pid_t k : kids)
    EXPECT_TRUE(DiesWithin(k, std::chrono::milliseconds(2000))) << "probe child " << k << " outlived its parent";
  for (pid_t k : kids) kill(k, SIGKILL);  // one that did outlive it must not spin on
  for (int ms = 0; ms < 5000 && !kids.empty(); ms += 10) {
    kids.erase(std::remove_if(kids.begin(), kids.end(), [](pid_t k) { return waitpid(k, nullptr, WNOHANG) != 0; }),
               kids.end());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
}

}  // namespace
