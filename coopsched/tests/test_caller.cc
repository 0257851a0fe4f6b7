// SPDX-License-Identifier: Apache-2.0
// coopsched_test_caller: one call to keel-coopsched as an NF (or a tenant pretending to be
// one) makes it, from a process of its own, so that the daemon's NF socket sees that
// process as its caller.
//
//   coopsched_test_caller SOCKET RPC [--own-pid-ns] [--group G] [--position K] [--count N]
//                         [--tid self|N] [--pid-ns self|N] [--pktbuf PATH]
//                         [--exec PROG ARGS...]
//
// RPC: register-thread, register-group, attach, detach, unregister, set-batch, status,
// events. Prints one line, "CODE HOSTPID MESSAGE" (CODE the gRPC status code, 0 for OK;
// HOSTPID the caller's pid in the PID namespace of /proc), then execs PROG if --exec is
// given: the thread it announced goes on as that program (a test NF).
//
// --own-pid-ns: the call is made from a PID namespace of its own, as from a container,
// by its second process (pid 2; pid 1, its init, waits for it): --tid self is then 2 and
// --pid-ns self that namespace. Everything in it dies with this process.
#include <grpcpp/grpcpp.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "keel/v1/coopsched.grpc.pb.h"

namespace {

uint64_t OwnPidNs() {
  struct stat st {};
  return stat("/proc/self/ns/pid", &st) == 0 ? st.st_ino : 0;
}

// The caller's pid as /proc (the host's, not remounted) knows it.
long HostPid() {
  char buf[32] = "";
  ssize_t n = readlink("/proc/self", buf, sizeof buf - 1);
  return n > 0 ? std::strtol(buf, nullptr, 10) : -1;
}

// Forks into a new PID namespace: returns in its pid 2; the other processes exit with
// its status.
void EnterOwnPidNs() {
  if (unshare(CLONE_NEWPID) != 0) {
    perror("unshare(CLONE_NEWPID)");
    _exit(3);
  }
  pid_t init = fork();
  if (init < 0) _exit(3);
  if (init > 0) {
    int st = 0;
    waitpid(init, &st, 0);
    _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 1);
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // pid 1 dies with the caller's first process...
  pid_t nf = fork();
  if (nf < 0) _exit(3);
  if (nf > 0) {  // ... and everything in the namespace with pid 1
    int st = 0;
    waitpid(nf, &st, 0);
    _exit(WIFEXITED(st) ? WEXITSTATUS(st) : 1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s SOCKET RPC [options] (see the source)\n", argv[0]);
    return 2;
  }
  std::string sock = argv[1], rpc = argv[2], group = "g", pktbuf, tid = "self", pid_ns = "self";
  uint32_t position = 0, count = 1;
  bool own_ns = false;
  char** exec_argv = nullptr;
  for (int i = 3; i < argc; i++) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--own-pid-ns") own_ns = true;
    else if (a == "--group") group = next();
    else if (a == "--position") position = static_cast<uint32_t>(std::stoul(next()));
    else if (a == "--count") count = static_cast<uint32_t>(std::stoul(next()));
    else if (a == "--tid") tid = next();
    else if (a == "--pid-ns") pid_ns = next();
    else if (a == "--pktbuf") pktbuf = next();
    else if (a == "--exec" && i + 1 < argc) {
      exec_argv = argv + i + 1;
      break;
    } else {
      std::fprintf(stderr, "%s: unknown argument %s\n", argv[0], a.c_str());
      return 2;
    }
  }
  if (own_ns) EnterOwnPidNs();  // before gRPC starts threads

  auto channel = grpc::CreateChannel(sock, grpc::InsecureChannelCredentials());
  auto stub = keel::v1::Coopsched::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  grpc::Status st;
  if (rpc == "register-thread") {
    keel::v1::RegisterThreadRequest req;
    req.set_group_id(group);
    req.set_position(position);
    req.set_count(count);
    req.set_tid(tid == "self" ? gettid() : std::stoi(tid));
    req.set_pid_ns(pid_ns == "self" ? OwnPidNs() : std::stoull(pid_ns));
    req.set_pktbuf_path(pktbuf);
    keel::v1::RegisterThreadResponse out;
    st = stub->RegisterThread(&ctx, req, &out);
  } else if (rpc == "register-group") {
    keel::v1::RegisterGroupRequest req;
    req.set_group_id(group);
    req.add_tids(gettid());
    req.set_pktbuf_path(pktbuf);
    keel::v1::GroupStatus out;
    st = stub->RegisterGroup(&ctx, req, &out);
  } else if (rpc == "attach") {
    keel::v1::AttachRequest req;
    req.set_group_id(group);
    req.set_core(1);
    keel::v1::GroupStatus out;
    st = stub->Attach(&ctx, req, &out);
  } else if (rpc == "detach") {
    keel::v1::DetachRequest req;
    req.set_group_id(group);
    keel::v1::DetachResponse out;
    st = stub->Detach(&ctx, req, &out);
  } else if (rpc == "unregister") {
    keel::v1::UnregisterRequest req;
    req.set_group_id(group);
    keel::v1::UnregisterResponse out;
    st = stub->Unregister(&ctx, req, &out);
  } else if (rpc == "set-batch") {
    keel::v1::SetBatchRequest req;
    req.set_group_id(group);
    req.set_batch(4);
    keel::v1::GroupStatus out;
    st = stub->SetBatch(&ctx, req, &out);
  } else if (rpc == "status") {
    keel::v1::StatusResponse out;
    st = stub->Status(&ctx, keel::v1::StatusRequest(), &out);
  } else if (rpc == "events") {
    auto reader = stub->Events(&ctx, keel::v1::EventsRequest());
    keel::v1::Event ev;
    while (reader->Read(&ev)) {
    }
    st = reader->Finish();
  } else {
    std::fprintf(stderr, "%s: unknown RPC %s\n", argv[0], rpc.c_str());
    return 2;
  }
  std::printf("%d %ld %s\n", static_cast<int>(st.error_code()), HostPid(),
              st.error_message().c_str());
  std::fflush(stdout);
  if (!exec_argv) return 0;
  stub.reset();
  channel.reset();
  execv(exec_argv[0], exec_argv);
  perror(exec_argv[0]);
  return 127;
}
