/* SPDX-License-Identifier: Apache-2.0 */
#include "tor_openflow.h"

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "keel/inband.h"

namespace keel::ingress {
namespace {

using keel::inband::Get16;
using keel::inband::Get32;
using keel::inband::Put16;
using keel::inband::Put32;

/* OpenFlow 1.3 (spec 1.3.5), only what this file speaks. */
constexpr uint8_t kVersion = 0x04;
constexpr size_t kHeaderLen = 8;
constexpr uint8_t kHello = 0;
constexpr uint8_t kError = 1;
constexpr uint8_t kEchoRequest = 2;
constexpr uint8_t kEchoReply = 3;
constexpr uint8_t kFeaturesRequest = 5;
constexpr uint8_t kFeaturesReply = 6;
constexpr uint8_t kFlowMod = 14;
constexpr uint8_t kBarrierRequest = 20;
constexpr uint8_t kBarrierReply = 21;
constexpr uint16_t kHelloElemVersionBitmap = 1;
constexpr size_t kFlowModFixedLen = 48; /* ofp_flow_mod up to its match, header included */
constexpr uint16_t kMatchOxm = 1;
constexpr uint32_t kNoBuffer = 0xffffffff;
constexpr uint32_t kAnyPort = 0xffffffff;
constexpr uint32_t kAnyGroup = 0xffffffff;

constexpr uint8_t kProtoTcp = 6;
constexpr uint8_t kProtoUdp = 17;

/* OXM basic-class field numbers. */
constexpr uint8_t kOxmEthType = 5;
constexpr uint8_t kOxmIpProto = 10;
constexpr uint8_t kOxmIpv4Src = 11;
constexpr uint8_t kOxmIpv4Dst = 12;
constexpr uint8_t kOxmTcpSrc = 13;
constexpr uint8_t kOxmTcpDst = 14;
constexpr uint8_t kOxmUdpSrc = 15;
constexpr uint8_t kOxmUdpDst = 16;

constexpr int kBackoffFirstMs = 100;
constexpr int kBackoffMaxMs = 2000;

void Put64(uint8_t* p, uint64_t v) {
  Put32(p, static_cast<uint32_t>(v >> 32));
  Put32(p + 4, static_cast<uint32_t>(v));
}

uint64_t Get64(const uint8_t* p) { return uint64_t{Get32(p)} << 32 | Get32(p + 4); }

void PutHeader(uint8_t* p, uint8_t type, uint16_t len, uint32_t xid) {
  p[0] = kVersion;
  p[1] = type;
  Put16(p + 2, len);
  Put32(p + 4, xid);
}

/* Appends one OXM TLV (class OPENFLOW_BASIC, no mask) of |len| <= 4 bytes of |value|. */
uint8_t* PutOxm(uint8_t* p, uint8_t field, uint8_t len, uint32_t value) {
  Put32(p, 0x80000000u | uint32_t{field} << 9 | len);
  for (int i = 0; i < len; i++) p[4 + i] = static_cast<uint8_t>(value >> (8 * (len - 1 - i)));
  return p + 4 + len;
}

void AppendMessage(std::string* out, uint8_t type, uint32_t xid) {
  size_t at = out->size();
  out->resize(at + kHeaderLen);
  PutHeader(reinterpret_cast<uint8_t*>(&(*out)[at]), type, kHeaderLen, xid);
}

/* Writes all of |buf|; false on an error or a write that timed out (SO_SNDTIMEO). */
bool WriteAll(int fd, const char* buf, size_t len) {
  while (len > 0) {
    ssize_t n = send(fd, buf, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    buf += n;
    len -= static_cast<size_t>(n);
  }
  return true;
}

/* Whether a peer's HELLO lets both sides speak 1.3: it names 1.3, or a later
 * version (then we agree on our 1.3) without a version bitmap that leaves 1.3
 * out. ovs-vswitchd names the highest version the bridge allows, with a
 * bitmap of all of them. */
bool HelloAllows13(const uint8_t* msg, size_t len) {
  if (msg[0] < kVersion) return false;
  for (size_t at = kHeaderLen; at + 4 <= len;) {
    uint16_t type = Get16(msg + at);
    uint16_t elen = Get16(msg + at + 2);
    if (elen < 4 || at + elen > len) break;
    if (type == kHelloElemVersionBitmap && elen >= 8) return (Get32(msg + at + 4) >> kVersion & 1) != 0;
    at += (elen + 7u) / 8 * 8;
  }
  return true;
}

}  // namespace

void AppendFlowMod(const FlowKey& flow, const RuleTemplate& t, uint32_t xid, std::string* out) {
  bool ports = flow.proto == kProtoTcp || flow.proto == kProtoUdp;
  size_t oxm_len = 6 + 5 + 8 + 8 + (ports ? 12 : 0);
  size_t match_len = 4 + oxm_len;
  size_t match_padded = (match_len + 7) / 8 * 8;
  size_t total = kFlowModFixedLen + match_padded + t.instructions.size();

  size_t at = out->size();
  out->resize(at + total, '\0');
  uint8_t* p = reinterpret_cast<uint8_t*>(&(*out)[at]);
  PutHeader(p, kFlowMod, static_cast<uint16_t>(total), xid);
  Put64(p + 8, t.cookie);
  Put64(p + 16, 0); /* cookie_mask */
  p[24] = t.table_id;
  p[25] = 0; /* OFPFC_ADD */
  Put16(p + 26, t.idle_timeout_s);
  Put16(p + 28, 0); /* hard_timeout */
  Put16(p + 30, t.priority);
  Put32(p + 32, kNoBuffer);
  Put32(p + 36, kAnyPort);
  Put32(p + 40, kAnyGroup);
  Put16(p + 44, t.flags);
  /* p + 46: 2 bytes of pad, zero */

  uint8_t* m = p + kFlowModFixedLen;
  Put16(m, kMatchOxm);
  Put16(m + 2, static_cast<uint16_t>(match_len));
  uint8_t* o = m + 4;
  o = PutOxm(o, kOxmEthType, 2, 0x0800);
  o = PutOxm(o, kOxmIpProto, 1, flow.proto);
  o = PutOxm(o, kOxmIpv4Src, 4, flow.src_ip);
  o = PutOxm(o, kOxmIpv4Dst, 4, flow.dst_ip);
  if (flow.proto == kProtoTcp) {
    o = PutOxm(o, kOxmTcpSrc, 2, flow.src_port);
    o = PutOxm(o, kOxmTcpDst, 2, flow.dst_port);
  } else if (flow.proto == kProtoUdp) {
    o = PutOxm(o, kOxmUdpSrc, 2, flow.src_port);
    o = PutOxm(o, kOxmUdpDst, 2, flow.dst_port);
  }
  /* The match's padding is already zero. */
  std::memcpy(m + match_padded, t.instructions.data(), t.instructions.size());
}

TorOpenFlow::TorOpenFlow(std::string path, int timeout_ms)
    : path_(path.rfind("unix:", 0) == 0 ? path.substr(5) : std::move(path)), timeout_ms_(timeout_ms) {}

TorOpenFlow::~TorOpenFlow() {
  Stop();
  if (wake_fd_ >= 0) close(wake_fd_);
}

void TorOpenFlow::Start() {
  if (thread_.joinable()) return;
  if (wake_fd_ < 0) wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  stopping_.store(false);
  thread_ = std::thread([this] { Loop(); });
  pthread_setname_np(thread_.native_handle(), "keel-ing-of");
}

void TorOpenFlow::Stop() {
  if (!thread_.joinable()) return;
  stopping_.store(true);
  Wake();
  thread_.join();
}

void TorOpenFlow::Wake() {
  uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));
}

