// SPDX-License-Identifier: Apache-2.0
// The NF socket's checks of its callers (cs-caller.h) against a fake /proc tree: who may
// announce which thread with which buffer. No daemon, no root.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "cs-caller.h"

namespace {

namespace fs = std::filesystem;

// A fake /proc with processes, their threads and their roots, beside the agent's
// chain-buffer root <dir>/pktbuf holding instance g.
class CallerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/keel-cs-caller-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    proc_ = dir_ + "/proc";
    pktbuf_ = dir_ + "/pktbuf";
    path_ = pktbuf_ + "/g/pktbuf";
    fs::create_directories(pktbuf_ + "/g");
    Write(pktbuf_ + "/g/pktbuf", "buffer");
    // Process 100, the NF of instance g: sees the host's directories (its root is "/"),
    // threads 100 and 101, ids 7 and 8 in its PID namespace.
    AddProcess(100, 5000, "/");
    AddThread(100, 100, 7, 5000);
    AddThread(100, 101, 8, 5003);
    policy_ = {proc_.c_str(), pktbuf_.c_str(), 0, 1};
    ask_ = {"g", 7, PidNs(100), path_.c_str()};
  }

  void TearDown() override { fs::remove_all(dir_); }

  static void Write(const std::string& path, const std::string& text) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path) << text;
  }

  // A /proc stat line of a process called "nf (x)" that started at tick start.
  static std::string Stat(pid_t pid, uint64_t start) {
    return std::to_string(pid) + " (nf (x)) S 1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 " +
           std::to_string(start) + " 0 0\n";
  }

  // Process pid, started at tick start, whose root directory is root; its PID namespace
  // is a file of its own (the test needs only its inode).
  void AddProcess(pid_t pid, uint64_t start, const std::string& root) {
    const std::string p = proc_ + "/" + std::to_string(pid);
    Write(p + "/stat", Stat(pid, start));
    Write(p + "/ns/pid", "");
    fs::create_directory_symlink(root, p + "/root");
  }

  void AddThread(pid_t pid, pid_t tid, pid_t ns_tid, uint64_t start) {
    const std::string t = proc_ + "/" + std::to_string(pid) + "/task/" + std::to_string(tid);
    Write(t + "/stat", Stat(tid, start));
    Write(t + "/status", "Name:\tnf\nTgid:\t" + std::to_string(pid) + "\nNSpid:\t" +
                             std::to_string(tid) + "\t" + std::to_string(ns_tid) + "\n");
  }

  uint64_t PidNs(pid_t pid) const {
    struct stat st {};
    stat((proc_ + "/" + std::to_string(pid) + "/ns/pid").c_str(), &st);
    return st.st_ino;
  }

  // Runs every check for caller and ask_; *msg gets the refusal's message.
  cs_refusal Check(const cs_caller& caller, std::string* msg = nullptr) {
    cs_caller_grant grant{};
    cs_error err{};
    cs_refusal r = cs_caller_check(&policy_, &caller, &ask_, &grant, &err);
    if (msg) *msg = r ? err.msg : "";
    if (!r) grant_ = grant;
    return r;
  }

  std::string dir_, proc_, pktbuf_, path_;
  cs_caller_policy policy_{};
  cs_caller_ask ask_{};
  cs_caller_grant grant_{};
  const cs_caller nf_{100, 5000};
};

TEST_F(CallerTest, StartTimeIsField22WhateverTheCommandHolds) {
  uint64_t start = 0;
  ASSERT_EQ(cs_stat_starttime("42 (a) b (c) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 777 0\n", &start), 0);
  EXPECT_EQ(start, 777u);
  EXPECT_EQ(cs_stat_starttime("42 (cut", &start), -1);
  ASSERT_EQ(cs_proc_starttime(proc_.c_str(), 100, 101, &start), 0);
  EXPECT_EQ(start, 5003u);
}

TEST_F(CallerTest, AnNfMayAnnounceItsOwnThreadForItsOwnInstance) {
  std::string msg;
  ASSERT_EQ(Check(nf_, &msg), CS_REFUSED_NONE) << msg;
  EXPECT_EQ(grant_.host_tid, 100);
  EXPECT_EQ(grant_.tid_start, 5000u);
  ask_.tid = 8;
  ASSERT_EQ(Check(nf_, &msg), CS_REFUSED_NONE) << msg;
  EXPECT_EQ(grant_.host_tid, 101);
  EXPECT_EQ(grant_.tid_start, 5003u);
  struct stat st {};
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_EQ(grant_.buf_ino, st.st_ino);
  EXPECT_EQ(grant_.buf_dev, st.st_dev);
}

