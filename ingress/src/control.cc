/* SPDX-License-Identifier: Apache-2.0 */
#include "control.h"

#include <grpcpp/alarm.h>

#include <arpa/inet.h>
#include <poll.h>
#include <time.h>

#include <chrono>
#include <iterator>
#include <cstdio>
#include <vector>

#include "control_token.h"
#include "filter_set.h"

namespace keel::ingress {

namespace v1 = keel::v1;

namespace {

constexpr int kWatchBackoffMinMs = 100;
/* keel-ing-rinj's asks of torctl for a chain's reinject rule: 10 ms doubling
 * to 1 s, five at 1 s, then none until the Watch brings another chain. */
constexpr int kReinjectProbeMinMs = 10, kReinjectProbeMaxMs = 1000, kReinjectProbesAtMax = 5;
constexpr int kWatchBackoffMaxMs = 5000;
constexpr int kReleaseTimeoutMs = 1000;
constexpr int kReportTimeoutMs = 500;
constexpr int kReportMovesTimeoutMs = 2000;

/* CLOCK_MONOTONIC in ns: the clock the lcore stamps a flow's first packet with. */
uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

std::chrono::system_clock::time_point In(int ms) {
  return std::chrono::system_clock::now() + std::chrono::milliseconds(ms);
}

v1::FiveTuple ToProto(const FlowKey& k) {
  v1::FiveTuple t;
  t.set_src_ip(Ipv4String(k.src_ip));
  t.set_dst_ip(Ipv4String(k.dst_ip));
  t.set_src_port(k.src_port);
  t.set_dst_port(k.dst_port);
  t.set_proto(k.proto);
  return t;
}

/* The flow key of |t|; false if it names no IPv4 5-tuple. */
bool FromProto(const v1::FiveTuple& t, FlowKey* k) {
  in_addr src, dst;
  if (inet_pton(AF_INET, t.src_ip().c_str(), &src) != 1 || inet_pton(AF_INET, t.dst_ip().c_str(), &dst) != 1 ||
      t.src_port() > UINT16_MAX || t.dst_port() > UINT16_MAX || t.proto() > UINT8_MAX)
    return false;
  *k = FlowKey{ntohl(src.s_addr), ntohl(dst.s_addr), static_cast<uint16_t>(t.src_port()),
               static_cast<uint16_t>(t.dst_port()), static_cast<uint8_t>(t.proto())};
  return true;
}

/* What is wrong with FlowMove |m| as a whole ("" if nothing). */
std::string MoveProblem(const v1::FlowMove& m) {
  if (m.id().empty()) return "no id";
  if (m.chain().empty()) return "no chain";
  for (const v1::ChainInstance* i : {&m.from(), &m.to()}) {
    if (i->vlan() == 0 || i->vlan() >= inband::kMarkVid)
      return "instance " + i->id() + " has VLAN " + std::to_string(i->vlan()) + " (not 1-4092)";
  }
  if (m.from().vlan() == m.to().vlan()) return "from and to are the same instance (VLAN " + std::to_string(m.to().vlan()) + ")";
  return "";
}

/* The drop reason of a failed call: timeout if it ran out of time. */
DropReason Failure(const grpc::Status& st, DropReason otherwise) {
  return st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ? DropReason::kTimeout : otherwise;
}

}  // namespace

template <class Resp>
struct Control::TypedCall : Call {
  Resp resp;
  std::unique_ptr<grpc::ClientAsyncResponseReader<Resp>> reader;
  std::function<void(const grpc::Status&, const Resp&)> done;
  void Complete() override { done(status, resp); }
};

/* A channel that reconnects within a second of its server coming back (gRPC's
 * default backoff grows to two minutes, far longer than a flow can wait). */
static std::shared_ptr<grpc::Channel> Dial(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

static AssignBatchConfig BatchConfig(const ControlConfig& cfg) {
  AssignBatchConfig b;
  b.max_flows = static_cast<size_t>(cfg.assign_batch);
  b.window_ns = uint64_t(cfg.assign_window_us) * 1000;
  b.busy_rate = cfg.assign_busy_rate;
  b.max_attempts = cfg.assign_attempts;
  const uint64_t patience_ms = cfg.assign_patience_ms > 0 ? uint64_t(cfg.assign_patience_ms)
                                                           : uint64_t(cfg.assign_timeout_ms) * uint64_t(cfg.assign_attempts);
  b.patience_ns = patience_ms * 1'000'000;
  return b;
}

Control::Control(const ControlConfig& cfg, Channel* channel, IngressCounters* counters)
    : cfg_(cfg), channel_(channel), counters_(counters), assign_batcher_(BatchConfig(cfg)) {
  gateway_ = v1::Control::NewStub(Dial(cfg.gateway));
  torctl_ = v1::TorControl::NewStub(Dial(cfg.torctl));
  if (!cfg.tor_openflow.empty()) of_ = std::make_unique<TorOpenFlow>(cfg.tor_openflow, cfg.install_timeout_ms);
}

Control::~Control() { Stop(); }

void Control::Start() {
  cq_thread_ = std::thread([this] { CompletionLoop(); });
  req_thread_ = std::thread([this] { RequestLoop(); });
  watch_thread_ = std::thread([this] { WatchLoop(); });
  report_thread_ = std::thread([this] { ReportLoop(); });
  reinject_thread_ = std::thread([this] { ReinjectLoop(); });
  pthread_setname_np(cq_thread_.native_handle(), "keel-ing-cq");
  pthread_setname_np(req_thread_.native_handle(), "keel-ing-req");
  pthread_setname_np(watch_thread_.native_handle(), "keel-ing-watch");
  pthread_setname_np(report_thread_.native_handle(), "keel-ing-report");
  pthread_setname_np(reinject_thread_.native_handle(), "keel-ing-rinj");
  if (of_) of_->Start();
}

void Control::Stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) return;
    stopping_ = true;
    for (Call* c : live_) c->ctx.TryCancel();
    if (watch_ctx_) watch_ctx_->TryCancel();
  }
  stop_cv_.notify_all();
  reinject_cv_.notify_all();
  channel_->WakeControl();
  for (std::thread* t : {&req_thread_, &watch_thread_, &report_thread_, &reinject_thread_}) {
    if (t->joinable()) t->join();
  }
  /* Its pending writes end (failed); their completions find stopping_ and post nothing. */
  if (of_) of_->Stop();
  /* Every call was cancelled and no new one starts: the queue drains. */
  cq_.Shutdown();
  if (cq_thread_.joinable()) cq_thread_.join();
  Msg m;
  while (channel_->FromLcore(&m)) {
    if (m.kind == Msg::Kind::kFilterSetDone) delete m.filters;
  }
}

