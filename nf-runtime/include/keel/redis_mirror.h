/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Mirrors NF flow tables into Redis (Galleon §4.2): a background thread
 * writes the changes each table hands over, answers pulls for flows a table
 * does not know, and reconnects when Redis goes away. The packet path only
 * ever calls FlowState::Sync, which never waits for Redis.
 *
 * Each table is one Redis hash, keel:state:<tenant>:<chain>:<K>-<nf>, whose
 * fields are 16-byte flow keys; two chains never share a hash.
 */
#ifndef KEEL_REDIS_MIRROR_H_
#define KEEL_REDIS_MIRROR_H_

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <unordered_map>
#include <vector>

#include "keel/state.h"

struct redisContext;

namespace keel {

/* The Redis hash that holds the state of NF |position| (0-based) named |nf|. */
std::string StateKey(const std::string& tenant, const std::string& chain, size_t position,
                     const std::string& nf);

/* A Redis ACL user and its password (keel-agent gives each chain instance one
 * that may touch only that instance's keys). */
struct RedisAuth {
  std::string user;
  std::string password;
};

/* Reads a login file (--redis-auth-file): one line "USER PASSWORD". False with
 * the reason in |*err| (which never holds the file's content) if it cannot be
 * read or holds anything else. */
bool ReadRedisAuthFile(const std::string& path, RedisAuth* auth, std::string* err);

class RedisMirror {
 public:
  /* |addr| is HOST:PORT or unix:PATH; |period| is how often changes are
   * written. While Redis is away each table holds the latest change of at
   * most |max_pending| flows: a change to a flow already held replaces it,
   * a change to another flow is dropped (the newest is lost, the local table
   * keeps it) and counted in dropped_changes(). */
  RedisMirror(const std::string& addr, std::chrono::milliseconds period, size_t max_pending = 1 << 20);
  ~RedisMirror();
  /* The Redis address as given: HOST:PORT or unix:PATH. */
  std::string Address() const;
  /* Before Add: log in as |auth| (AUTH) on every connection. A refused login
   * is reported once, on stderr, and the mirror behaves as with Redis
   * unreachable (empty state at start; changes held and retried). */
  void SetAuth(RedisAuth auth) { auth_ = std::move(auth); }

  /* Before Start: mirrors |state| into hash |key| and loads what the hash
   * already holds into it, so a restarted NF continues with its state.
   * Returns the number of flows loaded (0 if Redis is unreachable). */
  size_t Add(FlowState* state, const std::string& key);
  /* Starts the mirror thread (keel-redis, SCHED_OTHER). The caller is the
   * packet thread: the mirror keeps off its core, following it when
   * coopsched moves it. */
  void Start();
  /* Writes what is still pending (for at most |deadline|) and stops. */
  void Stop(std::chrono::milliseconds deadline);

  bool connected() const { return connected_.load(); }
  uint64_t writes() const { return writes_.load(); }
  uint64_t reconnects() const { return reconnects_.load(); }
  uint64_t dropped_changes() const { return dropped_changes_.load(); }

 private:
  struct Table {
    FlowState* state;
    std::string key;
    std::unordered_map<FlowKey, StateRecord, FlowKeyHash> pending; /* latest change per flow */
    std::vector<FlowKey> pulls;
    std::vector<StateRecord> pulled;
  };
  bool Connect();
  bool LogIn(redisContext* c);
  void Disconnect();
  bool Flush(Table* t);
  void Loop(pid_t packet_tid);
  void Round();

  std::string host_;
  int port_ = 0;
  std::string unix_path_; /* set for unix:PATH: a unix socket instead of TCP */
  RedisAuth auth_;        /* user "": no AUTH */
  bool refused_ = false;  /* the last login was refused (reported once) */
  bool write_refused_ = false; /* Redis refused a write (reported once) */
  std::chrono::milliseconds period_;
  size_t max_pending_;
  redisContext* ctx_ = nullptr;
  std::chrono::steady_clock::time_point next_connect_{};
  std::vector<Table> tables_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::atomic<bool> connected_{false};
  std::atomic<uint64_t> writes_{0};
  std::atomic<uint64_t> reconnects_{0};
  std::atomic<uint64_t> dropped_changes_{0};
};

}  // namespace keel

#endif  // KEEL_REDIS_MIRROR_H_
