// SPDX-License-Identifier: Apache-2.0
#include "coopsched_service.h"

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
  if (cs_sched_announce(sched_, req->group_id().c_str(), req->position(), req->count(), tid,
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

}  // namespace keel::coopsched
