/* SPDX-License-Identifier: Apache-2.0 */
#include "tor_openflow.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace keel::ingress {
namespace {

using Bytes = std::vector<uint8_t>;
using Clock = std::chrono::steady_clock;

Bytes ToBytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string ToString(const Bytes& b) { return std::string(b.begin(), b.end()); }

/* OFPIT_APPLY_ACTIONS with one OFPAT_OUTPUT to port 3 (max_len OFPCML_NO_BUFFER). */
const Bytes kOutput3 = {
    0x00, 0x04, 0x00, 0x18, 0x00, 0x00, 0x00, 0x00,                          /* type 4, len 24, pad */
    0x00, 0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x03, 0xff, 0xff, 0x00, 0x00,  /* OUTPUT, len 16, port 3 */
    0x00, 0x00, 0x00, 0x00,                                                  /* max_len, pad 6 */
};

RuleTemplate Template() {
  RuleTemplate t;
  t.table_id = 2;
  t.priority = 0x1000;
  t.cookie = 0x0102030405060708;
  t.idle_timeout_s = 10;
  t.flags = 1;
  t.instructions = ToString(kOutput3);
  return t;
}

TEST(OpenFlowFlowModTest, TcpFlowExactBytes) {
  FlowKey flow{0x0A000001, 0x0A000002, 0x1234, 80, 6};
  std::string out = "xy"; /* appended to what is there */
  AppendFlowMod(flow, Template(), 42, &out);
  Bytes want = {
      'x', 'y',
      /* header: version 4, FLOW_MOD, length 120, xid 42 */
      0x04, 0x0e, 0x00, 0x78, 0x00, 0x00, 0x00, 0x2a,
      0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, /* cookie */
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, /* cookie_mask */
      0x02, 0x00,                                     /* table 2, OFPFC_ADD */
      0x00, 0x0a, 0x00, 0x00, 0x10, 0x00,             /* idle 10, hard 0, priority 0x1000 */
      0xff, 0xff, 0xff, 0xff,                         /* buffer_id: none */
      0xff, 0xff, 0xff, 0xff,                         /* out_port: any */
      0xff, 0xff, 0xff, 0xff,                         /* out_group: any */
      0x00, 0x01, 0x00, 0x00,                         /* flags SEND_FLOW_REM, pad */
      /* match: OXM, length 4 + 39 */
      0x00, 0x01, 0x00, 0x2b,
      0x80, 0x00, 0x0a, 0x02, 0x08, 0x00,             /* eth_type 0x0800 */
      0x80, 0x00, 0x14, 0x01, 0x06,                   /* ip_proto 6 */
      0x80, 0x00, 0x16, 0x04, 0x0a, 0x00, 0x00, 0x01, /* ipv4_src 10.0.0.1 */
      0x80, 0x00, 0x18, 0x04, 0x0a, 0x00, 0x00, 0x02, /* ipv4_dst 10.0.0.2 */
      0x80, 0x00, 0x1a, 0x02, 0x12, 0x34,             /* tcp_src 0x1234 */
      0x80, 0x00, 0x1c, 0x02, 0x00, 0x50,             /* tcp_dst 80 */
      0x00, 0x00, 0x00, 0x00, 0x00,                   /* pad to 48 */
  };
  want.insert(want.end(), kOutput3.begin(), kOutput3.end());
  EXPECT_EQ(ToBytes(out), want);
}

TEST(OpenFlowFlowModTest, IcmpFlowHasNoPorts) {
  /* Ports in the key are not matched for a protocol without them. */
  FlowKey flow{0xC0A80101, 0xC0A80202, 7, 9, 1};
  std::string out;
  AppendFlowMod(flow, Template(), 0x01020304, &out);
  Bytes want = {
      0x04, 0x0e, 0x00, 0x68, 0x01, 0x02, 0x03, 0x04, /* length 104 */
      0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08,
      0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
      0x02, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x10, 0x00,
      0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
      0xff, 0xff, 0xff, 0xff, 0x00, 0x01, 0x00, 0x00,
      0x00, 0x01, 0x00, 0x1f,                         /* match length 4 + 27 */
      0x80, 0x00, 0x0a, 0x02, 0x08, 0x00,
      0x80, 0x00, 0x14, 0x01, 0x01,                   /* ip_proto 1 */
      0x80, 0x00, 0x16, 0x04, 0xc0, 0xa8, 0x01, 0x01,
      0x80, 0x00, 0x18, 0x04, 0xc0, 0xa8, 0x02, 0x02,
      0x00,                                           /* pad to 32 */
  };
  want.insert(want.end(), kOutput3.begin(), kOutput3.end());
  EXPECT_EQ(ToBytes(out), want);
}

TEST(OpenFlowFlowModTest, UdpPortsAreUdpFields) {
  FlowKey flow{1, 2, 53, 5353, 17};
  RuleTemplate t = Template();
  t.instructions.clear();
  std::string out;
  AppendFlowMod(flow, t, 1, &out);
  ASSERT_EQ(out.size(), 96u); /* 48 + match padded from 43 to 48, no instructions */
  Bytes b = ToBytes(out);
  EXPECT_EQ(b[2], 0x00);
  EXPECT_EQ(b[3], 96);
  EXPECT_EQ(b[51], 0x2b);
  EXPECT_EQ(Bytes(b.begin() + 79, b.begin() + 91),
            (Bytes{0x80, 0x00, 0x1e, 0x02, 0x00, 0x35, 0x80, 0x00, 0x20, 0x02, 0x14, 0xe9}));
  EXPECT_EQ(Bytes(b.begin() + 91, b.end()), Bytes(5, 0));
}

/* One OpenFlow message as the fake switch reads or writes it. */
struct Msg {
  uint8_t version = 4;
  uint8_t type = 0;
  uint32_t xid = 0;
  std::string body;
  std::string Wire() const {
    std::string w(8, '\0');
    w[0] = static_cast<char>(version);
    w[1] = static_cast<char>(type);
    size_t len = 8 + body.size();
    w[2] = static_cast<char>(len >> 8);
    w[3] = static_cast<char>(len);
    for (int i = 0; i < 4; i++) w[4 + i] = static_cast<char>(xid >> (24 - 8 * i));
    return w + body;
  }
};

std::string Be64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; i++) s[i] = static_cast<char>(v >> (56 - 8 * i));
  return s;
}

