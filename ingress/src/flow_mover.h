/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The ingress' side of a live flow move (issue 37): one flow F of a chain
 * goes from instance S to instance D of the same chain with its NF state,
 * loss-free and in order (OpenNF's order-preserving move, SIGCOMM'14
 * §5.1.2, with the ingress as the controller that buffers).
 *
 * Per flow:
 *
 *   Removing   F's packets that reach the ingress are held (bounded); torctl
 *              is asked to delete F's rule, so F's packets miss on the ToR
 *              and come here.
 *   Quiet      the removal is confirmed, but the switch's datapath may still
 *              send F to S from a cached entry until it revalidates it (the
 *              barrier reply does not wait for that; keel-torctl rules.py):
 *              F's first packet held here shows that the switch has let go,
 *              and the quiet time (the handover marker's) after it lets the
 *              packets still on their way to S arrive there. A flow that
 *              sends nothing meanwhile waits the longer idle quiet time.
 *   Exporting  an EXPORT_STATE frame (inband.h type 2, body: a flow_move.h
 *              export frame for F without records) went to S behind F's
 *              last packets; each position appends F's state and forgets
 *              it, and S's last position sends the frame back here.
 *   Importing  the returned export, ok, went to D as IMPORT_STATE (type 3,
 *              the same records); each of D's positions takes its own.
 *   Installing the import came back ok: F's rule to D is being installed
 *              (torctl InstallFlows, barrier).
 *   then       the held packets go to D, marked, and the flow's handover
 *              marker follows once it is quiet: D's position 0 holds F's
 *              direct packets until then, as for a new flow.
 *
 * A move that fails leaves F whole on S (the "the flow stays whole on
 * one side"):
 *   - the rule's removal fails:           F goes back to S at once ("rule");
 *   - S's export fails (an NF keeps global state, the records do not fit):
 *     the returned frame, status reset, goes back through S as an import
 *     (positions before the failing one gave their records up) ("global",
 *     "no_room");
 *   - D refuses the import, or F's rule to D cannot be installed: an export
 *     through D takes back what D's positions imported, then S's records go
 *     back through S as an import ("refused", "rule");
 *   - a frame does not come back within the frame timeout ("timeout"): after
 *     a lost import S's records go back through S; after a lost export they
 *     are gone with the frame.
 * Going back to S: the held packets are sent to S, marked, and then F's rule
 * to S is installed again (a new flow's order: held packets out before the
 * rule lets later ones bypass the ingress).
 *
 * Every flow ends with one Result: moved, or why not, and the pause: from F's
 * first held packet (the move's start if none was held) to F's rule to D
 * confirmed, or to the held packets going back to S.
 *
 * Single-threaded and free of DPDK and gRPC, like flow_table.h: time is
 * passed in, packets are opaque pointers, and what is to be done is handed
 * back as Actions for the lcore (frames, releases) and the control thread
 * (rules, reports).
 */
#ifndef KEEL_INGRESS_FLOW_MOVER_H_
#define KEEL_INGRESS_FLOW_MOVER_H_

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "flow_table.h"
#include "keel/flow_move.h"
#include "keel/inband.h"
#include "parser.h"

namespace keel::ingress {

struct MoverConfig {
  uint32_t hold_per_flow = 4096; /* packets held per moving flow */
  uint32_t hold_max = 16384;     /* packets held by all moving flows */
  uint32_t max_flows = 4096;     /* flows moving at once */
  /* Export no sooner than this after the removal was confirmed and after the
   * flow's first held packet; with none held, idle_quiet_ns after the removal. */
  uint64_t quiet_ns = 10'000'000;
  uint64_t idle_quiet_ns = 50'000'000;
  uint64_t frame_timeout_ns = 200'000'000; /* a frame sent -> it is back */
  /* A rule removal or install the control thread has not answered by then
   * counts as failed (its own call deadlines end far sooner). */
  uint64_t rule_timeout_ns = 5'000'000'000;
};

/* Why a flow did not move; each is counted. */
enum class MoveFailure : uint8_t {
  kNone,
  kGlobal,  /* an NF of the chain keeps global state */
  kNoRoom,  /* the flow's records do not fit in one frame */
  kRefused, /* a position of D refused the records */
  kTimeout, /* a frame did not come back */
  kRule,    /* torctl did not remove the old rule or install the new one */
  kBusy,    /* the flow is being set up or moved already */
  kInvalid, /* the move named no usable flow or instance */
  kCount,
};

/* The ReportMoves reason of |f|, e.g. "no_room" ("" for kNone). */
const char* MoveFailureName(MoveFailure f);

/* Why a returned frame was not taken (each is counted). */
enum class FrameVerdict : uint8_t {
  kTaken,
  kMalformed,   /* not a flow_move.h frame */
  kUnknownFlow, /* for a flow that is not moving (late after a timeout, or stray) */
  kUnexpected,  /* not the frame the flow waits for now (a duplicate, the wrong kind or instance) */
};

struct MoveResult {
  uint32_t move = 0; /* the control thread's number of the FlowMove */
  FlowKey key;
  MoveFailure failure = MoveFailure::kNone; /* kNone: moved */
  uint64_t pause_ns = 0;
};

/* One thing the mover asks its caller to do, in the order given. */
struct MoveAction {
  enum class Kind : uint8_t {
    kRemoveRule, /* control: torctl RemoveFlow(key); answer with OnRuleRemoved */
    kSendFrame,  /* lcore: send |body| as in-band |type| to the instance tagged |vlan| */
    kInstall,    /* control: install key's rule to D (to_destination) and answer with OnInstalled */
    kRelease,    /* lcore: send |packets| tagged |vlan| and keep forwarding key's late packets there;
                  * to_destination: its rule is in, the marker follows once quiet; else install
                  * key's rule to S again (no answer) */
    kResult,     /* control: the flow's outcome for ReportMoves */
  };
  explicit MoveAction(Kind k) : kind(k) {}

  Kind kind;
  FlowKey key;
  uint32_t move = 0;
  uint16_t vlan = 0;
  bool to_destination = false;
  inband::Type type = inband::Type::kExportState;
  std::vector<uint8_t> body;
  std::vector<Packet> packets;
  MoveResult result;
};
using MoveActions = std::vector<MoveAction>;

/* What became of a packet offered to the mover. */
enum class HoldVerdict : uint8_t {
  kNotMoving, /* the flow is not moving: the caller handles the packet */
  kHeld,      /* the mover holds it */
  kFull,      /* the flow is moving but its hold is full: drop it (buffer_full) */
};

class FlowMover {
 public:
  explicit FlowMover(const MoverConfig& cfg);

  /* Starts moving flow |key| of move |move| from the instance tagged
   * |from_vlan| to the one tagged |to_vlan|. A flow that is moving already,
   * or one more than max_flows, gets a kBusy result instead. */
  void Begin(uint32_t move, const FlowKey& key, uint16_t from_vlan, uint16_t to_vlan, uint64_t now,
             MoveActions* out);
  /* Ends the move of |key| at once with |why| and nothing to undo (the
   * caller found it cannot start). */
  static void Reject(uint32_t move, const FlowKey& key, MoveFailure why, MoveActions* out);

  /* A packet of flow |key| that reached the ingress. */
  HoldVerdict OnPacket(const FlowKey& key, Packet pkt, uint64_t now);

  /* torctl's answer to kRemoveRule. */
  void OnRuleRemoved(const FlowKey& key, bool ok, uint64_t now, MoveActions* out);
  /* torctl's answer to kInstall. */
  void OnInstalled(const FlowKey& key, bool ok, uint64_t now, MoveActions* out);
  /* A flow_move.h frame (the in-band body, |len| bytes) that came back from
   * the instance tagged |vlan| (0: the VLAN is not known). */
  FrameVerdict OnFrame(const uint8_t* body, size_t len, uint16_t vlan, uint64_t now, MoveActions* out);
  /* Sends the exports that are due and ends the waits that timed out.
   * |seen_until|: every frame that reached the port before it has been read
   * (the start of the last read that emptied the port's ring). A flow's quiet
   * time is judged against it, not |now|: after a stall the ring may still
   * hold the flow's first packet past the switch's let-go, which sets the
   * quiet time (as for the handover marker, dataplane.h). Timeouts run on
   * |now|. */
  void Poll(uint64_t now, uint64_t seen_until, MoveActions* out);
  void Poll(uint64_t now, MoveActions* out) { Poll(now, now, out); }

  /* True while some flow is moving (packets need a lookup). */
  bool active() const { return !flows_.empty(); }
  bool moving(const FlowKey& key) const { return flows_.count(key) != 0; }
  size_t flows() const { return flows_.size(); }
  uint32_t held() const { return held_; }
  /* Frames that went back to S as imports and were refused there (S lost
   * the flow's state), and restore imports that did not come back. */
  uint64_t restores_failed() const { return restores_failed_; }

 private:
  enum class State : uint8_t { kRemoving, kQuiet, kExporting, kImporting, kInstalling, kTakingBack, kRestoring };
  struct Flow {
    State state;
    uint32_t move;
    uint16_t from_vlan, to_vlan;
    MoveFailure failure = MoveFailure::kNone; /* set once the flow is on its way back to S */
    uint64_t started;
    uint64_t first_held = 0;
    uint64_t deadline; /* the current state's: quiet over, frame or answer overdue */
    std::vector<Packet> held;
    MoveFrame saved; /* S's records (the export as it came back, status ok) */
    bool have_saved = false;
  };

  /* Sends |frame| to the instance tagged |vlan| and waits |state| for it. */
  void SendFrame(Flow* f, const FlowKey& key, State state, MoveFrame frame, uint16_t vlan, uint64_t now,
                 MoveActions* out);
  /* An export frame for |key| without records. */
  static MoveFrame FreshExport(const FlowKey& key);
  /* F's state goes back to S: its saved records as an import, or, with
   * none, straight to Back. */
  void Restore(Flow* f, const FlowKey& key, MoveFailure why, uint64_t now, MoveActions* out);
  /* Takes back from D what it imported (an export through D), then Restore. */
  void TakeBack(Flow* f, const FlowKey& key, MoveFailure why, uint64_t now, MoveActions* out);
  /* Ends the flow's move: held packets to S (its rule to S follows) or to D
   * (its rule is in), and the result. Erases the flow. */
  void Finish(const FlowKey& key, bool moved, uint64_t now, MoveActions* out);
  void Timeout(const FlowKey& key, Flow* f, uint64_t now, MoveActions* out);

  MoverConfig cfg_;
  std::unordered_map<FlowKey, Flow, FlowKeyHash> flows_;
  uint32_t held_ = 0;
  uint64_t restores_failed_ = 0;
};

/* The flow_move.h key of an ingress flow key, and back. */
keel::FlowKey ToMoveKey(const FlowKey& k);
FlowKey FromMoveKey(const keel::FlowKey& k);

}  // namespace keel::ingress

#endif  // KEEL_INGRESS_FLOW_MOVER_H_
