// SPDX-License-Identifier: Apache-2.0
// A hostile tenant's packet function (tests/test_hostile_nf.py), in the packet-cpp template's
// shape: it forwards its packets like any NF, and from Init on, and again after every batch,
// it tries to reach what is not its own — the control plane's Redis keys and another
// instance's NF state, keel-coopsched's control of other groups and of host threads, files
// the host would open, other instances' chain buffers, the host's /run — and forges its
// statistics file to claim overload. Every attempt's outcome is counted in hostile.json in
// its instance directory (the host reads it at the same path): "refused" when keel stopped
// it, "succeeded" when it got through. It also forges flow-move frames (issue 37: inband.h
// types 2 and 3) for the victim's flow (victim_flow), with a NAT record of its choosing, out
// of its own port once a round: it cannot see where they go, so it only counts them
// (move_frames_forged); the test checks that keel-ingress dropped them and that the victim's
// flow kept its instance and its mapping.
//
// The attempts run on a thread of their own, woken by the packet thread after a batch: the
// packet thread must not block on a socket while it holds the managed core, and the thread
// is the same process with the same credentials, so it can do no less than ProcessBatch.
//
// Built on the host against keel's generated coopsched stubs (the NF resolves them, and
// gRPC, against keel-nf when loaded): keel/nf-sdk has no gRPC headers, and a real attacker
// brings whatever client they need.
#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "keel/flow_move.h"
#include "keel/inband.h"
#include "keel/nf.h"
#include "keel/v1/coopsched.grpc.pb.h"

namespace keel {
namespace {

constexpr const char* kRedisSock = "/run/keel/redis.sock";
constexpr const char* kCoopschedSock = "unix:/run/keel/coopsched.sock";

struct Outcome {
  uint64_t refused = 0, succeeded = 0;
  std::string last;  // what the last attempt saw
};

// The value of --FLAG in keel-nf's own command line ("" if absent).
std::string OwnArg(const std::string& flag) {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t i = 0, j; i < all.size(); i = j + 1) {
    j = all.find('\0', i);
    if (j == std::string::npos) j = all.size();
    args.push_back(all.substr(i, j - i));
  }
  for (size_t i = 0; i + 1 < args.size(); i++)
    if (args[i] == flag) return args[i + 1];
  return "";
}

// One Redis command over the unix socket, in RESP; returns the reply's first line
// ("-NOPERM ...", "+OK", "*2", ...) or "connect: ..." when there is no Redis to talk to.
class Redis {
 public:
  Redis() {
    fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, kRedisSock, sizeof a.sun_path - 1);
    timeval tv{1, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      err_ = std::string("connect: ") + std::strerror(errno);
      close(fd_);
      fd_ = -1;
    }
  }
  ~Redis() {
    if (fd_ >= 0) close(fd_);
  }
  std::string Call(const std::vector<std::string>& args) {
    if (fd_ < 0) return err_;
    std::string req = "*" + std::to_string(args.size()) + "\r\n";
    for (const auto& a : args) req += "$" + std::to_string(a.size()) + "\r\n" + a + "\r\n";
    if (write(fd_, req.data(), req.size()) != static_cast<ssize_t>(req.size())) return "write failed";
    char buf[4096];
    ssize_t n = read(fd_, buf, sizeof buf - 1);
    if (n <= 0) return "read failed";
    buf[n] = 0;
    std::string line(buf);
    return line.substr(0, line.find("\r\n"));
  }

 private:
  int fd_ = -1;
  std::string err_;
};

// Redis refused the command: an error reply, or nothing to connect to.
bool RedisRefused(const std::string& reply) { return reply.empty() || reply[0] == '-' || reply.rfind("connect:", 0) == 0; }

class Hostile : public NF {
 public:
  ~Hostile() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  void Init(const Config& config) override {
    config.CheckObject({"victim", "host_tid", "host_pidns", "victim_flow"});
    victim_ = config["victim"].String();
    if (config.Has("victim_flow")) victim_flow_ok_ = ParseFlow(config["victim_flow"].String(), &victim_flow_);
    if (config.Has("host_tid")) host_tid_ = static_cast<int>(config["host_tid"].Int(0, 1 << 30));
    if (config.Has("host_pidns")) host_pidns_ = static_cast<uint64_t>(config["host_pidns"].Int(0, INT64_MAX));
    group_ = OwnArg("--chain-id");
    pktbuf_ = OwnArg("--pktbuf");
    stats_ = OwnArg("--stats");
    dir_ = pktbuf_.empty() ? "" : std::filesystem::path(pktbuf_).parent_path().string();
    if (group_.empty() || dir_.empty()) return;  // keel-nf --check or --list: no instance
    thread_ = std::thread([this] { Loop(); });
  }

