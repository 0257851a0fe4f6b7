/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/state.h"

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "keel/flow_move.h"
#include "keel/redis_mirror.h"

namespace keel {
namespace {

using std::chrono::milliseconds;

FlowKey Flow(uint16_t port) {
  FlowKey k;
  k.src_ip = 0xc6120001;
  k.dst_ip = 0xc6130001;
  k.src_port = port;
  k.dst_port = 80;
  k.proto = kProtoTcp;
  return k;
}

struct Value {
  uint32_t a;
  uint16_t b;
};

TEST(FlowState, LocalReadUpdateRemove) {
  FlowState s;
  Value v{};
  EXPECT_FALSE(s.Read(Flow(1), &v));
  s.Update(Flow(1), Value{7, 9});
  ASSERT_TRUE(s.Read(Flow(1), &v));
  EXPECT_EQ(v.a, 7u);
  EXPECT_EQ(v.b, 9);
  s.Remove(Flow(1));
  EXPECT_FALSE(s.Read(Flow(1), &v));
  EXPECT_EQ(s.size(), 0u);
}

TEST(FlowState, AFloodOfNewFlowsStaysWithinTheDefaultCapacity) {
  /* Spoofed 5-tuples, each seen once: memory must not follow them. */
  FlowState s;
  for (uint32_t i = 0; i < 200000; i++) {
    FlowKey k = Flow(static_cast<uint16_t>(i));
    k.src_ip = 0xc6120000 + (i >> 16);
    s.Update(k, Value{i, 0});
  }
  EXPECT_LE(s.size(), 65536u);
  EXPECT_EQ(s.refusals(), 200000u - s.size());
}

FlowKey Spoofed(uint32_t i) {
  FlowKey k = Flow(static_cast<uint16_t>(i));
  k.src_ip = 0x0a000000 + (i >> 16);
  return k;
}

TEST(FlowState, IdleFlowsMakeRoomAndAreCountedLikeConntrack) {
  FlowState s;
  s.set_limits(FlowLimits{1000, 30000});
  const uint64_t t0 = s.now_ms();
  for (uint32_t i = 0; i < 100000; i++) {
    if (i % 1000 == 0) s.Advance(t0 + i * 31); /* 1000 new flows per 31 s: the last lot is idle */
    s.Update(Spoofed(i), Value{i, 0});
    ASSERT_LE(s.size(), 1000u);
  }
  EXPECT_EQ(s.size(), 1000u);
  EXPECT_EQ(s.evictions(), 99000u) << "every flow but the last 1000 was evicted idle";
  EXPECT_EQ(s.refusals(), 0u);
  EXPECT_EQ(s.flows(), 1000u);

  /* Full of flows in use: a new one is refused, the ones in use stay. */
  Value v;
  EXPECT_FALSE(s.Update(Flow(1), Value{1, 1}));
  EXPECT_EQ(s.refusals(), 1u);
  EXPECT_TRUE(s.Read(Spoofed(99999), &v));

  /* A flow read now is not idle later; the others expire without new flows. */
  const uint64_t t1 = s.now_ms() + 20000;
  s.Advance(t1);
  ASSERT_TRUE(s.Read(Spoofed(99000), &v));
  for (int i = 0; i < 100; i++) s.Advance(t1 + 15000 + i); /* the others idle 35 s, it 15 s */
  EXPECT_EQ(s.size(), 1u) << "Advance sweeps idle flows a few at a time";
  EXPECT_TRUE(s.Read(Spoofed(99000), &v));
}

TEST(FlowState, EvictedFlowsAreDeletedFromTheStore) {
  FlowState s;
  s.set_mirrored(true);
  s.set_limits(FlowLimits{10, 1000});
  s.Update(Flow(1), Value{1, 1});
  s.Sync();
  std::vector<StateRecord> dirty, pulled;
  std::vector<FlowKey> pulls;
  s.Exchange(&dirty, &pulls, &pulled);
  s.Advance(s.now_ms() + 1000);
  s.Sync();
  dirty.clear();
  s.Exchange(&dirty, &pulls, &pulled);
  ASSERT_EQ(dirty.size(), 1u);
  EXPECT_EQ(dirty[0].key, Flow(1));
  EXPECT_EQ(dirty[0].len, 0) << "a deletion";
}

TEST(FlowState, HandsChangesAndPullsToTheMirror) {
  FlowState s;
  s.set_mirrored(true);
  s.Update(Flow(1), Value{1, 1});
  s.Update(Flow(1), Value{2, 2}); /* one record for the latest value */
  s.Update(Flow(2), Value{3, 3});
  s.Remove(Flow(2));
  Value v;
  EXPECT_FALSE(s.Read(Flow(3), &v));
  EXPECT_FALSE(s.Read(Flow(3), &v)); /* asked once */
  s.Sync();
  std::vector<StateRecord> dirty, pulled;
  std::vector<FlowKey> pulls;
  s.Exchange(&dirty, &pulls, &pulled);
  ASSERT_EQ(dirty.size(), 2u);
  EXPECT_EQ(dirty[0].key, Flow(1));
  EXPECT_EQ(reinterpret_cast<Value*>(dirty[0].data)->a, 2u);
  EXPECT_EQ(dirty[1].key, Flow(2));
  EXPECT_EQ(dirty[1].len, 0) << "a removal is a record without value";
  ASSERT_EQ(pulls.size(), 1u);
  EXPECT_EQ(pulls[0], Flow(3));

  /* The mirror answers the pull; the next Sync makes the flow known. */
  StateRecord found;
  found.key = Flow(3);
  found.len = sizeof(Value);
  Value stored{42, 4};
  std::memcpy(found.data, &stored, sizeof stored);
  pulled.push_back(found);
  s.Exchange(&dirty, &pulls, &pulled);
  EXPECT_FALSE(s.Read(Flow(3), &v));
  s.Sync();
  ASSERT_TRUE(s.Read(Flow(3), &v));
  EXPECT_EQ(v.a, 42u);
}

/* A redis-server of the test's own on a free loopback port. */
class RedisServer {
 public:
  /* |port| 0: the first free port from a per-process start. */
  explicit RedisServer(int port = 0) {
    int first = port ? port : 26379 + getpid() % 2000, last = port ? port : 65000;
    for (port_ = first; port_ <= last; port_ += 7) {
      pid_ = fork();
      if (pid_ == 0) {
        std::string p = std::to_string(port_);
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        std::string sock = UnixPath(port_);
        execlp("redis-server", "redis-server", "--port", p.c_str(), "--bind", "127.0.0.1",
               "--unixsocket", sock.c_str(), "--unixsocketperm", "700",
               "--save", "", "--appendonly", "no", "--loglevel", "warning", nullptr);
        _exit(127);
      }
      for (int i = 0; i < 50; i++) {
        std::this_thread::sleep_for(milliseconds(20));
        int status;
        if (waitpid(pid_, &status, WNOHANG) == pid_) {
          pid_ = -1;
          if (WIFEXITED(status) && WEXITSTATUS(status) == 127) return; /* not installed */
          break; /* port taken: try the next */
        }
        redisContext* c = redisConnect("127.0.0.1", port_);
        bool up = c && !c->err;
        if (c) redisFree(c);
        if (up) return;
      }
      Stop();
    }
  }
  ~RedisServer() { Stop(); }
  void Stop() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
    pid_ = -1;
  }
  bool up() const { return pid_ > 0; }
  std::string addr() const { return "127.0.0.1:" + std::to_string(port_); }
  /* The same server through its unix socket. */
  std::string unix_addr() const { return "unix:" + UnixPath(port_); }
  static std::string UnixPath(int port) { return "/tmp/keel-redis-test-" + std::to_string(port) + ".sock"; }
  int port() const { return port_; }