bool Control::Pause(int ms) {
  std::unique_lock<std::mutex> lk(mu_);
  return !stop_cv_.wait_for(lk, std::chrono::milliseconds(ms), [this] { return stopping_; });
}

template <class Resp, class Prepare, class Done>
void Control::Issue(int timeout_ms, Prepare prepare, Done done) {
  auto* call = new TypedCall<Resp>;
  call->ctx.set_deadline(In(timeout_ms));
  AddControlToken(&call->ctx, cfg_.token);
  /* A channel between reconnect attempts (the gateway or torctl restarted a
   * moment ago) would fail the call at once; the flow can wait its deadline. */
  call->ctx.set_wait_for_ready(true);
  call->done = std::move(done);
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stopping_) {
      delete call;
      return;
    }
    live_.insert(call);
  }
  call->reader = prepare(&call->ctx, &cq_);
  call->reader->StartCall();
  call->reader->Finish(&call->resp, &call->status, call);
}

void Control::CompletionLoop() {
  void* tag;
  bool ok;
  while (cq_.Next(&tag, &ok)) {
    auto* call = static_cast<Call*>(tag);
    call->Complete();
    std::lock_guard<std::mutex> lk(mu_);
    live_.erase(call);
    delete call;
  }
}

void Control::Post(std::function<void()> fn) {
  struct Posted : Call {
    grpc::Alarm alarm;
    std::function<void()> fn;
    void Complete() override { fn(); }
  };
  auto* p = new Posted;
  p->fn = std::move(fn);
  std::lock_guard<std::mutex> lk(mu_);
  if (stopping_) {
    delete p;
    return;
  }
  live_.insert(p);
  p->alarm.Set(&cq_, gpr_now(GPR_CLOCK_MONOTONIC), p);
}

void Control::RequestLoop() {
  pollfd pfd{channel_->wake_fd(), POLLIN, 0};
  for (;;) {
    uint64_t due;
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (stopping_) return;
      /* With every call slot taken, the next completion sends the batch. */
      due = assign_in_flight_ < kAssignInFlight ? assign_batcher_.Deadline() : 0;
    }
    if (due == 0) {
      poll(&pfd, 1, -1);
    } else {
      const uint64_t now = MonotonicNs();
      const uint64_t wait = due > now ? due - now : 0;
      timespec d{static_cast<time_t>(wait / 1'000'000'000), static_cast<long>(wait % 1'000'000'000)};
      ppoll(&pfd, 1, &d, nullptr);
    }
    channel_->DrainWake();
    Msg m;
    while (channel_->FromLcore(&m)) HandleLcoreMsg(m);
    FlushAssigns();
  }
}

void Control::HandleLcoreMsg(const Msg& m) {
  switch (m.kind) {
    case Msg::Kind::kNewFlow:
      return Assign(m);
    case Msg::Kind::kReleased:
      return InstallStage2(m.req_id, m.since_ns);
    case Msg::Kind::kAbandoned: {
      std::lock_guard<std::mutex> lk(mu_);
      if (setups_.erase(m.req_id) == 0) return;
      break;
    }
    case Msg::Kind::kFilterSetDone:
      delete m.filters;
      return;
    case Msg::Kind::kMoveRemoveRule:
      return MoveRemoveRule(m);
    case Msg::Kind::kMoveInstall:
      return MoveInstall(m);
    case Msg::Kind::kMoveResult:
      return MoveResult(m);
    default:
      return;
  }
  Release(m.key, "timeout");
}

void Control::Assign(const Msg& m) {
  PendingFlow f;
  f.key = m.key;
  f.req_id = m.req_id;
  f.chain = m.chain;
  std::lock_guard<std::mutex> lk(mu_);
  assign_batcher_.Add(std::move(f), MonotonicNs());
}

