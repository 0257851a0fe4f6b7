// SPDX-License-Identifier: Apache-2.0

package handlers

// What the OpenFaaS gateway adds over a faas-provider, in the shapes its clients (faas-cli,
// the certifier) parse: /system/info, the call id of every invocation, 404 for a function
// that does not exist, scale from zero, asynchronous calls and AlertManager's alerts.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/keel-nfv/keel/gateway/internal/provider"
	"github.com/openfaas/faas-provider/types"
)

// GatewayInfo is the OpenFaaS gateway's answer to /system/info (faas' gateway/types), the
// provider's own info nested in it.
type GatewayInfo struct {
	Provider *types.ProviderInfo `json:"provider"`
	Version  *types.VersionInfo  `json:"version"`
	Arch     string              `json:"arch"`
}

// MakeInfoHandler handles GET /system/info; orchestration names where normal functions run
// (docker, kubernetes, or the upstream provider).
func MakeInfoHandler(orchestration string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v := &types.VersionInfo{Release: Version, SHA: SHA}
		writeJSON(w, GatewayInfo{
			Provider: &types.ProviderInfo{Name: "keel-gateway", Orchestration: orchestration, Version: v},
			Version:  v, Arch: runtime.GOARCH})
	}
}

// Call-id headers of the OpenFaaS gateway: on the request to the function and on the answer.
const (
	HeaderCallID    = "X-Call-Id"
	HeaderStartTime = "X-Start-Time"
)

// withCallID gives each call an id (the caller's X-Call-Id, else a new UUID) and its start
// time in Unix nanoseconds, passed to the function and returned to the caller.
func withCallID(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(HeaderCallID)
		if id == "" {
			id = uuid.NewString()
		}
		start := strconv.FormatInt(time.Now().UnixNano(), 10)
		r.Header.Set(HeaderCallID, id)
		r.Header.Set(HeaderStartTime, start)
		w.Header().Set(HeaderCallID, id)
		w.Header().Set(HeaderStartTime, start)
		next(w, r)
	}
}

// notFound is the 404 of a call to a function keel does not hold.
func notFound(w http.ResponseWriter, name, namespace string) {
	http.Error(w, fmt.Sprintf("function %s not found in namespace %s (faas-cli list shows the functions)", name, namespace), http.StatusNotFound)
}

// makeInvoke is the synchronous call (/function/NAME): a function keel does not hold is
// 404, a chain or packet function 400 saying how they are used, a function scaled to zero
// is scaled up and the call held until a replica is ready (provider.Wake), then proxied.
func makeInvoke(p *provider.Provider, name func(*http.Request) string, fwd http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		fn := name(r)
		if err := p.Wake(r.Context(), fn); err != nil {
			if errors.Is(err, provider.ErrNotFound) {
				notFound(w, fn, p.NamespaceName())
				return
			}
			writeError(w, err)
			return
		}
		fwd(w, r)
	}
}

// Async calls (/async-function/NAME): accepted with 202 and the call id, run in the
// background through the synchronous path, their answer POSTed to X-Callback-Url when the
// caller gave one (as OpenFaaS' queue-worker does, with X-Call-Id, X-Function-Status and
// X-Duration-Seconds). The queue is in memory: calls accepted before a gateway restart are
// lost (OpenFaaS keeps them in NATS JetStream).
const (
	AsyncQueue   = 256 // calls waiting at most; more are refused with 429
	AsyncWorkers = 4
)

type asyncCall struct {
	req      *http.Request // detached from the caller's connection
	callback string
	fn       string
}

type asyncInvoker struct {
	p      *provider.Provider
	name   func(*http.Request) string
	invoke http.HandlerFunc // the instrumented synchronous path
	queue  chan asyncCall
	client *http.Client
}

func newAsyncInvoker(ctx context.Context, p *provider.Provider, name func(*http.Request) string, invoke http.HandlerFunc) *asyncInvoker {
	a := &asyncInvoker{p: p, name: name, invoke: invoke, queue: make(chan asyncCall, AsyncQueue),
		client: &http.Client{Timeout: 30 * time.Second}}
	for i := 0; i < AsyncWorkers; i++ {
		go a.work(ctx)
	}
	return a
}

