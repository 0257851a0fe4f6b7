/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ingress's own OpenFlow 1.3 connection to the top-of-rack switch, for
 * the stage-2 rules of new flows: keel-torctl says once what a (chain,
 * instance, worker)'s rule looks like (a RuleTemplate), and the ingress
 * writes each flow's flow-mod itself, straight to ovs-vswitchd's management
 * socket (/var/run/openvswitch/<bridge>.mgmt, which takes OpenFlow
 * connections without any controller configuration), instead of one gRPC
 * call to torctl per flow.
 *
 * Only what installing rules needs is spoken: HELLO, FEATURES (for the
 * datapath id), ECHO, FLOW_MOD (ADD), BARRIER and ERROR. Everything else the
 * switch sends is ignored.
 */
#ifndef KEEL_INGRESS_TOR_OPENFLOW_H_
#define KEEL_INGRESS_TOR_OPENFLOW_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "parser.h"

namespace keel::ingress {

/* What keel-torctl says the stage-2 rule of one (chain, instance, worker) looks like, all but
 * its match: the ingress builds each flow's rule from it. */
struct RuleTemplate {
  uint64_t datapath_id = 0;   /* the switch torctl built it for */
  uint8_t table_id = 0;
  uint16_t priority = 0;
  uint64_t cookie = 0;
  uint16_t idle_timeout_s = 0;
  uint16_t flags = 0;         /* OFPFF_* (OFPFF_SEND_FLOW_REM = 1) */
  std::string instructions;   /* the rule's OpenFlow 1.3 instructions, encoded as on the wire */
};

/* The most instruction bytes a flow-mod can carry: its length is 16 bits, and
 * the header, the flow-mod's fields and the largest match take 96 bytes. */
constexpr size_t kMaxInstructionBytes = 65535 - 96;

/* Appends one OpenFlow 1.3 OFPT_FLOW_MOD: OFPFC_ADD, cookie_mask 0, hard_timeout 0,
 * buffer_id OFP_NO_BUFFER, out_port OFPP_ANY, out_group OFPG_ANY, table/priority/cookie/
 * idle timeout/flags and instructions from |t|, and an OXM match (OFPMT_OXM, padded to 8
 * bytes) of, in this order: eth_type 0x0800, ip_proto, ipv4_src, ipv4_dst, then for TCP (6)
 * tcp_src, tcp_dst, for UDP (17) udp_src, udp_dst (no ports for other protocols).
 * |t.instructions| must be at most kMaxInstructionBytes long. */
void AppendFlowMod(const FlowKey& flow, const RuleTemplate& t, uint32_t xid, std::string* out);

/* One OpenFlow 1.3 connection to a switch's Unix socket, for flow-mods only.
 *
 * A thread (keel-ing-of) connects, says HELLO (OpenFlow 1.3 only, with a
 * version bitmap), asks for the switch's features, answers its echo requests
 * and reads the answers to Install's flow-mods; it sleeps in poll() when
 * nothing is pending. A connection that breaks, or a switch that does not
 * finish the handshake within timeout_ms, is dropped and made again after
 * 100 ms, doubling to 2 s while it keeps failing.
 *
 * Install may be called from any thread; calls write one at a time. */
class TorOpenFlow {
 public:
  /* |ok[i]| says whether rules[i] of the Install is on the switch.
   *
   * Where it runs: inside Install when nothing was sent (not connected, or
   * every rule refused before sending); otherwise on the connection thread,
   * with no lock of this class held. It may call Install (and DatapathId,
   * Connects), but not Stop or the destructor; while it runs the connection
   * thread reads nothing and no other Install's result or timeout is handled,
   * and an Install from it writes on that thread (up to timeout_ms if the
   * switch does not read), so it should hand the result on and return. */
  using Done = std::function<void(const std::vector<bool>& ok)>;

  /* |path|: the switch's Unix socket ("unix:" prefix allowed). */
  explicit TorOpenFlow(std::string path, int timeout_ms = 1000);
  ~TorOpenFlow();  /* Stop() */
  TorOpenFlow(const TorOpenFlow&) = delete;
  TorOpenFlow& operator=(const TorOpenFlow&) = delete;

