# SPDX-License-Identifier: Apache-2.0
"""The control plane's shared token, for keel's Python gRPC servers and clients (keel-place,
keel-torctl, the tests); the Go side is internal/controltoken, keel-ingress's is
ingress/src/control_token.cc.

Every gRPC call between keel's components carries the metadata "authorization: Bearer TOKEN";
a server refuses a call without the right token (UNAUTHENTICATED). TOKEN is the content of a
file (mode 0600) that the first server to start creates. proto/genpy.py copies this module
beside each package's generated stubs; it is not a generated file.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import tempfile
from collections import namedtuple
from typing import Any, Callable

import grpc

DEFAULT_FILE = "/var/lib/keel/secrets/control-token"
HEADER = "authorization"
MIN_LEN = 16


class TokenError(Exception):
    """The token file is missing or does not hold a usable token."""


def read(path: str) -> str:
    """The token in `path` (surrounding white space ignored): at least 16 printable ASCII
    characters without spaces."""
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            tok = f.read().strip()
    except OSError as e:
        raise TokenError(f"control token {path}: {e.strerror}") from e
    if len(tok) < MIN_LEN:
        raise TokenError(f"control token {path}: {len(tok)} characters, want at least {MIN_LEN}")
    if any(not "!" <= c <= "~" for c in tok):
        raise TokenError(f"control token {path}: want printable ASCII without spaces")
    return tok


def ensure(path: str) -> tuple[str, bool]:
    """The token in `path`, creating the file first (32 random bytes as hex, mode 0600, its
    directory 0700) if it does not exist; the bool says whether this call created it. Servers
    that start together agree: the file appears complete or not at all."""
    if os.path.exists(path):
        return read(path), False
    d = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(d, mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".control-token-", dir=d)  # mode 0600
        try:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32) + "\n")
            try:
                os.link(tmp, path)  # unlike rename, fails if another server made the file meanwhile
                created = True
            except FileExistsError:
                created = False
        finally:
            os.unlink(tmp)
    except OSError as e:
        raise TokenError(f"control token {path}: {e.strerror}") from e
    return read(path), created


def check(metadata: Any, token: str) -> str:
    """'' if the call's metadata (key, value pairs) carries `token`, else why not."""
    got = next((v for k, v in metadata or () if k == HEADER), None)
    if got is None:
        return ('keel control plane: no "authorization: Bearer TOKEN" metadata; '
                "give the client the control-token file (--control-token-file)")
    if not isinstance(got, str) or not got.startswith("Bearer "):
        return 'keel control plane: the authorization metadata is not "Bearer TOKEN"'
    want = hashlib.sha256(token.encode()).digest()
    have = hashlib.sha256(got[len("Bearer "):].encode()).digest()
    if not hmac.compare_digest(want, have):
        return ("keel control plane: wrong token; the client's --control-token-file must hold "
                "the same token as the server's")
    return ""


class ServerInterceptor(grpc.ServerInterceptor):
    """Refuses every call (unary or streaming) that does not carry the token."""

    def __init__(self, token: str):
        self._token = token

    def intercept_service(self, continuation: Callable, details: grpc.HandlerCallDetails):
        handler = continuation(details)
        why = check(details.invocation_metadata, self._token)
        if handler is None or not why:
            return handler

        def refuse(_request: Any, context: grpc.ServicerContext):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, why)

        ser = dict(request_deserializer=handler.request_deserializer,
                   response_serializer=handler.response_serializer)
        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(refuse, **ser)
        if handler.unary_stream:
            return grpc.unary_stream_rpc_method_handler(refuse, **ser)
        if handler.stream_unary:
            return grpc.stream_unary_rpc_method_handler(refuse, **ser)
        return grpc.stream_stream_rpc_method_handler(refuse, **ser)


class _CallDetails(namedtuple("_CallDetails", "method timeout metadata credentials wait_for_ready compression"),
                   grpc.ClientCallDetails):
    pass


class _Bearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
              grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds the token to every call's metadata."""

    def __init__(self, token: str):
        self._entry = (HEADER, "Bearer " + token)

    def _details(self, d: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        md = [m for m in (d.metadata or ()) if m[0] != HEADER] + [self._entry]
        return _CallDetails(d.method, d.timeout, md, d.credentials, getattr(d, "wait_for_ready", None),
                            getattr(d, "compression", None))

    def intercept_unary_unary(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_unary_stream(self, continuation, client_call_details, request):
        return continuation(self._details(client_call_details), request)

    def intercept_stream_unary(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details), request_iterator)

    def intercept_stream_stream(self, continuation, client_call_details, request_iterator):
        return continuation(self._details(client_call_details), request_iterator)


def channel(address: str, token: str, options: Any = None) -> grpc.Channel:
    """An insecure channel to `address` whose calls carry `token`."""
    return grpc.intercept_channel(grpc.insecure_channel(address, options=options), _Bearer(token))