  void ProcessBatch(PacketBatch* batch) override {
    if (batch->cnt() == 0) return;
    if (victim_flow_ok_ && forge_move_.exchange(false)) ForgeMoveFrame(batch->pkt(batch->cnt() - 1));
    batches_.fetch_add(1, std::memory_order_relaxed);
    cv_.notify_one();
  }

 private:
  void Loop() {
    uint64_t seen = ~0ull;
    std::unique_lock<std::mutex> l(mu_);
    while (!stop_) {
      l.unlock();
      Round();
      l.lock();
      // The next round after the next batch, at most every 500 ms.
      cv_.wait_for(l, std::chrono::milliseconds(500), [this] { return stop_; });
      seen = batches_.load();
      cv_.wait(l, [&] { return stop_ || batches_.load() != seen; });
    }
  }

  // "SRC:SPORT>DST:DPORT/PROTO", e.g. "198.18.0.1:20001>198.18.6.10:5001/17".
  static bool ParseFlow(const std::string& s, FlowKey* k) {
    char src[16], dst[16];
    unsigned sport, dport, proto;
    in_addr a{}, b{};
    if (std::sscanf(s.c_str(), "%15[0-9.]:%u>%15[0-9.]:%u/%u", src, &sport, dst, &dport, &proto) != 5 ||
        inet_pton(AF_INET, src, &a) != 1 || inet_pton(AF_INET, dst, &b) != 1 || sport > 65535 || dport > 65535 ||
        proto > 255)
      return false;
    *k = FlowKey{};
    k->src_ip = ntohl(a.s_addr);
    k->dst_ip = ntohl(b.s_addr);
    k->src_port = static_cast<uint16_t>(sport);
    k->dst_port = static_cast<uint16_t>(dport);
    k->proto = static_cast<uint8_t>(proto);
    return true;
  }

  // Turns |p|, one of its own packets, into an IMPORT_STATE (then, next time, EXPORT_STATE)
  // frame for the victim's flow that carries a NAT mapping of the forger's choosing for the
  // victim's position 1, marked and addressed as keel-ingress addresses its own. It leaves by
  // this instance's port like any packet.
  void ForgeMoveFrame(Packet* p) {
    static constexpr uint8_t kDst[6] = {0x02, 'k', 'e', 'e', 'l', 0x01}, kSrc[6] = {0x02, 'k', 'e', 'e', 'l', 0x00};
    const uint64_t n = move_frames_forged_.load(std::memory_order_relaxed);
    MoveFrame f;
    f.kind = n % 2 ? MoveKind::kExport : MoveKind::kImport;
    f.flow = f.cur = victim_flow_;
    MoveRecord r;
    r.position = 1;
    r.nf = NfId("nat");
    r.state.key = victim_flow_;
    r.state.len = 8;
    std::memset(r.state.data, 0x41, r.state.len);
    f.records.push_back(r);
    uint8_t body[inband::kMoveBodyMax];
    const size_t body_len = EncodeMoveFrame(f, body, sizeof body);
    size_t need = inband::kMoveBodyOffset + body_len;
    if (need < inband::kMinFrame) need = inband::kMinFrame;
    if (body_len == 0 || (p->len() < need && !p->Append(static_cast<uint16_t>(need - p->len())))) return;
    if (p->len() > need) p->Trim(static_cast<uint16_t>(p->len() - need));
    const auto type = f.kind == MoveKind::kImport ? inband::Type::kImportState : inband::Type::kExportState;
    if (inband::WriteMoveFrame(p->data(), p->len(), kDst, kSrc, type, body, body_len) != 0)
      move_frames_forged_.fetch_add(1, std::memory_order_relaxed);
  }

  void Record(const std::string& attack, bool refused, const std::string& what) {
    Outcome& o = outcomes_[attack];
    (refused ? o.refused : o.succeeded)++;
    if (!refused || o.succeeded == 0) o.last = what; /* keep what got through in sight */
  }

  // The instances of the victim chain this one might guess: CHAIN.0 .. CHAIN.7.
  std::vector<std::string> VictimGroups() const {
    std::vector<std::string> g;
    for (int i = 0; i < 8; i++) g.push_back(victim_ + "." + std::to_string(i));
    return g;
  }

