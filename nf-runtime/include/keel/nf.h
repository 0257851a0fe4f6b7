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
 *
 * Init validates the configuration and throws keel::ConfigError naming the
 * bad field. ProcessBatch sees only packets; scheduling, packet I/O and the
 * external state store belong to the runtime.
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

 private:
  FlowState state_;
};

using NfFactory = std::function<std::unique_ptr<NF>()>;

struct NfInfo {
  std::string name;
  std::string help;
  NfFactory factory;
};

/* Adds an NF type to the registry; used through KEEL_NF. */
class NfRegistrar {
 public:
  NfRegistrar(const char* name, const char* help, NfFactory factory);
};

/* Creates an NF by its registered name; nullptr if there is none. */
std::unique_ptr<NF> CreateNf(const std::string& name);
/* All registered NFs, sorted by name. */
std::vector<const NfInfo*> ListNfs();

/* Creates NF |name| and runs Init with |config_json| (empty: "{}").
 * Throws ConfigError naming the NF and the problem. */
std::unique_ptr<NF> MakeNf(const std::string& name, const std::string& config_json);

}  // namespace keel

#define KEEL_NF(CLASS, NAME, HELP)                                  \
  static ::keel::NfRegistrar keel_nf_registrar_##CLASS(NAME, HELP,  \
      []() -> std::unique_ptr<::keel::NF> { return std::make_unique<CLASS>(); })

#endif  // KEEL_NF_H_
