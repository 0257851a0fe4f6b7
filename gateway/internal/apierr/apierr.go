// SPDX-License-Identifier: Apache-2.0

// Package apierr holds the errors the gateway's handlers map to HTTP status codes, so that
// the provider and the controller report them without one importing the other.
package apierr

import "errors"

// Errors the handlers map to HTTP status codes.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict")
	ErrInvalid  = errors.New("invalid")
	// ErrUnavailable: the function exists but no replica became ready in time (503).
	ErrUnavailable = errors.New("unavailable")
)
