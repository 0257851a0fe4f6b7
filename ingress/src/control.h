/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ingress's control side: everything that talks gRPC, off the lcore.
 *
 *  - keel-ing-req: sleeps on the Channel's eventfd, takes the lcore's
 *    messages and starts the calls they need (AssignFlows, stage 2, release);
 *    new flows go to the gateway in batches (assign_batch.h): the flows that
 *    came within a window (1 ms) or up to a count, in one AssignFlows call.
 *  - keel-ing-cq: runs the completion queue of those asynchronous calls and
 *    chains each setup's next step: AssignFlows -> decision to the lcore
 *    (release tagged with the instance's VLAN; a switch-only chain first
 *    has InstallFlow(reinject_only) put in a stage-1 rule), and after the
 *    lcore released the held packets, InstallFlow of the flow's own rule.
 *    With --tor-openflow, a flow whose chain instance has a fresh rule
 *    template (torctl returns one with each installed stage-2 rule) has its
 *    rule written to the ToR by keel-ing-of (tor_openflow.h) instead, and
 *    reported to torctl in batches (RecordFlows); completions come back to
 *    this thread (Post), which stays the one writer of the counters.
 *  - keel-ing-watch: follows the gateway's chains (Control.Watch) and hands
 *    the lcore a freshly compiled FilterSet on every change; re-watches
 *    with backoff when the stream ends. A FLOWS_MOVE for this ingress
 *    starts a move of each of its flows on the lcore (flow_mover.h); the
 *    request thread takes the moving flows' rules off the ToR (RemoveFlow)
 *    and installs their new ones through stage 2's path, and once every
 *    flow of the FlowMove has its result, one ReportMoves call tells the
 *    gateway.
 *  - keel-ing-report: ReportIngressStats every report interval.
 *  - keel-ing-rinj: when the Watch announces a switch-only chain with a
 *    reinject VLAN, asks keel-torctl (ChainReinjects) until the chain's
 *    reinject rule is on the switch (10 ms, doubling to 1 s, then it waits for
 *    the next chain), so that even the chain's first flow goes back tagged
 *    with that VLAN instead of waiting for a stage-1 rule.
 */
#ifndef KEEL_INGRESS_CONTROL_H_
#define KEEL_INGRESS_CONTROL_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "assign_batch.h"
#include "tor_openflow.h"
#include "channel.h"
#include "keel/v1/control.grpc.pb.h"
#include "keel/v1/torctl.grpc.pb.h"
#include "stats.h"

namespace keel::ingress {

struct ControlConfig {
  std::string gateway = "127.0.0.1:50051";
  std::string torctl = "127.0.0.1:50070";
  std::string ingress_id = "ingress-0";
  std::string token;  /* the control-plane token every call carries (control_token.h) */
  /* --chain-reinject: release a switch-only chain's flows by its reinject VLAN once
   * torctl confirms the chain's rule (else every flow takes a stage-1 rule). */
  bool chain_reinject = true;
  uint32_t idle_timeout_s = 0;
  int assign_timeout_ms = 500;
  /* AssignFlows is idempotent (a flow already assigned gets its assignment
   * again), so a flow whose call ran out of time or found the gateway
   * unavailable is sent again, up to this many calls in all, before its
   * packets go. */
  int assign_attempts = 3;
  /* New flows in AssignFlows calls at once; new flows beyond wait in order,
   * and one that waited longer than assign_patience_ms for a place is
   * dropped as control_busy. */
  int max_assigning = 256;
  /* How long a new flow may wait for a place in a call; 0: as long as its
   * calls could take (assign_timeout_ms x assign_attempts), so a gateway that
   * is slow or restarting costs latency within the hold, not packets. */
  int assign_patience_ms = 0;
  /* A batch of new flows goes when it holds assign_batch flows or its first
   * flow has waited assign_window_us. */
  int assign_batch = 64;
  int assign_window_us = 1000;
  /* New flows a second (recent) from which a flow waits assign_window_us for
   * others; below it goes at once. 0: always waits. */
  int assign_busy_rate = 0;
  int install_timeout_ms = 1000;
  /* --tor-openflow: the ToR's OpenFlow socket, where the ingress writes flows' own rules
   * from torctl's templates ("": torctl installs every rule). */
  std::string tor_openflow;
  int template_ttl_ms = 1000;
  int report_moves_attempts = 3;  /* ReportMoves is idempotent: a failed call is made again */
  int report_interval_ms = 2000;
};

class Control {
 public:
  Control(const ControlConfig& cfg, Channel* channel, IngressCounters* counters);
  ~Control();