void Control::FlushAssigns() {
  std::vector<std::vector<PendingFlow>> batches;
  std::vector<PendingFlow> late;
  {
    std::lock_guard<std::mutex> lk(mu_);
    const uint64_t now = MonotonicNs();
    while (assign_in_flight_ < kAssignInFlight && assigning_ < cfg_.max_assigning && assign_batcher_.Due(now)) {
      auto b = assign_batcher_.Take(now, static_cast<size_t>(cfg_.max_assigning - assigning_), &late);
      if (b.empty()) continue;
      assign_in_flight_++;
      assigning_ += static_cast<int>(b.size());
      batches.push_back(std::move(b));
    }
  }
  /* Waited a whole call's deadline for a slot: the gateway is past its
   * capacity; the flow's packets go now rather than after more waiting. */
  for (const PendingFlow& f : late) Decide(f.key, f.req_id, DropReason::kControlBusy);
  for (auto& b : batches) {
    auto batch = std::make_shared<std::vector<PendingFlow>>(std::move(b));
    v1::AssignFlowsRequest req;
    for (const PendingFlow& f : *batch) {
      v1::AssignFlowRequest* r = req.add_flows();
      *r->mutable_flow() = ToProto(f.key);
      r->set_ingress_id(cfg_.ingress_id);
      r->set_chain(f.chain);
    }
    counters_->assign_calls.Add(1);
    Issue<v1::AssignFlowsResponse>(
        cfg_.assign_timeout_ms,
        [&](grpc::ClientContext* ctx, grpc::CompletionQueue* cq) { return gateway_->PrepareAsyncAssignFlows(ctx, req, cq); },
        [this, batch](const grpc::Status& st, const v1::AssignFlowsResponse& resp) { OnAssignedBatch(*batch, st, resp); });
  }
}

void Control::OnAssignedBatch(const std::vector<PendingFlow>& batch, const grpc::Status& st,
                              const v1::AssignFlowsResponse& resp) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    assign_in_flight_--;
    assigning_ -= static_cast<int>(batch.size());
  }
  for (size_t i = 0; i < batch.size(); i++) {
    const PendingFlow& f = batch[i];
    if (st.ok() && i >= static_cast<size_t>(resp.results_size())) {
      /* A gateway that answered fewer flows than it was asked: it did not decide the rest. */
      AssignFailed(f, grpc::Status(grpc::StatusCode::INTERNAL, "no answer for the flow"));
    } else if (!st.ok()) {
      AssignFailed(f, st);
    } else if (const v1::AssignFlowResult& r = resp.results(static_cast<int>(i)); !r.error().empty()) {
      AssignFailed(f, grpc::Status(static_cast<grpc::StatusCode>(r.code()), r.error()));
    } else {
      OnAssigned(f, r.response());
    }
  }
  FlushAssigns();
  /* The request thread may sleep without a deadline (it saw every call slot
   * taken): have it time the window of the flows still waiting. */
  bool waiting;
  {
    std::lock_guard<std::mutex> lk(mu_);
    waiting = assign_batcher_.waiting() > 0;
  }
  if (waiting) channel_->WakeControl();
}

void Control::AssignFailed(const PendingFlow& f, const grpc::Status& st) {
  const bool transient = st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
                         st.error_code() == grpc::StatusCode::UNAVAILABLE;
  if (transient) {
    /* A gateway busy for a moment (a scale-out's cold start on core 0)
     * costs the flow latency, not its packets. */
    std::lock_guard<std::mutex> lk(mu_);
    if (assign_batcher_.Retry(f, MonotonicNs())) {
      counters_->assign_retries.Add(1);
      return;
    }
  }
  /* A call that ran out of time may still have been carried out: the
   * gateway would count the flow against its instance forever. Release it
   * (a flow the gateway does not know is no harm). */
  if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) Release(f.key, "assign_timeout");
  Decide(f.key, f.req_id, Failure(st, DropReason::kAssignFailed));
}

