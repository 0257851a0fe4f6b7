// SPDX-License-Identifier: Apache-2.0

package provider

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/internal/controltoken"
	"github.com/keel-nfv/keel/internal/dockerlog"
	"github.com/openfaas/faas-provider/logs"
)

// CheckLogs says why a function has no logs to show: ErrNotFound for an unknown name,
// ErrInvalid for a packet function (it runs inside chains). nil: Query can read it.
func (p *Provider) CheckLogs(ctx context.Context, name string) error {
	_, err := p.loggable(ctx, name)
	return err
}

// loggable reads the function and says why it has no logs (CheckLogs' errors), once for both
// CheckLogs and Query.
func (p *Provider) loggable(ctx context.Context, name string) (*chain.Function, error) {
	if name == "" {
		return nil, fmt.Errorf("%w: name: missing (faas-cli logs NAME)", ErrInvalid)
	}
	f, err := p.lookup(ctx, p.trimNamespace(name))
	if err != nil {
		return nil, err
	}
	switch f.Kind {
	case chain.KindNF:
		users, err := p.chainsUsing(ctx, f.Deployment.Service)
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s is a packet function: it has no process of its own and logs inside the chains that "+
			"use it (%s); run faas-cli logs CHAIN", ErrInvalid, f.Deployment.Service, orNone(users))
	case chain.KindChain:
		if f.Chain == nil || len(f.Chain.Placement.Subgroups) == 0 {
			return nil, fmt.Errorf("%w: chain %s runs on the ToR switch only: it has no containers and so no logs "+
				"(faas-cli describe %s shows where it runs)", ErrInvalid, f.Deployment.Service, f.Deployment.Service)
		}
	case "":
		if p.Runtime == nil {
			return nil, fmt.Errorf("%w: no container engine: normal functions do not run here", ErrInvalid)
		}
	}
	return f, nil
}

// Query serves faas-cli logs (faas-provider's logs.Requester): a normal function's replicas
// from the container engine; a chain's NF containers from the agent of every worker that runs
// one of its instances (GET http://AGENT/logs?chain=NAME). Without follow, the newest
// req.Tail lines of all containers together, oldest first.
func (p *Provider) Query(ctx context.Context, req logs.Request) (<-chan logs.Message, error) {
	name := p.trimNamespace(req.Name)
	f, err := p.loggable(ctx, name)
	if err != nil {
		return nil, err
	}
	o := dockerlog.Options{Since: req.Since, Tail: req.Tail, Follow: req.Follow}
	var lines <-chan dockerlog.Line
	if f.Kind == chain.KindChain {
		lines, err = p.chainLogs(ctx, name, o)
	} else {
		lines, err = p.Runtime.Logs(ctx, name, o)
	}
	if err != nil {
		return nil, err
	}
	if !req.Follow && req.Tail > 0 {
		lines = newest(lines, req.Tail)
	}
	out := make(chan logs.Message, 64)
	go func() {
		defer close(out)
		for l := range lines {
			m := logs.Message{Name: name, Namespace: p.NamespaceName(), Instance: l.Container, Timestamp: l.Time, Text: l.Text}
			select {
			case out <- m:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// newest keeps the last n lines of a finished stream, in time order.
func newest(in <-chan dockerlog.Line, n int) <-chan dockerlog.Line {
	var all []dockerlog.Line
	for l := range in {
		all = append(all, l)
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Time.Before(all[j].Time) })
	if len(all) > n {
		all = all[len(all)-n:]
	}
	out := make(chan dockerlog.Line, len(all))
	for _, l := range all {
		out <- l
	}
	close(out)
	return out
}

// agentClient reads agents' /logs: connecting and the answer's headers are bounded (an
// agent that does not answer costs a faas-cli logs call 10 s at most); the stream itself is
// not, since --follow runs until the caller stops it (LogsTimeout at most).
var agentClient = &http.Client{Transport: &http.Transport{
	DialContext:           (&net.Dialer{Timeout: 3 * time.Second}).DialContext,
	ResponseHeaderTimeout: 10 * time.Second,
	MaxIdleConnsPerHost:   2,
}}

// chainLogs merges the log streams of the agents whose workers run the chain's instances.
func (p *Provider) chainLogs(ctx context.Context, name string, o dockerlog.Options) (<-chan dockerlog.Line, error) {
	insts, err := p.Store.Instances(ctx, name)
	if err != nil {
		return nil, err
	}
	workers, err := p.Store.Workers(ctx)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var addrs []string
	for _, in := range insts {
		w := workers[in.Worker]
		if seen[in.Worker] || w == nil || w.Address == "" {
			continue
		}
		seen[in.Worker] = true
		addrs = append(addrs, w.Address)
	}
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%w: chain %s has no instance on a registered worker (it runs on the switch only, or no agent has registered)", ErrInvalid, name)
	}
	q := url.Values{"chain": {name}}
	if o.Since != nil {
		q.Set("since", o.Since.Format(time.RFC3339Nano))
	}
	if o.Tail > 0 {
		q.Set("tail", strconv.Itoa(o.Tail))
	}
	if o.Follow {
		q.Set("follow", "true")
	}
	out := make(chan dockerlog.Line, 64)
	// Every agent at once, each bounded by agentClient's deadlines: one slow or dead agent
	// costs the call at most those, not one after another.
	resps := make([]*http.Response, len(addrs))
	errs := make([]error, len(addrs))
	var connect sync.WaitGroup
	for i, addr := range addrs {
		connect.Add(1)
		go func() {
			defer connect.Done()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/logs?"+q.Encode(), nil)
			if err == nil {
				controltoken.SetHTTP(req, p.ControlToken)
				resps[i], err = agentClient.Do(req)
			}
			if err == nil && resps[i].StatusCode != http.StatusOK {
				resps[i].Body.Close()
				err = fmt.Errorf("agent %s: %s", addr, resps[i].Status)
			}
			errs[i] = err
		}()
	}
	connect.Wait()
	var wg sync.WaitGroup
	failed := 0
	for i, resp := range resps {
		if errs[i] != nil {
			failed++
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer resp.Body.Close()
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				var l dockerlog.Line
				if json.Unmarshal(sc.Bytes(), &l) != nil {
					continue
				}
				select {
				case out <- l:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	if failed == len(addrs) {
		return nil, errors.Join(errs...)
	}
	go func() {
		wg.Wait()
		close(out)
	}()
	return out, nil
}