  void Round() {
    TryRedis();
    TryCoopsched();
    TryFiles();
    ForgeStats();
    forge_move_ = true;  // the packet thread forges one with its next batch
    rounds_++;
    Write();
  }

  void TryRedis() {
    // Without credentials: Redis' default user is off.
    {
      Redis r;
      std::string rep = r.Call({"KEYS", "*"});
      Record("redis_anonymous_keys", RedisRefused(rep), rep);
    }
    // With this instance's own credentials, everything that is not its own prefix.
    std::string user, pass;
    std::ifstream f("/run/secrets/keel/redis");
    f >> user >> pass;
    auto as_me = [&](const std::vector<std::string>& cmd) {
      Redis r;
      if (!user.empty()) {
        std::string a = r.Call({"AUTH", user, pass});
        if (a != "+OK") return "AUTH: " + a;
      }
      return r.Call(cmd);
    };
    std::string rep = as_me({"KEYS", "*"});
    Record("redis_keys", RedisRefused(rep), rep);
    rep = as_me({"FLUSHALL"});
    Record("redis_flushall", RedisRefused(rep), rep);
    rep = as_me({"CONFIG", "GET", "*"});
    Record("redis_config", RedisRefused(rep), rep);
    rep = as_me({"ACL", "LIST"});
    Record("redis_acl", RedisRefused(rep), rep);
    bool read_refused = true, write_refused = true;
    std::string last_read, last_write;
    for (const auto& g : VictimGroups()) {
      for (int pos = 0; pos < 3; pos++) {
        std::string key = "keel:state:openfaas-fn:" + g + ":" + std::to_string(pos) + "-nat";
        rep = as_me({"HSCAN", key, "0"});
        if (!RedisRefused(rep)) read_refused = false, last_read = key + " " + rep;
        else if (last_read.empty()) last_read = rep;
        rep = as_me({"HSET", key, "hostile", "1"});
        if (!RedisRefused(rep)) write_refused = false, last_write = key + " " + rep;
        else if (last_write.empty()) last_write = rep;
      }
    }
    Record("redis_read_victim_state", read_refused, last_read);
    Record("redis_write_victim_state", write_refused, last_write);
    rep = as_me({"HGET", "keel:function:" + victim_, "spec"});
    std::string rep2 = as_me({"SMEMBERS", "keel:functions"});
    Record("redis_read_control", RedisRefused(rep) && RedisRefused(rep2), rep + " / " + rep2);
    rep = as_me({"HSET", "keel:flows", "hostile", "{}"});
    rep2 = as_me({"SET", "keel:function:" + victim_, "hostile"});
    Record("redis_write_control", RedisRefused(rep) && RedisRefused(rep2), rep + " / " + rep2);
  }

