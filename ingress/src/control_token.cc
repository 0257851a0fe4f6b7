/* SPDX-License-Identifier: Apache-2.0 */
#include "control_token.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace keel::ingress {

namespace {
constexpr size_t kMinTokenLen = 16;
}  // namespace

bool ReadControlToken(const std::string& path, std::string* token, std::string* err) {
  std::ifstream in(path);
  if (!in) {
    *err = "control token " + path + ": " + std::strerror(errno);
    return false;
  }
  std::ostringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  const char* space = " \t\r\n\v\f";
  size_t begin = s.find_first_not_of(space);
  size_t end = s.find_last_not_of(space);
  s = begin == std::string::npos ? "" : s.substr(begin, end - begin + 1);
  if (s.size() < kMinTokenLen) {
    *err = "control token " + path + ": " + std::to_string(s.size()) + " characters, want at least " +
           std::to_string(kMinTokenLen);
    return false;
  }
  for (char c : s) {
    if (c <= ' ' || c > '~') {
      *err = "control token " + path + ": want printable ASCII without spaces";
      return false;
    }
  }
  *token = s;
  return true;
}

void AddControlToken(grpc::ClientContext* ctx, const std::string& token) {
  ctx->AddMetadata("authorization", "Bearer " + token);
}

}  // namespace keel::ingress