 private:
  pid_t pid_ = -1;
  int port_ = 0;
};

TEST(RedisMirror, RestartedInstanceContinuesWithItsState) {
  RedisServer redis;
  if (!redis.up()) GTEST_SKIP() << "redis-server is not installed (make deps installs it)";
  const std::string key = StateKey("t1", "chain-a", 1, "nat");
  EXPECT_EQ(key, "keel:state:t1:chain-a:1-nat");
  {
    FlowState s;
    RedisMirror m(redis.addr(), milliseconds(10));
    EXPECT_EQ(m.Add(&s, key), 0u);
    m.Start();
    for (uint16_t i = 0; i < 100; i++) s.Update(Flow(i), Value{i, 1});
    s.Remove(Flow(5));
    s.Sync(true);
    m.Stop(milliseconds(2000));
    EXPECT_EQ(m.writes(), 100u);
  }
  /* Another chain's table in the same Redis does not see it. */
  FlowState other;
  RedisMirror m2(redis.addr(), milliseconds(10));
  EXPECT_EQ(m2.Add(&other, StateKey("t1", "chain-b", 1, "nat")), 0u);

  FlowState again;
  RedisMirror m3(redis.addr(), milliseconds(10));
  EXPECT_EQ(m3.Add(&again, key), 99u);
  Value v;
  ASSERT_TRUE(again.Read(Flow(42), &v));
  EXPECT_EQ(v.a, 42u);
  EXPECT_FALSE(again.Read(Flow(5), &v));
}

TEST(RedisMirror, ReachesRedisThroughAUnixSocket) {
  /* NF containers run without a network and reach Redis through its socket. */
  RedisServer redis;
  if (!redis.up()) GTEST_SKIP() << "redis-server is not installed (make deps installs it)";
  const std::string key = StateKey("t1", "chain-u", 0, "nat");
  {
    FlowState s;
    RedisMirror m(redis.unix_addr(), milliseconds(10));
    EXPECT_EQ(m.Address(), redis.unix_addr());
    m.Add(&s, key);
    m.Start();
    for (uint16_t i = 0; i < 10; i++) s.Update(Flow(i), Value{i, 2});
    s.Sync(true);
    m.Stop(milliseconds(2000));
    EXPECT_EQ(m.writes(), 10u);
  }
  FlowState tcp;
  RedisMirror m2(redis.addr(), milliseconds(10));
  EXPECT_EQ(m2.Add(&tcp, key), 10u);
}

TEST(RedisMirror, PullsUnknownFlowsWrittenElsewhere) {
  RedisServer redis;
  if (!redis.up()) GTEST_SKIP() << "redis-server is not installed (make deps installs it)";
  const std::string key = StateKey("t", "c", 0, "lb");
  FlowState writer;
  RedisMirror mw(redis.addr(), milliseconds(5));
  mw.Add(&writer, key);
  mw.Start();
  FlowState reader;
  RedisMirror mr(redis.addr(), milliseconds(5));
  mr.Add(&reader, key);
  mr.Start();

  writer.Update(Flow(9), Value{99, 0});
  writer.Sync(true);
  std::this_thread::sleep_for(milliseconds(100));
  Value v;
  EXPECT_FALSE(reader.Read(Flow(9), &v)) << "the first read only asks the store";
  bool found = false;
  for (int i = 0; i < 200 && !found; i++) {
    std::this_thread::sleep_for(milliseconds(5));
    reader.Sync();
    found = reader.Read(Flow(9), &v);
  }
  ASSERT_TRUE(found);
  EXPECT_EQ(v.a, 99u);
  mw.Stop(milliseconds(500));
  mr.Stop(milliseconds(500));
}

TEST(RedisMirror, LogsInAsTheInstancesUserAndTreatsARefusalAsUnreachable) {
  RedisServer redis;
  if (!redis.up()) GTEST_SKIP() << "redis-server is not installed (make deps installs it)";
  /* A user as keel-agent makes it: its instance's keys, the mirror's commands. */
  redisContext* admin = redisConnect("127.0.0.1", redis.port());
  ASSERT_TRUE(admin && !admin->err);
  auto* r = static_cast<redisReply*>(redisCommand(admin, "ACL SETUSER keel-nf.c.0 reset on >pw ~keel:state:t:c.0:* "
                                                         "resetchannels -@all +hscan +hset +hdel +hget +ping"));
  ASSERT_TRUE(r && r->type == REDIS_REPLY_STATUS);
  freeReplyObject(r);
  const std::string key = StateKey("t", "c.0", 0, "nat");
  {
    FlowState s;
    RedisMirror m(redis.unix_addr(), milliseconds(10));
    m.SetAuth({"keel-nf.c.0", "pw"});
    EXPECT_EQ(m.Add(&s, key), 0u);
    EXPECT_TRUE(m.connected());
    m.Start();
    for (uint16_t i = 0; i < 10; i++) s.Update(Flow(i), Value{i, 3});
    s.Sync(true);
    m.Stop(milliseconds(2000));
    EXPECT_EQ(m.writes(), 10u);
  }
  FlowState again;
  RedisMirror m2(redis.addr(), milliseconds(10));
  m2.SetAuth({"keel-nf.c.0", "pw"});
  EXPECT_EQ(m2.Add(&again, key), 10u);

  FlowState wrong;
  RedisMirror m3(redis.addr(), milliseconds(10));
  m3.SetAuth({"keel-nf.c.0", "not-pw"});
  EXPECT_EQ(m3.Add(&wrong, key), 0u) << "a refused login starts with empty state";
  EXPECT_FALSE(m3.connected());
  redisFree(admin);
}

TEST(RedisMirror, ReadsALoginFileOfOneLine) {
  char path[] = "/tmp/keel-auth-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  auto write_file = [&](const char* text) {
    ASSERT_EQ(ftruncate(fd, 0), 0);
    ASSERT_EQ(pwrite(fd, text, std::strlen(text), 0), static_cast<ssize_t>(std::strlen(text)));
  };
  RedisAuth a;
  std::string err;
  write_file("keel-nf.c.0 s3cret\n");
  ASSERT_TRUE(ReadRedisAuthFile(path, &a, &err)) << err;
  EXPECT_EQ(a.user, "keel-nf.c.0");
  EXPECT_EQ(a.password, "s3cret");
  for (const char* bad : {"", "user-only\n", "a b c\n", "a b\nc d\n"}) {
    write_file(bad);
    EXPECT_FALSE(ReadRedisAuthFile(path, &a, &err)) << bad;
    EXPECT_EQ(err.find("s3cret"), std::string::npos);
  }
  close(fd);
  unlink(path);
  EXPECT_FALSE(ReadRedisAuthFile(path, &a, &err));
  EXPECT_NE(err.find("No such file"), std::string::npos) << err;
}

