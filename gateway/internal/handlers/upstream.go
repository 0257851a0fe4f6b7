// SPDX-License-Identifier: Apache-2.0

package handlers

// keel-gateway --upstream-provider: faas-cli's function calls split between keel (packet
// functions and chains) and an existing faas-provider (faas-netes) that runs the normal
// functions.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	"github.com/gorilla/mux"
	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/provider"
	"github.com/keel-nfv/keel/gateway/internal/upstream"
	"github.com/openfaas/faas-provider/types"
)

// split routes each call by the function it names: the upstream's when the upstream holds
// it (or, on deploy, when it is a normal function), keel's otherwise. A name both hold is
// refused with ErrConflict rather than guessed, so a user never changes the wrong one.
type split struct {
	p  *provider.Provider
	up *upstream.Provider
}

// owner of a function name.
type owner int

const (
	nobody owner = iota
	keel
	theUpstream
)

// ownerOf asks keel's store and the upstream who holds name.
func (s split) ownerOf(ctx context.Context, name string) (owner, error) {
	what, err := s.p.Holds(ctx, name)
	if err != nil {
		return nobody, err
	}
	has, err := s.up.Has(ctx, name)
	switch {
	case err != nil:
		return nobody, err
	case what != "" && has:
		return nobody, s.conflict(map[string]string{name: what})
	case what != "":
		return keel, nil
	case has:
		return theUpstream, nil
	}
	return nobody, nil
}

// conflict is the error of names keel holds (as what, by name) while the upstream holds
// them too.
func (s split) conflict(what map[string]string) error {
	names := make([]string, 0, len(what))
	for name := range what {
		names = append(names, name)
	}
	sort.Strings(names)
	msgs := make([]string, 0, len(names))
	for _, name := range names {
		msgs = append(msgs, fmt.Sprintf("function %s exists twice: as a %s in keel and as a normal function at the upstream provider %s; "+
			"remove one of them (faas-cli remove %s -g %s removes the upstream's)", name, what[name], s.up.URL(), name, s.up.URL()))
	}
	return fmt.Errorf("%w: %s", provider.ErrConflict, strings.Join(msgs, "; "))
}

// byName sends the call to the upstream when the upstream holds the function that name
// reads from the request, to keel's handler otherwise (which answers an unknown or a
// missing name).
func (s split) byName(name func(*http.Request) string, keelHandler http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if name(r) == "" {
			keelHandler(w, r)
			return
		}
		who, err := s.ownerOf(r.Context(), name(r))
		switch {
		case err != nil:
			writeError(w, err)
		case who == theUpstream:
			s.up.Forward(w, r)
		default:
			keelHandler(w, r)
		}
	}
}

// list answers faas-cli list with keel's functions and the upstream's together; keel's
// are all in its one namespace, so a list of another (--namespace) shows only the upstream's.
func (s split) list(w http.ResponseWriter, r *http.Request) {
	mine, err := s.p.List(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	if ns := r.URL.Query().Get("namespace"); ns != "" && ns != Namespace {
		mine = nil
	}
	theirs, err := s.up.List(r.Context(), r.URL.Query())
	if err != nil {
		writeError(w, err)
		return
	}
	kinds := map[string]string{}
	for _, f := range mine {
		if what, err := s.p.Holds(r.Context(), f.Name); err == nil {
			kinds[f.Name] = what
		}
	}
	twice := map[string]string{}
	for _, f := range theirs {
		if what, ok := kinds[f.Name]; ok {
			twice[f.Name] = what
		}
	}
	if len(twice) > 0 {
		writeError(w, s.conflict(twice))
		return
	}
	writeJSON(w, append(mine, theirs...))
}

// rereadable reads r's body (up to maxBody) and puts it back for whichever handler serves
// the request; false after it answered a body it could not read.
func rereadable(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		http.Error(w, fmt.Sprintf("request body: %v", err), http.StatusBadRequest)
		return nil, false
	}
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	return body, true
}

// deploy sends a normal function to the upstream and a packet function or chain to keel's
// handler, refusing a name the other side holds.
func (s split) deploy(keelHandler http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, ok := rereadable(w, r)
		if !ok {
			return
		}
		var fd types.FunctionDeployment
		if json.Unmarshal(body, &fd) != nil || fd.Service == "" {
			keelHandler(w, r) // keel's handler says what is wrong with the request
			return
		}
		kind, err := chain.Kind(&fd)
		if err != nil {
			keelHandler(w, r)
			return
		}
		if kind == "" {
			what, err := s.p.Holds(r.Context(), fd.Service)
			switch {
			case err != nil:
				writeError(w, err)
			case what != "":
				writeError(w, fmt.Errorf("%w: service: the name %s is a %s in keel; normal functions go to the upstream provider %s: "+
					"remove it first or pick another name", provider.ErrConflict, fd.Service, what, s.up.URL()))
			default:
				s.up.Forward(w, r)
			}
			return
		}
		has, err := s.up.Has(r.Context(), fd.Service)
		switch {
		case err != nil:
			writeError(w, err)
		case has:
			writeError(w, fmt.Errorf("%w: service: the name %s is a normal function at the upstream provider %s: "+
				"remove it there first or pick another name", provider.ErrConflict, fd.Service, s.up.URL()))
		default:
			keelHandler(w, r)
		}
	}
}

// remove sends faas-cli remove to whoever holds the function.
func (s split) remove(keelHandler http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, ok := rereadable(w, r)
		if !ok {
			return
		}
		var req types.DeleteFunctionRequest
		_ = json.Unmarshal(body, &req) // keel's handler refuses a bad body
		s.byName(func(*http.Request) string { return req.FunctionName }, keelHandler)(w, r)
	}
}

// invoke calls the upstream's function unless keel holds the name (keel's handler then
// explains that a packet function or chain is not called over HTTP). Only that rare case
// asks the upstream too, so a call of a normal function costs one cached store read.
func (s split) invoke(name func(*http.Request) string, keelHandler http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		what, err := s.p.Holds(r.Context(), name(r))
		if err != nil {
			writeError(w, err)
			return
		}
		if what == "" {
			s.up.Invoke(w, r)
			return
		}
		if has, err := s.up.Has(r.Context(), name(r)); err != nil {
			writeError(w, err)
		} else if has {
			writeError(w, s.conflict(map[string]string{name(r): what}))
		} else {
			keelHandler(w, r)
		}
	}
}

func statusName(r *http.Request) string { return mux.Vars(r)["name"] }
func logsName(r *http.Request) string {
	return strings.TrimSuffix(r.URL.Query().Get("name"), "."+Namespace)
}
