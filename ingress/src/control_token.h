/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The control plane's shared token, as keel-ingress sends it: every call to
 * the gateway (Control) and keel-torctl (TorControl) carries the metadata
 * "authorization: Bearer TOKEN", TOKEN being the content of the file the
 * first server created (--control-token-file). The Go side is
 * internal/controltoken, the Python side proto/keel/v1/controltoken.py.
 */
#ifndef KEEL_INGRESS_CONTROL_TOKEN_H_
#define KEEL_INGRESS_CONTROL_TOKEN_H_

#include <grpcpp/grpcpp.h>

#include <string>

namespace keel::ingress {

/* Where the token file is unless --control-token-file says otherwise. */
inline constexpr const char* kDefaultControlTokenFile = "/var/lib/keel/secrets/control-token";

/* Reads the token from |path| (surrounding white space ignored): at least 16
 * printable ASCII characters without spaces. Returns false with |*err| naming
 * the file and the problem. */
bool ReadControlToken(const std::string& path, std::string* token, std::string* err);

/* Makes the call of |ctx| carry |token|. */
void AddControlToken(grpc::ClientContext* ctx, const std::string& token);

}  // namespace keel::ingress

#endif  // KEEL_INGRESS_CONTROL_TOKEN_H_