TEST(RedisMirror, AFullQueueDropsTheNewestFlowsChanges) {
  RedisServer redis;
  if (!redis.up()) GTEST_SKIP() << "redis-server is not installed (make deps installs it)";
  const int port = redis.port();
  redis.Stop();
  FlowState s;
  RedisMirror m("127.0.0.1:" + std::to_string(port), milliseconds(5), 4);
  m.Add(&s, "keel:state:t:c:0-full");
  m.Start();
  for (uint16_t i = 0; i < 10; i++) {
    s.Update(Flow(i), Value{i, 0});
    s.Sync(true);
  }
  s.Update(Flow(0), Value{100, 0}); /* a flow already held: its latest change replaces it */
  s.Sync(true);
  for (int w = 0; w < 400 && m.dropped_changes() < 6; w++) std::this_thread::sleep_for(milliseconds(5));
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(m.dropped_changes(), 6u) << "flows 4..9 found the queue full";

  RedisServer back(port);
  ASSERT_TRUE(back.up());
  m.Stop(milliseconds(2000));
  EXPECT_EQ(m.writes(), 4u);
  FlowState again;
  RedisMirror m2("127.0.0.1:" + std::to_string(port), milliseconds(5));
  EXPECT_EQ(m2.Add(&again, "keel:state:t:c:0-full"), 4u);
  Value v;
  ASSERT_TRUE(again.Read(Flow(0), &v));
  EXPECT_EQ(v.a, 100u);
  EXPECT_TRUE(again.Read(Flow(3), &v)) << "the oldest changes were kept";
  EXPECT_FALSE(again.Read(Flow(4), &v)) << "the newest were dropped";
}