void Control::OnAssigned(const PendingFlow& f, const v1::AssignFlowResponse& resp) {
  const FlowKey& key = f.key;
  const uint64_t req = f.req_id;
  if (!resp.assigned()) return Decide(key, req, DropReason::kAssignFailed);
  Setup setup{key, {}};
  v1::FlowAssignment& a = setup.assignment;
  *a.mutable_flow() = ToProto(key);
  a.set_chain(resp.chain().empty() ? f.chain : resp.chain());
  if (!resp.switch_only()) {
    a.set_instance(resp.instance().id());
    a.set_vlan(resp.instance().vlan());
    a.set_worker(resp.instance().worker());
  }
  const uint32_t vlan = a.vlan();
  const std::string chain = a.chain();  /* a is moved from below */
  {
    std::lock_guard<std::mutex> lk(mu_);
    setups_[req] = std::move(setup);
  }
  if (vlan != 0) {
    /* The flow has an instance: its packets go back tagged with the
     * instance's VLAN, which the ToR's reinject rule for that instance
     * (installed with the instance, not per flow) steers through the chain.
     * No switch round trip stands between the assignment and the release. */
    return Decide(key, req, DropReason::kCount, static_cast<uint16_t>(vlan));
  }
  /* A switch-only chain with a reinject VLAN: once torctl has answered a stage 1
   * of one of the chain's flows saying the chain's reinject rule with that VLAN
   * is on the switch (it goes in with the chain's program, behind the same
   * barrier), its packets go back tagged with that VLAN and that rule steers
   * them: no per-flow stage-1 rule, no torctl call before the release. */
  const uint32_t reinject = resp.switch_only() && cfg_.chain_reinject ? resp.reinject_vlan() : 0;
  const bool reinject_ok = reinject > 0 && reinject < inband::kMarkVid;
  if (reinject_ok) {
    bool ready;
    {
      std::lock_guard<std::mutex> lk(mu_);
      ready = reinject_ready_.count({chain, reinject}) > 0;
    }
    if (ready) {
      counters_->chain_reinjects.Add(1);
      return Decide(key, req, DropReason::kCount, static_cast<uint16_t>(reinject | kChainReinject));
    }
  }
  /* Else its held packets wait for a stage-1 rule that matches them coming back
   * from the ingress. */
  v1::InstallFlowRequest install;
  {
    std::lock_guard<std::mutex> lk(mu_);
    *install.mutable_assignment() = setups_[req].assignment;
  }
  install.set_idle_timeout_s(cfg_.idle_timeout_s);
  install.set_reinject_only(true);
  Issue<v1::InstallFlowResponse>(
      cfg_.install_timeout_ms,
      [&](grpc::ClientContext* ctx, grpc::CompletionQueue* cq) { return torctl_->PrepareAsyncInstallFlow(ctx, install, cq); },
      [this, key, req, chain, reinject = reinject_ok ? reinject : 0](const grpc::Status& st,
                                                                     const v1::InstallFlowResponse& r) {
        if (st.ok()) {
          /* torctl says the chain's reinject rule with that VLAN is on the switch (it
           * may not know the VLAN yet: a chain deployed a moment ago). */
          if (reinject != 0 && r.chain_reinject_vlan() == reinject) {
            std::lock_guard<std::mutex> lk(mu_);
            reinject_ready_.insert({chain, reinject});
          }
          return Decide(key, req, DropReason::kCount);
        }
        Decide(key, req, Failure(st, DropReason::kInstallFailed));
        {
          std::lock_guard<std::mutex> lk(mu_);
          setups_.erase(req);
        }
        Release(key, "install_failed");
      });
}

void Control::InstallStage2(uint64_t req, uint64_t since_ns) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = setups_.find(req);
    if (it == setups_.end()) return;
    Stage2 s{{}, since_ns, it->second.key, req};
    *s.request.mutable_assignment() = it->second.assignment;
    s.request.set_idle_timeout_s(cfg_.idle_timeout_s);
    s.request.set_reinject_only(false);
    setups_.erase(it);
    stage2_queue_.push_back(std::move(s));
  }
  FlushStage2();
}

void Control::FlushStage2() {
  /* Group commit from this side: while kStage2InFlight calls are out, the
   * flows that become ready queue up and go together in the next call, so at
   * a low rate each flow has its own call and under load one call, one
   * torctl commit and one switch barrier serve many. A flow whose chain
   * instance has a fresh template is written to the ToR directly instead,
   * the lot behind one barrier of its own. */
  auto batch = std::make_shared<std::vector<Stage2>>();
  std::vector<Stage2> direct;
  std::vector<RuleTemplate> rules;
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (stage2_queue_.empty() || stage2_in_flight_ >= kStage2InFlight) return;
    const uint64_t now = MonotonicNs();
    size_t n = std::min(stage2_queue_.size(), kStage2MaxBatch);
    for (size_t i = 0; i < n; i++) {
      Stage2& s = stage2_queue_[i];
      RuleTemplate t;
      if (of_ && s.move == 0 && !s.via_torctl && TemplateFor(s.request.assignment(), now, &t)) {
        direct.push_back(std::move(s));
        rules.push_back(std::move(t));
      } else {
        batch->push_back(std::move(s));
      }
    }
    stage2_queue_.erase(stage2_queue_.begin(), stage2_queue_.begin() + static_cast<long>(n));
    stage2_in_flight_ += !batch->empty() + !direct.empty();
  }
  if (!direct.empty()) InstallDirect(std::move(direct), std::move(rules));
  if (batch->empty()) return;
  v1::InstallFlowsRequest req;
  for (const Stage2& s : *batch) *req.add_flows() = s.request;
  /* A flow whose stage 2 fails stays on the ingress: its packets keep
   * reaching it, and it forwards them (tagged, or behind the stage-1 rule),
   * so none is lost; count it. */
  Issue<v1::InstallFlowsResponse>(
      cfg_.install_timeout_ms,
      [&](grpc::ClientContext* ctx, grpc::CompletionQueue* cq) { return torctl_->PrepareAsyncInstallFlows(ctx, req, cq); },
      [this, batch](const grpc::Status& st, const v1::InstallFlowsResponse& resp) {
        const uint64_t now = MonotonicNs();
        for (size_t i = 0; i < batch->size(); i++) {
          const v1::InstallFlowResult* r = st.ok() && i < static_cast<size_t>(resp.results_size())
                                               ? &resp.results(static_cast<int>(i)) : nullptr;
          const bool ok = r && r->error().empty();
          const Stage2& s = (*batch)[i];
          if (ok && of_ && r->has_template_() && s.move == 0) {
            /* The flows of the same instance that follow are written directly. */
            const v1::RuleTemplate& pt = r->template_();
            Template t{{}, now + static_cast<uint64_t>(cfg_.template_ttl_ms) * 1'000'000, of_->Connects()};
            t.rule.datapath_id = pt.datapath_id();
            t.rule.table_id = static_cast<uint8_t>(pt.table_id());
            t.rule.priority = static_cast<uint16_t>(pt.priority());
            t.rule.cookie = pt.cookie();
            t.rule.idle_timeout_s = static_cast<uint16_t>(pt.idle_timeout_s());
            t.rule.flags = static_cast<uint16_t>(pt.flags());
            t.rule.instructions = pt.instructions();
            std::lock_guard<std::mutex> lk(mu_);
            templates_[TemplateKey(s.request.assignment())] = std::move(t);
          }
          Stage2Done(s, ok, now);
        }
        {
          std::lock_guard<std::mutex> lk(mu_);
          stage2_in_flight_--;
        }
        FlushStage2();
      });
}

