/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A minimal HTTP/1.0 server for Prometheus: GET /metrics answers with the
 * ingress's counters in text exposition format, anything else 404. One
 * thread (keel-ing-metrics) that sleeps in poll between scrapes.
 */
#ifndef KEEL_INGRESS_METRICS_SERVER_H_
#define KEEL_INGRESS_METRICS_SERVER_H_

#include <atomic>
#include <functional>
#include <string>
#include <thread>

namespace keel::ingress {

class MetricsServer {
 public:
  /* Serves |body()| on |addr| (HOST:PORT). */
  MetricsServer(std::string addr, std::function<std::string()> body);
  ~MetricsServer() { Stop(); }

  /* Binds and starts the thread; false with |*err| if the address is bad or taken. */
  bool Start(std::string* err);
  void Stop();

 private:
  void Loop();
  void Serve(int fd);

  std::string addr_;
  std::function<std::string()> body_;
  int listen_fd_ = -1;
  int stop_fd_ = -1;  /* eventfd: Stop wakes the poll */
  std::thread thread_;
};

}  // namespace keel::ingress

#endif  // KEEL_INGRESS_METRICS_SERVER_H_
