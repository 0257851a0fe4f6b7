// SPDX-License-Identifier: Apache-2.0

package chain

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	pb "github.com/keel-nfv/keel/proto/keel/v1"
)

const smartNICRack = `switch: {kind: pisa, stages: 12}
servers:
  - {name: w1, cores: 16, ghz: 2.6, numa_nodes: 2, nics: [{gbps: 40, smartnic: {kind: ebpf, cores: 48, ghz: 0.8}}]}
  - {name: w2, cores: 8, ghz: 2.6, nics: [{gbps: 40, smartnic: {kind: ebpf}}]}
`

// embeddedRack is make up's topology, with its eBPF SmartNIC or, plain, as make up
// SMARTNIC=0 writes it (deploy/local/up.sh --no-smartnic).
func embeddedRack(t *testing.T, plain bool) string {
	t.Helper()
	b, err := os.ReadFile("../../../deploy/local/topology.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if plain {
		return regexp.MustCompile(`smartnic: \{[^}]*\}`).ReplaceAllString(string(b), "smartnic: null")
	}
	return string(b)
}

func Test_WantsRefine_only_for_a_SmartNIC_or_several_NUMA_nodes(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
		want       bool
	}{
		{"the embedded stack's rack (make up)", embeddedRack(t, false), true},
		{"the embedded stack's rack (make up SMARTNIC=0)", embeddedRack(t, true), false},
		{"one NUMA node, no SmartNIC", "servers:\n  - {name: a, numa_nodes: 1, nics: [{gbps: 10, smartnic: null}]}\n", false},
		{"numa_nodes left out", "servers:\n  - {name: a, nics: [{gbps: 10}]}\n", false},
		{"two NUMA nodes", "servers:\n  - {name: a, numa_nodes: 2, nics: [{gbps: 10}]}\n", true},
		{"a SmartNIC on the second server", "servers:\n  - {name: a, nics: [{gbps: 10}]}\n  - {name: b, nics: [{gbps: 10}, {gbps: 10, smartnic: {kind: ebpf}}]}\n", true},
		{"not YAML", "servers: [", false},
	} {
		if got := WantsRefine(c.yaml); got != c.want {
			t.Errorf("%s: WantsRefine = %v, want %v", c.name, got, c.want)
		}
	}
}

// refineReport is what keel-place place --refine all reports for the rack smartNICRack with
// goodChain (nat-chain: acl, nat on w1) and a deployed chain (older: tunnel on w2).
const refineJSON = `{"steps": ["smartchain", "uno", "octans"], "servers": [
 {"server": "w1", "nic": [{"algo": "smartchain", "measure": "latency benefit over all-CPU, us", "before": 0, "after": 14.5, "round_trips": 1,
   "nfs": [{"name": "nat-chain.acl", "chain": "nat-chain", "nf": "acl", "target": "smartnic", "position": "nic-ingress"},
           {"name": "nat-chain.nat", "chain": "nat-chain", "nf": "nat", "target": "server", "position": "cpu"}]}],
  "numa": {"algo": "octans", "measure": "aggregate Mpps (model)", "baseline": "locality-first", "before": 3.2, "after": 3.5,
   "subgroups": [{"chain": "nat-chain", "name": "subgroup 0: nat (part 1)", "subgroup": 0, "nfs": ["nat"], "node": 1, "cores": [8, 9]},
                 {"chain": "nat-chain", "name": "subgroup 0: nat (part 2)", "subgroup": 0, "nfs": ["nat"], "node": 1, "cores": [10]}]}},
 {"server": "w2", "nic": [{"algo": "uno", "measure": "host cores", "before": 1, "before_fits": true, "after": null,
   "reason": "no placement within PCIe and SmartNIC limits (Infeasible)"}], "numa": null}]}`

func refinePlacer(report string) *fakePlacer {
	fp := okPlacer()
	fp.place = &pb.PlaceResponse{Ok: true, Feasible: true, RefineJson: report, Chains: []*pb.PlacedChain{
		{Name: "NEW", RateGbps: 2, Nfs: []*pb.PlacedNf{{Name: "acl", Nf: "acl", Target: "server", Server: "w1"}, {Name: "nat", Nf: "nat", Target: "server", Server: "w1"}},
			Subgroups: []*pb.PlacedSubgroup{{Id: 0, Server: "w1", Cores: 3, Nfs: []string{"acl", "nat"}}}},
		{Name: "OLD0", RateGbps: 5, Nfs: []*pb.PlacedNf{{Name: "tunnel", Nf: "tunnel", Target: "server", Server: "w2"}},
			Subgroups: []*pb.PlacedSubgroup{{Id: 0, Server: "w2", Cores: 1, Nfs: []string{"tunnel"}}}}}}
	return fp
}

