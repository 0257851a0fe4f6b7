// SPDX-License-Identifier: Apache-2.0

// Package handlers serves the OpenFaaS provider REST API (faas-provider's routes and types)
// over the provider, on the gateway's own router.
package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/mux"
	"github.com/keel-nfv/keel/gateway/internal/metrics"
	"github.com/keel-nfv/keel/gateway/internal/provider"
	"github.com/keel-nfv/keel/gateway/internal/secrets"
	"github.com/keel-nfv/keel/gateway/internal/ui"
	"github.com/keel-nfv/keel/gateway/internal/upstream"
	"github.com/openfaas/faas-provider/auth"
	"github.com/openfaas/faas-provider/logs"
	"github.com/openfaas/faas-provider/proxy"
	"github.com/openfaas/faas-provider/types"
)

// NameExpression matches a function name (faas-provider's bootstrap.NameExpression).
const NameExpression = "-a-zA-Z_0-9."

// Namespace is the namespace keel serves by default; faas-cli appends it to function names
// (NAME.openfaas-fn). A provider with another (--namespace) says so (NamespaceName).
const Namespace = provider.DefaultNamespace

// Version and SHA are reported by /system/info (and faas-cli version): make build sets them
// to git describe and the commit (-ldflags -X); "dev" otherwise.
var (
	Version = "dev"
	SHA     = "dev"
)

const maxBody = 1 << 20

// writeError maps provider errors to HTTP status codes with the message faas-cli prints.
func writeError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	msg := err.Error()
	for _, m := range []struct {
		err  error
		code int
	}{{provider.ErrInvalid, http.StatusBadRequest}, {provider.ErrNotFound, http.StatusNotFound}, {provider.ErrConflict, http.StatusConflict},
		{provider.ErrUnavailable, http.StatusServiceUnavailable}} {
		if errors.Is(err, m.err) {
			code = m.code
			msg = strings.TrimPrefix(msg, m.err.Error()+": ")
			break
		}
	}
	var ue *upstream.Error
	if code == http.StatusInternalServerError && errors.As(err, &ue) {
		code = http.StatusBadGateway // the upstream provider failed, not keel
	}
	if code == http.StatusInternalServerError {
		log.Printf("error: %v", err)
	}
	http.Error(w, msg, code)
}

// MakeDeployHandler handles POST (create) or PUT (update) /system/functions.
func MakeDeployHandler(p *provider.Provider, update bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var fd types.FunctionDeployment
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
		if err == nil {
			err = json.Unmarshal(body, &fd)
		}
		if err != nil {
			http.Error(w, fmt.Sprintf("request body: %v", err), http.StatusBadRequest)
			return
		}
		if err := p.Deploy(r.Context(), &fd, update); err != nil {
			writeError(w, err)
			return
		}
		log.Printf("deployed %s (update=%v)", fd.Service, update)
		w.WriteHeader(http.StatusAccepted)
	}
}

// MakeSecretsHandler handles /system/secrets (faas-cli secret list, create, update, remove):
// GET lists names, POST creates, PUT updates, DELETE removes ({"name": ...}).
func MakeSecretsHandler(p *provider.Provider) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if p.Secrets == nil {
			http.Error(w, "this gateway keeps no secrets", http.StatusNotImplemented)
			return
		}
		if r.Method == http.MethodGet {
			names, err := p.Secrets.Names()
			if err != nil {
				writeError(w, err)
				return
			}
			out := make([]types.Secret, 0, len(names))
			for _, n := range names {
				out = append(out, types.Secret{Name: n, Namespace: Namespace})
			}
			writeJSON(w, out)
			return
		}
		var sec types.Secret
		if err := json.NewDecoder(io.LimitReader(r.Body, maxBody)).Decode(&sec); err != nil {
			http.Error(w, "bad secret JSON: "+err.Error(), http.StatusBadRequest)
			return
		}
		var err error
		switch r.Method {
		case http.MethodDelete:
			if users := p.SecretUsers(r.Context(), sec.Name); len(users) > 0 {
				http.Error(w, fmt.Sprintf("secret %s is used by %s: remove or redeploy them first", sec.Name, strings.Join(users, ", ")), http.StatusConflict)
				return
			}
			err = p.Secrets.Delete(sec.Name)
		default:
			value := []byte(sec.Value)
			if len(value) == 0 {
				value = sec.RawValue
			}
			err = p.Secrets.Put(sec.Name, value, r.Method == http.MethodPut)
		}
		switch {
		case errors.Is(err, secrets.ErrNotFound):
			http.Error(w, err.Error(), http.StatusNotFound)
		case errors.Is(err, secrets.ErrExists):
			http.Error(w, err.Error(), http.StatusConflict)
		case errors.Is(err, secrets.ErrInvalid):
			http.Error(w, err.Error(), http.StatusBadRequest)
		case err != nil:
			writeError(w, err)
		case r.Method == http.MethodPost:
			w.WriteHeader(http.StatusCreated)
		default:
			w.WriteHeader(http.StatusOK)
		}
	}
}

