/* SPDX-License-Identifier: Apache-2.0 */
/* keel-trafgen: flags, scenario, signals and the result file; see --help. */
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "flags.h"
#include "scenario.h"
#include "trafgen.h"

namespace {

void OnSignal(int) { keel::trafgen::g_stop = 1; }

bool WriteResult(const std::string& path, const std::string& text) {
  if (path.empty()) {
    std::cout << text << std::endl;
    return true;
  }
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << text << '\n';
    if (!out) return false;
  }
  return std::rename(tmp.c_str(), path.c_str()) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace keel::trafgen;
  Flags flags;
  std::string err;
  if (!ParseFlags(argc, argv, &flags, &err)) {
    std::fprintf(stderr, "keel-trafgen: %s\nkeel-trafgen --help explains the flags and the scenario.\n", err.c_str());
    return 2;
  }
  if (flags.help) {
    std::fputs(Usage().c_str(), stdout);
    return 0;
  }
  std::ifstream in(flags.scenario);
  if (!in) {
    std::fprintf(stderr, "keel-trafgen: cannot read --scenario %s\n", flags.scenario.c_str());
    return 2;
  }
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded()) {
    std::fprintf(stderr, "keel-trafgen: %s is not valid JSON\n", flags.scenario.c_str());
    return 2;
  }
  Scenario sc;
  if (!ParseScenario(j, &sc, &err)) {
    std::fprintf(stderr, "keel-trafgen: %s: %s\n", flags.scenario.c_str(), err.c_str());
    return 2;
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  Trafgen gen(sc, flags);
  if (!gen.Setup(&err)) {
    std::fprintf(stderr, "keel-trafgen: %s\n", err.c_str());
    return 1;
  }
  gen.Run();
  if (!WriteResult(flags.out, gen.Result().dump(2))) {
    std::fprintf(stderr, "keel-trafgen: cannot write %s\n", flags.out.c_str());
    return 1;
  }
  return 0;
}
