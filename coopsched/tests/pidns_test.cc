// SPDX-License-Identifier: Apache-2.0
// cs_pidns_host_tid: thread ids of NFs in containers (their own PID
// namespaces) mapped to the host's. Creating a PID namespace needs root.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

#include "cs-pidns.h"

namespace {

// What the child in the new namespace reports about itself.
struct Report {
  uint64_t pid_ns;
  pid_t pid;
};

// A child process in a PID namespace of its own: it reports its namespace
// and its pid there, then waits until the test ends it.
class ChildInNewPidNs {
 public:
  bool Start() {
    int fds[2];
    if (pipe(fds) != 0) return false;
    // A bare clone without a stack behaves as fork(), in a new namespace.
    pid_ = static_cast<pid_t>(syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, 0, 0, 0, 0));
    if (pid_ == 0) {
      Report r{cs_pidns_self(), getpid()};
      (void)!write(fds[1], &r, sizeof r);
      pause();
      _exit(0);
    }
    close(fds[1]);
    bool ok = pid_ > 0 && read(fds[0], &report_, sizeof report_) == sizeof report_;
    close(fds[0]);
    return ok;
  }
  ~ChildInNewPidNs() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  pid_t host_pid() const { return pid_; }
  const Report& report() const { return report_; }

 private:
  pid_t pid_ = -1;
  Report report_{};
};

TEST(PidNs, MapsPid1OfANewNamespaceToTheHostPid) {
  if (geteuid() != 0) GTEST_SKIP() << "creating a PID namespace (CLONE_NEWPID) needs root";
  ChildInNewPidNs child;
  ASSERT_TRUE(child.Start()) << "clone(CLONE_NEWPID): " << std::strerror(errno);
  ASSERT_EQ(child.report().pid, 1);
  ASSERT_NE(child.report().pid_ns, cs_pidns_self());
  pid_t host = 0;
  cs_error err{};
  ASSERT_EQ(cs_pidns_host_tid(child.report().pid_ns, 1, &host, &err), CS_OK) << err.msg;
  EXPECT_EQ(host, child.host_pid());
}

TEST(PidNs, InnerTidIsTheIdTheThreadKnowsItselfBy) {
  if (geteuid() != 0) GTEST_SKIP() << "creating a PID namespace (CLONE_NEWPID) needs root";
  ChildInNewPidNs child;
  ASSERT_TRUE(child.Start()) << "clone(CLONE_NEWPID): " << std::strerror(errno);
  EXPECT_EQ(cs_pidns_inner_tid(child.host_pid()), 1);
  EXPECT_EQ(cs_pidns_inner_tid(gettid()), gettid());
}

TEST(PidNs, UnknownThreadIsNotFoundAndNamed) {
  if (geteuid() != 0) GTEST_SKIP() << "creating a PID namespace (CLONE_NEWPID) needs root";
  ChildInNewPidNs child;
  ASSERT_TRUE(child.Start()) << "clone(CLONE_NEWPID): " << std::strerror(errno);
  pid_t host = 0;
  cs_error err{};
  ASSERT_EQ(cs_pidns_host_tid(child.report().pid_ns, 4242, &host, &err), CS_ENOENT);
  std::string ns = "pid:[" + std::to_string(child.report().pid_ns) + "]";
  EXPECT_NE(std::string(err.msg).find(ns), std::string::npos) << err.msg;
  EXPECT_NE(std::string(err.msg).find("4242"), std::string::npos) << err.msg;
}

TEST(PidNs, OwnNamespaceMapsATidToItself) {
  pid_t host = 0;
  cs_error err{};
  ASSERT_EQ(cs_pidns_host_tid(cs_pidns_self(), gettid(), &host, &err), CS_OK) << err.msg;
  EXPECT_EQ(host, gettid());
}

}  // namespace
