/* SPDX-License-Identifier: Apache-2.0 */
#include "metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace keel::ingress {

MetricsServer::MetricsServer(std::string addr, std::function<std::string()> body)
    : addr_(std::move(addr)), body_(std::move(body)) {}

bool MetricsServer::Start(std::string* err) {
  size_t colon = addr_.rfind(':');
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  int port = colon == std::string::npos ? -1 : std::atoi(addr_.c_str() + colon + 1);
  if (port <= 0 || port > 65535 || inet_pton(AF_INET, addr_.substr(0, colon).c_str(), &sa.sin_addr) != 1) {
    *err = "--metrics " + addr_ + ": want IPv4:PORT, e.g. 127.0.0.1:9103";
    return false;
  }
  sa.sin_port = htons(static_cast<uint16_t>(port));
  listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 || listen(listen_fd_, 16) != 0) {
    *err = "--metrics " + addr_ + ": " + std::strerror(errno);
    return false;
  }
  stop_fd_ = eventfd(0, EFD_CLOEXEC);
  thread_ = std::thread([this] { Loop(); });
  pthread_setname_np(thread_.native_handle(), "keel-ing-metrics");
  return true;
}

void MetricsServer::Stop() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    (void)!write(stop_fd_, &one, sizeof(one));
    thread_.join();
  }
  for (int* fd : {&listen_fd_, &stop_fd_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

void MetricsServer::Loop() {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  while (poll(fds, 2, -1) >= 0 || errno == EINTR) {
    if (fds[1].revents) return;
    if (!(fds[0].revents & POLLIN)) continue;
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Serve(fd);
    close(fd);
  }
}

void MetricsServer::Serve(int fd) {
  /* A scraper that never sends its request must not hold the thread up. */
  timeval tv{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  char req[1024];
  ssize_t n = recv(fd, req, sizeof(req) - 1, 0);
  if (n <= 0) return;
  req[n] = '\0';
  bool metrics = std::strncmp(req, "GET /metrics ", 13) == 0 || std::strncmp(req, "GET /metrics?", 13) == 0;
  std::string body = metrics ? body_() : "not found: try /metrics\n";
  std::string resp = std::string(metrics ? "HTTP/1.0 200 OK\r\n" : "HTTP/1.0 404 Not Found\r\n") +
                     (metrics ? "Content-Type: text/plain; version=0.0.4\r\n" : "Content-Type: text/plain\r\n") +
                     "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
  for (size_t off = 0; off < resp.size();) {
    ssize_t w = send(fd, resp.data() + off, resp.size() - off, MSG_NOSIGNAL);
    if (w <= 0) return;
    off += static_cast<size_t>(w);
  }
}

}  // namespace keel::ingress