// LogsTimeout bounds one faas-cli logs request (a --follow stream ends after it).
const LogsTimeout = 30 * time.Minute

// MakeLogsHandler handles GET /system/logs (faas-cli logs): faas-provider's streaming handler
// over the provider, after a check that names an unknown function or a packet function (the
// stock handler answers every error with "function log request failed").
func MakeLogsHandler(p *provider.Provider) http.HandlerFunc {
	stream := logs.NewLogHandlerFunc(p, LogsTimeout)
	return func(w http.ResponseWriter, r *http.Request) {
		if err := p.CheckLogs(r.Context(), r.URL.Query().Get("name")); err != nil {
			writeError(w, err)
			return
		}
		stream(w, r)
	}
}

// MakeDeleteHandler handles DELETE /system/functions.
func MakeDeleteHandler(p *provider.Provider) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req types.DeleteFunctionRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, maxBody)).Decode(&req); err != nil || req.FunctionName == "" {
			http.Error(w, "request body: expected {\"functionName\": NAME}", http.StatusBadRequest)
			return
		}
		if err := p.Delete(r.Context(), req.FunctionName); err != nil {
			writeError(w, err)
			return
		}
		log.Printf("removed %s", req.FunctionName)
		w.WriteHeader(http.StatusAccepted)
	}
}

// MakeListHandler handles GET /system/functions.
func MakeListHandler(p *provider.Provider) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		list, err := p.List(r.Context())
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, list)
	}
}

// MakeStatusHandler handles GET /system/function/{name}.
func MakeStatusHandler(p *provider.Provider) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		st, err := p.Status(r.Context(), mux.Vars(r)["name"])
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, st)
	}
}

// MakeScaleHandler handles POST /system/scale-function/{name}.
func MakeScaleHandler(p *provider.Provider) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req types.ScaleServiceRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, maxBody)).Decode(&req); err != nil {
			http.Error(w, fmt.Sprintf("request body: %v", err), http.StatusBadRequest)
			return
		}
		name := mux.Vars(r)["name"]
		if err := p.Scale(r.Context(), name, req.Replicas); err != nil {
			writeError(w, err)
			return
		}
		log.Printf("scaled %s to %d", name, req.Replicas)
		w.WriteHeader(http.StatusAccepted)
	}
}

// MakeNamespacesHandler handles GET /system/namespaces: keel serves one namespace.
func MakeNamespacesHandler(namespace string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, []string{namespace})
	}
}

// inNamespace refuses, with 400 naming both, a call of the REST API for a namespace other
// than the one keel serves: in the query (?namespace=, faas-cli's --namespace) or, on
// deploy, in the body. faas-netes answers a namespace it does not serve the same way.
func inNamespace(namespace string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ns := r.URL.Query().Get("namespace")
		if ns == "" && r.Body != nil && (r.Method == http.MethodPost || r.Method == http.MethodPut || r.Method == http.MethodDelete) &&
			strings.HasPrefix(r.URL.Path, "/system/functions") {
			body, ok := rereadable(w, r)
			if !ok {
				return
			}
			var in struct {
				Namespace string `json:"namespace"`
			}
			_ = json.Unmarshal(body, &in) // the handler says what is wrong with a bad body
			ns = in.Namespace
		}
		if ns != "" && ns != namespace {
			http.Error(w, fmt.Sprintf("namespace %q is not served by keel-gateway: it serves %q (GET /system/namespaces)", ns, namespace), http.StatusBadRequest)
			return
		}
		h(w, r)
	}
}

// MakeHealthHandler handles /healthz.
func MakeHealthHandler() http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.Write([]byte("OK"))
	}
}

func notImplemented(what string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, what+" is not implemented by keel-gateway", http.StatusNotImplemented)
	}
}

// guardWith puts basic auth with creds in front of a handler (creds nil: none).
func guardWith(creds *auth.BasicAuthCredentials) func(http.HandlerFunc) http.HandlerFunc {
	return func(h http.HandlerFunc) http.HandlerFunc {
		if creds == nil {
			return h
		}
		return auth.DecorateWithBasicAuth(h, creds)
	}
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		log.Printf("write response: %v", err)
	}
}

