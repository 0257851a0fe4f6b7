// SPDX-License-Identifier: Apache-2.0
// The NF socket's listener: keel-coopsched accepts each connection itself, to know the
// calling process, and hands the connection to a gRPC server that has no port of its own.
#ifndef KEEL_COOPSCHED_NF_SOCKET_H_
#define KEEL_COOPSCHED_NF_SOCKET_H_

#include <grpcpp/grpcpp.h>

#include <string>
#include <thread>

#include "coopsched_service.h"
#include "cs-sched.h"

namespace keel::coopsched {

// NfSocket listens on a unix socket; its accept thread reads each connection's
// SO_PEERCRED pid and that process's start time (/proc/PID/stat field 22: the pair names
// one process even after the pid is reused), records them in a PeerTable and passes the
// descriptor to the gRPC server with grpc::AddInsecureChannelFromFd.
class NfSocket {
 public:
  ~NfSocket() { Stop(); }

  // Listen creates the socket at path (a stale socket there is removed) with mode 0600;
  // false with *why on failure.
  bool Listen(const std::string& path, std::string* why);

  // Serve starts the accept thread. A connection whose caller cannot be read is closed and
  // counted as refused by check caller.
  void Serve(grpc::Server* server, PeerTable* peers, cs_sched* sched);

  // Stop ends the accept thread and removes the socket; call before the server shuts down.
  void Stop();

 private:
  void Accept(grpc::Server* server, PeerTable* peers, cs_sched* sched);

  std::string path_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;  // eventfd: the accept thread ends when it is readable
  std::thread thread_;
};

}  // namespace keel::coopsched

#endif  // KEEL_COOPSCHED_NF_SOCKET_H_
