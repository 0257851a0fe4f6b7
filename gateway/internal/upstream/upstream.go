// SPDX-License-Identifier: Apache-2.0

// Package upstream is keel-gateway's client of another OpenFaaS provider (faas-netes, or
// any server of faas-provider's REST API) that runs the cluster's normal functions when
// the gateway starts with --upstream-provider: keel keeps packet functions and chains and
// hands every normal-function call to it.
package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/openfaas/faas-provider/types"
)

// Provider is the upstream faas-provider.
type Provider struct {
	url            *url.URL
	user, password string // its basic auth; user "" sends none
	client         *http.Client
	system, invoke *httputil.ReverseProxy // the REST API's calls; function invocations
}

// New returns the client of the provider at rawURL (http or https, e.g.
// http://faas-netes.openfaas:8081), authenticating as user with the password in
// passwordFile ("" : no basic auth). It checks the arguments, not the provider.
func New(rawURL, user, passwordFile string) (*Provider, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, fmt.Errorf("--upstream-provider %q: %w", rawURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.User != nil {
		return nil, fmt.Errorf("--upstream-provider %q: want http(s)://HOST[:PORT][/PATH], without credentials (--upstream-password-file) or query", rawURL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	p := &Provider{url: u, client: &http.Client{Timeout: 30 * time.Second}}
	if passwordFile != "" {
		b, err := os.ReadFile(passwordFile)
		if err != nil {
			return nil, fmt.Errorf("--upstream-password-file: %w", err)
		}
		p.user, p.password = user, strings.TrimSpace(string(b))
		if p.user == "" || p.password == "" {
			return nil, fmt.Errorf("--upstream-password-file %s: empty password or --upstream-user", passwordFile)
		}
	}
	p.system, p.invoke = p.reverseProxy(true), p.reverseProxy(false)
	return p, nil
}

// errRefused is the upstream's 401: keel's credentials for it are wrong.
var errRefused = errors.New("it refused keel-gateway's credentials (401): check --upstream-user and --upstream-password-file")

// reverseProxy forwards requests to the same path and query at the upstream. With
// credentials (the REST API) it swaps keel's basic auth for the upstream's and turns the
// upstream's 401 into an error naming it. Without (invocations: faas-provider does not
// guard /function/), the request and the answer pass as they are, so the upstream's
// credentials never reach a function and a function's own 401 reaches its caller.
func (p *Provider) reverseProxy(credentials bool) *httputil.ReverseProxy {
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(p.url)
			if credentials {
				r.Out.Header.Del("Authorization")
				p.authorize(r.Out)
			}
		},
		FlushInterval: -1, // faas-cli logs --follow streams
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			http.Error(w, p.wrap(err).Error(), http.StatusBadGateway)
		},
	}
	if credentials {
		rp.ModifyResponse = func(resp *http.Response) error {
			if resp.StatusCode == http.StatusUnauthorized {
				return errRefused // passed on, the user would take it for keel's own login failing
			}
			return nil
		}
	}
	return rp
}

// URL is the provider's address as given.
func (p *Provider) URL() string { return p.url.String() }

// Error is a call the upstream provider did not answer, or answered with an error status:
// its message names the provider, so a user sees which of the two gateways failed.
type Error struct {
	URL    string
	Status int // 0: no answer
	Err    error
}

func (e *Error) Error() string { return fmt.Sprintf("upstream faas-provider %s: %v", e.URL, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

func (p *Provider) wrap(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // the URL is said once, by Error
	}
	return &Error{URL: p.URL(), Err: err}
}

func (p *Provider) authorize(r *http.Request) {
	if p.user != "" {
		r.SetBasicAuth(p.user, p.password)
	}
}

// get GETs path and decodes its JSON answer into v; found is false on 404.
func (p *Provider) get(ctx context.Context, path string, v any) (found bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url.String()+path, nil)
	if err != nil {
		return false, err
	}
	p.authorize(req)
	resp, err := p.client.Do(req)
	if err != nil {
		return false, p.wrap(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	switch {
	case err != nil:
		return false, p.wrap(err)
	case resp.StatusCode == http.StatusNotFound:
		return false, nil
	case resp.StatusCode == http.StatusUnauthorized:
		return false, &Error{URL: p.URL(), Status: resp.StatusCode, Err: errRefused}
	case resp.StatusCode != http.StatusOK:
		return false, &Error{URL: p.URL(), Status: resp.StatusCode,
			Err: fmt.Errorf("GET %s: %s: %s", path, resp.Status, strings.TrimSpace(string(body)))}
	}
	if err := json.Unmarshal(body, v); err != nil {
		return false, p.wrap(fmt.Errorf("GET %s: %w", path, err))
	}
	return true, nil
}

// List returns the upstream's functions (faas-cli list), in the namespace of query's
// namespace parameter when it has one.
func (p *Provider) List(ctx context.Context, query url.Values) ([]types.FunctionStatus, error) {
	path := "/system/functions"
	if ns := query.Get("namespace"); ns != "" {
		path += "?namespace=" + url.QueryEscape(ns)
	}
	var out []types.FunctionStatus
	if _, err := p.get(ctx, path, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Has tells whether the upstream runs a function of that name.
func (p *Provider) Has(ctx context.Context, name string) (bool, error) {
	var st types.FunctionStatus
	return p.get(ctx, "/system/function/"+url.PathEscape(name), &st)
}

// Forward sends a call of the REST API (/system/...) to the same path and query at the
// upstream, with the upstream's credentials, and streams its answer back; when the
// upstream cannot be reached the answer is 502 with an Error's message.
func (p *Provider) Forward(w http.ResponseWriter, r *http.Request) { p.system.ServeHTTP(w, r) }

// Invoke sends a function invocation (/function/NAME...) to the upstream as it came.
func (p *Provider) Invoke(w http.ResponseWriter, r *http.Request) { p.invoke.ServeHTTP(w, r) }
