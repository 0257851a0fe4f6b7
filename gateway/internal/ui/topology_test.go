// SPDX-License-Identifier: Apache-2.0

package ui

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/policy"
	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/openfaas/faas-provider/types"
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func chainFn(name string, slo float64, server, sw []string) *chain.Function {
	c := &chain.Chain{Name: name, Spec: strings.Join(append(append([]string{}, sw...), server...), " -> "),
		Filter: "dst net 198.18.1.0/24", SLO: chain.SLO{P99us: slo, TMinGbps: 1}, NFs: append(append([]string{}, sw...), server...)}
	for _, n := range server {
		c.Members = append(c.Members, chain.Member{Name: n, NF: strings.ToLower(n)})
	}
	for _, n := range sw {
		c.SwitchNFs = append(c.SwitchNFs, chain.SwitchNF{Member: chain.Member{Name: n}})
	}
	return &chain.Function{Kind: chain.KindChain, Deployment: types.FunctionDeployment{Service: name}, Chain: c}
}

// rack: chain1 on the switch only; chain2 and chain3 share core 1 of worker local, chain3
// has a second instance attached on core 2 over its SLO and one pooled; a normal function.
func rack() Snapshot {
	return Snapshot{
		Time: t0,
		Functions: []*chain.Function{
			chainFn("chain3", 100, []string{"NAT"}, []string{"ACL"}),
			chainFn("chain1", 100, nil, []string{"Tunnel", "IPv4Fwd"}),
			chainFn("chain2", 200, []string{"ACL", "UrlFilter", "Encrypt"}, nil),
			{Deployment: types.FunctionDeployment{Service: "hello"}},
		},
		Instances: map[string][]*store.Instance{
			"chain2": {{ID: "chain2/1", Chain: "chain2", Worker: "local", State: store.Attached, Core: 1, VLAN: 101,
				Flows: 3, RateGbps: 0.5, RatePps: 60000, Note: store.Note{Load: 0.3, Threshold: 0.8}, NFQueueLen: 4, VFDropped: 1, Batch: 2, P99us: 40, Phase: "ready"}},
			"chain3": {
				{ID: "chain3/1", Chain: "chain3", Worker: "local", State: store.Attached, Core: 1, VLAN: 102, Flows: 2,
					RateGbps: 0.25, RatePps: 30000, Note: store.Note{Load: 0.2, Threshold: 0.7}, P99us: 30, Phase: "ready"},
				{ID: "chain3/2", Chain: "chain3", Worker: "local", State: store.Attached, Core: 2, VLAN: 103, Flows: 1,
					RateGbps: 1, RatePps: 120000, Note: store.Note{Load: 0.75, Threshold: 0.7}, NFQueueLen: 80, P99us: 150, Overloaded: true, Phase: "ready"},
				{ID: "chain3/3", Chain: "chain3", Worker: "local", State: store.Pooled, Core: -1, VLAN: 104, Phase: "starting"},
			},
		},
		Workers: map[string]*store.Worker{"local": {Name: "local", CoreIDs: []uint32{1, 2, 3}, Seen: t0}},
	}
}

func decisions(n int) []policy.Decision {
	var out []policy.Decision
	for i := 0; i < n; i++ {
		out = append(out, policy.Decision{Time: t0.Add(time.Duration(i) * time.Second), Kind: policy.KindAttach,
			Reason: "cold_start", Chain: "chain3", Instance: "chain3/1", Worker: "local", Core: 1, Text: "scale-out: ..."})
	}
	return out
}

func Test_Build_places_sgroups_on_their_workers_cores(t *testing.T) {
	top := Build(rack(), nil, nil)
	if len(top.Workers) != 1 || top.Workers[0].Name != "local" {
		t.Fatalf("workers: %+v", top.Workers)
	}
	w := top.Workers[0]
	if len(w.Cores) != 3 || w.Cores[0].ID != 1 || w.Cores[2].ID != 3 {
		t.Fatalf("cores: %+v", w.Cores)
	}
	c1 := w.Cores[0]
	if len(c1.Sgroups) != 2 || c1.Sgroups[0].Instance != "chain2/1" || c1.Sgroups[1].Instance != "chain3/1" {
		t.Fatalf("core 1 sgroups: %+v", c1.Sgroups)
	}
	if got := c1.Load; got < 0.499 || got > 0.501 {
		t.Errorf("core 1 load %v, want 0.5 (its sgroups' loads)", got)
	}
	sg := c1.Sgroups[0]
	if strings.Join(sg.NFs, ",") != "ACL,UrlFilter,Encrypt" || sg.SLOP99us != 200 || sg.NFQueueLen != 4 || sg.VFDropped != 1 || sg.Batch != 2 ||
		sg.Threshold != 0.8 || sg.RateGbps != 0.5 {
		t.Errorf("chain2's sgroup: %+v", sg)
	}
	if len(w.Cores[2].Sgroups) != 0 {
		t.Errorf("core 3 should be idle: %+v", w.Cores[2])
	}
	if len(w.Pool) != 1 || w.Pool[0].Instance != "chain3/3" || w.Pool[0].Phase != "starting" {
		t.Errorf("pool: %+v", w.Pool)
	}
}