  /* Starts the connection thread ("keel-ing-of"). */
  void Start();
  /* Ends the connection and its thread; every pending Install fails (all
   * false). Later Installs fail at once. */
  void Stop();
  /* The switch's datapath id once connected and its FEATURES_REPLY came; 0 otherwise. */
  uint64_t DatapathId() const { return datapath_id_.load(std::memory_order_acquire); }
  /* Connections made so far, counted when their handshake is complete (1
   * after the first; a reconnect adds one). */
  uint64_t Connects() const { return connects_.load(std::memory_order_relaxed); }

  /* Sends one ADD flow-mod per rule and an OFPT_BARRIER_REQUEST behind them, in one write.
   * |done| is called exactly once with one bool per rule: false for a rule an OFPT_ERROR
   * with its xid answered, true for the others once the barrier reply came; all false if
   * not connected (then called inside Install), if the connection breaks first, or if no
   * barrier reply came within timeout_ms. A rule whose template is null, has more than
   * kMaxInstructionBytes of instructions, or was built for another switch (a datapath_id
   * that is neither 0 nor DatapathId()) is false without being sent. An empty |rules|
   * gets done({}) at once. See Done for the thread |done| runs on. */
  void Install(const std::vector<std::pair<FlowKey, const RuleTemplate*>>& rules, Done done);

 private:
  using Clock = std::chrono::steady_clock;

  /* One Install waiting for its barrier reply. Its flow-mods' xids are the
   * |sent.size()| xids just before |barrier_xid|, in |sent|'s order. */
  struct Pending {
    uint32_t barrier_xid = 0;
    std::vector<size_t> sent;  /* the rule index of each flow-mod sent */
    std::vector<bool> ok;
    Done done;
    Clock::time_point deadline;
  };
  enum class Phase { kHello, kFeatures, kUp };

  void Loop();
  /* Opens the socket and sends HELLO; -1 if that failed. */
  int Connect();
  /* Reads, parses and handles what the switch sent; false if the connection
   * is to be dropped (closed by the peer, a read error, a bad message). */
  bool ReadMessages(int fd, std::string* rbuf, Phase* phase);
  bool Handle(int fd, const uint8_t* msg, size_t len, Phase* phase);
  void OnError(uint32_t xid, const uint8_t* msg, size_t len);
  void OnBarrierReply(uint32_t xid);
  /* Fails the pending Installs whose deadline has passed; the time until the
   * next deadline in ms for poll (-1: none). */
  int ExpireDue();
  /* Drops the connection |fd| and fails every pending Install. */
  void Drop(int fd);
  void FailAllPending();
  /* Writes one message from the connection thread; false if the write failed. */
  bool SendMessage(int fd, uint8_t type, uint32_t xid, const uint8_t* body, size_t body_len);
  /* Sleeps |ms| or until Stop; false if stopping. */
  bool Backoff(int ms);
  void DrainWake();
  void Wake();

  const std::string path_;
  const int timeout_ms_;
  std::thread thread_;
  int wake_fd_ = -1;  /* eventfd: Stop, and a first pending Install's deadline */
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> datapath_id_{0};
  std::atomic<uint64_t> connects_{0};

  /* Writers. fd_ is the socket once the handshake is complete, -1 otherwise;
   * it is set and reset only with write_mu_ held, so it is never closed under
   * a writer. Lock order: write_mu_ before pending_mu_. */
  std::mutex write_mu_;
  int fd_ = -1;
  uint32_t next_xid_ = 1;

  std::mutex pending_mu_;
  std::deque<Pending> pending_;  /* in the order written, the order the switch answers */

  /* Connection thread only. */
  bool logged_version_ = false;
  bool logged_connect_ = false;
  bool logged_error_ = false;
};

}  // namespace keel::ingress

#endif  // KEEL_INGRESS_TOR_OPENFLOW_H_
