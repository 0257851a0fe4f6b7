/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/redis_mirror.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "keel/monitor.h"

namespace keel {

static constexpr auto kReconnectBackoff = std::chrono::milliseconds(500);
static constexpr timeval kIoTimeout = {0, 200 * 1000};

std::string StateKey(const std::string& tenant, const std::string& chain, size_t position,
                     const std::string& nf) {
  return "keel:state:" + tenant + ":" + chain + ":" + std::to_string(position) + "-" + nf;
}

bool ReadRedisAuthFile(const std::string& path, RedisAuth* auth, std::string* err) {
  std::ifstream f(path);
  if (!f) {
    *err = path + ": " + std::strerror(errno);
    return false;
  }
  std::string line, extra;
  std::getline(f, line);
  std::istringstream words(line);
  RedisAuth a;
  if (!(words >> a.user >> a.password) || words >> extra || (f >> extra)) {
    *err = path + ": want one line \"USER PASSWORD\"";
    return false;
  }
  *auth = std::move(a);
  return true;
}

RedisMirror::RedisMirror(const std::string& addr, std::chrono::milliseconds period, size_t max_pending)
    : period_(period), max_pending_(max_pending) {
  if (addr.rfind("unix:", 0) == 0) {
    unix_path_ = addr.substr(5);
    return;
  }
  size_t colon = addr.rfind(':');
  host_ = addr.substr(0, colon);
  port_ = colon == std::string::npos ? 6379 : std::atoi(addr.c_str() + colon + 1);
}

std::string RedisMirror::Address() const {
  return unix_path_.empty() ? host_ + ":" + std::to_string(port_) : "unix:" + unix_path_;
}

RedisMirror::~RedisMirror() {
  Stop(std::chrono::milliseconds(0));
  Disconnect();
}

bool RedisMirror::Connect() {
  if (ctx_) return true;
  auto now = std::chrono::steady_clock::now();
  if (now < next_connect_) return false;
  next_connect_ = now + kReconnectBackoff;
  redisContext* c = unix_path_.empty() ? redisConnectWithTimeout(host_.c_str(), port_, kIoTimeout)
                                       : redisConnectUnixWithTimeout(unix_path_.c_str(), kIoTimeout);
  if (!c || c->err) {
    if (c) redisFree(c);
    return false;
  }
  redisSetTimeout(c, kIoTimeout);
  if (!LogIn(c)) {
    redisFree(c);
    return false;
  }
  ctx_ = c;
  connected_ = true;
  reconnects_++;
  return true;
}

/* AUTH on a new connection, if there is a user; a refusal is reported once
 * (Redis' reason, e.g. WRONGPASS, never the password). */
bool RedisMirror::LogIn(redisContext* c) {
  if (auth_.user.empty()) return true;
  auto* r = static_cast<redisReply*>(redisCommand(c, "AUTH %s %s", auth_.user.c_str(), auth_.password.c_str()));
  bool ok = r && r->type != REDIS_REPLY_ERROR;
  if (!ok && !refused_ && r)
    std::fprintf(stderr, "keel: redis %s refuses the login of user %s (--redis-auth-file): %s; NF state is neither loaded nor mirrored until it accepts it\n",
                 Address().c_str(), auth_.user.c_str(), r->str);
  if (r) {
    refused_ = !ok;
    freeReplyObject(r);
  }
  return ok;
}

void RedisMirror::Disconnect() {
  if (ctx_) redisFree(ctx_);
  ctx_ = nullptr;
  connected_ = false;
}

size_t RedisMirror::Add(FlowState* state, const std::string& key) {
  state->set_mirrored(true);
  tables_.push_back(Table{state, key, {}, {}, {}});
  if (!Connect()) {
    std::fprintf(stderr, "keel: redis %s %s; %s starts with empty state\n", Address().c_str(),
                 refused_ ? "refused the login" : "unreachable", key.c_str());
    return 0;
  }
  size_t loaded = 0;
  std::string cursor = "0";
  do {
    auto* r = static_cast<redisReply*>(
        redisCommand(ctx_, "HSCAN %s %s COUNT 1000", key.c_str(), cursor.c_str()));
    if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
      if (r && r->type == REDIS_REPLY_ERROR)
        std::fprintf(stderr, "keel: redis %s: HSCAN %s: %s; it starts with empty state\n", Address().c_str(),
                     key.c_str(), r->str);
      if (r) freeReplyObject(r);
      Disconnect();
      break;
    }
    cursor.assign(r->element[0]->str, r->element[0]->len);
    const redisReply* kv = r->element[1];
    for (size_t i = 0; i + 1 < kv->elements; i += 2) {
      const redisReply* f = kv->element[i];
      const redisReply* v = kv->element[i + 1];
      if (f->len != sizeof(FlowKey) || v->len == 0 || v->len > kMaxStateValue) continue;
      StateRecord rec;
      std::memcpy(&rec.key, f->str, sizeof(FlowKey));
      rec.len = static_cast<uint8_t>(v->len);
      std::memcpy(rec.data, v->str, v->len);
      if (state->Preload(rec)) loaded++;
    }
    freeReplyObject(r);
  } while (cursor != "0");
  return loaded;
}