// NewRouter builds faas-provider's routes, the OpenFaaS gateway's own (/system/info in its
// shape, /function/ with call ids and scale from zero, /async-function/, /system/alert with
// alerts set) and, with v, the operator's view (/ui/ and /system/keel/topology); creds nil
// disables basic auth. With up, normal functions are the upstream provider's
// (keel-gateway --upstream-provider): their calls, and secrets, go there after keel's basic
// auth, and faas-cli list shows both sides. ctx bounds the asynchronous calls' workers.
func NewRouter(ctx context.Context, p *provider.Provider, m *metrics.Metrics, v *ui.View, creds *auth.BasicAuthCredentials, up *upstream.Provider, alerts Alerter) *mux.Router {
	guard := guardWith(creds)
	namespace := Namespace
	if p != nil {
		namespace = p.NamespaceName()
	}
	list, deploy, update, remove := MakeListHandler(p), MakeDeployHandler(p, false), MakeDeployHandler(p, true), MakeDeleteHandler(p)
	status, scale, secretsH, logsH := MakeStatusHandler(p), MakeScaleHandler(p), MakeSecretsHandler(p), MakeLogsHandler(p)

	cfg := types.FaaSConfig{ReadTimeout: time.Minute, WriteTimeout: time.Minute, MaxIdleConns: 256, MaxIdleConnsPerHost: 64}
	fwd := proxy.NewHandlerFunc(cfg, p, false)
	name := func(r *http.Request) string { return strings.TrimSuffix(mux.Vars(r)["name"], "."+namespace) }
	// Calls are counted (gateway_function_invocation_*) once the function is known to
	// exist: a name nobody deployed must not add a series per name to /metrics.
	invoke := makeInvoke(p, name, m.InstrumentInvocation(name, fwd))
	orchestration := "docker"
	if p != nil && p.Runtime != nil {
		orchestration = p.Orchestration()
	}
	if up != nil {
		orchestration = "upstream " + up.URL()
		s := split{p: p, up: up}
		list, deploy, update, remove = s.list, s.deploy(deploy), s.deploy(update), s.remove(remove)
		status, scale, logsH = s.byName(statusName, status), s.byName(statusName, scale), s.byName(logsName, logsH)
		secretsH, invoke = up.Forward, m.InstrumentInvocation(name, s.invoke(name, makeInvoke(p, name, fwd)))
	} else {
		ns := func(h http.HandlerFunc) http.HandlerFunc { return inNamespace(namespace, h) }
		list, deploy, update, remove = ns(list), ns(deploy), ns(update), ns(remove)
		status, scale, secretsH, logsH = ns(status), ns(scale), ns(secretsH), ns(logsH)
	}

	r := mux.NewRouter()
	r.HandleFunc("/system/functions", guard(list)).Methods(http.MethodGet)
	r.HandleFunc("/system/functions", guard(deploy)).Methods(http.MethodPost)
	r.HandleFunc("/system/functions", guard(update)).Methods(http.MethodPut)
	r.HandleFunc("/system/functions", guard(remove)).Methods(http.MethodDelete)
	r.HandleFunc("/system/function/{name:["+NameExpression+"]+}", guard(status)).Methods(http.MethodGet)
	r.HandleFunc("/system/scale-function/{name:["+NameExpression+"]+}", guard(scale)).Methods(http.MethodPost)
	r.HandleFunc("/system/info", guard(MakeInfoHandler(orchestration))).Methods(http.MethodGet)
	r.HandleFunc("/system/namespaces", guard(MakeNamespacesHandler(namespace))).Methods(http.MethodGet)
	r.HandleFunc("/system/secrets", guard(secretsH)).Methods(http.MethodGet, http.MethodPut, http.MethodPost, http.MethodDelete)
	r.HandleFunc("/system/logs", guard(logsH)).Methods(http.MethodGet)
	if alerts != nil && up == nil {
		r.HandleFunc("/system/alert", guard(MakeAlertHandler(alerts, namespace))).Methods(http.MethodPost)
	}
	if v != nil {
		r.HandleFunc("/system/keel/topology", guard(ui.MakeTopologyHandler(v))).Methods(http.MethodGet)
		r.Handle("/ui", http.RedirectHandler("/ui/", http.StatusMovedPermanently))
		r.PathPrefix("/ui/").Handler(guard(ui.StaticHandler("/ui/").ServeHTTP)).Methods(http.MethodGet, http.MethodHead)
	}

	instrumented := withCallID(invoke)
	r.HandleFunc("/function/{name:["+NameExpression+"]+}", instrumented)
	r.HandleFunc("/function/{name:["+NameExpression+"]+}/", instrumented)
	r.HandleFunc("/function/{name:["+NameExpression+"]+}/{params:.*}", instrumented)
	if up == nil && p != nil {
		// The background call runs the synchronous path, through the router so that its
		// name is read as for any call (and counted in the metrics).
		async := withCallID(newAsyncInvoker(ctx, p, name, func(w http.ResponseWriter, req *http.Request) { r.ServeHTTP(w, req) }).ServeHTTP)
		r.HandleFunc("/async-function/{name:["+NameExpression+"]+}", async).Methods(http.MethodPost)
		r.HandleFunc("/async-function/{name:["+NameExpression+"]+}/", async).Methods(http.MethodPost)
		r.HandleFunc("/async-function/{name:["+NameExpression+"]+}/{params:.*}", async).Methods(http.MethodPost)
	}
	r.HandleFunc("/healthz", MakeHealthHandler()).Methods(http.MethodGet, http.MethodHead)
	r.Handle("/metrics", m.Handler())
	return r
}
