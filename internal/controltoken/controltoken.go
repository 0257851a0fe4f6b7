// SPDX-License-Identifier: Apache-2.0

// Package controltoken is the shared secret of keel's control plane: every gRPC call between
// keel-gateway, keel-agent, keel-ingress, keel-place and keel-torctl carries the metadata
// "authorization: Bearer TOKEN", and each server refuses a call without the right one
// (UNAUTHENTICATED). The token lives in a file (mode 0600) that the first server to start
// creates; the gateway serves keel.v1.Control with it and dials the placer and keel-torctl
// with it, keel-agent reads it to reach the gateway.
package controltoken

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// DefaultFile is where every keel component looks for the token unless told otherwise
// (the gateway: control-token in its --secrets directory).
const DefaultFile = "/var/lib/keel/secrets/control-token"

// Header is the gRPC metadata key that carries the token, as "Bearer TOKEN".
const Header = "authorization"

// minLen is the shortest token a file may hold (a generated one has 64 characters).
const minLen = 16

// Ensure reads the token from path, creating the file first (32 random bytes as hex, mode
// 0600, its directory 0700) if it does not exist; created reports whether it did. Two
// servers that start together agree: the file appears complete or not at all.
func Ensure(path string) (token string, created bool, err error) {
	if tok, err := Read(path); err == nil || !errors.Is(err, os.ErrNotExist) {
		return tok, false, err
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", false, fmt.Errorf("control token %s: %w", path, err)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", false, err
	}
	tmp, err := os.CreateTemp(dir, ".control-token-*") // mode 0600
	if err != nil {
		return "", false, fmt.Errorf("control token %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.WriteString(hex.EncodeToString(b) + "\n")
	if err := errors.Join(werr, tmp.Close()); err != nil {
		return "", false, fmt.Errorf("control token %s: %w", path, err)
	}
	// link, unlike rename, fails if another process created the file meanwhile: then its
	// token stands.
	lerr := os.Link(tmp.Name(), path)
	if lerr != nil && !errors.Is(lerr, os.ErrExist) {
		return "", false, fmt.Errorf("control token %s: %w", path, lerr)
	}
	token, err = Read(path)
	return token, err == nil && lerr == nil, err
}

// Read reads the token from path (surrounding white space ignored). It must be at least 16
// printable ASCII characters without spaces.
func Read(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("control token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < minLen {
		return "", fmt.Errorf("control token %s: %d characters, want at least %d", path, len(tok), minLen)
	}
	for _, c := range tok {
		if c <= ' ' || c > '~' {
			return "", fmt.Errorf("control token %s: want printable ASCII without spaces", path)
		}
	}
	return tok, nil
}

// check returns nil if ctx's incoming metadata carries token, else an UNAUTHENTICATED
// status that says what is missing or wrong.
func check(ctx context.Context, token string) error {
	md, _ := metadata.FromIncomingContext(ctx)
	var got string
	if vals := md.Get(Header); len(vals) > 0 {
		got = vals[0]
	}
	if msg := verify(got, token, "metadata"); msg != "" {
		return status.Error(codes.Unauthenticated, msg)
	}
	return nil
}

// verify checks an authorization value (gRPC metadata or an HTTP header: what) against
// token: "" when it is "Bearer TOKEN", else what is missing or wrong (the tokens are
// compared in constant time).
func verify(authorization, token, what string) string {
	if authorization == "" {
		return "keel control plane: no \"authorization: Bearer TOKEN\" " + what + "; give the client the control-token file (--control-token-file)"
	}
	got, ok := strings.CutPrefix(authorization, "Bearer ")
	if !ok {
		return "keel control plane: the authorization " + what + " is not \"Bearer TOKEN\""
	}
	want, have := sha256.Sum256([]byte(token)), sha256.Sum256([]byte(got))
	if subtle.ConstantTimeCompare(want[:], have[:]) != 1 {
		return "keel control plane: wrong token; the client's --control-token-file must hold the same token as the server's"
	}
	return ""
}

// RequireHTTP answers 401 to an HTTP request that does not carry "Authorization: Bearer
// TOKEN", and passes the others to next: the control plane's HTTP endpoints (keel-agent's
// /logs) take the same token as its gRPC calls.
func RequireHTTP(token string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if msg := verify(r.Header.Get("Authorization"), token, "header"); msg != "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="keel control plane"`)
			http.Error(w, msg, http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// SetHTTP puts the token into an HTTP request of the control plane.
func SetHTTP(r *http.Request, token string) { r.Header.Set("Authorization", "Bearer "+token) }

// UnaryServerInterceptor refuses unary calls that do not carry token.
func UnaryServerInterceptor(token string) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := check(ctx, token); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor refuses streaming calls that do not carry token.
func StreamServerInterceptor(token string) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := check(ss.Context(), token); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// bearer puts the token into every call's metadata.
type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{Header: "Bearer " + string(b)}, nil
}

// RequireTransportSecurity is false: keel's gRPC runs without TLS (see README, "The
// control-plane token").
func (bearer) RequireTransportSecurity() bool { return false }

// WithToken is the dial option that makes a client's calls carry token.
func WithToken(token string) grpc.DialOption {
	return grpc.WithPerRPCCredentials(bearer(token))
}
