/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/coopsched_client.h"

#include <grpcpp/grpcpp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <memory>
#include <mutex>
#include <thread>

#include "keel/v1/coopsched.grpc.pb.h"

namespace keel {

/* How long the announcing thread waits for coopsched's answer before it goes on.
 *
 * coopsched stops the last position to announce itself while its call is in flight (the
 * chain becomes a detached sgroup), so that answer is read only once the chain is
 * attached, and by gRPC's own threads: SCHED_OTHER threads confined, like the whole NF, to
 * the managed core, where attached chains with traffic run at SCHED_FIFO and leave the core
 * idle only once they have been quiet for a while (keel-nf --idle-nap-after-ms).
 * There they get the kernel's CFS share of a FIFO-saturated core, 50 ms once a second: a
 * packet thread that waited for them held the first packets of a freshly attached instance
 * for ~1 s (make demo, chains 2 and 3). So the packet thread waits this long, which covers
 * a refusal (coopsched checks everything before it stops a thread) and an unreachable
 * coopsched, and then goes on; the call ends in the background.
 *
 * It also goes on as soon as it finds itself SCHED_FIFO: coopsched makes the chain's
 * threads FIFO (stopped, at its waiting priority) only once it has accepted the chain, so
 * that is its answer, read without gRPC's threads. Without this, a chain attached within
 * 200 ms of its last announcement (a pooled instance taken the moment it is ready) held its
 * first packets until the bound ran out (make demo: ~207 ms first packets on chains 2 and
 * 3 at the deploy moment, when new instances starting on the core use up its CFS share). */
constexpr auto kAnswerWait = std::chrono::milliseconds(200);
/* How often the waiting thread looks at its own policy. */
constexpr auto kPolicyCheck = std::chrono::milliseconds(1);

namespace {

struct Call {
  std::unique_ptr<v1::Coopsched::Stub> stub;
  grpc::ClientContext ctx;
  v1::RegisterThreadRequest req;
  v1::RegisterThreadResponse resp;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  bool gone_on = false; /* the packet thread stopped waiting */
  grpc::Status status;
};

}  // namespace

bool AnnounceToCoopsched(const std::string& target, const std::string& group, int position,
                         int count, const std::string& pktbuf, std::string* err) {
  auto call = std::make_shared<Call>();
  call->stub = v1::Coopsched::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  v1::RegisterThreadRequest& req = call->req;
  req.set_group_id(group);
  req.set_position(static_cast<uint32_t>(position));
  req.set_count(static_cast<uint32_t>(count));
  req.set_tid(static_cast<int32_t>(gettid())); /* the packet thread: the caller */
  /* In a container the tid is the namespace's; coopsched maps it to its own. */
  struct stat ns;
  if (stat("/proc/self/ns/pid", &ns) == 0) req.set_pid_ns(ns.st_ino);
  req.set_pktbuf_path(pktbuf);

  /* Read before the call starts: coopsched may register the thread and make it FIFO before
   * this thread runs again, and a thread that was FIFO before it asked learns nothing from
   * its policy (it would wait out kAnswerWait: 210 ms first packets, tests/
   * test_coopsched_chain.py's attach-right-after-register test in a CI run). */
  const bool was_fifo = sched_getscheduler(0) == SCHED_FIFO;
  std::thread([call, target] {
    pthread_setname_np(pthread_self(), "keel-announce");
    grpc::Status st = call->stub->RegisterThread(&call->ctx, call->req, &call->resp);
    std::lock_guard<std::mutex> lk(call->mu);
    call->status = st;
    call->done = true;
    if (call->gone_on && !st.ok()) {
      /* Refused after the packet thread went on: the NF stops as if told to. */
      std::fprintf(stderr, "keel-nf: coopsched %s: %s; stopping\n", target.c_str(),
                   st.error_message().c_str());
      std::raise(SIGTERM);
    }
    call->cv.notify_all();
  }).detach();

  const auto until = std::chrono::steady_clock::now() + kAnswerWait;
  std::unique_lock<std::mutex> lk(call->mu);
  while (!call->done) {
    /* The clock runs on while coopsched holds the thread stopped: once it is attached and
     * goes on, a wait that began more than kAnswerWait before has run out. */
    if (std::chrono::steady_clock::now() >= until || (!was_fifo && sched_getscheduler(0) == SCHED_FIFO)) {
      call->gone_on = true;
      return true;
    }
    call->cv.wait_for(lk, kPolicyCheck);
  }
  if (!call->status.ok()) {
    *err = "coopsched " + target + ": " + call->status.error_message();
    return false;
  }
  return true;
}

}  // namespace keel