constexpr uint64_t kDpid = 0x0000AABBCCDDEEFF;

/* A switch's management socket in a temporary directory, one connection at a time. */
class FakeSwitch {
 public:
  FakeSwitch() {
    char tmpl[] = "/tmp/keel-of-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    path_ = dir_ + "/br.mgmt";
    listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::strncpy(sa.sun_path, path_.c_str(), sizeof(sa.sun_path) - 1);
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    EXPECT_EQ(listen(listen_fd_, 4), 0);
  }
  ~FakeSwitch() {
    CloseConn();
    close(listen_fd_);
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  const std::string& path() const { return path_; }

  bool Accept() {
    pollfd p{listen_fd_, POLLIN, 0};
    if (poll(&p, 1, 2000) != 1) return false;
    conn_ = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    buf_.clear();
    return conn_ >= 0;
  }
  void CloseConn() {
    if (conn_ >= 0) close(conn_);
    conn_ = -1;
  }
  /* The next message, or false on EOF or after 2 s. */
  bool Read(Msg* m) {
    for (;;) {
      if (buf_.size() >= 8) {
        size_t len = static_cast<uint8_t>(buf_[2]) << 8 | static_cast<uint8_t>(buf_[3]);
        if (len >= 8 && buf_.size() >= len) {
          m->version = static_cast<uint8_t>(buf_[0]);
          m->type = static_cast<uint8_t>(buf_[1]);
          m->xid = 0;
          for (int i = 4; i < 8; i++) m->xid = m->xid << 8 | static_cast<uint8_t>(buf_[i]);
          m->body = buf_.substr(8, len - 8);
          buf_.erase(0, len);
          return true;
        }
      }
      pollfd p{conn_, POLLIN, 0};
      if (poll(&p, 1, 2000) != 1) return false;
      char chunk[4096];
      ssize_t n = recv(conn_, chunk, sizeof(chunk), 0);
      if (n <= 0) return false;
      buf_.append(chunk, static_cast<size_t>(n));
    }
  }
  bool Eof() {
    pollfd p{conn_, POLLIN, 0};
    char c;
    return poll(&p, 1, 2000) == 1 && recv(conn_, &c, 1, 0) == 0;
  }
  void Write(const std::string& bytes) {
    ASSERT_EQ(send(conn_, bytes.data(), bytes.size(), MSG_NOSIGNAL), static_cast<ssize_t>(bytes.size()));
  }
  void WriteByteByByte(const std::string& bytes) {
    for (char c : bytes) {
      ASSERT_EQ(send(conn_, &c, 1, MSG_NOSIGNAL), 1);
      std::this_thread::yield();
    }
  }

  /* Takes a connection and answers its handshake with |hello|; |split|: one byte per write. */
  void Handshake(bool split = false, const std::string& hello = Msg{4, 0, 1, ""}.Wire()) {
    ASSERT_TRUE(Accept());
    Msg m;
    ASSERT_TRUE(Read(&m));
    EXPECT_EQ(m.version, 4);
    ASSERT_EQ(m.type, 0) << "HELLO first";
    if (split) {
      WriteByteByByte(hello);
    } else {
      Write(hello);
    }
    ASSERT_TRUE(Read(&m));
    EXPECT_EQ(m.version, 4);
    ASSERT_EQ(m.type, 5) << "FEATURES_REQUEST";
    EXPECT_EQ(m.body, "");
    /* datapath_id, n_buffers, n_tables, auxiliary_id, pad, capabilities, reserved */
    std::string features = Msg{4, 6, m.xid, Be64(kDpid) + std::string(16, '\0')}.Wire();
    if (split) {
      WriteByteByByte(features);
    } else {
      Write(features);
    }
  }

  /* Reads |n| flow-mods and a barrier; their xids, the barrier's last. */
  std::vector<uint32_t> ReadInstall(size_t n, std::vector<std::string>* mods = nullptr) {
    std::vector<uint32_t> xids;
    Msg m;
    for (size_t i = 0; i < n; i++) {
      if (!Read(&m)) return {};
      EXPECT_EQ(m.type, 14) << "FLOW_MOD";
      xids.push_back(m.xid);
      if (mods) mods->push_back(m.Wire());
    }
    if (!Read(&m)) return {};
    EXPECT_EQ(m.type, 20) << "BARRIER_REQUEST";
    EXPECT_EQ(m.body, "");
    xids.push_back(m.xid);
    return xids;
  }

 private:
  std::string dir_, path_;
  int listen_fd_ = -1;
  int conn_ = -1;
  std::string buf_;
};

bool WaitFor(const std::function<bool()>& cond, int ms = 2000) {
  auto until = Clock::now() + std::chrono::milliseconds(ms);
  while (!cond()) {
    if (Clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

/* Collects an Install's result. */
struct Result {
  std::promise<std::vector<bool>> promise;
  std::future<std::vector<bool>> future = promise.get_future();
  std::atomic<int> calls{0};
  TorOpenFlow::Done Done() {
    return [this](const std::vector<bool>& ok) {
      if (++calls == 1) promise.set_value(ok);
    };
  }
  std::vector<bool> Get() {
    if (future.wait_for(std::chrono::seconds(2)) != std::future_status::ready) return {};
    return future.get();
  }
};

std::vector<std::pair<FlowKey, const RuleTemplate*>> Rules(size_t n, const RuleTemplate* t) {
  std::vector<std::pair<FlowKey, const RuleTemplate*>> rules;
  for (size_t i = 0; i < n; i++) {
    rules.push_back({FlowKey{0x0A000001, 0x0A000002, static_cast<uint16_t>(1000 + i), 80, 6}, t});
  }
  return rules;
}

std::string Error(uint32_t xid, const std::string& offending) {
  /* OFPET_FLOW_MOD_FAILED (5), OFPFMFC_TABLE_FULL (1), then up to 64 bytes of the request */
  return Msg{4, 1, xid, std::string("\x00\x05\x00\x01", 4) + offending.substr(0, 64)}.Wire();
}

/* Starts |of| and completes the handshake with |sw|: |of| is up and knows the datapath id. */
void Connect(FakeSwitch* sw, TorOpenFlow* of) {
  of->Start();
  sw->Handshake();
  ASSERT_TRUE(WaitFor([&] { return of->DatapathId() != 0; }));
}

TEST(TorOpenFlowTest, InstallReportsTheRuleTheSwitchRefused) {
  FakeSwitch sw;
  TorOpenFlow of("unix:" + sw.path());
  ASSERT_NO_FATAL_FAILURE(Connect(&sw, &of));
  EXPECT_EQ(of.DatapathId(), kDpid);
  EXPECT_EQ(of.Connects(), 1u);

  RuleTemplate t = Template();
  auto rules = Rules(3, &t);
  Result r;
  of.Install(rules, r.Done());
  std::vector<std::string> mods;
  std::vector<uint32_t> xids = sw.ReadInstall(3, &mods);
  ASSERT_EQ(xids.size(), 4u);
  for (size_t i = 0; i < 4; i++) {
    for (size_t j = i + 1; j < 4; j++) EXPECT_NE(xids[i], xids[j]);
  }
  for (size_t i = 0; i < 3; i++) {
    std::string want;
    AppendFlowMod(rules[i].first, t, xids[i], &want);
    EXPECT_EQ(mods[i], want) << "flow-mod " << i;
  }
  /* Several messages in one read. */
  sw.Write(Error(xids[1], mods[1]) + Msg{4, 21, xids[3], ""}.Wire());
  EXPECT_EQ(r.Get(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(r.calls, 1);
}

TEST(TorOpenFlowTest, RulesForAnotherSwitchAreNotSent) {
  FakeSwitch sw;
  TorOpenFlow of(sw.path());
  ASSERT_NO_FATAL_FAILURE(Connect(&sw, &of));
  RuleTemplate mine = Template();
  mine.datapath_id = kDpid;
  RuleTemplate other = Template();
  other.datapath_id = kDpid + 1;
  auto rules = Rules(3, &mine);
  rules[0].second = &other;
  rules[2].second = nullptr;
  Result r;
  of.Install(rules, r.Done());
  std::vector<uint32_t> xids = sw.ReadInstall(1);
  ASSERT_EQ(xids.size(), 2u);
  sw.Write(Msg{4, 21, xids[1], ""}.Wire());
  EXPECT_EQ(r.Get(), (std::vector<bool>{false, true, false}));
}

TEST(TorOpenFlowTest, InstallWhenNotConnectedFailsAtOnce) {
  TorOpenFlow of("/nonexistent/br.mgmt");
  std::vector<bool> got;
  bool called = false;
  of.Install(Rules(2, nullptr), [&](const std::vector<bool>& ok) {
    called = true;
    got = ok;
  });
  EXPECT_TRUE(called);
  EXPECT_EQ(got, (std::vector<bool>{false, false}));
  EXPECT_EQ(of.DatapathId(), 0u);
}

TEST(TorOpenFlowTest, BrokenConnectionFailsPendingAndReconnects) {
  FakeSwitch sw;
  TorOpenFlow of(sw.path());
  ASSERT_NO_FATAL_FAILURE(Connect(&sw, &of));
  RuleTemplate t = Template();
  Result r;
  of.Install(Rules(2, &t), r.Done());
  ASSERT_EQ(sw.ReadInstall(2).size(), 3u);
  sw.CloseConn();
  EXPECT_EQ(r.Get(), (std::vector<bool>{false, false}));

  sw.Handshake();
  ASSERT_TRUE(WaitFor([&] { return of.Connects() == 2; }));
  EXPECT_EQ(of.DatapathId(), kDpid);
  Result again;
  of.Install(Rules(1, &t), again.Done());
  std::vector<uint32_t> xids = sw.ReadInstall(1);
  ASSERT_EQ(xids.size(), 2u);
  sw.Write(Msg{4, 21, xids[1], ""}.Wire());
  EXPECT_EQ(again.Get(), (std::vector<bool>{true}));
  EXPECT_EQ(r.calls, 1);
}

TEST(TorOpenFlowTest, NoBarrierReplyInTimeFails) {
  FakeSwitch sw;
  TorOpenFlow of(sw.path(), 200);
  ASSERT_NO_FATAL_FAILURE(Connect(&sw, &of));
  RuleTemplate t = Template();
  Result r;
  Clock::time_point start = Clock::now();
  of.Install(Rules(2, &t), r.Done());
  std::vector<uint32_t> xids = sw.ReadInstall(2);
  ASSERT_EQ(xids.size(), 3u);
  EXPECT_EQ(r.Get(), (std::vector<bool>{false, false}));
  auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
  EXPECT_GE(took, 190);
  EXPECT_LT(took, 1000);

  /* The late reply is for nobody; the connection goes on. */
  sw.Write(Msg{4, 21, xids[2], ""}.Wire());
  Result next;
  of.Install(Rules(1, &t), next.Done());
  xids = sw.ReadInstall(1);
  ASSERT_EQ(xids.size(), 2u);
  sw.Write(Msg{4, 21, xids[1], ""}.Wire());
  EXPECT_EQ(next.Get(), (std::vector<bool>{true}));
  EXPECT_EQ(r.calls, 1);
  EXPECT_EQ(of.Connects(), 1u);
}

TEST(TorOpenFlowTest, AnswersEchoRequests) {
  FakeSwitch sw;
  TorOpenFlow of(sw.path());
  ASSERT_NO_FATAL_FAILURE(Connect(&sw, &of));
  sw.Write(Msg{4, 2, 77, "ping"}.Wire());
  Msg m;
  ASSERT_TRUE(sw.Read(&m));
  EXPECT_EQ(m.version, 4);
  EXPECT_EQ(m.type, 3) << "ECHO_REPLY";
  EXPECT_EQ(m.xid, 77u);
  EXPECT_EQ(m.body, "ping");
}

TEST(TorOpenFlowTest, MessagesSplitAcrossWritesParse) {
  FakeSwitch sw;
  TorOpenFlow of(sw.path());
  of.Start();
  sw.Handshake(/*split=*/true);
  ASSERT_TRUE(WaitFor([&] { return of.DatapathId() != 0; }));
  EXPECT_EQ(of.DatapathId(), kDpid);
  RuleTemplate t = Template();
  Result r;
  of.Install(Rules(2, &t), r.Done());
  std::vector<std::string> mods;
  std::vector<uint32_t> xids = sw.ReadInstall(2, &mods);
  ASSERT_EQ(xids.size(), 3u);
  sw.WriteByteByByte(Error(xids[0], mods[0]) + Msg{4, 21, xids[2], ""}.Wire());
  EXPECT_EQ(r.Get(), (std::vector<bool>{false, true}));
}

TEST(TorOpenFlowTest, OtherVersionIsRefusedAndRetried) {
  FakeSwitch sw;
  TorOpenFlow of(sw.path());
  of.Start();
  ASSERT_TRUE(sw.Accept());
  Msg m;
  ASSERT_TRUE(sw.Read(&m));
  sw.Write(Msg{1, 0, 1, ""}.Wire()); /* OpenFlow 1.0 only */
  EXPECT_TRUE(sw.Eof()) << "the client closes";
  EXPECT_EQ(of.DatapathId(), 0u);
  sw.CloseConn();
  sw.Handshake();
  ASSERT_TRUE(WaitFor([&] { return of.DatapathId() != 0; }));
  EXPECT_EQ(of.Connects(), 1u);
}

TEST(TorOpenFlowTest, NewerSwitchThatAlsoSpeaksOneThreeIsTaken) {
  FakeSwitch sw;
  TorOpenFlow of(sw.path());
  of.Start();
  /* OpenFlow 1.5's HELLO with a version bitmap of 1.0, 1.3 and 1.5, as ovs-vswitchd sends it. */
  sw.Handshake(false, Msg{6, 0, 1, std::string("\x00\x01\x00\x08\x00\x00\x00\x52", 8)}.Wire());
  ASSERT_TRUE(WaitFor([&] { return of.DatapathId() != 0; }));
  EXPECT_EQ(of.Connects(), 1u);
}

TEST(TorOpenFlowTest, NewerSwitchWithoutOneThreeIsRefused) {
  FakeSwitch sw;
  TorOpenFlow of(sw.path());
  of.Start();
  ASSERT_TRUE(sw.Accept());
  Msg m;
  ASSERT_TRUE(sw.Read(&m));
  sw.Write(Msg{6, 0, 1, std::string("\x00\x01\x00\x08\x00\x00\x00\x40", 8)}.Wire()); /* 1.5 only */
  EXPECT_TRUE(sw.Eof()) << "the client closes";
  EXPECT_EQ(of.Connects(), 0u);
}

TEST(TorOpenFlowTest, StopFailsPendingInstalls) {
  FakeSwitch sw;
  TorOpenFlow of(sw.path());
  ASSERT_NO_FATAL_FAILURE(Connect(&sw, &of));
  RuleTemplate t = Template();
  Result r;
  of.Install(Rules(1, &t), r.Done());
  ASSERT_EQ(sw.ReadInstall(1).size(), 2u);
  of.Stop();
  EXPECT_EQ(r.Get(), (std::vector<bool>{false}));
  EXPECT_EQ(of.DatapathId(), 0u);
}

}  // namespace
}  // namespace keel::ingress