TEST_F(CallerTest, AReusedPidIsNotTheCaller) {
  std::string msg;
  EXPECT_EQ(Check({100, 4999}, &msg), CS_REFUSED_CALLER);
  EXPECT_NE(msg.find("check caller: pid 100 names another process now"), std::string::npos) << msg;
  EXPECT_EQ(Check({300, 5000}, &msg), CS_REFUSED_CALLER);
  EXPECT_NE(msg.find("check caller: the calling process 300 is gone"), std::string::npos) << msg;
}

TEST_F(CallerTest, OnlyTheCallersOwnPidNamespace) {
  std::string msg;
  ask_.pid_ns = PidNs(100) + 1;
  EXPECT_EQ(Check(nf_, &msg), CS_REFUSED_PID_NS);
  EXPECT_NE(msg.find("check pid-ns: pid_ns"), std::string::npos) << msg;
  // 0 claims keel-coopsched's own namespace (the host's): not the container's.
  ask_.pid_ns = 0;
  EXPECT_EQ(Check(nf_, &msg), CS_REFUSED_PID_NS);
  EXPECT_NE(msg.find("(keel-coopsched's own)"), std::string::npos) << msg;
  // A caller that does run in keel-coopsched's namespace may say 0.
  policy_.own_pid_ns = PidNs(100);
  EXPECT_EQ(Check(nf_, &msg), CS_REFUSED_NONE) << msg;
}

TEST_F(CallerTest, OnlyAThreadOfTheCallingProcess) {
  AddProcess(200, 6000, "/");
  AddThread(200, 200, 9, 6000);
  std::string msg;
  ask_.tid = 9;  // another process's thread
  EXPECT_EQ(Check(nf_, &msg), CS_REFUSED_THREAD);
  EXPECT_NE(msg.find("check thread: tid 9 is not a thread of the calling process 100"),
            std::string::npos)
      << msg;
  ask_.tid = 100;  // the host id of the caller's own thread is not its id in its namespace
  EXPECT_EQ(Check(nf_, &msg), CS_REFUSED_THREAD);
  ask_.tid = -1;
  EXPECT_EQ(Check(nf_, &msg), CS_REFUSED_THREAD);
  // A thread that claims to have started before its process is no thread of it.
  AddThread(100, 102, 10, 4000);
  ask_.tid = 10;
  EXPECT_EQ(Check(nf_, &msg), CS_REFUSED_THREAD);
}

TEST_F(CallerTest, OnlyTheBufferOfTheGroupUnderPktbufDir) {
  fs::create_directories(pktbuf_ + "/h");
  Write(pktbuf_ + "/h/pktbuf", "");
  struct Case {
    const char* group;
    std::string path;
  };
  const Case bad[] = {
      {"g", dir_ + "/elsewhere/pktbuf"},
      {"g", pktbuf_ + "/h/pktbuf"},  // another group's buffer
      {"g", pktbuf_ + "/g/pktbuf2"},
      {"g", pktbuf_ + "/g/../h/pktbuf"},
      {"g", pktbuf_ + "//g/pktbuf"},
      {"..", pktbuf_ + "/../pktbuf"},
      {".", pktbuf_ + "/./pktbuf"},
      {"g/..", pktbuf_ + "/g/../pktbuf"},
      {"a..b", pktbuf_ + "/a..b/pktbuf"},
      {"", pktbuf_ + "//pktbuf"},
  };
  for (const Case& c : bad) {
    ask_.group = c.group;
    ask_.pktbuf_path = c.path.c_str();
    std::string msg;
    EXPECT_EQ(Check(nf_, &msg), CS_REFUSED_PKTBUF_PATH) << c.group << " " << c.path;
    EXPECT_EQ(msg.rfind("check pktbuf-path: ", 0), 0u) << msg;
  }
}