func (a *asyncInvoker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fn := a.name(r)
	what, err := a.p.Holds(r.Context(), fn)
	switch {
	case err != nil:
		writeError(w, err)
		return
	case what == "":
		notFound(w, fn, a.p.NamespaceName())
		return
	case what != "normal function":
		writeError(w, a.p.CheckInvocable(r.Context(), fn))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		http.Error(w, fmt.Sprintf("request body: %v", err), http.StatusBadRequest)
		return
	}
	if len(body) > maxBody {
		http.Error(w, fmt.Sprintf("request body: an asynchronous call takes at most %d bytes", maxBody), http.StatusRequestEntityTooLarge)
		return
	}
	// The call goes on after this request ends: a copy on its own context, at the
	// synchronous path of the same function.
	req := r.Clone(context.Background())
	req.URL.Path = "/function/" + strings.TrimPrefix(r.URL.Path, "/async-function/")
	req.RequestURI = ""
	req.Body, req.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
	select {
	case a.queue <- asyncCall{req: req, callback: r.Header.Get("X-Callback-Url"), fn: fn}:
		w.WriteHeader(http.StatusAccepted)
	default:
		http.Error(w, fmt.Sprintf("the asynchronous queue is full (%d calls waiting): retry later", AsyncQueue), http.StatusTooManyRequests)
	}
}

func (a *asyncInvoker) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case c := <-a.queue:
			a.run(ctx, c)
		}
	}
}

func (a *asyncInvoker) run(ctx context.Context, c asyncCall) {
	start := time.Now()
	rec := httptest.NewRecorder()
	a.invoke(rec, c.req.WithContext(ctx))
	id := c.req.Header.Get(HeaderCallID)
	if c.callback == "" {
		log.Printf("async call %s of %s: %d in %s", id, c.fn, rec.Code, time.Since(start).Round(time.Millisecond))
		return
	}
	cb, err := http.NewRequestWithContext(ctx, http.MethodPost, c.callback, bytes.NewReader(rec.Body.Bytes()))
	if err != nil {
		log.Printf("async call %s of %s: callback %q: %v", id, c.fn, c.callback, err)
		return
	}
	for k, vs := range rec.Header() {
		cb.Header[k] = vs
	}
	cb.Header.Set(HeaderCallID, id)
	cb.Header.Set("X-Function-Name", c.fn)
	cb.Header.Set("X-Function-Status", strconv.Itoa(rec.Code))
	cb.Header.Set("X-Duration-Seconds", strconv.FormatFloat(time.Since(start).Seconds(), 'f', 6, 64))
	resp, err := a.client.Do(cb)
	if err != nil {
		log.Printf("async call %s of %s: callback %s: %v", id, c.fn, c.callback, err)
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
}

// Alerter applies AlertManager's notifications to normal functions (control.FunctionScaler).
type Alerter interface {
	Alert(ctx context.Context, name, status string) (from, to uint64, err error)
}

// alertNotification is the part of AlertManager's webhook body keel reads.
type alertNotification struct {
	Status string `json:"status"`
	Alerts []struct {
		Status string            `json:"status"`
		Labels map[string]string `json:"labels"`
	} `json:"alerts"`
}

// AlertResult is one alert's outcome in /system/alert's answer.
type AlertResult struct {
	Function string `json:"function"`
	Status   string `json:"status"`
	From     uint64 `json:"from"`
	To       uint64 `json:"to"`
	Error    string `json:"error,omitempty"`
}

// MakeAlertHandler handles POST /system/alert, AlertManager's webhook as OpenFaaS CE takes
// it: each alert names a function in its function_name label; "firing" scales it up by
// com.openfaas.scale.factor % of its max, "resolved" back to its min. The answer lists what
// each alert did; a body that is not a notification is 400.
func MakeAlertHandler(a Alerter, namespace string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var n alertNotification
		if err := json.NewDecoder(io.LimitReader(r.Body, maxBody)).Decode(&n); err != nil || len(n.Alerts) == 0 {
			msg := "expected AlertManager's webhook JSON with at least one alert"
			if err != nil {
				msg += ": " + err.Error()
			}
			http.Error(w, "request body: "+msg, http.StatusBadRequest)
			return
		}
		out := make([]AlertResult, 0, len(n.Alerts))
		for _, al := range n.Alerts {
			res := AlertResult{Function: strings.TrimSuffix(al.Labels["function_name"], "."+namespace), Status: al.Status}
			if res.Status == "" {
				res.Status = n.Status
			}
			if res.Function == "" {
				res.Error = "the alert has no function_name label"
			} else if from, to, err := a.Alert(r.Context(), res.Function, res.Status); err != nil {
				res.Error = err.Error()
			} else {
				res.From, res.To = from, to
			}
			out = append(out, res)
		}
		writeJSON(w, out)
	}
}