TEST(RedisMirror, RedisDownNeverBlocksAndReconnects) {
  RedisServer redis;
  if (!redis.up()) GTEST_SKIP() << "redis-server is not installed (make deps installs it)";
  const int port = redis.port();
  redis.Stop();
  FlowState s;
  RedisMirror m("127.0.0.1:" + std::to_string(port), milliseconds(10));
  EXPECT_EQ(m.Add(&s, "keel:state:t:c:0-nat"), 0u);
  m.Start();
  auto t0 = std::chrono::steady_clock::now();
  for (uint16_t i = 0; i < 1000; i++) {
    s.Update(Flow(i), Value{i, 0});
    Value v;
    s.Read(Flow(static_cast<uint16_t>(i + 5000)), &v);
    s.Sync();
  }
  auto spent = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(spent, milliseconds(50)) << "the packet path waited for Redis";
  EXPECT_FALSE(m.connected());
  /* A non-blocking Sync skips its turn while the mirror holds the table (on a loaded
   * machine the mirror may be preempted holding it for the rest of the loop); the runner
   * hands over what is left with a blocking Sync when it stops, and so does this test. */
  s.Sync(true);

  /* Redis comes back: the mirror reconnects and writes what it held. */
  RedisServer back(port);
  ASSERT_TRUE(back.up());
  redisContext* c = redisConnect("127.0.0.1", port);
  ASSERT_TRUE(c && !c->err);
  long long stored = 0;
  for (int i = 0; i < 300 && stored < 1000; i++) {
    std::this_thread::sleep_for(milliseconds(10));
    auto* r = static_cast<redisReply*>(redisCommand(c, "HLEN keel:state:t:c:0-nat"));
    stored = r && r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
    if (r) freeReplyObject(r);
  }
  redisFree(c);
  EXPECT_EQ(stored, 1000);
  EXPECT_TRUE(m.connected());
  m.Stop(milliseconds(0));
}

