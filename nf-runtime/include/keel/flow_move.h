/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Flow moves (issue 37): the control frame that carries one flow's NF state
 * from a chain instance S to an instance D of the same chain, in band. The
 * ingress holds the flow's new packets and sends an export frame through S
 * behind the flow's last packets; each position appends the state it holds
 * for the flow (NF::ExportFlow) and forgets it; the ingress turns the frame
 * into an import frame and sends it through D ahead of the held packets;
 * each of D's positions takes its records (NF::ImportFlow).
 *
 * Wire format, version 1, all integers big-endian, at most kMoveFrameMax
 * bytes (one Ethernet frame's payload, with room for the headers around it):
 *
 *   off len
 *     0   2  magic 'K' 'M'
 *     2   1  version (1)
 *     3   1  kind: 1 export, 2 import
 *     4   1  status: 0 ok, 1 no room, 2 global, 3 refused (MoveStatus)
 *     5   1  position that set the status (0 while ok)
 *     6   1  count: records that follow
 *     7   1  0 (reserved)
 *     8  13  flow: the flow as the ingress sees it (key, below)
 *    21  13  cur: the flow as the next position sees it
 *    34      count records, each:
 *              position u8 | nf u32 (NfId of its NF's name) | key (13) |
 *              len u8 (0..kMaxStateValue) | value[len]
 *
 *   key: src ip u32 | dst ip u32 | src port u16 | dst port u16 | proto u8
 *
 * A record takes kMoveRecordBytes + its value: a frame holds one flow and
 * at most (1400 - 34) / (19 + 64) = 16 records of the largest value, 50 of
 * NAT's (8-byte values; a NAT flow needs 2). A flow whose records do not
 * fit fails with status "no room" and keeps its state where it was.
 *
 * A frame whose status is not ok passes the later positions untouched:
 * after an export failed at position P, positions before P have handed
 * their records over and forgotten them, so the ingress sends the frame
 * back through S as an import frame to make S whole again; after an import
 * was refused at P, an export frame through D takes back what positions
 * before P imported.
 */
#ifndef KEEL_FLOW_MOVE_H_
#define KEEL_FLOW_MOVE_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "keel/inband.h"
#include "keel/nf.h"
#include "keel/packet.h"
#include "keel/state.h"

namespace keel {

constexpr size_t kMoveFrameMax = 1400;
constexpr size_t kMoveHeaderBytes = 34;
constexpr size_t kMoveRecordBytes = 19; /* plus the value */
constexpr uint8_t kMoveVersion = 1;
/* Where kind, status and the failing position are in an encoded frame. */
constexpr size_t kMoveKindAt = 3;
constexpr size_t kMoveStatusAt = 4;
constexpr size_t kMoveFailedAt = 5;
/* In band (inband.h types 2 and 3), the frame is the control frame's body. */
static_assert(kMoveFrameMax == inband::kMoveBodyMax && kMoveHeaderBytes == inband::kMoveBodyMin);
/* Records of the largest value one frame holds. */
constexpr size_t kMoveMaxRecords = (kMoveFrameMax - kMoveHeaderBytes) / (kMoveRecordBytes + kMaxStateValue);

enum class MoveKind : uint8_t { kExport = 1, kImport = 2 };

enum class MoveStatus : uint8_t {
  kOk = 0,
  kNoRoom = 1,  /* the flow's records do not fit in one frame */
  kGlobal = 2,  /* the position's NF keeps global state: its flows do not move */
  kRefused = 3, /* the position could not take the records (ImportFlow said why) */
};

/* One position's piece of a flow's state. */
struct MoveRecord {
  uint8_t position = 0;
  uint32_t nf = 0; /* NfId of the position's NF */
  StateRecord state;
};

/* A decoded frame. */
struct MoveFrame {
  MoveKind kind = MoveKind::kExport;
  MoveStatus status = MoveStatus::kOk;
  uint8_t failed_position = 0;
  FlowKey flow;
  FlowKey cur;
  std::vector<MoveRecord> records;

  /* The bytes EncodeMoveFrame writes for it. */
  size_t EncodedSize() const;
};

/* The 32-bit FNV-1a hash of an NF's name: records name their NF by it. */
uint32_t NfId(std::string_view name);

/* Writes |f| to |buf| (|cap| bytes); returns the bytes written, or 0 if it
 * does not fit in |cap| or in kMoveFrameMax, or holds more than 255
 * records or a value longer than kMaxStateValue. */
size_t EncodeMoveFrame(const MoveFrame& f, uint8_t* buf, size_t cap);

/* Reads a frame of |len| bytes. False, with the problem in |*err|, for
 * anything but a well-formed version-1 frame: short, long, wrong magic,
 * version, kind or status, records cut short or left over, values too long. */
bool DecodeMoveFrame(const uint8_t* buf, size_t len, MoveFrame* f, std::string* err);

/* A chain position as moves see it. */
struct MovePosition {
  uint8_t index = 0; /* 0-based place in the chain */
  uint32_t nf = 0;   /* NfId of its NF's name */
};

/* An export frame passing position |pos|, whose NF is |nf|. If no earlier
 * position failed: a global NF sets status kGlobal; otherwise the NF's
 * records for frame->cur are appended and forgotten and cur becomes the
 * flow as the next position sees it, unless they do not fit in the frame:
 * then the NF keeps them (they are imported back) and status is kNoRoom. */
void ExportAt(NF* nf, const MovePosition& pos, MoveFrame* frame);

/* An import frame passing position |pos|, whose NF is |nf|: hands the NF
 * the records of this position. If no earlier position failed and the NF
 * refuses them, or they name another NF, or the NF is global and there are
 * records for it, status becomes kRefused and |*err| says why. */
void ImportAt(NF* nf, const MovePosition& pos, MoveFrame* frame, std::string* err);

/* What a position does with a move frame that reaches it: the |*len| bytes
 * at |buf| (which has room for kMoveFrameMax) are decoded, run through
 * ExportAt or ImportAt by their kind, and written back in place, |*len| set
 * to the new length. A refused import sets |*err| and the frame's status
 * (the frame goes on). False, with the problem in |*err|, only when the
 * bytes are not a frame: the caller drops and counts them. */
bool MoveAt(NF* nf, const MovePosition& pos, uint8_t* buf, size_t* len, std::string* err);

/* The ingress, sending an in-band move frame that came back on its next
 * leg (issue 37): |header| is the frame's in-band header (inband.h
 * ParseMoveFrame's header_off), a move frame's body behind it. Sets the
 * in-band type (EXPORT_STATE or IMPORT_STATE) and the body's kind to
 * |kind|, the status back to ok and the failing position to 0 (a frame
 * whose status is not ok passes every position untouched); the flows and
 * the records stay. E.g. an export that came back ok, as the import for the
 * destination; one that failed, as the import that makes the source whole. */
void SetMoveLeg(uint8_t* header, MoveKind kind);

}  // namespace keel

#endif  // KEEL_FLOW_MOVE_H_