void Control::Stage2Done(const Stage2& s, bool ok, uint64_t now) {
  if (s.to_destination) {
    /* A moved flow's rule to its new instance: the mover releases it, or moves it back. */
    Msg done{Msg::Kind::kMoveInstalled};
    done.key = s.key;
    done.ok = ok;
    ToLcore(done);
    return;
  }
  if (!ok) {
    counters_->stage2_failed.Add(1);
    return;
  }
  counters_->stage2_installed.Add(1);
  if (s.request.assignment().vlan() != 0) Installed(s.key, s.req);
  /* Runs on the completion-queue thread, install_latency's one writer. */
  if (s.move == 0) counters_->install_latency.Observe(now - s.since_ns);
}

std::string Control::TemplateKey(const v1::FlowAssignment& a) {
  return a.chain() + '\n' + std::to_string(a.vlan()) + '\n' + a.worker();
}

bool Control::TemplateFor(const v1::FlowAssignment& a, uint64_t now, RuleTemplate* out) const {
  auto it = templates_.find(TemplateKey(a));
  if (it == templates_.end() || it->second.until_ns <= now) return false;
  /* A template of another switch (a different bridge) is no use, nor one from before the
   * connection broke: a restarted switch has the instance's rules once torctl put them back,
   * which the next flow's install through torctl waits for. */
  if (it->second.rule.datapath_id == 0 || it->second.rule.datapath_id != of_->DatapathId() ||
      it->second.connection != of_->Connects())
    return false;
  *out = it->second.rule;
  return true;
}

void Control::InstallDirect(std::vector<Stage2> batch, std::vector<RuleTemplate> rules) {
  auto b = std::make_shared<std::vector<Stage2>>(std::move(batch));
  auto r = std::make_shared<std::vector<RuleTemplate>>(std::move(rules));
  std::vector<std::pair<FlowKey, const RuleTemplate*>> mods;
  mods.reserve(b->size());
  for (size_t i = 0; i < b->size(); i++) mods.emplace_back((*b)[i].key, &(*r)[i]);
  of_->Install(mods, [this, b, r](const std::vector<bool>& ok) {
    Post([this, b, r, ok] {
      const uint64_t now = MonotonicNs();
      std::vector<v1::InstalledFlow> installed;
      std::vector<Stage2> failed;
      for (size_t i = 0; i < b->size(); i++) {
        Stage2& s = (*b)[i];
        if (i < ok.size() && ok[i]) {
          counters_->stage2_direct.Add(1);
          Stage2Done(s, true, now);
          v1::InstalledFlow& f = installed.emplace_back();
          *f.mutable_assignment() = s.request.assignment();
          f.set_idle_timeout_s((*r)[i].idle_timeout_s);
          f.set_cookie((*r)[i].cookie);
          continue;
        }
        counters_->stage2_direct_failed.Add(1);
        s.via_torctl = true;
        failed.push_back(std::move(s));
      }
      {
        std::lock_guard<std::mutex> lk(mu_);
        std::move(installed.begin(), installed.end(), std::back_inserter(records_));
        /* The switch refused these or the connection broke: torctl installs them (and finds
         * out what is wrong); their instances' templates go until torctl gives new ones. */
        for (Stage2& s : failed) {
          templates_.erase(TemplateKey(s.request.assignment()));
          stage2_queue_.push_back(std::move(s));
        }
        stage2_in_flight_--;
      }
      FlushStage2();
      FlushRecords(false);
    });
  });
}

void Control::FlushRecords(bool force) {
  auto req = std::make_shared<v1::RecordFlowsRequest>();
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (records_.empty() || record_in_flight_) return;
    const uint64_t now = MonotonicNs();
    if (!force && records_.size() < kRecordBatch && now - record_last_ns_ < kRecordEveryNs) return;
    for (v1::InstalledFlow& f : records_) *req->add_flows() = std::move(f);
    records_.clear();
    record_in_flight_ = true;
    record_last_ns_ = now;
  }
  Issue<v1::RecordFlowsResponse>(
      cfg_.install_timeout_ms,
      [&](grpc::ClientContext* ctx, grpc::CompletionQueue* cq) { return torctl_->PrepareAsyncRecordFlows(ctx, *req, cq); },
      [this, req](const grpc::Status& st, const v1::RecordFlowsResponse&) {
        std::lock_guard<std::mutex> lk(mu_);
        record_in_flight_ = false;
        if (st.ok()) return;
        /* torctl restarting: the reports wait for the next call, oldest first. Should it
         * stay away long, its read-back of the switch on reconnecting finds the rules anyway. */
        counters_->record_failed.Add(1);
        std::vector<v1::InstalledFlow> again(req->flows().begin(), req->flows().end());
        again.insert(again.end(), std::make_move_iterator(records_.begin()), std::make_move_iterator(records_.end()));
        if (again.size() > kRecordMax) {
          counters_->records_dropped.Add(again.size() - kRecordMax);
          again.erase(again.begin(), again.end() - static_cast<long>(kRecordMax));
        }
        records_ = std::move(again);
      });
}