/* An NF whose state is all in its flow table. */
class TableNf : public NF {
 public:
  void Init(const Config&) override {}
  void ProcessBatch(PacketBatch*) override {}
};

/* Fields of hash |key|, once they number |want| (within 2 s). */
long long HashLen(int port, const std::string& key, long long want) {
  redisContext* c = redisConnect("127.0.0.1", port);
  long long n = -1;
  for (int i = 0; i < 200 && n != want; i++) {
    if (i) std::this_thread::sleep_for(milliseconds(10));
    auto* r = static_cast<redisReply*>(redisCommand(c, "HLEN %s", key.c_str()));
    n = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (r) freeReplyObject(r);
  }
  redisFree(c);
  return n;
}

TEST(RedisMirror, AMovedFlowLeavesTheSourcesHashAndEntersTheDestinations) {
  RedisServer redis;
  if (!redis.up()) GTEST_SKIP() << "redis-server is not installed (make deps installs it)";
  const std::string src_key = StateKey("t", "g-src", 0, "t"), dst_key = StateKey("t", "g-dst", 0, "t");
  TableNf src, dst;
  RedisMirror ms(redis.addr(), milliseconds(5)), md(redis.addr(), milliseconds(5));
  ms.Add(&src.state(), src_key);
  md.Add(&dst.state(), dst_key);
  ms.Start();
  md.Start();
  src.state().Update(Flow(1), Value{1, 1});
  src.state().Update(Flow(1).Reverse(), Value{2, 2});
  src.state().Update(Flow(2), Value{3, 3});
  src.state().Sync(true);
  ASSERT_EQ(HashLen(redis.port(), src_key, 3), 3);

  MoveFrame f;
  f.flow = f.cur = Flow(1);
  ExportAt(&src, MovePosition{0, NfId("t")}, &f);
  ASSERT_EQ(f.records.size(), 2u);
  src.state().Sync(true);
  EXPECT_EQ(HashLen(redis.port(), src_key, 1), 1) << "the source's hash keeps only the flow that stayed";

  f.kind = MoveKind::kImport;
  std::string err;
  ImportAt(&dst, MovePosition{0, NfId("t")}, &f, &err);
  ASSERT_EQ(f.status, MoveStatus::kOk) << err;
  dst.state().Sync(true);
  EXPECT_EQ(HashLen(redis.port(), dst_key, 2), 2) << "the destination's hash holds both directions";
  ms.Stop(milliseconds(500));
  md.Stop(milliseconds(500));

  /* A restarted destination continues with the moved flow. */
  FlowState again;
  RedisMirror m(redis.addr(), milliseconds(5));
  EXPECT_EQ(m.Add(&again, dst_key), 2u);
  Value v;
  ASSERT_TRUE(again.Read(Flow(1).Reverse(), &v));
  EXPECT_EQ(v.a, 2u);
}

}  // namespace
}  // namespace keel
