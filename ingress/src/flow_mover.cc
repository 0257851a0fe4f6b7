/* SPDX-License-Identifier: Apache-2.0 */
#include "flow_mover.h"

#include <algorithm>

#include <string>

namespace keel::ingress {

const char* MoveFailureName(MoveFailure f) {
  static const char* const kNames[] = {"", "global", "no_room", "refused", "timeout", "rule", "busy", "invalid"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == static_cast<size_t>(MoveFailure::kCount));
  return kNames[static_cast<size_t>(f)];
}

keel::FlowKey ToMoveKey(const FlowKey& k) {
  keel::FlowKey m;
  m.src_ip = k.src_ip;
  m.dst_ip = k.dst_ip;
  m.src_port = k.src_port;
  m.dst_port = k.dst_port;
  m.proto = k.proto;
  return m;
}

FlowKey FromMoveKey(const keel::FlowKey& k) { return FlowKey{k.src_ip, k.dst_ip, k.src_port, k.dst_port, k.proto}; }

FlowMover::FlowMover(const MoverConfig& cfg) : cfg_(cfg) { flows_.reserve(cfg.max_flows); }

void FlowMover::Reject(uint32_t move, const FlowKey& key, MoveFailure why, MoveActions* out) {
  MoveAction a{MoveAction::Kind::kResult};
  a.key = key;
  a.move = move;
  a.result = MoveResult{move, key, why, 0};
  out->push_back(std::move(a));
}

void FlowMover::Begin(uint32_t move, const FlowKey& key, uint16_t from_vlan, uint16_t to_vlan, uint64_t now,
                      MoveActions* out) {
  if (flows_.count(key) || flows_.size() >= cfg_.max_flows) return Reject(move, key, MoveFailure::kBusy, out);
  Flow& f = flows_[key];
  f.state = State::kRemoving;
  f.move = move;
  f.from_vlan = from_vlan;
  f.to_vlan = to_vlan;
  f.started = now;
  f.deadline = now + cfg_.rule_timeout_ns;
  MoveAction a{MoveAction::Kind::kRemoveRule};
  a.key = key;
  a.move = move;
  out->push_back(std::move(a));
}

HoldVerdict FlowMover::OnPacket(const FlowKey& key, Packet pkt, uint64_t now) {
  auto it = flows_.find(key);
  if (it == flows_.end()) return HoldVerdict::kNotMoving;
  Flow& f = it->second;
  if (f.held.size() >= cfg_.hold_per_flow || held_ >= cfg_.hold_max) return HoldVerdict::kFull;
  if (f.first_held == 0) {
    f.first_held = now;
    /* The switch has let go of the flow: its stragglers to S need only the quiet time. */
    if (f.state == State::kQuiet) f.deadline = now + cfg_.quiet_ns;
  }
  f.held.push_back(pkt);
  held_++;
  return HoldVerdict::kHeld;
}

void FlowMover::OnRuleRemoved(const FlowKey& key, bool ok, uint64_t now, MoveActions* out) {
  auto it = flows_.find(key);
  if (it == flows_.end() || it->second.state != State::kRemoving) return;
  Flow& f = it->second;
  if (!ok) {
    f.failure = MoveFailure::kRule;
    return Finish(key, false, now, out);
  }
  f.state = State::kQuiet;
  f.deadline = f.first_held ? std::max(now, f.first_held) + cfg_.quiet_ns : now + cfg_.idle_quiet_ns;
}

void FlowMover::OnInstalled(const FlowKey& key, bool ok, uint64_t now, MoveActions* out) {
  auto it = flows_.find(key);
  if (it == flows_.end() || it->second.state != State::kInstalling) return;
  if (ok) return Finish(key, true, now, out);
  TakeBack(&it->second, key, MoveFailure::kRule, now, out);
}

FrameVerdict FlowMover::OnFrame(const uint8_t* body, size_t len, uint16_t vlan, uint64_t now, MoveActions* out) {
  MoveFrame frame;
  std::string err;
  if (!DecodeMoveFrame(body, len, &frame, &err)) return FrameVerdict::kMalformed;
  const FlowKey key = FromMoveKey(frame.flow);
  auto it = flows_.find(key);
  if (it == flows_.end()) return FrameVerdict::kUnknownFlow;
  Flow& f = it->second;
  /* Which frame the flow waits for: its kind and the instance it comes back from. */
  MoveKind kind;
  uint16_t from;
  switch (f.state) {
    case State::kExporting: kind = MoveKind::kExport, from = f.from_vlan; break;
    case State::kImporting: kind = MoveKind::kImport, from = f.to_vlan; break;
    case State::kTakingBack: kind = MoveKind::kExport, from = f.to_vlan; break;
    case State::kRestoring: kind = MoveKind::kImport, from = f.from_vlan; break;
    default: return FrameVerdict::kUnexpected;
  }
  if (frame.kind != kind || (vlan != 0 && vlan != from)) return FrameVerdict::kUnexpected;
  const bool ok = frame.status == MoveStatus::kOk;
  switch (f.state) {
    case State::kExporting:
      /* Failed or not, the records in it are S's: they go back there unless D takes them. */
      f.saved = frame;
      f.saved.status = MoveStatus::kOk;
      f.saved.failed_position = 0;
      f.have_saved = true;
      if (!ok) {
        MoveFailure why = frame.status == MoveStatus::kGlobal   ? MoveFailure::kGlobal
                          : frame.status == MoveStatus::kNoRoom ? MoveFailure::kNoRoom
                                                                : MoveFailure::kRefused;
        Restore(&f, key, why, now, out);
        break;
      }
      frame.kind = MoveKind::kImport;
      SendFrame(&f, key, State::kImporting, std::move(frame), f.to_vlan, now, out);
      break;
    case State::kImporting:
      if (!ok) {
        TakeBack(&f, key, MoveFailure::kRefused, now, out);
        break;
      }
      f.state = State::kInstalling;
      f.deadline = now + cfg_.rule_timeout_ns;
      {
        MoveAction a{MoveAction::Kind::kInstall};
        a.key = key;
        a.move = f.move;
        a.vlan = f.to_vlan;
        a.to_destination = true;
        out->push_back(std::move(a));
      }
      break;
    case State::kTakingBack:
      /* What D gives back is what it imported of S's records: S gets the whole saved set. */
      Restore(&f, key, f.failure, now, out);
      break;
    case State::kRestoring:
      if (!ok) restores_failed_++;
      Finish(key, false, now, out);
      break;
    default:
      break;
  }
  return FrameVerdict::kTaken;
}

void FlowMover::Poll(uint64_t now, uint64_t seen_until, MoveActions* out) {
  for (auto it = flows_.begin(); it != flows_.end();) {
    Flow& f = it->second;
    const FlowKey key = it->first;
    ++it; /* Finish erases the flow */
    if (f.state == State::kQuiet) {
      if (seen_until < f.deadline) continue;
      SendFrame(&f, key, State::kExporting, FreshExport(key), f.from_vlan, now, out);
    } else if (now >= f.deadline) {
      Timeout(key, &f, now, out);
    }
  }
}

void FlowMover::Timeout(const FlowKey& key, Flow* f, uint64_t now, MoveActions* out) {
  switch (f->state) {
    case State::kRemoving:
      f->failure = MoveFailure::kRule;
      return Finish(key, false, now, out);
    case State::kExporting:
      /* S's state went with the frame, if S had it: nothing to give back. */
      f->failure = MoveFailure::kTimeout;
      return Finish(key, false, now, out);
    case State::kImporting:
      /* D may be gone: S gets its records back without asking D for them. */
      return Restore(f, key, MoveFailure::kTimeout, now, out);
    case State::kInstalling:
      return TakeBack(f, key, MoveFailure::kRule, now, out);
    case State::kTakingBack:
      return Restore(f, key, f->failure, now, out);
    case State::kRestoring:
      restores_failed_++;
      return Finish(key, false, now, out);
    case State::kQuiet:
      return;
  }
}

MoveFrame FlowMover::FreshExport(const FlowKey& key) {
  MoveFrame frame;
  frame.kind = MoveKind::kExport;
  frame.flow = frame.cur = ToMoveKey(key);
  return frame;
}

void FlowMover::SendFrame(Flow* f, const FlowKey& key, State state, MoveFrame frame, uint16_t vlan, uint64_t now,
                          MoveActions* out) {
  MoveAction a{MoveAction::Kind::kSendFrame};
  a.key = key;
  a.move = f->move;
  a.vlan = vlan;
  a.type = frame.kind == MoveKind::kExport ? inband::Type::kExportState : inband::Type::kImportState;
  a.body.resize(kMoveFrameMax);
  a.body.resize(EncodeMoveFrame(frame, a.body.data(), a.body.size()));
  out->push_back(std::move(a));
  f->state = state;
  f->deadline = now + cfg_.frame_timeout_ns;
}

void FlowMover::Restore(Flow* f, const FlowKey& key, MoveFailure why, uint64_t now, MoveActions* out) {
  f->failure = why;
  if (!f->have_saved) return Finish(key, false, now, out);
  MoveFrame frame = f->saved;
  frame.kind = MoveKind::kImport;
  SendFrame(f, key, State::kRestoring, std::move(frame), f->from_vlan, now, out);
}

void FlowMover::TakeBack(Flow* f, const FlowKey& key, MoveFailure why, uint64_t now, MoveActions* out) {
  f->failure = why;
  SendFrame(f, key, State::kTakingBack, FreshExport(key), f->to_vlan, now, out);
}

void FlowMover::Finish(const FlowKey& key, bool moved, uint64_t now, MoveActions* out) {
  auto it = flows_.find(key);
  Flow& f = it->second;
  MoveAction rel{MoveAction::Kind::kRelease};
  rel.key = key;
  rel.move = f.move;
  rel.vlan = moved ? f.to_vlan : f.from_vlan;
  rel.to_destination = moved;
  rel.packets = std::move(f.held);
  held_ -= static_cast<uint32_t>(rel.packets.size());
  out->push_back(std::move(rel));
  MoveAction res{MoveAction::Kind::kResult};
  res.key = key;
  res.move = f.move;
  const uint64_t from = f.first_held ? f.first_held : f.started;
  res.result = MoveResult{f.move, key, moved ? MoveFailure::kNone : f.failure, now - from};
  out->push_back(std::move(res));
  flows_.erase(it);
}

}  // namespace keel::ingress
