/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/flow_move.h"

#include <arpa/inet.h>

#include <cstring>

namespace keel {

namespace {

constexpr uint8_t kMagic0 = 'K';
constexpr uint8_t kMagic1 = 'M';
constexpr size_t kKeyBytes = 13;

void Put16(uint8_t* p, uint16_t v) { Store16(p, htons(v)); }

void Put32(uint8_t* p, uint32_t v) {
  uint32_t n = htonl(v);
  std::memcpy(p, &n, sizeof n);
}

uint16_t Get16(const uint8_t* p) { return ntohs(Load16(p)); }

uint32_t Get32(const uint8_t* p) {
  uint32_t n;
  std::memcpy(&n, p, sizeof n);
  return ntohl(n);
}

void PutKey(uint8_t* p, const FlowKey& k) {
  Put32(p, k.src_ip);
  Put32(p + 4, k.dst_ip);
  Put16(p + 8, k.src_port);
  Put16(p + 10, k.dst_port);
  p[12] = k.proto;
}

FlowKey GetKey(const uint8_t* p) {
  FlowKey k;
  k.src_ip = Get32(p);
  k.dst_ip = Get32(p + 4);
  k.src_port = Get16(p + 8);
  k.dst_port = Get16(p + 10);
  k.proto = p[12];
  return k;
}

size_t RecordsSize(const std::vector<MoveRecord>& records) {
  size_t n = 0;
  for (const MoveRecord& r : records) n += kMoveRecordBytes + r.state.len;
  return n;
}

}  // namespace

uint32_t NfId(std::string_view name) {
  uint32_t h = 2166136261u;
  for (char c : name) {
    h ^= static_cast<uint8_t>(c);
    h *= 16777619u;
  }
  return h;
}

size_t MoveFrame::EncodedSize() const { return kMoveHeaderBytes + RecordsSize(records); }

size_t EncodeMoveFrame(const MoveFrame& f, uint8_t* buf, size_t cap) {
  size_t n = f.EncodedSize();
  if (n > cap || n > kMoveFrameMax || f.records.size() > UINT8_MAX) return 0;
  for (const MoveRecord& r : f.records)
    if (r.state.len > kMaxStateValue) return 0;
  buf[0] = kMagic0;
  buf[1] = kMagic1;
  buf[2] = kMoveVersion;
  buf[3] = static_cast<uint8_t>(f.kind);
  buf[4] = static_cast<uint8_t>(f.status);
  buf[5] = f.failed_position;
  buf[6] = static_cast<uint8_t>(f.records.size());
  buf[7] = 0;
  PutKey(buf + 8, f.flow);
  PutKey(buf + 8 + kKeyBytes, f.cur);
  uint8_t* p = buf + kMoveHeaderBytes;
  for (const MoveRecord& r : f.records) {
    p[0] = r.position;
    Put32(p + 1, r.nf);
    PutKey(p + 5, r.state.key);
    p[5 + kKeyBytes] = r.state.len;
    std::memcpy(p + kMoveRecordBytes, r.state.data, r.state.len);
    p += kMoveRecordBytes + r.state.len;
  }
  return n;
}

bool DecodeMoveFrame(const uint8_t* buf, size_t len, MoveFrame* f, std::string* err) {
  auto fail = [err](std::string why) {
    *err = "flow move frame: " + why;
    return false;
  };
  if (len < kMoveHeaderBytes)
    return fail(std::to_string(len) + " bytes, shorter than the " + std::to_string(kMoveHeaderBytes) + "-byte header");
  if (len > kMoveFrameMax)
    return fail(std::to_string(len) + " bytes, longer than " + std::to_string(kMoveFrameMax));
  if (buf[0] != kMagic0 || buf[1] != kMagic1) return fail("bad magic");
  if (buf[2] != kMoveVersion) return fail("version " + std::to_string(buf[2]) + ", expected 1");
  if (buf[3] != static_cast<uint8_t>(MoveKind::kExport) && buf[3] != static_cast<uint8_t>(MoveKind::kImport))
    return fail("kind " + std::to_string(buf[3]) + " is neither export (1) nor import (2)");
  if (buf[4] > static_cast<uint8_t>(MoveStatus::kRefused)) return fail("unknown status " + std::to_string(buf[4]));
  if (buf[7] != 0) return fail("reserved byte is not 0");
  f->kind = static_cast<MoveKind>(buf[3]);
  f->status = static_cast<MoveStatus>(buf[4]);
  f->failed_position = buf[5];
  f->flow = GetKey(buf + 8);
  f->cur = GetKey(buf + 8 + kKeyBytes);
  f->records.clear();
  size_t off = kMoveHeaderBytes;
  for (size_t i = 0; i < buf[6]; i++) {
    if (len - off < kMoveRecordBytes) return fail("record " + std::to_string(i) + " is cut short");
    const uint8_t* p = buf + off;
    uint8_t vlen = p[5 + kKeyBytes];
    if (vlen > kMaxStateValue)
      return fail("record " + std::to_string(i) + " has a " + std::to_string(vlen) + "-byte value (at most " +
                  std::to_string(kMaxStateValue) + ")");
    if (len - off - kMoveRecordBytes < vlen) return fail("record " + std::to_string(i) + "'s value is cut short");
    MoveRecord& r = f->records.emplace_back();
    r.position = p[0];
    r.nf = Get32(p + 1);
    r.state.key = GetKey(p + 5);
    r.state.len = vlen;
    std::memcpy(r.state.data, p + kMoveRecordBytes, vlen);
    off += kMoveRecordBytes + vlen;
  }
  if (off != len) return fail(std::to_string(len - off) + " bytes after the last record");
  return true;
}

void NF::ExportFlow(const FlowKey& flow, FlowExport* out) {
  StateRecord r;
  if (state_.Take(flow, &r)) out->records.push_back(r);
  FlowKey rev = flow.Reverse();
  if (!(rev == flow) && state_.Take(rev, &r)) out->records.push_back(r);
}

bool NF::ImportFlow(const std::vector<StateRecord>& records, std::string* err) {
  std::vector<StateRecord> before(records.size());
  std::vector<bool> had(records.size());
  for (size_t i = 0; i < records.size(); i++) {
    had[i] = state_.Peek(records[i].key, &before[i]);
    if (state_.Update(records[i].key, records[i].data, records[i].len)) continue;
    for (size_t j = i; j-- > 0;) {
      if (had[j])
        state_.Update(before[j].key, before[j].data, before[j].len);
      else
        state_.Remove(records[j].key);
    }
    *err = "flow table full (" + std::to_string(state_.size()) + " flows)";
    return false;
  }
  return true;
}

void ExportAt(NF* nf, const MovePosition& pos, MoveFrame* frame) {
  if (frame->status != MoveStatus::kOk) return;
  if (!nf->movable()) {
    frame->status = MoveStatus::kGlobal;
    frame->failed_position = pos.index;
    return;
  }
  FlowExport ex;
  ex.next = frame->cur;
  nf->ExportFlow(frame->cur, &ex);
  size_t room = kMoveFrameMax - frame->EncodedSize();
  size_t need = 0;
  for (const StateRecord& r : ex.records) need += kMoveRecordBytes + r.len;
  if (need > room || frame->records.size() + ex.records.size() > UINT8_MAX) {
    std::string err;
    nf->ImportFlow(ex.records, &err); /* room just freed: it takes them back */
    frame->status = MoveStatus::kNoRoom;
    frame->failed_position = pos.index;
    return;
  }
  for (const StateRecord& r : ex.records) frame->records.push_back(MoveRecord{pos.index, pos.nf, r});
  frame->cur = ex.next;
}

void ImportAt(NF* nf, const MovePosition& pos, MoveFrame* frame, std::string* err) {
  if (frame->status != MoveStatus::kOk) return;
  std::vector<StateRecord> mine;
  for (const MoveRecord& r : frame->records) {
    if (r.position != pos.index) continue;
    if (r.nf != pos.nf) {
      *err = "position " + std::to_string(pos.index) + ": records of another NF";
      frame->status = MoveStatus::kRefused;
      frame->failed_position = pos.index;
      return;
    }
    mine.push_back(r.state);
  }
  if (mine.empty()) return;
  if (!nf->movable()) {
    *err = "position " + std::to_string(pos.index) + ": the NF keeps global state";
  } else if (nf->ImportFlow(mine, err)) {
    return;
  } else {
    *err = "position " + std::to_string(pos.index) + ": " + *err;
  }
  frame->status = MoveStatus::kRefused;
  frame->failed_position = pos.index;
}

bool MoveAt(NF* nf, const MovePosition& pos, uint8_t* buf, size_t* len, std::string* err) {
  MoveFrame f;
  if (!DecodeMoveFrame(buf, *len, &f, err)) return false;
  if (f.kind == MoveKind::kExport)
    ExportAt(nf, pos, &f);
  else
    ImportAt(nf, pos, &f, err);
  /* ExportAt keeps the frame within kMoveFrameMax; ImportAt does not grow it. */
  *len = EncodeMoveFrame(f, buf, kMoveFrameMax);
  return true;
}

void SetMoveLeg(uint8_t* header, MoveKind kind) {
  header[1] = static_cast<uint8_t>(kind == MoveKind::kExport ? inband::Type::kExportState : inband::Type::kImportState);
  uint8_t* body = header + inband::kHeaderLen;
  body[kMoveKindAt] = static_cast<uint8_t>(kind);
  body[kMoveStatusAt] = static_cast<uint8_t>(MoveStatus::kOk);
  body[kMoveFailedAt] = 0;
}

}  // namespace keel