func Test_Validate_asks_for_refine_on_a_SmartNIC_rack_and_keeps_each_chains_part(t *testing.T) {
	fp := refinePlacer(refineJSON)
	v, _ := validator(fp)
	v.Topology = smartNICRack
	older := &Chain{Name: "older", Spec: "Tunnel(vlan=7)", SLOText: "t_min=1Gbps", SLO: SLO{TMinGbps: 1}}
	c, placements, err := v.Validate(context.Background(), deployment("nat-chain", good), []*Chain{older}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(fp.refines) != 1 || fp.refines[0] != RefineAll {
		t.Fatalf("Place requests' refine %q, want one %q", fp.refines, RefineAll)
	}
	if got, want := c.RefinedSummary(), "acl@smartnic-ingress:w1 -> nat@server:w1 node=1 cores=8-10"; got != want {
		t.Errorf("refined summary %q, want %q", got, want)
	}
	if got, want := c.RefineGains(), "smartchain on w1: latency benefit over all-CPU, us 0 -> 14.5; octans on w1: aggregate Mpps (model) 3.2 -> 3.5"; got != want {
		t.Errorf("gains %q, want %q", got, want)
	}
	// Lemur's placement is what it was; the agents run acl in XDP on the SmartNIC, nat on the server
	if c.Summary() != "acl@server:w1 -> nat@server:w1" || len(c.Members) != 1 || c.Members[0].Name != "nat" {
		t.Errorf("placement changed: %q, members %v", c.Summary(), c.Members)
	}
	if len(c.NICNFs) != 1 || c.NICNFs[0].Name != "acl" || c.NICNFs[0].Egress {
		t.Errorf("NIC NFs %+v, want acl at the NIC's ingress", c.NICNFs)
	}
	o := &Chain{Placement: placements["older"]}
	if got, want := o.RefinedSummary(), "tunnel@server:w2"; got != want {
		t.Errorf("deployed chain's refined summary %q, want %q", got, want)
	}
	if got, want := o.RefineGains(), "uno on w2: host cores 1 -> no solution (no placement within PCIe and SmartNIC limits (Infeasible))"; got != want {
		t.Errorf("deployed chain's gains %q, want %q", got, want)
	}
	// the refinement is stored with the chain's record (the store keeps Chain as JSON)
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	var back Chain
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.RefinedSummary() != c.RefinedSummary() || back.RefineGains() != c.RefineGains() {
		t.Errorf("refinement lost in the record: %s", b)
	}
}

func Test_Validate_on_a_rack_without_SmartNIC_or_NUMA_asks_no_refine_and_records_as_before(t *testing.T) {
	fp := okPlacer()
	v, _ := validator(fp)
	v.Topology = embeddedRack(t, true)
	older := &Chain{Name: "older", Spec: "Tunnel(vlan=7)", SLOText: "t_min=1Gbps", SLO: SLO{TMinGbps: 1}}
	c, _, err := v.Validate(context.Background(), deployment("nat-chain", good), []*Chain{older}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(fp.refines) != 1 || fp.refines[0] != "" {
		t.Fatalf("Place requests' refine %q, want one empty", fp.refines)
	}
	b, _ := json.Marshal(c)
	if strings.Contains(string(b), "refined") || c.RefinedSummary() != "" || c.RefineGains() != "" {
		t.Errorf("a chain placed without refinement records one: %s", b)
	}
}

func Test_Validate_refuses_a_refine_report_it_cannot_read(t *testing.T) {
	v, _ := validator(refinePlacer(`{"servers": {}}`))
	v.Topology = smartNICRack
	_, _, err := v.Validate(context.Background(), deployment("nat-chain", good), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "placer returned a bad refine report") {
		t.Fatalf("got %v, want a bad refine report error", err)
	}
}

func Test_intList_collapses_runs(t *testing.T) {
	if got := intList([]int{11, 0, 1, 2, 3, 8, 10, 3}); got != "0-3,8,10-11" {
		t.Fatalf("got %q", got)
	}
}