  void Start();
  /* Cancels every call in flight and ends the threads (well within 1 s). */
  void Stop();

 private:
  /* One asynchronous unary call in flight; its tag on the completion queue. */
  struct Call {
    virtual ~Call() = default;
    virtual void Complete() = 0;
    grpc::ClientContext ctx;
    grpc::Status status;
  };
  template <class Resp>
  struct TypedCall;

  /* A flow between AssignFlow and its stage-2 install. */
  struct Setup {
    FlowKey key;
    keel::v1::FlowAssignment assignment;
  };
  /* A flow whose stage-2 rule is queued or on its way. */
  struct Stage2 {
    keel::v1::InstallFlowRequest request;
    uint64_t since_ns;  /* its first packet, for install_latency */
    FlowKey key;
    uint64_t req;       /* its setup's request id (the lcore's) */
    uint32_t move = 0;  /* a moving flow's rule: its FlowMove's number */
    bool to_destination = false;  /* the rule to the move's destination (the mover waits for it) */
    bool via_torctl = false;      /* a direct write failed: torctl installs it */
  };
  /* A rule template from torctl and until when it is used. */
  struct Template {
    RuleTemplate rule;
    uint64_t until_ns;
    uint64_t connection;  /* keel-ing-of's connection it is for (a switch restart ends it) */
  };
  /* A FlowMove being carried out. */
  struct Move {
    keel::v1::FlowMove spec;
    std::vector<keel::v1::FlowMoveResult> results;  /* one per flow of spec, in its order */
    std::unordered_map<FlowKey, size_t, FlowKeyHash> index;  /* a flow's place in results */
    size_t pending = 0;  /* flows without a result yet */
  };
  static constexpr int kStage2InFlight = 2;
  static constexpr int kAssignInFlight = 4;
  static constexpr size_t kStage2MaxBatch = 256;
  /* Flows written to the ToR directly are reported to torctl in one RecordFlows call
   * when this many wait or the last call is this long ago (expiries take seconds). */
  static constexpr size_t kRecordBatch = 512;
  static constexpr uint64_t kRecordEveryNs = 100'000'000;
  static constexpr size_t kRecordMax = 1u << 20; /* beyond, the oldest reports go (counted) */

  template <class Resp, class Prepare, class Done>
  void Issue(int timeout_ms, Prepare prepare, Done done);

  void RequestLoop();
  void HandleLcoreMsg(const Msg& m);
  void CompletionLoop();
  /* A new flow from the lcore joins the open batch. */
  void Assign(const Msg& m);
  /* Sends every batch that is due, while fewer than kAssignInFlight calls
   * and max_assigning flows are out. */
  void FlushAssigns();
  /* The answer to one AssignFlows call. */
  void OnAssignedBatch(const std::vector<PendingFlow>& batch, const grpc::Status& st,
                       const keel::v1::AssignFlowsResponse& resp);
  /* One flow's failed call (the whole call's status, or the flow's own):
   * sent again if the failure is transient and it has calls left, else its
   * packets are dropped. */
  void AssignFailed(const PendingFlow& f, const grpc::Status& st);
  /* One flow's answer: the decision to the lcore (and a switch-only chain's stage 1). */
  void OnAssigned(const PendingFlow& f, const keel::v1::AssignFlowResponse& resp);
  /* Queues the flow's own rule for installation (its held packets are out);
   * |since_ns| is its first packet. */
  void InstallStage2(uint64_t req, uint64_t since_ns);
  /* Sends the queued rules in one InstallFlows call unless kStage2InFlight
   * calls are out already (the last one's completion sends the rest). */
  void FlushStage2();
  /* One stage-2 rule's outcome (completion-queue thread). */
  void Stage2Done(const Stage2& s, bool ok, uint64_t now);
  /* Writes |batch|'s rules to the ToR (keel-ing-of); a failed one goes back to the queue for torctl. */
  void InstallDirect(std::vector<Stage2> batch, std::vector<RuleTemplate> rules);
  /* The fresh template of |a|'s chain instance for the connected switch (mu_ held). */
  bool TemplateFor(const keel::v1::FlowAssignment& a, uint64_t now, RuleTemplate* out) const;
  static std::string TemplateKey(const keel::v1::FlowAssignment& a);
  /* Sends the queued RecordFlows reports if due (|force|: if any). */
  void FlushRecords(bool force);
  /* Runs |fn| on the completion-queue thread. */
  void Post(std::function<void()> fn);
  /* Tells the lcore that setup |req|'s own rule is in: its marker follows. */
  void Installed(const FlowKey& key, uint64_t req);
  void Release(const FlowKey& key, const char* reason);
  /* Tells the lcore: release the flow's packets tagged |vlan| (0: untagged), or drop them (|failure|). */
  void Decide(const FlowKey& key, uint64_t req, DropReason failure, uint16_t vlan = 0);