void RedisMirror::Start() {
  pid_t packet_tid = gettid();
  thread_ = std::thread([this, packet_tid] { Loop(packet_tid); });
  pthread_setname_np(thread_.native_handle(), "keel-redis");
  MoveOffCore(thread_.native_handle(), PinnedCore(packet_tid));
}

void RedisMirror::Stop(std::chrono::milliseconds deadline) {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  /* Last round: what the packet thread handed over at shutdown. */
  auto end = std::chrono::steady_clock::now() + deadline;
  next_connect_ = {};
  do {
    Round();
    bool empty = true;
    for (const Table& t : tables_) empty = empty && t.pending.empty();
    if (empty) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    next_connect_ = {};
  } while (std::chrono::steady_clock::now() < end);
}

/* Writes a table's pending changes and asks for its pulls in one pipeline;
 * false (and nothing lost) if Redis failed. */
bool RedisMirror::Flush(Table* t) {
  size_t sent = 0;
  for (const auto& [k, rec] : t->pending) {
    if (rec.len)
      redisAppendCommand(ctx_, "HSET %s %b %b", t->key.c_str(), &rec.key, sizeof(FlowKey),
                         rec.data, static_cast<size_t>(rec.len));
    else
      redisAppendCommand(ctx_, "HDEL %s %b", t->key.c_str(), &rec.key, sizeof(FlowKey));
    sent++;
  }
  for (const FlowKey& k : t->pulls)
    redisAppendCommand(ctx_, "HGET %s %b", t->key.c_str(), &k, sizeof(FlowKey));
  for (size_t i = 0; i < sent + t->pulls.size(); i++) {
    void* reply = nullptr;
    if (redisGetReply(ctx_, &reply) != REDIS_OK || !reply) return false;
    auto* r = static_cast<redisReply*>(reply);
    if (r->type == REDIS_REPLY_ERROR && !write_refused_) {
      write_refused_ = true;
      std::fprintf(stderr, "keel: redis %s refuses %s of %s: %s\n", Address().c_str(), i < sent ? "a write" : "a read",
                   t->key.c_str(), r->str);
    }
    if (i >= sent) {
      StateRecord rec;
      rec.key = t->pulls[i - sent];
      rec.len = 0;
      if (r->type == REDIS_REPLY_STRING && r->len > 0 && r->len <= kMaxStateValue) {
        rec.len = static_cast<uint8_t>(r->len);
        std::memcpy(rec.data, r->str, r->len);
      }
      t->pulled.push_back(rec);
    }
    freeReplyObject(r);
  }
  writes_ += sent;
  t->pending.clear();
  t->pulls.clear();
  return true;
}

void RedisMirror::Round() {
  for (Table& t : tables_) {
    std::vector<StateRecord> dirty;
    t.state->Exchange(&dirty, &t.pulls, &t.pulled);
    /* Full: the newest flows' changes are dropped. Dropping the oldest
     * instead would need an order kept beside the map, for no better
     * outcome: either way Redis misses flows the local table still has. */
    for (const StateRecord& r : dirty) {
      if (t.pending.size() >= max_pending_ && !t.pending.count(r.key)) {
        dropped_changes_++;
        continue;
      }
      t.pending[r.key] = r;
    }
  }
  if (!Connect()) {
    /* No store to ask: the flows stay unknown (FlowState asks once). */
    for (Table& t : tables_) t.pulls.clear();
    return;
  }
  for (Table& t : tables_) {
    if (t.pending.empty() && t.pulls.empty()) continue;
    if (!Flush(&t)) {
      Disconnect();
      return;
    }
  }
}

void RedisMirror::Loop(pid_t packet_tid) {
  int core = PinnedCore(packet_tid);
  std::unique_lock<std::mutex> l(mu_);
  while (!stop_) {
    l.unlock();
    FollowOffCore(packet_tid, &core);
    Round();
    l.lock();
    cv_.wait_for(l, period_, [this] { return stop_; });
  }
}

}  // namespace keel
