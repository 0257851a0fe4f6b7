// SPDX-License-Identifier: Apache-2.0
// keel.v1.Coopsched over the C scheduling core (src/cs-sched.h).
#ifndef KEEL_COOPSCHED_SERVICE_H_
#define KEEL_COOPSCHED_SERVICE_H_

#include <atomic>

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

}  // namespace keel::coopsched

#endif  // KEEL_COOPSCHED_SERVICE_H_