  // A call that timed out or found the socket busy was neither served nor refused: on a
  // loaded machine it is asked again (three tries), so that only an answer counts.
  static grpc::Status Call(const std::function<grpc::Status(v1::Coopsched::Stub*, grpc::ClientContext*)>& fn) {
    auto stub = v1::Coopsched::NewStub(grpc::CreateChannel(kCoopschedSock, grpc::InsecureChannelCredentials()));
    grpc::Status st;
    for (int attempt = 0; attempt < 3; attempt++) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
      st = fn(stub.get(), &ctx);
      if (st.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED &&
          st.error_code() != grpc::StatusCode::UNAVAILABLE)
        break;
    }
    return st;
  }

  static std::string Why(const grpc::Status& st) {
    return st.ok() ? "OK" : std::to_string(st.error_code()) + " " + st.error_message();
  }

  void TryCoopsched() {
    grpc::Status st = Call([](v1::Coopsched::Stub* s, grpc::ClientContext* c) {
      v1::StatusRequest req;
      v1::StatusResponse resp;
      return s->Status(c, req, &resp);
    });
    Record("coopsched_status", !st.ok(), Why(st));
    // A host thread into this instance's own group (a new position) and into a group of
    // its own making, claiming no namespace, then the host's: the test's sacrificial process.
    if (host_tid_ > 0) {
      for (uint64_t ns : {uint64_t{0}, host_pidns_}) {
        st = Call([&](v1::Coopsched::Stub* s, grpc::ClientContext* c) {
          v1::RegisterThreadRequest req;
          req.set_group_id("hostile-made.1");
          req.set_position(0);
          req.set_count(1);
          req.set_tid(host_tid_);
          req.set_pid_ns(ns);
          req.set_pktbuf_path(pktbuf_);
          v1::RegisterThreadResponse resp;
          return s->RegisterThread(c, req, &resp);
        });
        Record(ns ? "coopsched_register_host_tid_hostns" : "coopsched_register_host_tid", !st.ok(), Why(st));
      }
    }
    // A planted buffer file and a symlink to a host file, announced as this thread's group.
    std::string fake = dir_ + "/fake-pktbuf";
    {
      std::ofstream f(fake);
      f << std::string(4096, '\0');
    }
    unlink((dir_ + "/evil").c_str());
    if (symlink("/etc/shadow", (dir_ + "/evil").c_str()) != 0) {}
    for (const std::string& path : {fake, dir_ + "/evil"}) {
      st = Call([&](v1::Coopsched::Stub* s, grpc::ClientContext* c) {
        v1::RegisterThreadRequest req;
        req.set_group_id("hostile-planted.1");
        req.set_position(0);
        req.set_count(2);  // never complete: a refusal must come from the checks, not the count
        req.set_tid(static_cast<int32_t>(gettid()));
        struct stat ns;
        if (stat("/proc/self/ns/pid", &ns) == 0) req.set_pid_ns(ns.st_ino);
        req.set_pktbuf_path(path);
        v1::RegisterThreadResponse resp;
        return s->RegisterThread(c, req, &resp);
      });
      Record("coopsched_planted_buffer", !st.ok(), path + ": " + Why(st));
    }
    // The victim's groups: attach elsewhere, detach, change its batch, unregister.
    bool attach = true, detach = true, batch = true, unreg = true;
    std::string why_attach, why_detach, why_batch, why_unreg;
    for (const auto& g : VictimGroups()) {
      st = Call([&](v1::Coopsched::Stub* s, grpc::ClientContext* c) {
        v1::AttachRequest req;
        req.set_group_id(g);
        req.set_core(1);
        v1::GroupStatus resp;
        return s->Attach(c, req, &resp);
      });
      attach &= PermissionDenied(st, &why_attach);
      st = Call([&](v1::Coopsched::Stub* s, grpc::ClientContext* c) {
        v1::DetachRequest req;
        req.set_group_id(g);
        v1::DetachResponse resp;
        return s->Detach(c, req, &resp);
      });
      detach &= PermissionDenied(st, &why_detach);
      st = Call([&](v1::Coopsched::Stub* s, grpc::ClientContext* c) {
        v1::SetBatchRequest req;
        req.set_group_id(g);
        req.set_batch(1);
        v1::GroupStatus resp;
        return s->SetBatch(c, req, &resp);
      });
      batch &= PermissionDenied(st, &why_batch);
      st = Call([&](v1::Coopsched::Stub* s, grpc::ClientContext* c) {
        v1::UnregisterRequest req;
        req.set_group_id(g);
        v1::UnregisterResponse resp;
        return s->Unregister(c, req, &resp);
      });
      unreg &= PermissionDenied(st, &why_unreg);
    }
    Record("coopsched_attach_victim", attach, why_attach);
    Record("coopsched_detach_victim", detach, why_detach);
    Record("coopsched_set_batch_victim", batch, why_batch);
    Record("coopsched_unregister_victim", unreg, why_unreg);
  }

  // NOT_FOUND would mean the call was served and the group merely guessed wrong: only a
  // refusal of the call itself counts.
  // The first call served is what the report shows, not a later refusal.
  static bool PermissionDenied(const grpc::Status& st, std::string* why) {
    if (st.error_code() != grpc::StatusCode::PERMISSION_DENIED) {
      if (why->rfind("served: ", 0) != 0) *why = "served: " + Why(st);
      return false;
    }
    if (why->empty()) *why = Why(st);
    return true;
  }

  void TryFiles() {
    // Other instances' chain buffers, by the host's layout.
    std::string root = std::filesystem::path(dir_).parent_path().string();
    bool refused = true;
    std::string seen;
    for (const auto& g : VictimGroups()) {
      int fd = open((root + "/" + g + "/pktbuf").c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) refused = false, seen = root + "/" + g + "/pktbuf", close(fd);
    }
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(root, ec))
      if (e.path().filename() != std::filesystem::path(dir_).filename())
        refused = false, seen = "lists " + e.path().string();
    Record("other_chain_buffers", refused, seen.empty() ? "nothing but its own" : seen);
    // The host's files through pid 1's root, and the host's /run.
    refused = true;
    seen.clear();
    for (const char* p : {"/proc/1/root/run/docker.sock", "/proc/1/root/var/run/docker.sock", "/run/docker.sock",
                          "/var/run/docker.sock"}) {
      struct stat s;
      if (lstat(p, &s) == 0) refused = false, seen += std::string(p) + " ";
    }
    // Every socket it can find under /run: only the two keel mounts it was given, and
    // DPDK's own (/run/dpdk: this process's EAL, in the container's own /run).
    for (const auto& e : std::filesystem::recursive_directory_iterator(
             "/run", std::filesystem::directory_options::skip_permission_denied, ec)) {
      std::error_code ec2;
      if (!e.is_socket(ec2)) continue;
      std::string p = e.path().string();
      if (p != "/run/keel/redis.sock" && p != "/run/keel/coopsched.sock" && p.rfind("/run/dpdk/", 0) != 0)
        refused = false, seen += p + " ";
    }
    Record("host_files", refused, seen.empty() ? "none" : seen);
  }

  // Its statistics file claims ten times the packets and a full queue, written right after
  // keel-nf's own, to make the controller think the instance is overloaded.
  void ForgeStats() {
    if (stats_.empty()) return;
    std::ifstream in(stats_);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string s = ss.str();
    if (s.empty()) return;
    Json j = Json::parse(s, nullptr, false);
    if (j.is_discarded()) return;
    forged_ += 1000000;
    if (j.contains("port") && j["port"].is_object()) {
      j["port"]["rx_packets"] = j["port"].value("rx_packets", 0ull) * 10 + forged_;
      j["port"]["rx_bytes"] = j["port"].value("rx_bytes", 0ull) * 10 + forged_ * 1000;
      j["port"]["rx_queue_len"] = 4096;
    }
    if (j.contains("cycles_per_batch")) j["cycles_per_batch"] = 50000000.0;
    if (j.contains("nfs") && j["nfs"].is_array())
      for (auto& nf : j["nfs"]) {
        nf["packets_in"] = nf.value("packets_in", 0ull) * 10 + forged_;
        nf["cycles_per_packet"] = 100000.0;
      }
    std::string tmp = stats_ + ".hostile";
    std::ofstream(tmp) << j.dump();
    rename(tmp.c_str(), stats_.c_str());
    forgeries_++;
  }

  void Write() {
    Json j = Json::object();
    j["rounds"] = rounds_;
    j["stats_forged"] = forgeries_;
    j["move_frames_forged"] = move_frames_forged_.load();
    j["batches"] = batches_.load();
    Json a = Json::object();
    for (const auto& [name, o] : outcomes_)
      a[name] = {{"refused", o.refused}, {"succeeded", o.succeeded}, {"last", o.last}};
    j["attacks"] = a;
    std::string tmp = dir_ + "/hostile.json.tmp";
    std::ofstream(tmp) << j.dump(1);
    rename(tmp.c_str(), (dir_ + "/hostile.json").c_str());
  }

  std::string victim_, group_, pktbuf_, stats_, dir_;
  int host_tid_ = 0;
  uint64_t host_pidns_ = 0;
  std::map<std::string, Outcome> outcomes_;
  uint64_t rounds_ = 0, forgeries_ = 0, forged_ = 0;
  std::atomic<uint64_t> batches_{0};
  FlowKey victim_flow_;
  bool victim_flow_ok_ = false;
  std::atomic<bool> forge_move_{false};
  std::atomic<uint64_t> move_frames_forged_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

KEEL_NF(Hostile, "hostile", "a hostile tenant's NF: forwards, and tries to reach what is not its own");
KEEL_NF_ARGS(Hostile, R"json([
  {"name": "victim", "type": "string", "required": true, "doc": "the chain whose instances it attacks"},
  {"name": "host_tid", "type": "integer", "minimum": 0, "default": 0, "doc": "a host thread to register with coopsched"},
  {"name": "host_pidns", "type": "integer", "minimum": 0, "default": 0, "doc": "the host's pid namespace inode, to claim"},
  {"name": "victim_flow", "type": "string", "doc": "SRC:SPORT>DST:DPORT/PROTO of a victim flow to forge move frames for"}
])json");

}  // namespace keel
