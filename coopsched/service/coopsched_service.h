// SPDX-License-Identifier: Apache-2.0
// keel.v1.Coopsched over the C scheduling core (src/cs-sched.h).
#ifndef KEEL_COOPSCHED_SERVICE_H_
#define KEEL_COOPSCHED_SERVICE_H_

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "cs-caller.h"
#include "cs-pidns.h"
#include "cs-sched.h"
#include "keel/v1/coopsched.grpc.pb.h"

namespace keel::coopsched {

// Service answers the Coopsched RPCs; it does not own the scheduler.
class Service final : public keel::v1::Coopsched::Service {
 public:
  explicit Service(cs_sched* sched) : sched_(sched), own_pid_ns_(cs_pidns_self()) {}

  // Stop ends every Events stream; call before shutting the server down.
  void Stop() { stopping_ = true; }

  grpc::Status RegisterGroup(grpc::ServerContext*, const keel::v1::RegisterGroupRequest*,
                             keel::v1::GroupStatus*) override;
  grpc::Status RegisterThread(grpc::ServerContext*, const keel::v1::RegisterThreadRequest*,
                              keel::v1::RegisterThreadResponse*) override;
  grpc::Status Attach(grpc::ServerContext*, const keel::v1::AttachRequest*,
                      keel::v1::GroupStatus*) override;
  grpc::Status Detach(grpc::ServerContext*, const keel::v1::DetachRequest*,
                      keel::v1::DetachResponse*) override;
  grpc::Status Unregister(grpc::ServerContext*, const keel::v1::UnregisterRequest*,
                          keel::v1::UnregisterResponse*) override;
  grpc::Status SetBatch(grpc::ServerContext*, const keel::v1::SetBatchRequest*,
                        keel::v1::GroupStatus*) override;
  grpc::Status Status(grpc::ServerContext*, const keel::v1::StatusRequest*,
                      keel::v1::StatusResponse*) override;
  grpc::Status Events(grpc::ServerContext*, const keel::v1::EventsRequest*,
                      grpc::ServerWriter<keel::v1::Event>*) override;

 private:
  grpc::Status GroupReply(const std::string& group, keel::v1::GroupStatus* out);

  cs_sched* sched_;
  const uint64_t own_pid_ns_;  // inode of coopsched's PID namespace
  std::atomic<bool> stopping_{false};
};

// PeerTable says which process is at the other end of each NF socket connection.
// keel-coopsched accepts those connections itself and hands each descriptor N to gRPC,
// whose ServerContext::peer() is then "fd:N"; the accept thread records the caller
// under N before it hands N over, so a reused N names the newest connection.
class PeerTable {
 public:
  // Set records the process at the other end of descriptor fd.
  void Set(int fd, const cs_caller& caller);
  // Find looks up a peer() string; false if it is not "fd:N" of a recorded connection.
  bool Find(const std::string& peer, cs_caller* out) const;

 private:
  mutable std::mutex mu_;
  std::unordered_map<int, cs_caller> by_fd_;
};

// NfService answers on the NF socket, the one mounted into NF containers: RegisterThread
// of a thread of the calling process itself, after the checks of cs-caller.h; every other
// method is PERMISSION_DENIED with a message naming the admin socket. Each refusal is
// counted and posted as a "refused" event (cs_sched_refused).
class NfService final : public keel::v1::Coopsched::Service {
 public:
  // policy.proc and policy.pktbuf_dir must outlive the service; admin_socket is named in
  // the refusals of the admin methods.
  NfService(cs_sched* sched, const cs_caller_policy& policy, const PeerTable* peers,
            std::string admin_socket)
      : sched_(sched), policy_(policy), peers_(peers), admin_socket_(std::move(admin_socket)) {}

  grpc::Status RegisterGroup(grpc::ServerContext*, const keel::v1::RegisterGroupRequest*,
                             keel::v1::GroupStatus*) override;
  grpc::Status RegisterThread(grpc::ServerContext*, const keel::v1::RegisterThreadRequest*,
                              keel::v1::RegisterThreadResponse*) override;
  grpc::Status Attach(grpc::ServerContext*, const keel::v1::AttachRequest*,
                      keel::v1::GroupStatus*) override;
  grpc::Status Detach(grpc::ServerContext*, const keel::v1::DetachRequest*,
                      keel::v1::DetachResponse*) override;
  grpc::Status Unregister(grpc::ServerContext*, const keel::v1::UnregisterRequest*,
                          keel::v1::UnregisterResponse*) override;
  grpc::Status SetBatch(grpc::ServerContext*, const keel::v1::SetBatchRequest*,
                        keel::v1::GroupStatus*) override;
  grpc::Status Status(grpc::ServerContext*, const keel::v1::StatusRequest*,
                      keel::v1::StatusResponse*) override;
  grpc::Status Events(grpc::ServerContext*, const keel::v1::EventsRequest*,
                      grpc::ServerWriter<keel::v1::Event>*) override;

 private:
  grpc::Status Refuse(enum cs_refusal why, const std::string& group, pid_t pid,
                      const std::string& message);
  grpc::Status AdminOnly(grpc::ServerContext* ctx, const char* method, const std::string& group);

  cs_sched* sched_;
  const cs_caller_policy policy_;
  const PeerTable* peers_;
  const std::string admin_socket_;
  // Held from the checks to the announce, so that two announcers of a new group cannot
  // both bind it (--pktbuf-in-pods) and a binding is read as the announce finds it.
  std::mutex mu_;
  // --pktbuf-in-pods: the buffer file (device, inode) each group's first announcer
  // presented; forgotten once coopsched knows the group no more.
  std::map<std::string, std::pair<uint64_t, uint64_t>> bound_;
};

}  // namespace keel::coopsched

#endif  // KEEL_COOPSCHED_SERVICE_H_