func Test_Build_sums_chains_and_checks_their_SLO(t *testing.T) {
	top := Build(rack(), nil, map[string][]Sample{"chain2": {{Time: t0, RateGbps: 0.4, Cores: 1, P99us: 35, Flows: 3}}})
	names := []string{}
	for _, c := range top.Chains {
		names = append(names, c.Name)
	}
	if strings.Join(names, ",") != "chain1,chain2,chain3" {
		t.Fatalf("chains %v: want the three chains by name, no normal function", names)
	}
	c1, c2, c3 := top.Chains[0], top.Chains[1], top.Chains[2]
	if !c1.SwitchOnly || len(c1.Cores) != 0 || c1.Flows != 0 || strings.Join(c1.SwitchNFs, ",") != "Tunnel,IPv4Fwd" || !c1.SLOMet {
		t.Errorf("chain1 runs on the switch only: %+v", c1)
	}
	if c2.SwitchOnly || len(c2.History) != 1 || c2.History[0].P99us != 35 || !c2.SLOMet {
		t.Errorf("chain2: %+v", c2)
	}
	if c3.Attached != 2 || c3.Pooled != 1 || c3.Flows != 3 || c3.RateGbps != 1.25 || c3.P99us != 150 || c3.SLOMet ||
		strings.Join(c3.Cores, ",") != "local:1,local:2" || strings.Join(c3.SwitchNFs, ",") != "ACL" {
		t.Errorf("chain3: %+v", c3)
	}
	want := Totals{Chains: 3, Attached: 3, Pooled: 1, Flows: 6, CoresManaged: 3, CoresUsed: 2, RateGbps: 1.75, ChainsOverSLO: 1}
	if top.Totals != want {
		t.Errorf("totals %+v, want %+v", top.Totals, want)
	}
}

func Test_Build_lists_the_latest_decisions_newest_first(t *testing.T) {
	top := Build(rack(), decisions(DecisionsShown+20), nil)
	if len(top.Decisions) != DecisionsShown || top.Totals.DecisionsInRing != DecisionsShown+20 {
		t.Fatalf("got %d decisions (%d kept), want %d", len(top.Decisions), top.Totals.DecisionsInRing, DecisionsShown)
	}
	if !top.Decisions[0].Time.After(top.Decisions[1].Time) {
		t.Errorf("not newest first: %v, %v", top.Decisions[0].Time, top.Decisions[1].Time)
	}
}

func Test_topology_JSON_has_the_fields_the_page_and_scripts_read(t *testing.T) {
	b, err := json.Marshal(Build(rack(), decisions(1), nil))
	if err != nil {
		t.Fatal(err)
	}
	var j map[string]any
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatal(err)
	}
	sg := j["workers"].([]any)[0].(map[string]any)["cores"].([]any)[0].(map[string]any)["sgroups"].([]any)[0].(map[string]any)
	for _, k := range []string{"chain", "instance", "nfs", "rate_gbps", "rate_pps", "load", "threshold", "vf_dropped", "nf_reported_queue_len", "batch",
		"p99_us", "slo_p99_us", "flows", "phase"} {
		if _, ok := sg[k]; !ok {
			t.Errorf("sgroup lacks %q: %s", k, b)
		}
	}
	ch := j["chains"].([]any)[0].(map[string]any)
	for _, k := range []string{"name", "slo", "nfs", "switch_nfs", "cores", "rate_gbps", "p99_us", "slo_met", "history"} {
		if _, ok := ch[k]; !ok {
			t.Errorf("chain lacks %q", k)
		}
	}
	d := j["decisions"].([]any)[0].(map[string]any)
	if d["kind"] != "attach" || d["reason"] != "cold_start" || d["text"] == "" {
		t.Errorf("decision: %v", d)
	}
	// Empty lists are [], never null, so the page and jq need no special case.
	empty, _ := json.Marshal(Build(Snapshot{Time: t0}, nil, nil))
	if strings.Contains(string(empty), "null") {
		t.Errorf("empty topology has nulls: %s", empty)
	}
}

func Test_History_keeps_the_latest_samples_of_deployed_chains(t *testing.T) {
	h := &History{Keep: 3}
	for i := 0; i < 5; i++ {
		s := rack()
		s.Time = t0.Add(time.Duration(i) * 2 * time.Second)
		h.Add(Build(s, nil, nil))
	}
	all := h.All()
	if len(all["chain3"]) != 3 || !all["chain3"][0].Time.Equal(t0.Add(4*time.Second)) || all["chain3"][2].Cores != 2 {
		t.Errorf("chain3 history: %+v", all["chain3"])
	}
	s := rack()
	s.Functions = s.Functions[:1]
	h.Add(Build(s, nil, nil))
	if _, ok := h.All()["chain2"]; ok {
		t.Error("a removed chain's history is kept")
	}
}