  /* A FLOWS_MOVE for this ingress: each flow's move starts on the lcore. */
  void StartMove(const keel::v1::FlowMove& move);
  /* The rule of moving flow |key|: taken off the ToR, or installed to the move's destination
   * (the mover waits for it) or again to its source (setup |req|'s marker follows). */
  void MoveRemoveRule(const Msg& m);
  void MoveInstall(const Msg& m);
  /* One flow's result; the last of its FlowMove's sends ReportMoves. */
  void MoveResult(const Msg& m);
  void ReportMoves(std::shared_ptr<keel::v1::ReportMovesRequest> req, int attempt);
  /* Sends |m| to the lcore, waiting while its ring is full; false once stopping. */
  bool ToLcore(const Msg& m);

  void WatchLoop();
  /* Reads one Watch stream to its end; true if it got as far as SYNCED. */
  bool ReadWatch(grpc::ClientContext* ctx);
  /* A chain the Watch announced (or removed): its reinject VLAN wanted or forgotten. */
  void NoteChain(const keel::v1::Chain& c);
  void ForgetChain(const std::string& name);
  void ForgetTemplates(const std::string& chain);
  /* True while a wanted reinject VLAN is not confirmed (mu_ held). */
  bool ReinjectUnconfirmed() const;
  void ReinjectLoop();
  void Publish(const std::map<std::string, std::string>& chains);

  void ReportLoop();
  /* Sleeps |ms| unless Stop comes first; false once stopping. */
  bool Pause(int ms);

  ControlConfig cfg_;
  Channel* channel_;
  IngressCounters* counters_;
  std::unique_ptr<keel::v1::Control::Stub> gateway_;
  std::unique_ptr<keel::v1::TorControl::Stub> torctl_;
  std::unique_ptr<TorOpenFlow> of_;  /* --tor-openflow, else null */
  grpc::CompletionQueue cq_;

  std::mutex mu_;  /* guards everything below */
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  std::set<Call*> live_;                /* calls in flight, cancelled by Stop */
  /* Switch-only chains' reinject VLANs known to be on the ToR: an install of
   * one of the chain's flows succeeded with that VLAN given (the chain's
   * reinject rule goes in with its program). */
  std::set<std::pair<std::string, uint32_t>> reinject_ready_;
  /* The switch-only chains the Watch announced with a reinject VLAN (name -> VLAN). */
  std::map<std::string, uint32_t> reinject_wanted_;
  std::condition_variable reinject_cv_;  /* a chain wanted, or stopping */
  bool reinject_news_ = false;           /* a chain wanted since keel-ing-rinj last looked */
  std::map<uint64_t, Setup> setups_;    /* assigned flows awaiting stage 2, by request id */
  std::vector<Stage2> stage2_queue_;    /* ready for stage 2, waiting for a call slot */
  int stage2_in_flight_ = 0;            /* InstallFlows calls and direct writes out */
  std::map<std::string, Template> templates_;   /* by TemplateKey: chain, VLAN, worker */
  std::vector<keel::v1::InstalledFlow> records_;  /* direct rules torctl has not been told of */
  bool record_in_flight_ = false;
  uint64_t record_last_ns_ = 0;
  AssignBatcher assign_batcher_;        /* new flows waiting for AssignFlows */
  int assign_in_flight_ = 0;            /* AssignFlows calls out */
  int assigning_ = 0;                   /* flows in AssignFlows calls */
  grpc::ClientContext* watch_ctx_ = nullptr;
  std::map<uint32_t, Move> moves_;      /* FlowMoves being carried out, by number */
  uint32_t next_move_ = 1;

  std::map<std::string, std::string> published_;  /* the chains the lcore has; watch thread only */

  std::thread req_thread_, cq_thread_, watch_thread_, report_thread_, reinject_thread_;
};

}  // namespace keel::ingress

#endif  // KEEL_INGRESS_CONTROL_H_
