/* SPDX-License-Identifier: Apache-2.0 */
#include "keel/port_wake.h"

#include <dirent.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>

#ifndef AF_XDP
#define AF_XDP 44
#endif

namespace keel {

std::vector<int> FindPortWakeFds() {
  std::vector<int> fds;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return fds;
  const int own = dirfd(dir);
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == own) continue;
    struct stat st;
    if (fstat(static_cast<int>(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    int domain = 0;
    socklen_t len = sizeof(domain);
    if (getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0) continue;
    if (domain == AF_PACKET || domain == AF_XDP) fds.push_back(static_cast<int>(fd));
  }
  closedir(dir);
  std::sort(fds.begin(), fds.end());
  return fds;
}

}  // namespace keel
