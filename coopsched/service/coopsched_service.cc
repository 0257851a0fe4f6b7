// SPDX-License-Identifier: Apache-2.0
#include "coopsched_service.h"

#include <cstdlib>
#include <vector>

#include "cs-pidns.h"
#include "cs-rt.h"

namespace keel::coopsched {
namespace {

grpc::Status ToStatus(const cs_error& err) {
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  switch (err.cls) {
    case CS_OK: return grpc::Status::OK;
    case CS_EINVAL: code = grpc::StatusCode::INVALID_ARGUMENT; break;
    case CS_ENOENT: code = grpc::StatusCode::NOT_FOUND; break;
    case CS_EEXIST: code = grpc::StatusCode::ALREADY_EXISTS; break;
    case CS_ESTATE: code = grpc::StatusCode::FAILED_PRECONDITION; break;
    case CS_ETIMEDOUT: code = grpc::StatusCode::DEADLINE_EXCEEDED; break;
    case CS_EINTERNAL: code = grpc::StatusCode::INTERNAL; break;
  }
  return grpc::Status(code, err.msg);
}

keel::v1::GroupState ToProto(cs_group_state st) {
  switch (st) {
    case CS_DETACHED: return keel::v1::GROUP_STATE_DETACHED;
    case CS_ATTACHED: return keel::v1::GROUP_STATE_ATTACHED;
    case CS_DETACHING: return keel::v1::GROUP_STATE_DETACHING;
    case CS_CUT_OFF: return keel::v1::GROUP_STATE_CUT_OFF;
    case CS_FAILED: return keel::v1::GROUP_STATE_FAILED;
    case CS_FINISHED: return keel::v1::GROUP_STATE_FINISHED;
  }
  return keel::v1::GROUP_STATE_UNSPECIFIED;
}

void Fill(const cs_group_info& info, keel::v1::GroupStatus* out) {
  out->set_group_id(info.id);
  out->set_state(ToProto(info.state));
  out->set_core(info.core < 0 ? 0 : static_cast<uint32_t>(info.core));
  out->set_batch(info.batch);
  out->set_rounds(info.rounds);
  out->set_handoffs(info.handoffs);
  out->set_packets(info.packets);
  out->set_turn(info.turn);
  out->set_cpu_ns(info.cpu_ns);
  out->set_pktbuf_path(info.path);
  for (uint32_t i = 0; i < info.n; i++) {
    auto* t = out->add_threads();
    t->set_position(info.threads[i].position);
    t->set_tid(info.threads[i].tid);
    t->set_pid(info.threads[i].pid);
    t->set_state(info.threads[i].state ? std::string(1, info.threads[i].state) : "gone");
    t->set_cpu_ns(info.threads[i].cpu_ns);
  }
}

void Fill(const cs_event& ev, keel::v1::Event* out) {
  out->set_seq(ev.seq);
  out->set_unix_ns(ev.unix_ns);
  out->set_kind(ev.kind);
  out->set_group_id(ev.group);
  out->set_position(ev.position);
  out->set_tid(ev.tid);
  out->set_busy_us(ev.busy_us);
  out->set_message(ev.message);
}

}  // namespace

grpc::Status Service::GroupReply(const std::string& group, keel::v1::GroupStatus* out) {
  cs_group_info info;
  cs_error err{};
  if (cs_sched_group(sched_, group.c_str(), &info, &err) != CS_OK) return ToStatus(err);
  Fill(info, out);
  return grpc::Status::OK;
}

grpc::Status Service::RegisterGroup(grpc::ServerContext*, const keel::v1::RegisterGroupRequest* req,
                                    keel::v1::GroupStatus* out) {
  std::vector<pid_t> tids(req->tids().begin(), req->tids().end());
  cs_error err{};
  if (cs_sched_register(sched_, req->group_id().c_str(), tids.data(),
                        static_cast<uint32_t>(tids.size()), req->pktbuf_path().c_str(),
                        &err) != CS_OK)
    return ToStatus(err);
  return GroupReply(req->group_id(), out);
}

grpc::Status Service::RegisterThread(grpc::ServerContext*,
                                     const keel::v1::RegisterThreadRequest* req,
                                     keel::v1::RegisterThreadResponse* out) {
  uint32_t announced = 0;
  int registered = 0;
  cs_error err{};
  pid_t tid = req->tid();
  /* An NF in a container gives the id its own PID namespace knows. */
  if (req->pid_ns() != 0 && req->pid_ns() != own_pid_ns_ &&
      cs_pidns_host_tid(req->pid_ns(), req->tid(), &tid, &err) != CS_OK)
    return ToStatus(err);
  if (cs_sched_announce(sched_, req->group_id().c_str(), req->position(), req->count(), tid, 0,
                        req->pktbuf_path().c_str(), &announced, &registered, &err) != CS_OK)
    return ToStatus(err);
  out->set_announced(announced);
  out->set_registered(registered != 0);
  if (registered) return GroupReply(req->group_id(), out->mutable_group());
  return grpc::Status::OK;
}

grpc::Status Service::Attach(grpc::ServerContext*, const keel::v1::AttachRequest* req,
                             keel::v1::GroupStatus* out) {
  cs_error err{};
  if (cs_sched_attach(sched_, req->group_id().c_str(), static_cast<int>(req->core()), &err) !=
      CS_OK)
    return ToStatus(err);
  return GroupReply(req->group_id(), out);
}

grpc::Status Service::Detach(grpc::ServerContext*, const keel::v1::DetachRequest* req,
                             keel::v1::DetachResponse* out) {
  cs_error err{};
  int at_boundary = 0;
  uint64_t wait_us = 0;
  if (cs_sched_detach(sched_, req->group_id().c_str(), &at_boundary, &wait_us, &err) != CS_OK)
    return ToStatus(err);
  out->set_at_boundary(at_boundary != 0);
  out->set_wait_us(wait_us);
  return GroupReply(req->group_id(), out->mutable_group());
}

grpc::Status Service::Unregister(grpc::ServerContext*, const keel::v1::UnregisterRequest* req,
                                 keel::v1::UnregisterResponse*) {
  cs_error err{};
  if (cs_sched_unregister(sched_, req->group_id().c_str(), &err) != CS_OK) return ToStatus(err);
  return grpc::Status::OK;
}

grpc::Status Service::SetBatch(grpc::ServerContext*, const keel::v1::SetBatchRequest* req,
                               keel::v1::GroupStatus* out) {
  cs_error err{};
  if (cs_sched_set_batch(sched_, req->group_id().c_str(), req->batch(), &err) != CS_OK)
    return ToStatus(err);
  return GroupReply(req->group_id(), out);
}

grpc::Status Service::Status(grpc::ServerContext*, const keel::v1::StatusRequest*,
                             keel::v1::StatusResponse* out) {
  int64_t rt_runtime_us;
  cs_error err{};
  if (cs_rt_runtime_read(&rt_runtime_us, &err) != CS_OK) return ToStatus(err);
  out->set_rt_runtime_us(rt_runtime_us);
  const cs_options* opt = cs_sched_options(sched_);
  for (int i = 0; i < opt->ncores; i++) {
    out->add_cores(static_cast<uint32_t>(opt->cores[i]));
    uint64_t work, wakeups;
    cs_sched_enforcer_cost(sched_, i, &work, &wakeups);
    out->add_enforcer_cycles(work);
    out->add_enforcer_wakeups(wakeups);
  }
  out->set_tsc_hz(cs_sched_tsc_hz(sched_));
  out->set_handoff_cycles(cs_sched_handoff_cycles(sched_));
  out->set_yield_timeout_us(opt->yield_timeout_us);
  std::vector<cs_group_info> infos(16);
  size_t n;
  while ((n = cs_sched_groups(sched_, infos.data(), infos.size())) > infos.size())
    infos.resize(n);
  for (size_t i = 0; i < n; i++) Fill(infos[i], out->add_groups());
  std::vector<cs_event> evs(64);
  cs_events* log = cs_sched_events(sched_);
  uint64_t last = cs_events_last(log);
  size_t got = cs_events_read(log, last > 64 ? last - 64 : 0, evs.data(), evs.size(), 0);
  for (size_t i = 0; i < got; i++) Fill(evs[i], out->add_events());
  auto* refused = out->mutable_refused();
  for (int r = CS_REFUSED_NONE + 1; r < CS_REFUSED_N; r++)
    (*refused)[cs_refusal_name(static_cast<cs_refusal>(r))] =
        cs_sched_refusals(sched_, static_cast<cs_refusal>(r));
  return grpc::Status::OK;
}

grpc::Status Service::Events(grpc::ServerContext* ctx, const keel::v1::EventsRequest* req,
                             grpc::ServerWriter<keel::v1::Event>* writer) {
  uint64_t since = req->since();
  std::vector<cs_event> evs(32);
  cs_events* log = cs_sched_events(sched_);
  while (!ctx->IsCancelled() && !stopping_) {
    size_t got = cs_events_read(log, since, evs.data(), evs.size(), 200);
    for (size_t i = 0; i < got; i++) {
      keel::v1::Event ev;
      Fill(evs[i], &ev);
      if (!writer->Write(ev)) return grpc::Status::OK;
      since = evs[i].seq;
    }
  }
  return grpc::Status::OK;
}

void PeerTable::Set(int fd, const cs_caller& caller) {
  std::lock_guard<std::mutex> lock(mu_);
  by_fd_[fd] = caller;
}

bool PeerTable::Find(const std::string& peer, cs_caller* out) const {
  if (peer.rfind("fd:", 0) != 0) return false;
  char* end;
  long fd = std::strtol(peer.c_str() + 3, &end, 10);
  if (end == peer.c_str() + 3 || *end) return false;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_fd_.find(static_cast<int>(fd));
  if (it == by_fd_.end()) return false;
  *out = it->second;
  return true;
}

grpc::Status NfService::Refuse(enum cs_refusal why, const std::string& group, pid_t pid,
                               const std::string& message) {
  cs_sched_refused(sched_, why, group.c_str(), pid, message.c_str());
  return grpc::Status(grpc::StatusCode::PERMISSION_DENIED, message);
}

grpc::Status NfService::AdminOnly(grpc::ServerContext* ctx, const char* method,
                                  const std::string& group) {
  cs_caller caller{};
  peers_->Find(ctx->peer(), &caller);
  return Refuse(CS_REFUSED_METHOD, group, caller.pid,
                std::string("check method: keel-coopsched's NF socket serves only RegisterThread; ") +
                    method + " is the agent's, on the admin socket " + admin_socket_);
}

grpc::Status NfService::RegisterThread(grpc::ServerContext* ctx,
                                       const keel::v1::RegisterThreadRequest* req,
                                       keel::v1::RegisterThreadResponse* out) {
  const std::string& group = req->group_id();
  cs_caller caller{};
  if (!peers_->Find(ctx->peer(), &caller))
    return Refuse(CS_REFUSED_CALLER, group, 0,
                  "check caller: connection " + ctx->peer() + " was not accepted by keel-coopsched");
  // gRPC cancels a connection's calls before it closes its descriptor, which only then can
  // be reused: a call not cancelled after the look-up looked up its own connection.
  if (ctx->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "the caller went away");
  cs_caller_ask ask{group.c_str(), req->tid(), req->pid_ns(), req->pktbuf_path().c_str()};
  cs_caller_grant grant{};
  cs_error err{};
  std::lock_guard<std::mutex> lock(mu_);
  enum cs_refusal why = cs_caller_check(&policy_, &caller, &ask, &grant, &err);
  if (why != CS_REFUSED_NONE) return Refuse(why, group, caller.pid, err.msg);
  if (policy_.pod_dirs) {
    // Kubernetes: the instance directory is the Pod's emptyDir, which coopsched cannot
    // see, so the group is bound to the buffer file its first announcer presents (as seen
    // in that caller's root); every later announcer must present the very same file.
    for (auto it = bound_.begin(); it != bound_.end();)
      it = cs_sched_known(sched_, it->first.c_str()) ? std::next(it) : bound_.erase(it);
    const std::pair<uint64_t, uint64_t> file{grant.buf_dev, grant.buf_ino};
    auto it = bound_.find(group);
    if (it == bound_.end() && !cs_sched_known(sched_, group.c_str())) {
      bound_[group] = file;
    } else if (it == bound_.end() || it->second != file) {
      return Refuse(CS_REFUSED_PKTBUF_FILE, group, caller.pid,
                    "check pktbuf-file: " + req->pktbuf_path() + " in the root of process " +
                        std::to_string(caller.pid) + " is not the file sgroup \"" + group +
                        "\" was announced with");
    }
  }
  uint32_t announced = 0;
  int registered = 0;
  if (cs_sched_announce(sched_, group.c_str(), req->position(), req->count(), grant.host_tid,
                        grant.tid_start, req->pktbuf_path().c_str(), &announced, &registered,
                        &err) != CS_OK)
    return ToStatus(err);
  out->set_announced(announced);
  out->set_registered(registered != 0);
  if (!registered) return grpc::Status::OK;
  cs_group_info info;
  if (cs_sched_group(sched_, group.c_str(), &info, &err) != CS_OK) return ToStatus(err);
  Fill(info, out->mutable_group());
  return grpc::Status::OK;
}

grpc::Status NfService::RegisterGroup(grpc::ServerContext* ctx,
                                      const keel::v1::RegisterGroupRequest* req,
                                      keel::v1::GroupStatus*) {
  return AdminOnly(ctx, "RegisterGroup", req->group_id());
}

grpc::Status NfService::Attach(grpc::ServerContext* ctx, const keel::v1::AttachRequest* req,
                               keel::v1::GroupStatus*) {
  return AdminOnly(ctx, "Attach", req->group_id());
}

grpc::Status NfService::Detach(grpc::ServerContext* ctx, const keel::v1::DetachRequest* req,
                               keel::v1::DetachResponse*) {
  return AdminOnly(ctx, "Detach", req->group_id());
}

grpc::Status NfService::Unregister(grpc::ServerContext* ctx,
                                   const keel::v1::UnregisterRequest* req,
                                   keel::v1::UnregisterResponse*) {
  return AdminOnly(ctx, "Unregister", req->group_id());
}

grpc::Status NfService::SetBatch(grpc::ServerContext* ctx, const keel::v1::SetBatchRequest* req,
                                 keel::v1::GroupStatus*) {
  return AdminOnly(ctx, "SetBatch", req->group_id());
}

grpc::Status NfService::Status(grpc::ServerContext* ctx, const keel::v1::StatusRequest*,
                               keel::v1::StatusResponse*) {
  return AdminOnly(ctx, "Status", "");
}

grpc::Status NfService::Events(grpc::ServerContext* ctx, const keel::v1::EventsRequest*,
                               grpc::ServerWriter<keel::v1::Event>*) {
  return AdminOnly(ctx, "Events", "");
}

}  // namespace keel::coopsched