void Control::Installed(const FlowKey& key, uint64_t req) {
  Msg m{Msg::Kind::kInstalled};
  m.key = key;
  m.req_id = req;
  /* Lost, the message would cost the flow's direct packets the instance's hold timeout. */
  ToLcore(m);
}

bool Control::ToLcore(const Msg& m) {
  /* The lcore empties its ring every loop; a full ring means a burst of messages. */
  while (!channel_->ToLcore(m)) {
    if (!Pause(1)) return false;
  }
  return true;
}

void Control::StartMove(const v1::FlowMove& spec) {
  const std::string problem = MoveProblem(spec);
  if (!problem.empty())
    std::fprintf(stderr, "keel-ingress: move %s: %s; its flows stay where they are\n", spec.id().c_str(), problem.c_str());
  std::vector<Msg> begin;
  std::shared_ptr<v1::ReportMovesRequest> report;
  {
    std::lock_guard<std::mutex> lk(mu_);
    const uint32_t n = next_move_++;
    Move& mv = moves_[n];
    mv.spec = spec;
    for (const v1::FiveTuple& t : spec.flows()) {
      v1::FlowMoveResult& r = mv.results.emplace_back();
      *r.mutable_flow() = t;
      FlowKey key;
      /* A flow named twice would have one result for two places. */
      if (problem.empty() && FromProto(t, &key) && mv.index.emplace(key, mv.results.size() - 1).second) {
        Msg m{Msg::Kind::kMoveBegin};
        m.key = key;
        m.move = n;
        m.vlan = static_cast<uint16_t>(spec.from().vlan());
        m.to_vlan = static_cast<uint16_t>(spec.to().vlan());
        begin.push_back(m);
        continue;
      }
      r.set_reason(MoveFailureName(MoveFailure::kInvalid));
      /* The lcore never has an invalid flow: the control thread is this counter's one writer. */
      counters_->moves[static_cast<size_t>(MoveFailure::kInvalid)].Add(1);
    }
    mv.pending = begin.size();
    if (mv.pending == 0) {
      report = std::make_shared<v1::ReportMovesRequest>();
      report->set_ingress_id(cfg_.ingress_id);
      report->set_move_id(spec.id());
      for (v1::FlowMoveResult& r : mv.results) *report->add_results() = std::move(r);
      moves_.erase(n);
    }
  }
  for (const Msg& m : begin) {
    if (!ToLcore(m)) return;
  }
  if (report) ReportMoves(report, 1);
}

void Control::MoveRemoveRule(const Msg& m) {
  v1::RemoveFlowRequest req;
  *req.mutable_flow() = ToProto(m.key);
  const FlowKey key = m.key;
  Issue<v1::RemoveFlowResponse>(
      cfg_.install_timeout_ms,
      [&](grpc::ClientContext* ctx, grpc::CompletionQueue* cq) { return torctl_->PrepareAsyncRemoveFlow(ctx, req, cq); },
      [this, key](const grpc::Status& st, const v1::RemoveFlowResponse&) {
        /* removed=false (torctl had no rule) is no failure: the flow's packets come here all the same. */
        if (!st.ok())
          std::fprintf(stderr, "keel-ingress: moving %s: RemoveFlow: %s\n", Ipv4String(key.src_ip).c_str(),
                       st.error_message().c_str());
        Msg done{Msg::Kind::kMoveRuleRemoved};
        done.key = key;
        done.ok = st.ok();
        ToLcore(done);
      });
}

void Control::MoveInstall(const Msg& m) {
  bool known;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = moves_.find(m.move);
    known = it != moves_.end();
    if (known) {
      const v1::FlowMove& spec = it->second.spec;
      const v1::ChainInstance& to = m.to_destination ? spec.to() : spec.from();
      Stage2 s{{}, MonotonicNs(), m.key, m.req_id, m.move, m.to_destination};
      v1::FlowAssignment* a = s.request.mutable_assignment();
      *a->mutable_flow() = ToProto(m.key);
      a->set_chain(spec.chain());
      a->set_instance(to.id());
      a->set_vlan(to.vlan());
      a->set_worker(to.worker());
      s.request.set_idle_timeout_s(cfg_.idle_timeout_s);
      s.request.set_reinject_only(false);
      stage2_queue_.push_back(std::move(s));
    }
  }
  if (known) return FlushStage2();
  /* Cannot happen (a move ends with its last flow's result); the mover must not wait for it. */
  if (m.to_destination) {
    Msg done{Msg::Kind::kMoveInstalled};
    done.key = m.key;
    ToLcore(done);
  }
}

