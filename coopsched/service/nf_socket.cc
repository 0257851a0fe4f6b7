// SPDX-License-Identifier: Apache-2.0
#include "nf_socket.h"

#include <grpcpp/server_posix.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace keel::coopsched {

bool NfSocket::Listen(const std::string& path, std::string* why) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) {
    *why = path + ": longer than a unix socket path may be";
    return false;
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  struct stat st;
  if (lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode)) unlink(path.c_str());
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  stop_fd_ = eventfd(0, EFD_CLOEXEC);
  if (listen_fd_ < 0 || stop_fd_ < 0) {
    *why = std::string("socket: ") + std::strerror(errno);
    return false;
  }
  // Created 0700 (umask), so never reachable by others, then 0600 as the admin socket.
  mode_t old_umask = umask(0077);
  int rc = bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  int e = errno;
  umask(old_umask);
  if (rc == 0) chmod(path.c_str(), 0600);
  if (rc != 0 || listen(listen_fd_, 64) != 0) {
    *why = path + ": " + std::strerror(rc != 0 ? e : errno);
    return false;
  }
  path_ = path;
  return true;
}

void NfSocket::Serve(grpc::Server* server, PeerTable* peers, cs_sched* sched) {
  thread_ = std::thread([=, this] { Accept(server, peers, sched); });
}

void NfSocket::Accept(grpc::Server* server, PeerTable* peers, cs_sched* sched) {
  for (;;) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents) return;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) usleep(10000);  // EMFILE...
      continue;
    }
    ucred cred{};
    socklen_t len = sizeof cred;
    cs_caller caller{};
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.pid <= 0 ||
        cs_proc_starttime("/proc", cred.pid, 0, &caller.start) != 0) {
      close(fd);
      cs_sched_refused(sched, CS_REFUSED_CALLER, "", cred.pid,
                       "check caller: cannot tell which process connected to the NF socket");
      continue;
    }
    caller.pid = cred.pid;
    peers->Set(fd, caller);
    grpc::AddInsecureChannelFromFd(server, fd);
  }
}

void NfSocket::Stop() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    (void)!write(stop_fd_, &one, sizeof one);
    thread_.join();
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  if (stop_fd_ >= 0) close(stop_fd_);
  listen_fd_ = stop_fd_ = -1;
  if (!path_.empty()) unlink(path_.c_str());
  path_.clear();
}

}  // namespace keel::coopsched
