/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/coopsched_client.h"

#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include "keel/v1/coopsched.grpc.pb.h"

namespace keel {

bool AnnounceToCoopsched(const std::string& target, const std::string& group, int position,
                         int count, const std::string& pktbuf, std::string* err) {
  auto stub = v1::Coopsched::NewStub(grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  v1::RegisterThreadRequest req;
  req.set_group_id(group);
  req.set_position(static_cast<uint32_t>(position));
  req.set_count(static_cast<uint32_t>(count));
  req.set_tid(static_cast<int32_t>(gettid()));
  /* In a container the tid is the namespace's; coopsched maps it to its own. */
  struct stat ns;
  if (stat("/proc/self/ns/pid", &ns) == 0) req.set_pid_ns(ns.st_ino);
  req.set_pktbuf_path(pktbuf);
  v1::RegisterThreadResponse resp;
  /* coopsched stops the last position to announce itself while its call is
   * in flight (the chain becomes a detached sgroup); the answer arrives once
   * the chain is attached, however long that takes. An unreachable
   * coopsched still fails at once. */
  grpc::ClientContext ctx;
  grpc::Status st = stub->RegisterThread(&ctx, req, &resp);
  if (!st.ok()) {
    *err = "coopsched " + target + ": " + st.error_message();
    return false;
  }
  return true;
}

}  // namespace keel
