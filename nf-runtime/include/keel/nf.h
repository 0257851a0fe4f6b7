/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The packet-function API. An NF is one class:
 *
 *   class MacSwap : public keel::NF {
 *    public:
 *     void Init(const keel::Config& config) override { config.CheckObject({}); }
 *     void ProcessBatch(keel::PacketBatch* batch) override {
 *       for (keel::Packet* p : *batch) { ... p->Drop(); ... }
 *     }
 *   };
 *   KEEL_NF(MacSwap, "macswap", "swaps Ethernet source and destination");
 *   KEEL_NF_ARGS(MacSwap, "[]");
 *
 * Init validates the configuration and throws keel::ConfigError naming the
 * bad field. ProcessBatch sees only packets; scheduling, packet I/O and the
 * external state store belong to the runtime.
 *
 * KEEL_NF_ARGS declares, next to the NF, the arguments Init accepts as a JSON
 * array of argument schemas; `keel-nf --list --json` exports them and the
 * placer and the gateway check chains against them. An argument schema is
 *
 *   {"name": "vlan", "type": "integer", "minimum": 0, "maximum": 4095,
 *    "required": true, "doc": "VLAN id of the pushed 802.1Q tag"}
 *
 * with "type" one of integer (minimum, maximum), boolean, string (enum),
 * ipv4 ("A.B.C.D"), cidr ("A.B.C.D/N" or an address), proto ("tcp", "udp",
 * "icmp" or 0..255), mac, hex (bytes: the length in bytes), ports (a port N or "lo-hi"), array (items: the element's
 * type schema, min_items, max_items) or object (fields: argument schemas of its
 * members; no other member is accepted); "required" (default false), "default"
 * (the value Init assumes when the argument is absent) and "doc" (one line).
 *
 * KEEL_NF_STATE declares, next to the NF too, whether its flows can move to
 * another instance of the chain with their state (issue 37); the catalogue
 * exports it as "state" and the gateway asks it before moving a flow:
 *
 *   KEEL_NF_STATE(Dedup, R"json({"scope": "global",
 *     "doc": "one chunk cache shared by every flow, in step with rededup's"})json");
 *
 * "scope" is "per-flow" (every piece of state belongs to one flow, and
 * ExportFlow/ImportFlow below hand it over) or "global" (state shared by
 * flows: the NF's flows never move); "per_flow_if": {"ARG": VALUE, ...}
 * makes a global NF per-flow when each named argument has that value (its
 * "default" when absent). An NF that declares nothing is per-flow: right
 * for an NF without state and for one whose state is all in state() (the
 * default ExportFlow hands it over); an NF that keeps per-flow state of its
 * own overrides ExportFlow/ImportFlow, and one that keeps state shared by
 * flows declares it global.
 */
#ifndef KEEL_NF_H_
#define KEEL_NF_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "keel/batch.h"
#include "keel/config.h"
#include "keel/packet.h"
#include "keel/state.h"

namespace keel {

class NF;

/* What ExportFlow hands over for a flow that moves to another instance. */
struct FlowExport {
  std::vector<StateRecord> records; /* the state that belongs to the flow */
  FlowKey next;                     /* the flow as the next position sees it */
};

/* Creates NF |name| and runs Init with |config_json| (empty: "{}").
 * Throws ConfigError naming the NF and the problem. */
std::unique_ptr<NF> MakeNf(const std::string& name, const std::string& config_json);

class NF {
 public:
  virtual ~NF() = default;

  /* Takes and validates the configuration; throws ConfigError. */
  virtual void Init(const Config& config) = 0;
  /* Processes a burst in place; packets to discard are marked with Drop(). */
  virtual void ProcessBatch(PacketBatch* batch) = 0;
  /* NF-specific figures added to the runtime's statistics (e.g. per-flow
   * counters); null when there are none. */
  virtual Json Stats() const { return nullptr; }

  /* The NF's flow table (Galleon §4.2 update/read). */
  FlowState& state() { return state_; }

  /* Flow moves (issue 37). The runtime calls these between batches, on the
   * packet thread, when a control frame for the flow passes this position.
   *
   * ExportFlow hands over in |out->records| the state that belongs to |flow|
   * (the flow's 5-tuple as this position sees it) and forgets it here and
   * in the store; it sets |out->next| to the flow's 5-tuple as the next
   * position sees it, which the runtime preset to |flow| (an NF that
   * rewrites addresses or ports says what it rewrites them to). The default
   * takes the state() entries of |flow| and of its reverse direction. */
  virtual void ExportFlow(const FlowKey& flow, FlowExport* out);
  /* Takes over the records the same NF, configured alike, exported on
   * another instance, as if it had made them here (they are mirrored into
   * this instance's store). False, with the reason in |*err| and nothing
   * changed, if it cannot hold them (table full, a conflicting flow here).
   * The default puts every record in state(). */
  virtual bool ImportFlow(const std::vector<StateRecord>& records, std::string* err);

  /* False when the NF's declared state (KEEL_NF_STATE) is global with the
   * configuration MakeNf gave it: its flows do not move. */
  bool movable() const { return movable_; }

 private:
  friend std::unique_ptr<NF> MakeNf(const std::string& name, const std::string& config_json);
  FlowState state_;
  bool movable_ = true;
};

using NfFactory = std::function<std::unique_ptr<NF>()>;

struct NfInfo {
  std::string name;
  std::string help;
  NfFactory factory;
  Json args = Json::array(); /* argument schemas (KEEL_NF_ARGS) */
  std::string loaded_from;   /* the shared object that registered it; empty if built in */
  Json state = Json{{"scope", "per-flow"}}; /* what state it keeps (KEEL_NF_STATE) */
};

/* Adds an NF type to the registry; used through KEEL_NF. A name is taken
 * once: a second built-in NF of that name aborts with a message, and one
 * from a loaded object is refused (TakeRefusedNfNames) and leaves the first
 * in place. */
class NfRegistrar {
 public:
  NfRegistrar(const char* name, const char* help, NfFactory factory);
  const std::string& name() const { return name_; }
  /* False if the name was taken already and this NF was not registered. */
  bool accepted() const { return accepted_; }

 private:
  std::string name_;
  bool accepted_ = false;
};

/* Attaches argument schemas to a registered NF; used through KEEL_NF_ARGS.
 * A malformed schema is a programming error: it aborts with a message. */
class NfArgsRegistrar {
 public:
  NfArgsRegistrar(const NfRegistrar& nf, const char* args_json);
};

/* Attaches a state declaration to a registered NF; used through
 * KEEL_NF_STATE. A malformed declaration aborts with a message. */
class NfStateRegistrar {
 public:
  NfStateRegistrar(const NfRegistrar& nf, const char* state_json);
};

/* Returns the problem with a state declaration given the NF's argument
 * schemas |args|, or "" if it is well formed. */
std::string CheckStateDecl(const Json& state, const Json& args);
/* True if an NF that declared |state|, with argument schemas |args|, keeps
 * per-flow state (its flows can move) when configured with |config|. */
bool StateMovable(const Json& state, const Json& args, const Json& config);

/* Returns the problem with an argument schema array, or "" if it is well formed. */
std::string CheckArgSchemas(const Json& args);
/* Records that NFs registered from now on come from the shared object |path|
 * (empty: built in); used by LoadNfLibrary. */
void SetNfOrigin(const std::string& path);
/* The names NFs tried to register, since the last call, that other NFs had
 * already; used by LoadNfLibrary to refuse the object that tried. */
std::vector<std::string> TakeRefusedNfNames();
/* The catalogue of every registered NF as JSON (keel-nf --list --json):
 * {"version": 1, "nfs": [{"name", "help", "args": [...], "state": {...},
 * "loaded_from"?}]}. */
Json CatalogJson();

/* Creates an NF by its registered name; nullptr if there is none. */
std::unique_ptr<NF> CreateNf(const std::string& name);
/* All registered NFs, sorted by name. */
std::vector<const NfInfo*> ListNfs();

}  // namespace keel

#define KEEL_NF(CLASS, NAME, HELP)                                  \
  static ::keel::NfRegistrar keel_nf_registrar_##CLASS(NAME, HELP,  \
      []() -> std::unique_ptr<::keel::NF> { return std::make_unique<CLASS>(); })

/* Declares the arguments of the NF registered just above with KEEL_NF. */
#define KEEL_NF_ARGS(CLASS, ARGS_JSON) \
  static ::keel::NfArgsRegistrar keel_nf_args_##CLASS(keel_nf_registrar_##CLASS, ARGS_JSON)

/* Declares the state of the NF registered just above with KEEL_NF, after
 * its KEEL_NF_ARGS (per_flow_if names its arguments). */
#define KEEL_NF_STATE(CLASS, STATE_JSON) \
  static ::keel::NfStateRegistrar keel_nf_state_##CLASS(keel_nf_registrar_##CLASS, STATE_JSON)

#endif  // KEEL_NF_H_