void Control::MoveResult(const Msg& m) {
  std::shared_ptr<v1::ReportMovesRequest> report;
  {
    std::lock_guard<std::mutex> lk(mu_);
    auto it = moves_.find(m.move);
    if (it == moves_.end()) return;
    Move& mv = it->second;
    auto at = mv.index.find(m.key);
    if (at == mv.index.end()) return;
    v1::FlowMoveResult& r = mv.results[at->second];
    r.set_moved(m.move_failure == MoveFailure::kNone);
    r.set_reason(MoveFailureName(m.move_failure));
    r.set_pause_us(static_cast<double>(m.since_ns) / 1e3);
    if (--mv.pending > 0) return;
    report = std::make_shared<v1::ReportMovesRequest>();
    report->set_ingress_id(cfg_.ingress_id);
    report->set_move_id(mv.spec.id());
    for (v1::FlowMoveResult& x : mv.results) *report->add_results() = std::move(x);
    moves_.erase(it);
  }
  ReportMoves(report, 1);
}

void Control::ReportMoves(std::shared_ptr<v1::ReportMovesRequest> req, int attempt) {
  Issue<v1::ReportMovesResponse>(
      kReportMovesTimeoutMs,
      [&](grpc::ClientContext* ctx, grpc::CompletionQueue* cq) { return gateway_->PrepareAsyncReportMoves(ctx, *req, cq); },
      [this, req, attempt](const grpc::Status& st, const v1::ReportMovesResponse&) {
        if (st.ok()) return;
        if (attempt < cfg_.report_moves_attempts) return ReportMoves(req, attempt + 1);
        counters_->move_reports_failed.Add(1);
        std::fprintf(stderr, "keel-ingress: ReportMoves %s: %s (gave up after %d calls)\n", req->move_id().c_str(),
                     st.error_message().c_str(), attempt);
      });
}

void Control::Release(const FlowKey& key, const char* reason) {
  v1::ReleaseFlowRequest req;
  *req.mutable_flow() = ToProto(key);
  req.set_reason(reason);
  Issue<v1::ReleaseFlowResponse>(
      kReleaseTimeoutMs,
      [&](grpc::ClientContext* ctx, grpc::CompletionQueue* cq) { return gateway_->PrepareAsyncReleaseFlow(ctx, req, cq); },
      [this](const grpc::Status& st, const v1::ReleaseFlowResponse&) {
        if (st.ok()) counters_->flows_released.Add(1);
      });
}

void Control::Decide(const FlowKey& key, uint64_t req, DropReason failure, uint16_t vlan) {
  Msg m{Msg::Kind::kDecision};
  m.key = key;
  m.req_id = req;
  m.failure = failure;
  m.vlan = vlan;
  ToLcore(m);
}

void Control::WatchLoop() {
  int backoff = kWatchBackoffMinMs;
  while (true) {
    grpc::ClientContext ctx;
    AddControlToken(&ctx, cfg_.token);
    {
      std::lock_guard<std::mutex> lk(mu_);
      if (stopping_) return;
      watch_ctx_ = &ctx;
    }
    bool synced = ReadWatch(&ctx);
    {
      std::lock_guard<std::mutex> lk(mu_);
      watch_ctx_ = nullptr;
    }
    /* A stream that got as far as SYNCED was healthy: start the backoff over. */
    if (synced) backoff = kWatchBackoffMinMs;
    counters_->watch_restarts.Add(1);
    if (!Pause(backoff)) return;
    backoff = std::min(backoff * 2, kWatchBackoffMaxMs);
  }
}

bool Control::ReadWatch(grpc::ClientContext* ctx) {
  std::map<std::string, std::string> chains;
  v1::WatchRequest req;
  req.set_watcher(cfg_.ingress_id);
  auto reader = gateway_->Watch(ctx, req);
  v1::WatchEvent ev;
  bool synced = false;
  while (reader->Read(&ev)) {
    switch (ev.kind()) {
      case v1::WatchEvent::CHAIN_ADDED:
        chains[ev.chain().name()] = ev.chain().filter();
        NoteChain(ev.chain());
        break;
      case v1::WatchEvent::CHAIN_REMOVED:
        chains.erase(ev.chain().name());
        ForgetChain(ev.chain().name());
        break;
      case v1::WatchEvent::SYNCED:
        synced = true;
        break;
      case v1::WatchEvent::FLOWS_MOVE:
        if (ev.move().ingress_id() == cfg_.ingress_id) StartMove(ev.move());
        continue;
      default:
        continue;  /* instances and workers are the gateway's business */
    }
    /* Until SYNCED the stream is a snapshot in pieces: keep the old set. */
    if (synced) Publish(chains);
  }
  grpc::Status st = reader->Finish();
  std::fprintf(stderr, "keel-ingress: watch %s ended: %s (%d); watching again\n", cfg_.gateway.c_str(),
               st.error_message().c_str(), static_cast<int>(st.error_code()));
  return synced;
}

void Control::ForgetTemplates(const std::string& chain) {
  /* (mu_ held) TemplateKey begins with the chain's name and a newline. */
  templates_.erase(templates_.lower_bound(chain + '\n'), templates_.lower_bound(chain + '\x0b'));
}

void Control::NoteChain(const v1::Chain& c) {
  const uint32_t vlan = c.members_size() == 0 && cfg_.chain_reinject ? c.reinject_vlan() : 0;
  std::lock_guard<std::mutex> lk(mu_);
  ForgetTemplates(c.name());
  /* Confirmed VLANs of the chain other than its own now go (a chain re-placed
   * onto a server has none). */
  for (auto it = reinject_ready_.begin(); it != reinject_ready_.end();) {
    it = it->first == c.name() && it->second != vlan ? reinject_ready_.erase(it) : std::next(it);
  }
  if (vlan == 0 || vlan >= inband::kMarkVid) {
    reinject_wanted_.erase(c.name());
    return;
  }
  reinject_wanted_[c.name()] = vlan;
  if (!reinject_ready_.count({c.name(), vlan})) {
    reinject_news_ = true;
    reinject_cv_.notify_all();
  }
}