func Test_History_keeps_each_instances_p99_for_its_sparkline(t *testing.T) {
	h := &History{Keep: 2}
	for i := 0; i < 3; i++ {
		s := rack()
		s.Time = t0.Add(time.Duration(i) * 2 * time.Second)
		s.Instances["chain3"][1].P99us = float64(100 + i) // chain3/2
		h.Add(Build(s, nil, h.All()))
	}
	got := Build(rack(), nil, h.All())
	var sg2, sg3 *Sgroup
	for _, w := range got.Workers {
		for _, c := range w.Cores {
			for i := range c.Sgroups {
				if c.Sgroups[i].Instance == "chain3/2" {
					sg2 = &c.Sgroups[i]
				}
			}
		}
		for i := range w.Pool {
			if w.Pool[i].Instance == "chain3/3" {
				sg3 = &w.Pool[i]
			}
		}
	}
	if sg2 == nil || len(sg2.History) != 2 || sg2.History[0].P99us != 101 || sg2.History[1].P99us != 102 ||
		sg2.History[1].Cores != 1 || sg2.History[1].Flows != 1 {
		t.Fatalf("chain3/2's history: %+v", sg2)
	}
	if sg3 == nil || len(sg3.History) != 2 || sg3.History[1].Cores != 0 {
		t.Fatalf("pooled chain3/3's history: %+v", sg3)
	}
	s := rack()
	s.Instances["chain3"] = s.Instances["chain3"][:1]
	h.Add(Build(s, nil, nil))
	if _, ok := h.All()["chain3/2"]; ok {
		t.Error("a removed instance's history is kept")
	}
}

// fakeSource is a store with the rack's records.
type fakeSource struct{ s Snapshot }

func (f fakeSource) Functions(_ context.Context) ([]*chain.Function, error) {
	return f.s.Functions, nil
}
func (f fakeSource) Instances(_ context.Context, c string) ([]*store.Instance, error) {
	return f.s.Instances[c], nil
}
func (f fakeSource) Workers(_ context.Context) (map[string]*store.Worker, error) {
	return f.s.Workers, nil
}
func (f fakeSource) Flows(_ context.Context, _ string) ([]*store.Flow, error) {
	return []*store.Flow{{Key: "6 198.18.0.1:1024 198.18.1.9:80", Chain: "chain1"}}, nil
}

func Test_topology_handler_and_page_are_served(t *testing.T) {
	v := &View{Source: fakeSource{rack()}, Decisions: func() []policy.Decision { return decisions(2) }, History: &History{Keep: 10}}
	rec := httptest.NewRecorder()
	MakeTopologyHandler(v)(rec, httptest.NewRequest(http.MethodGet, "/system/keel/topology", nil))
	var top Topology
	if err := json.Unmarshal(rec.Body.Bytes(), &top); err != nil || rec.Code != 200 {
		t.Fatalf("%d %v: %s", rec.Code, err, rec.Body)
	}
	if len(top.Chains) != 3 || len(top.Decisions) != 2 || rec.Header().Get("Content-Type") != "application/json" ||
		top.Chains[0].Flows != 1 {
		t.Errorf("topology: %+v", top)
	}
	for path, want := range map[string]string{"/ui/": "<title>keel", "/ui/app.js": "/system/keel/topology", "/ui/style.css": ".sgroup"} {
		rec := httptest.NewRecorder()
		StaticHandler("/ui/").ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if rec.Code != 200 || !strings.Contains(rec.Body.String(), want) {
			t.Errorf("%s: %d, want %q in the body", path, rec.Code, want)
		}
	}
}

func Test_Build_shows_each_chains_measured_server_p99_against_its_server_budget(t *testing.T) {
	s := rack()
	s.Instances["chain3"][0].P50us, s.Instances["chain3"][0].P999us, s.Instances["chain3"][0].SojournWindowS = 12, 60, 5
	s.Instances["chain3"][1].P50us, s.Instances["chain3"][1].P999us, s.Instances["chain3"][1].SojournWindowS = 20, 400, 5
	s.ServerBudget = func(slo float64) float64 { return slo - 10 }
	top := Build(s, nil, nil)
	by := map[string]Chain{}
	for _, c := range top.Chains {
		by[c.Name] = c
	}
	c3, c2 := by["chain3"], by["chain2"]
	if c3.P99us != 150 || c3.P50us != 20 || c3.P999us != 400 || c3.WindowS != 5 || c3.BudgetUs != 90 || c3.SLOMet {
		t.Fatalf("chain3: %+v: want the largest of its instances' quantiles, over its 90 µs server budget", c3)
	}
	if c2.P99us != 40 || c2.BudgetUs != 190 || !c2.SLOMet {
		t.Fatalf("chain2: %+v", c2)
	}
	if sg := top.Workers[0].Cores[1].Sgroups[0]; sg.BudgetUs != 90 || sg.P99us != 150 {
		t.Fatalf("sgroup %+v", sg)
	}
	// A pooled instance's old figure is not the chain's.
	s.Instances["chain3"][1].State = store.Pooled
	if c := Build(s, nil, nil).Chains[2]; c.Name != "chain3" || c.P99us != 30 {
		t.Fatalf("chain3 with one attached instance: %+v", c)
	}
}
