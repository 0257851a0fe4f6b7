/* SPDX-License-Identifier: Apache-2.0 */
/* An NF runtime's one call to keel-coopsched: announcing its packet thread. */
#ifndef KEEL_COOPSCHED_CLIENT_H_
#define KEEL_COOPSCHED_CLIENT_H_

#include <string>

namespace keel {

/* Tells keel-coopsched at |target| ("unix:PATH") that the calling thread is
 * position |position| of |count| of chain instance |group| whose buffer
 * file is |pktbuf|. The thread is named by its id and PID namespace, so
 * coopsched finds it inside a container too. coopsched makes the chain an
 * sgroup (detached) once every position has announced itself. False and
 * |*err| if coopsched refuses or cannot be reached. The answer is awaited
 * 200 ms at most (coopsched_client.cc says why); a refusal that comes later
 * is printed and raises SIGTERM. */
bool AnnounceToCoopsched(const std::string& target, const std::string& group, int position,
                         int count, const std::string& pktbuf, std::string* err);

}  // namespace keel

#endif  // KEEL_COOPSCHED_CLIENT_H_
