/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/nf_loader.h"

#include <dlfcn.h>

#include <set>

#include "keel/nf.h"

namespace keel {

bool LoadNfLibrary(const std::string& path, std::vector<std::string>* added, std::string* err) {
  std::set<std::string> before;
  for (const NfInfo* i : ListNfs()) before.insert(i->name);
  /* dlopen searches the library path for a bare name; a tenant's file is meant. */
  std::string file = path.find('/') == std::string::npos ? "./" + path : path;
  dlerror();
  TakeRefusedNfNames();
  SetNfOrigin(path);
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  SetNfOrigin("");
  if (!handle) {
    const char* why = dlerror();
    *err = path + ": cannot load: " + (why ? why : "unknown dlopen error");
    return false;
  }
  /* The handle is never closed: the registered factories live in the object. */
  std::vector<std::string> taken = TakeRefusedNfNames();
  if (!taken.empty()) {
    std::string who;
    for (const NfInfo* i : ListNfs())
      if (i->name == taken[0]) who = i->loaded_from.empty() ? "a library NF" : "the NF from " + i->loaded_from;
    *err = path + ": registers NF '" + taken[0] + "', a name " + who +
           " already has; refused (a packet function needs a name of its own)";
    return false;
  }
  std::vector<std::string> names;
  for (const NfInfo* i : ListNfs())
    if (!before.count(i->name)) names.push_back(i->name);
  if (names.empty()) {
    *err = path + ": registers no new NF (a packet function registers one with KEEL_NF(Class, \"name\", "
           "\"help\"); a name keel-nf already has is not new)";
    return false;
  }
  if (added) *added = std::move(names);
  return true;
}

}  // namespace keel