void TorOpenFlow::DrainWake() {
  uint64_t n;
  (void)!read(wake_fd_, &n, sizeof(n));
}

void TorOpenFlow::Install(const std::vector<std::pair<FlowKey, const RuleTemplate*>>& rules, Done done) {
  std::vector<bool> ok(rules.size(), false);
  std::unique_lock<std::mutex> wl(write_mu_);
  uint64_t dpid = DatapathId();
  Pending p;
  std::string buf;
  if (fd_ >= 0) {
    for (size_t i = 0; i < rules.size(); i++) {
      const RuleTemplate* t = rules[i].second;
      if (t == nullptr || t->instructions.size() > kMaxInstructionBytes ||
          (t->datapath_id != 0 && t->datapath_id != dpid)) {
        continue;
      }
      AppendFlowMod(rules[i].first, *t, next_xid_++, &buf);
      p.sent.push_back(i);
      ok[i] = true;
    }
  }
  if (p.sent.empty()) {
    wl.unlock();
    done(ok);
    return;
  }
  uint32_t barrier_xid = next_xid_++;
  p.barrier_xid = barrier_xid;
  AppendMessage(&buf, kBarrierRequest, barrier_xid);
  p.ok = std::move(ok);
  p.done = std::move(done);
  bool first;
  {
    std::lock_guard<std::mutex> pl(pending_mu_);
    p.deadline = Clock::now() + std::chrono::milliseconds(timeout_ms_);
    first = pending_.empty();
    pending_.push_back(std::move(p));
  }
  /* The connection thread may be sleeping without a deadline. */
  if (first) Wake();
  bool written = WriteAll(fd_, buf.data(), buf.size());
  /* A partial message would garble the stream: the connection thread sees
   * the shutdown, drops the connection and fails what is pending. */
  if (!written) shutdown(fd_, SHUT_RDWR);
  wl.unlock();
  if (written) return;

  Done failed;
  std::vector<bool> all_false;
  {
    std::lock_guard<std::mutex> pl(pending_mu_);
    auto it = std::find_if(pending_.begin(), pending_.end(),
                           [&](const Pending& q) { return q.barrier_xid == barrier_xid; });
    if (it == pending_.end()) return; /* the connection thread failed it already */
    failed = std::move(it->done);
    all_false.assign(it->ok.size(), false);
    pending_.erase(it);
  }
  failed(all_false);
}

