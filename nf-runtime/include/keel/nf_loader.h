/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Loading a tenant's packet function from a shared object. The object is
 * built from the packet-cpp template WITHOUT libkeelnf: its KEEL_NF
 * registration and its calls into the NF API resolve against the executable
 * that loads it (keel-nf, linked with exported symbols), so the NF lands in
 * the executable's own registry and is then available by name (--nf NAME).
 */
#ifndef KEEL_NF_LOADER_H_
#define KEEL_NF_LOADER_H_

#include <string>
#include <vector>

namespace keel {

/* dlopens |path| (RTLD_NOW: every symbol must resolve at load time) and
 * returns the names of the NFs it registered in |added| (may be null).
 * Returns false with *err = "PATH: reason" (dlerror() when the object does
 * not load) if it does not load or registers no new NF. */
bool LoadNfLibrary(const std::string& path, std::vector<std::string>* added, std::string* err);

}  // namespace keel

#endif  // KEEL_NF_LOADER_H_
