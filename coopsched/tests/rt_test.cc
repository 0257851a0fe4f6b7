// SPDX-License-Identifier: Apache-2.0
// cs_rt_explain_eperm: why the kernel refused SCHED_FIFO to a thread of a cgroup v1 cpu
// cgroup without real-time budget (a Kubernetes Pod's, a Docker container's without
// --cpu-rt-runtime). Needs root, cgroup v1 RT group scheduling and RT throttling on.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "cs-rt.h"

namespace {

const char kCpuRoot[] = "/sys/fs/cgroup/cpu";

std::string WhyNot() {
  if (geteuid() != 0) return "moving a process between cgroups needs root";
  if (access((std::string(kCpuRoot) + "/cpu.rt_runtime_us").c_str(), F_OK) != 0)
    return "no cgroup v1 RT group scheduling here (no /sys/fs/cgroup/cpu/cpu.rt_runtime_us)";
  int64_t us = 0;
  cs_error err{};
  if (cs_rt_runtime_read(&us, &err) != CS_OK) return err.msg;
  if (us < 0)
    return "RT throttling is off host-wide (kernel.sched_rt_runtime_us -1, a keel-coopsched "
           "--no-rt-throttle runs?): the kernel then refuses nothing";
  return "";
}

// A sleeping child in a fresh cpu cgroup of its own (budget 0), removed at the end.
class ChildInCgroup {
 public:
  explicit ChildInCgroup(const std::string& name) : dir_(std::string(kCpuRoot) + "/" + name) {}
  bool Start() {
    if (mkdir(dir_.c_str(), 0755) != 0 && errno != EEXIST) return false;
    pid_ = fork();
    if (pid_ == 0) {
      pause();
      _exit(0);
    }
    std::ofstream(dir_ + "/tasks") << pid_ << "\n";
    return pid_ > 0;
  }
  ~ChildInCgroup() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    rmdir(dir_.c_str());
  }
  pid_t pid() const { return pid_; }

 private:
  std::string dir_;
  pid_t pid_ = -1;
};

TEST(Rt, ExplainsAnEpermFromACgroupWithoutBudget) {
  std::string why = WhyNot();
  if (!why.empty()) GTEST_SKIP() << why;
  std::string name = "keel-rt-test-" + std::to_string(getpid());
  ChildInCgroup child(name);
  ASSERT_TRUE(child.Start());
  sched_param sp{};
  sp.sched_priority = 1;
  ASSERT_EQ(sched_setscheduler(child.pid(), SCHED_FIFO, &sp), -1) << "the kernel let a zero-budget cgroup have SCHED_FIFO";
  ASSERT_EQ(errno, EPERM);
  char out[768];
  cs_rt_explain_eperm(child.pid(), out, sizeof out);
  std::string s(out);
  EXPECT_NE(s.find("/" + name), std::string::npos) << s;
  EXPECT_NE(s.find("cpu.rt_runtime_us 0"), std::string::npos) << s;
  EXPECT_NE(s.find("--no-rt-throttle"), std::string::npos) << s;
}

TEST(Rt, SaysNothingWhenTheCgroupIsNotTheCause) {
  std::string why = WhyNot();
  if (!why.empty()) GTEST_SKIP() << why;
  // A child of a cgroup given a budget: an EPERM there would have another cause.
  std::string name = "keel-rt-test-budget-" + std::to_string(getpid());
  ChildInCgroup child(name);
  std::string dir = std::string(kCpuRoot) + "/" + name;
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0) << std::strerror(errno);
  {
    std::ofstream budget(dir + "/cpu.rt_runtime_us");
    budget << "10000\n";
    budget.flush();
    if (!budget)
      GTEST_SKIP() << "cannot give a test cgroup 10000 us of RT budget: the root's is taken "
                      "by its other cgroups (Docker's, with --cpu-rt-runtime 950000?)";
  }
  ASSERT_TRUE(child.Start());
  char out[768] = "x";
  cs_rt_explain_eperm(child.pid(), out, sizeof out);
  EXPECT_STREQ(out, "") << "a cgroup with budget was blamed";
}

}  // namespace