void Control::ForgetChain(const std::string& name) {
  std::lock_guard<std::mutex> lk(mu_);
  ForgetTemplates(name);
  reinject_wanted_.erase(name);
  for (auto it = reinject_ready_.begin(); it != reinject_ready_.end();) {
    it = it->first == name ? reinject_ready_.erase(it) : std::next(it);
  }
}

bool Control::ReinjectUnconfirmed() const {
  for (const auto& [chain, vlan] : reinject_wanted_) {
    if (!reinject_ready_.count({chain, vlan})) return true;
  }
  return false;
}

void Control::ReinjectLoop() {
  int backoff_ms = kReinjectProbeMinMs, at_max = 0;
  std::unique_lock<std::mutex> lk(mu_);
  while (!stopping_) {
    if (!ReinjectUnconfirmed() || at_max >= kReinjectProbesAtMax) {
      /* Nothing to ask (or torctl keeps saying no: the chain's first flow's
       * stage 1 confirms it then): sleep until the Watch brings a chain. */
      reinject_cv_.wait(lk, [this] { return stopping_ || reinject_news_; });
      reinject_news_ = false;
      backoff_ms = kReinjectProbeMinMs;
      at_max = 0;
      continue;
    }
    lk.unlock();
    grpc::ClientContext ctx;
    ctx.set_deadline(In(cfg_.install_timeout_ms));
    AddControlToken(&ctx, cfg_.token);
    v1::ChainReinjectsResponse resp;
    const grpc::Status st = torctl_->ChainReinjects(&ctx, v1::ChainReinjectsRequest{}, &resp);
    lk.lock();
    if (st.ok()) {
      for (const auto& [chain, vlan] : resp.chains()) {
        auto it = reinject_wanted_.find(chain);
        if (it != reinject_wanted_.end() && it->second == vlan) reinject_ready_.insert({chain, vlan});
      }
    }
    if (!ReinjectUnconfirmed()) continue;
    reinject_cv_.wait_for(lk, std::chrono::milliseconds(backoff_ms), [this] { return stopping_; });
    if (backoff_ms >= kReinjectProbeMaxMs) at_max++;
    backoff_ms = std::min(2 * backoff_ms, kReinjectProbeMaxMs);
  }
}

void Control::Publish(const std::map<std::string, std::string>& chains) {
  if (chains == published_) return;
  std::vector<std::string> errors;
  Msg m{Msg::Kind::kFilterSet};
  m.filters = new FilterSet(chains, &errors);
  for (const std::string& e : errors) std::fprintf(stderr, "keel-ingress: %s (chain ignored)\n", e.c_str());
  counters_->chains.Set(m.filters->size());
  while (!channel_->ToLcore(m)) {
    if (!Pause(1)) {
      delete m.filters;
      return;
    }
  }
  published_ = chains;
}

void Control::ReportLoop() {
  uint64_t last_flows = 0;
  auto last = std::chrono::steady_clock::now();
  bool failing = false;
  while (Pause(cfg_.report_interval_ms)) {
    FlushRecords(true); /* what a quiet spell left unreported */
    Snapshot s = TakeSnapshot(*counters_);
    auto now = std::chrono::steady_clock::now();
    double dt = std::chrono::duration<double>(now - last).count();
    v1::IngressStats st;
    st.set_ingress_id(cfg_.ingress_id);
    st.set_packets_in(s.counters["packets_in"]);
    st.set_new_flows(s.counters["new_flows"]);
    st.set_new_flows_per_s(dt > 0 ? static_cast<double>(s.counters["new_flows"] - last_flows) / dt : 0);
    st.set_buffered_packets(static_cast<uint32_t>(s.buffered));
    st.set_buffered_max(static_cast<uint32_t>(s.buffered_max));
    st.set_flows_installed(s.counters["flows_installed"]);
    st.set_packets_reinjected(s.counters["packets_reinjected"]);
    st.set_packets_normal_path(s.counters["packets_normal_path"]);
    for (const auto& [reason, n] : s.drops) (*st.mutable_drops())[reason] = n;
    st.set_install_p50_ms(s.install.QuantileMs(0.5));
    st.set_install_p99_ms(s.install.QuantileMs(0.99));
    last_flows = s.counters["new_flows"];
    last = now;

    grpc::ClientContext ctx;
    ctx.set_deadline(In(kReportTimeoutMs));
    AddControlToken(&ctx, cfg_.token);
    v1::ReportIngressStatsResponse resp;
    grpc::Status rs = gateway_->ReportIngressStats(&ctx, st, &resp);
    /* Say so when reporting starts or stops failing, not every interval. */
    if (rs.ok() == failing) {
      failing = !rs.ok();
      std::fprintf(stderr, "keel-ingress: ReportIngressStats to %s %s\n", cfg_.gateway.c_str(),
                   failing ? ("failing: " + rs.error_message()).c_str() : "works again");
    }
  }
}

}  // namespace keel::ingress