void TorOpenFlow::Loop() {
  int backoff = kBackoffFirstMs;
  while (!stopping_.load()) {
    int fd = Connect();
    if (fd < 0) {
      if (!Backoff(backoff)) break;
      backoff = std::min(backoff * 2, kBackoffMaxMs);
      continue;
    }
    Phase phase = Phase::kHello;
    Clock::time_point handshake_deadline = Clock::now() + std::chrono::milliseconds(timeout_ms_);
    std::string rbuf;
    bool alive = true;
    while (alive && !stopping_.load()) {
      int wait = ExpireDue();
      if (phase != Phase::kUp) {
        auto left = std::chrono::ceil<std::chrono::milliseconds>(handshake_deadline - Clock::now()).count();
        if (left <= 0) {
          std::fprintf(stderr, "keel-ingress: openflow %s: no handshake within %d ms; reconnecting\n",
                       path_.c_str(), timeout_ms_);
          alive = false;
          break;
        }
        wait = wait < 0 ? static_cast<int>(left) : std::min(wait, static_cast<int>(left));
      }
      pollfd fds[2] = {{fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
      if (poll(fds, 2, wait) < 0) {
        if (errno == EINTR) continue;
        alive = false;
        break;
      }
      if (fds[1].revents) DrainWake();
      if (fds[0].revents) {
        bool was_up = phase == Phase::kUp;
        alive = ReadMessages(fd, &rbuf, &phase);
        if (!was_up && phase == Phase::kUp) backoff = kBackoffFirstMs;
      }
    }
    bool was_up = phase == Phase::kUp;
    Drop(fd);
    if (stopping_.load()) break;
    if (was_up) {
      std::fprintf(stderr, "keel-ingress: openflow %s: connection lost; reconnecting\n", path_.c_str());
    }
    if (!Backoff(backoff)) break;
    if (!was_up) backoff = std::min(backoff * 2, kBackoffMaxMs);
  }
  FailAllPending();
}

int TorOpenFlow::Connect() {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path_.size() >= sizeof(sa.sun_path)) {
    if (!logged_connect_) std::fprintf(stderr, "keel-ingress: openflow %s: path too long\n", path_.c_str());
    logged_connect_ = true;
    return -1;
  }
  std::memcpy(sa.sun_path, path_.data(), path_.size());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    if (!logged_connect_) {
      std::fprintf(stderr, "keel-ingress: openflow %s: connect: %s (retrying)\n", path_.c_str(),
                   std::strerror(errno));
    }
    logged_connect_ = true;
    close(fd);
    return -1;
  }
  /* A switch that stops reading must not hold a writer up for longer. */
  timeval tv{timeout_ms_ / 1000, (timeout_ms_ % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  /* HELLO with a version bitmap element naming 1.3 alone. */
  uint8_t bitmap[8];
  Put16(bitmap, kHelloElemVersionBitmap);
  Put16(bitmap + 2, 8);
  Put32(bitmap + 4, 1u << kVersion);
  uint32_t xid;
  {
    std::lock_guard<std::mutex> wl(write_mu_);
    xid = next_xid_++;
  }
  if (!SendMessage(fd, kHello, xid, bitmap, sizeof(bitmap))) {
    close(fd);
    return -1;
  }
  return fd;
}

bool TorOpenFlow::SendMessage(int fd, uint8_t type, uint32_t xid, const uint8_t* body, size_t body_len) {
  std::string msg(kHeaderLen + body_len, '\0');
  PutHeader(reinterpret_cast<uint8_t*>(msg.data()), type, static_cast<uint16_t>(msg.size()), xid);
  if (body_len > 0) std::memcpy(&msg[kHeaderLen], body, body_len);
  std::lock_guard<std::mutex> wl(write_mu_);
  return WriteAll(fd, msg.data(), msg.size());
}

bool TorOpenFlow::ReadMessages(int fd, std::string* rbuf, Phase* phase) {
  char chunk[16384];
  for (;;) {
    ssize_t n = recv(fd, chunk, sizeof(chunk), MSG_DONTWAIT);
    if (n > 0) {
      rbuf->append(chunk, static_cast<size_t>(n));
      if (static_cast<size_t>(n) < sizeof(chunk)) break;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    return false; /* closed by the peer, or an error */
  }
  size_t at = 0;
  bool ok = true;
  while (ok && rbuf->size() - at >= kHeaderLen) {
    const uint8_t* msg = reinterpret_cast<const uint8_t*>(rbuf->data()) + at;
    uint16_t len = Get16(msg + 2);
    if (len < kHeaderLen) return false;
    if (rbuf->size() - at < len) break;
    ok = Handle(fd, msg, len, phase);
    at += len;
  }
  rbuf->erase(0, at);
  return ok;
}

bool TorOpenFlow::Handle(int fd, const uint8_t* msg, size_t len, Phase* phase) {
  uint8_t type = msg[1];
  uint32_t xid = Get32(msg + 4);
  if (*phase == Phase::kHello) {
    if (type != kHello) return false;
    if (!HelloAllows13(msg, len)) {
      if (!logged_version_) {
        std::fprintf(stderr, "keel-ingress: openflow %s: the switch speaks OpenFlow version 0x%02x, not 1.3; retrying\n",
                     path_.c_str(), msg[0]);
      }
      logged_version_ = true;
      return false;
    }
    uint32_t req_xid;
    {
      std::lock_guard<std::mutex> wl(write_mu_);
      req_xid = next_xid_++;
    }
    *phase = Phase::kFeatures;
    return SendMessage(fd, kFeaturesRequest, req_xid, nullptr, 0);
  }
  if (msg[0] != kVersion) return false;
  switch (type) {
    case kEchoRequest:
      return SendMessage(fd, kEchoReply, xid, msg + kHeaderLen, len - kHeaderLen);
    case kFeaturesReply: {
      if (*phase != Phase::kFeatures || len < 16) return *phase == Phase::kUp;
      datapath_id_.store(Get64(msg + 8), std::memory_order_release);
      {
        std::lock_guard<std::mutex> wl(write_mu_);
        fd_ = fd;
      }
      connects_.fetch_add(1);
      logged_connect_ = false;
      *phase = Phase::kUp;
      return true;
    }
    case kError:
      /* Before the handshake is over, an error is about the handshake. */
      if (*phase != Phase::kUp) return false;
      OnError(xid, msg, len);
      return true;
    case kBarrierReply:
      OnBarrierReply(xid);
      return true;
    default:
      return true;
  }
}

void TorOpenFlow::OnError(uint32_t xid, const uint8_t* msg, size_t len) {
  if (!logged_error_ && len >= 12) {
    std::fprintf(stderr, "keel-ingress: openflow %s: the switch refused a message: OFPT_ERROR type %u code %u "
                         "(further errors not logged)\n",
                 path_.c_str(), Get16(msg + 8), Get16(msg + 10));
    logged_error_ = true;
  }
  Done failed;
  std::vector<bool> all_false;
  {
    std::lock_guard<std::mutex> pl(pending_mu_);
    for (auto it = pending_.begin(); it != pending_.end(); ++it) {
      /* The flow-mods' xids are the sent.size() xids before the barrier's
       * (unsigned arithmetic keeps that true across wrap-around). */
      uint32_t back = it->barrier_xid - xid;
      if (back >= 1 && back <= it->sent.size()) {
        it->ok[it->sent[it->sent.size() - back]] = false;
        return;
      }
      if (back == 0) {
        /* The barrier itself was refused: no reply will come for it. */
        failed = std::move(it->done);
        all_false.assign(it->ok.size(), false);
        pending_.erase(it);
        break;
      }
    }
  }
  if (failed) failed(all_false);
}

void TorOpenFlow::OnBarrierReply(uint32_t xid) {
  Pending done;
  {
    std::lock_guard<std::mutex> pl(pending_mu_);
    auto it = std::find_if(pending_.begin(), pending_.end(),
                           [&](const Pending& q) { return q.barrier_xid == xid; });
    if (it == pending_.end()) return; /* timed out already */
    done = std::move(*it);
    pending_.erase(it);
  }
  done.done(done.ok);
}

int TorOpenFlow::ExpireDue() {
  for (;;) {
    Pending due;
    int wait;
    {
      std::lock_guard<std::mutex> pl(pending_mu_);
      if (pending_.empty()) return -1;
      Clock::time_point now = Clock::now();
      /* Deadlines grow along the deque: they are set in the order written. */
      if (pending_.front().deadline > now) {
        wait = static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(pending_.front().deadline - now).count());
        return std::max(wait, 1);
      }
      due = std::move(pending_.front());
      pending_.pop_front();
    }
    due.done(std::vector<bool>(due.ok.size(), false));
  }
}

void TorOpenFlow::Drop(int fd) {
  {
    std::lock_guard<std::mutex> wl(write_mu_);
    fd_ = -1;
  }
  datapath_id_.store(0, std::memory_order_release);
  close(fd);
  FailAllPending();
}

void TorOpenFlow::FailAllPending() {
  std::deque<Pending> failed;
  {
    std::lock_guard<std::mutex> pl(pending_mu_);
    failed.swap(pending_);
  }
  for (Pending& p : failed) p.done(std::vector<bool>(p.ok.size(), false));
}

bool TorOpenFlow::Backoff(int ms) {
  Clock::time_point until = Clock::now() + std::chrono::milliseconds(ms);
  while (!stopping_.load()) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) return true;
    pollfd pfd{wake_fd_, POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(left)) > 0) DrainWake();
  }
  return false;
}

}  // namespace keel::ingress