TEST_F(CallerTest, OnlyACallerThatSeesTheInstanceDirectory) {
  // Process 200 is another instance's NF: in its root, the path of g is a directory of
  // its own making, with a buffer in it.
  const std::string root = dir_ + "/ctr-b";
  fs::create_directories(root + pktbuf_ + "/g");
  Write(root + pktbuf_ + "/g/pktbuf", "fake");
  AddProcess(200, 6000, root);
  AddThread(200, 200, 7, 6000);
  ask_.pid_ns = PidNs(200);
  std::string msg;
  EXPECT_EQ(Check({200, 6000}, &msg), CS_REFUSED_INSTANCE_DIR) << msg;
  EXPECT_NE(msg.find("check instance-dir: " + pktbuf_ + "/g in the root of process 200 is not"),
            std::string::npos)
      << msg;
  // A symlink in its root to the host's directory resolves inside that root.
  fs::remove_all(root + pktbuf_ + "/g");
  fs::create_directory_symlink(pktbuf_ + "/g", root + pktbuf_ + "/g");
  EXPECT_EQ(Check({200, 6000}, &msg), CS_REFUSED_INSTANCE_DIR) << msg;
  // Nothing there at all.
  fs::remove(root + pktbuf_ + "/g");
  EXPECT_EQ(Check({200, 6000}, &msg), CS_REFUSED_INSTANCE_DIR) << msg;
  EXPECT_NE(msg.find("does not see the instance directory"), std::string::npos) << msg;
  // A group keel-coopsched has no directory for.
  const std::string none = pktbuf_ + "/none/pktbuf";
  ask_.group = "none";
  ask_.pid_ns = PidNs(100);
  ask_.pktbuf_path = none.c_str();
  EXPECT_EQ(Check(nf_, &msg), CS_REFUSED_INSTANCE_DIR);
  EXPECT_NE(msg.find("keel-coopsched has no instance directory"), std::string::npos) << msg;
}

TEST_F(CallerTest, TheBufferIsARegularFileNotASymlink) {
  std::string msg;
  fs::remove(path_);
  fs::create_symlink("/etc/passwd", path_);
  EXPECT_EQ(Check(nf_, &msg), CS_REFUSED_PKTBUF_FILE);
  EXPECT_NE(msg.find("check pktbuf-file: "), std::string::npos) << msg;
  fs::remove(path_);
  ASSERT_EQ(mkfifo(path_.c_str(), 0600), 0);
  EXPECT_EQ(Check(nf_, &msg), CS_REFUSED_PKTBUF_FILE);
  EXPECT_NE(msg.find("is not a regular file"), std::string::npos) << msg;
  fs::remove(path_);
  EXPECT_EQ(Check(nf_, &msg), CS_REFUSED_PKTBUF_FILE);
}

TEST_F(CallerTest, InPodsTheInstanceDirectoryIsTheCallersOwn) {
  // Kubernetes: the directory is the Pod's emptyDir; keel-coopsched's own is another.
  const std::string root = dir_ + "/pod";
  fs::create_directories(root + pktbuf_ + "/g");
  Write(root + pktbuf_ + "/g/pktbuf", "pod's");
  AddProcess(200, 6000, root);
  AddThread(200, 200, 7, 6000);
  ask_.pid_ns = PidNs(200);
  policy_.pod_dirs = 1;
  std::string msg;
  ASSERT_EQ(Check({200, 6000}, &msg), CS_REFUSED_NONE) << msg;
  struct stat st {};
  ASSERT_EQ(stat((root + path_).c_str(), &st), 0);
  EXPECT_EQ(grant_.buf_ino, st.st_ino) << "the file as the Pod sees it";
  policy_.pod_dirs = 0;
  EXPECT_EQ(Check({200, 6000}, &msg), CS_REFUSED_INSTANCE_DIR) << msg;
}

TEST(Refusal, NamesAreWhatStatusReports) {
  EXPECT_STREQ(cs_refusal_name(CS_REFUSED_METHOD), "method");
  EXPECT_STREQ(cs_refusal_name(CS_REFUSED_CALLER), "caller");
  EXPECT_STREQ(cs_refusal_name(CS_REFUSED_PID_NS), "pid-ns");
  EXPECT_STREQ(cs_refusal_name(CS_REFUSED_THREAD), "thread");
  EXPECT_STREQ(cs_refusal_name(CS_REFUSED_PKTBUF_PATH), "pktbuf-path");
  EXPECT_STREQ(cs_refusal_name(CS_REFUSED_INSTANCE_DIR), "instance-dir");
  EXPECT_STREQ(cs_refusal_name(CS_REFUSED_PKTBUF_FILE), "pktbuf-file");
}

}  // namespace
