// SPDX-License-Identifier: Apache-2.0

package chain

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/keel-nfv/keel/gateway/internal/nfcatalog"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"github.com/openfaas/faas-provider/types"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// fakePlacer records the chains it is sent and answers Place with canned responses: parse is
// how it parses the request's last chain (the one being deployed), place's chain "NEW" is
// where it places it, "OLD0", "OLD1", ... the others.
type fakePlacer struct {
	parse   *pb.ParseResponse
	place   *pb.PlaceResponse
	placeFn func(in *pb.PlaceRequest) *pb.PlaceResponse // when set, answers Place instead of place
	sources [][]*pb.ChainSource                         // the chains of each request
	tenants []string                                    // tenant_nfs_json of each request
	refines []string                                    // refine of each Place request
	called  int
}

func (f *fakePlacer) Parse(context.Context, *pb.ParseRequest, ...grpc.CallOption) (*pb.ParseResponse, error) {
	return nil, errors.New("the gateway deploys with one Place request")
}

func (f *fakePlacer) Place(_ context.Context, in *pb.PlaceRequest, _ ...grpc.CallOption) (*pb.PlaceResponse, error) {
	f.sources = append(f.sources, in.Chains)
	f.tenants = append(f.tenants, in.TenantNfsJson)
	f.refines = append(f.refines, in.Refine)
	f.called++
	if !f.parse.Ok {
		return &pb.PlaceResponse{Errors: f.parse.Errors}, nil
	}
	var graphs []*pb.ChainGraph
	for i, c := range in.Chains {
		g := &pb.ChainGraph{Name: c.Name}
		if i == len(in.Chains)-1 {
			g = proto.Clone(f.parse.Chains[0]).(*pb.ChainGraph)
			g.Name = c.Name
		}
		graphs = append(graphs, g)
	}
	out := f.place
	if f.placeFn != nil {
		out = f.placeFn(in)
	}
	out = proto.Clone(out).(*pb.PlaceResponse)
	if out.Ok {
		out.Graphs = graphs
	}
	for _, c := range out.Chains {
		var i int
		if c.Name == "NEW" {
			c.Name = in.Chains[len(in.Chains)-1].Name
		} else if _, err := fmt.Sscanf(c.Name, "OLD%d", &i); err == nil && i < len(in.Chains)-1 {
			c.Name = in.Chains[i].Name
		}
	}
	return out, nil
}

// library holds the schemas of the library NFs the tests use, as KEEL_NF_ARGS declares them.
var library = func() *nfcatalog.Catalog {
	c, err := nfcatalog.Parse([]byte(`{"version": 1, "nfs": [
 {"name": "tunnel", "args": [{"name": "vlan", "type": "integer", "minimum": 0, "maximum": 4095, "required": true, "doc": "VLAN id"}]},
 {"name": "nat", "args": [{"name": "external_ip", "type": "ipv4", "required": true, "doc": "source address"},
   {"name": "port_range", "type": "array", "required": true, "min_items": 2, "max_items": 2,
    "items": {"type": "integer", "minimum": 1, "maximum": 65535}, "doc": "[lo, hi]"}]},
 {"name": "acl", "args": [{"name": "rules", "type": "array", "required": true, "doc": "rules", "items": {"type": "object",
   "fields": [{"name": "dst_ip", "type": "cidr", "doc": "destination"}, {"name": "drop", "type": "boolean", "doc": "drop"}]}}]}]}`))
	if err != nil {
		panic(err)
	}
	return c
}()

var ttlguard = &nfcatalog.NF{Name: "ttlguard", Help: "drops low TTLs", LoadedFrom: "/usr/lib/keel/nf/libnf.so",
	Args: []nfcatalog.Arg{{Name: "min_ttl", Type: "integer", Minimum: ptr(int64(1)), Maximum: ptr(int64(255)), Doc: "lowest TTL"}}}

func ptr[T any](v T) *T { return &v }

// fakeChecker plays keel-nf --check: it refuses the configurations in refuse.
type fakeChecker struct {
	refuse map[string]*nfcatalog.ArgError
	calls  []string
}

func (f *fakeChecker) Check(_ context.Context, instance, nf, config string) error {
	f.calls = append(f.calls, instance+" "+nf+"="+config)
	if e, ok := f.refuse[config]; ok {
		return &nfcatalog.ArgError{NF: instance, Arg: e.Arg, Problem: e.Problem}
	}
	return nil
}

func validator(fp *fakePlacer) (*Validator, *fakeChecker) {
	fc := &fakeChecker{}
	return &Validator{Placer: fp, Topology: "x", Catalog: library, Check: fc}, fc
}

func deployment(name string, ann map[string]string) *types.FunctionDeployment {
	labels := map[string]string{LabelKind: KindChain}
	return &types.FunctionDeployment{Service: name, Labels: &labels, Annotations: &ann}
}

const goodChain = "ACL(rules=[{'dst_ip':'198.18.3.0/24','drop':False}]) -> NAT(external_ip='198.18.100.1', port_range=[1024, 65535])"

var good = map[string]string{AnnotationChain: goodChain, AnnotationFilter: "dst net 198.18.3.0/24", AnnotationSLO: "p99=100us,t_min=1Gbps"}

// okPlacer answers like the placer for goodChain.
func okPlacer() *fakePlacer {
	return &fakePlacer{
		parse: &pb.ParseResponse{Ok: true, Chains: []*pb.ChainGraph{{Name: "c0", Nodes: []*pb.NfNode{
			{Name: "acl", Nf: "acl", ArgsJson: `{"rules": [{"dst_ip": "198.18.3.0/24", "drop": false}]}`},
			{Name: "nat", Nf: "nat", ArgsJson: `{"external_ip": "198.18.100.1", "port_range": [1024, 65535]}`}}}}},
		place: &pb.PlaceResponse{Ok: true, Feasible: true, Chains: []*pb.PlacedChain{
			{Name: "NEW", RateGbps: 2, Nfs: []*pb.PlacedNf{{Name: "acl", Nf: "acl", Target: "switch", Subgroup: -1}, {Name: "nat", Nf: "nat", Target: "server", Server: "w1"}},
				Subgroups: []*pb.PlacedSubgroup{{Id: 0, Server: "w1", Cores: 1, Nfs: []string{"nat"}}}},
			{Name: "OLD0", RateGbps: 5}}},
	}
}

func Test_Validate_places_the_new_chain_with_the_deployed_ones(t *testing.T) {
	fp := okPlacer()
	v, fc := validator(fp)
	other := &Chain{Name: "older", Spec: "Tunnel", SLOText: "t_min=1Gbps", SLO: SLO{TMinGbps: 1}}
	notStateful := false
	tenants := []TenantNF{{Name: "ttlguard", Image: "keel/nf-ttlguard:latest", NF: ttlguard, Cycles: 300, Stateful: &notStateful}, {Name: "bad-name"}}
	c, placements, err := v.Validate(context.Background(), deployment("nat-chain", good), []*Chain{other}, tenants)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.NFs, ",") != "acl,nat" || c.Placement.Subgroups[0].Server != "w1" || placements["older"].RateGbps != 5 {
		t.Fatalf("got %+v %+v", c, placements)
	}
	if c.Summary() != "acl@switch -> nat@server:w1" {
		t.Fatalf("summary %q", c.Summary())
	}
	// Each chain goes to the placer as its annotations say it, by its own name, in one
	// request: the deployed ones, then the new one.
	place := []*pb.ChainSource{{Name: "older", Expression: "Tunnel", Slo: "t_min=1Gbps"},
		{Name: "nat-chain", Expression: goodChain, Slo: "p99=100us,t_min=1Gbps"}}
	if len(fp.sources) != 1 || fmt.Sprint(fp.sources[0]) != fmt.Sprint(place) {
		t.Errorf("the placer was sent %v, want one request of %v", fp.sources, place)
	}
	wantTenants := `[{"name":"ttlguard","help":"drops low TTLs","args":[{"name":"min_ttl","type":"integer","doc":"lowest TTL","minimum":1,"maximum":255}],"cycles":300,"stateful":false}]`
	if len(fp.tenants) != 1 || fp.tenants[0] != wantTenants {
		t.Errorf("tenant NFs sent to the placer:\n%s\nwant\n%s", fp.tenants, wantTenants)
	}
	// acl runs on the switch; nat, the server NF, is the instance's one member
	wantMembers := []Member{{Name: "nat", NF: "nat", Image: LibraryImage, Config: `{"external_ip":"198.18.100.1","port_range":[1024,65535]}`, Movable: true}}
	if fmt.Sprint(c.Members) != fmt.Sprint(wantMembers) || len(c.NFConfigs) != 2 || c.NFConfigs[0].Config != `{"rules":[{"drop":false,"dst_ip":"198.18.3.0/24"}]}` {
		t.Errorf("members %+v, configs %+v", c.Members, c.NFConfigs)
	}
	if len(fc.calls) != 2 || fc.calls[1] != `nat nat={"external_ip":"198.18.100.1","port_range":[1024,65535]}` {
		t.Errorf("keel-nf --check calls %q", fc.calls)
	}
}

// The placer checks the arguments against the NFs' schemas (placer/tests/test_source.py);
// what only an NF's Init knows, keel-nf --check tells, named by the NF and the argument.
func Test_Validate_refuses_what_keel_nf_check_refuses_naming_the_NF_and_the_argument(t *testing.T) {
	fp := okPlacer()
	v, fc := validator(fp)
	fc.refuse = map[string]*nfcatalog.ArgError{`{"external_ip":"198.18.100.1","port_range":[1024,65535]}`: {Arg: "port_range", Problem: "lo 1024 is too low"}}
	_, _, err := v.Validate(context.Background(), deployment("c", good), nil, nil)
	if err == nil || err.Error() != "annotations.com.keel.chain: NF nat: argument port_range: lo 1024 is too low" {
		t.Fatalf("got %v", err)
	}
}

func Test_Validate_accepts_a_tenant_NF_with_its_arguments(t *testing.T) {
	fp := okPlacer()
	fp.parse.Chains[0].Nodes = append(fp.parse.Chains[0].Nodes, &pb.NfNode{Name: "ttlguard", Nf: "ttlguard", ArgsJson: `{"min_ttl": 10}`})
	fp.place.Chains = fp.place.Chains[:1] // no other chain is deployed
	fp.place.Chains[0].Nfs = append(fp.place.Chains[0].Nfs, &pb.PlacedNf{Name: "ttlguard", Nf: "ttlguard", Target: "server", Server: "w1"})
	v, fc := validator(fp)
	runner := &fakeRunner{}
	v.Runner = runner
	tenants := []TenantNF{{Name: "TTLGuard", Image: "keel/nf-ttlguard:latest", NF: ttlguard}}
	ann := map[string]string{AnnotationChain: goodChain + " -> ttlguard(min_ttl=10)", AnnotationFilter: "ip", AnnotationSLO: "t_min=1Gbps"}
	c, _, err := v.Validate(context.Background(), deployment("guarded", ann), nil, tenants)
	if err != nil {
		t.Fatal(err)
	}
	want := Member{Name: "ttlguard", NF: "ttlguard", Image: "keel/nf-ttlguard:latest", Config: `{"min_ttl":10}`, Movable: true}
	if len(c.Members) != 2 || c.Members[1] != want {
		t.Fatalf("members %+v", c.Members)
	}
	if len(fc.calls) != 2 || len(runner.args) != 1 || strings.Join(runner.args[0], " ") != `keel/nf-ttlguard:latest --check --nf ttlguard={"min_ttl":10}` {
		t.Fatalf("library checks %q, image runs %q", fc.calls, runner.args)
	}
}

// fakeRunner plays a tenant image whose keel-nf --check accepts everything.
type fakeRunner struct{ args [][]string }

func (f *fakeRunner) RunOnce(_ context.Context, image string, args []string) ([]byte, []byte, int, error) {
	f.args = append(f.args, append([]string{image}, args...))
	return nil, nil, 0, nil
}

func Test_SetPlacement_keeps_the_server_NFs_as_members(t *testing.T) {
	c := &Chain{NFConfigs: []Member{{Name: "acl"}, {Name: "nat"}, {Name: "tunnel"}}}
	c.SetPlacement(Placement{NFs: []PlacedNF{{Name: "acl", Target: "server"}, {Name: "nat", Target: "switch"}, {Name: "tunnel", Target: "server"}}})
	if fmt.Sprint(c.Members) != fmt.Sprint([]Member{{Name: "acl"}, {Name: "tunnel"}}) {
		t.Fatalf("members %+v", c.Members)
	}
	if c.SwitchBetweenServers() != "nat" {
		t.Errorf("nat runs on the switch between two server NFs, got %q", c.SwitchBetweenServers())
	}
	// An instance is built around a server NF: the only NF off the switch stays on the server
	// even where the placement puts it on the SmartNIC.
	c.SetPlacement(Placement{NFs: []PlacedNF{{Name: "acl", Target: "switch"}, {Name: "nat", Target: "switch"}, {Name: "tunnel", Target: "smartnic"}}})
	if fmt.Sprint(c.Members) != fmt.Sprint([]Member{{Name: "tunnel"}}) || len(c.NICNFs) != 0 {
		t.Fatalf("members %+v, NIC %+v", c.Members, c.NICNFs)
	}
}

func Test_SetPlacement_runs_the_NIC_NFs_before_and_after_the_server_part(t *testing.T) {
	c := &Chain{NFConfigs: []Member{{Name: "lb", NF: "lb"}, {Name: "mac", NF: "macswap"}, {Name: "nat", NF: "nat"},
		{Name: "cha", NF: "bpf"}, {Name: "acl", NF: "acl"}, {Name: "tun", NF: "tunnel"}}}
	// Lemur puts all on the server; the refinement (UNO) moves lb, mac, cha, acl and tun to the
	// SmartNIC. cha (bpf) has no XDP program, so acl after it cannot run on the NIC in order either.
	p := Placement{NFs: []PlacedNF{{Name: "lb", Target: "server"}, {Name: "mac", Target: "server"}, {Name: "nat", Target: "server"},
		{Name: "cha", Target: "server"}, {Name: "acl", Target: "server"}, {Name: "tun", Target: "server"}},
		Refined: &Refined{NFs: []RefinedNF{{Name: "lb", Target: "smartnic"}, {Name: "mac", Target: "smartnic"},
			{Name: "cha", Target: "smartnic"}, {Name: "acl", Target: "server"}, {Name: "tun", Target: "smartnic"}}}}
	c.SetPlacement(p)
	nic := []NICNF{{Member: Member{Name: "lb", NF: "lb"}}, {Member: Member{Name: "mac", NF: "macswap"}},
		{Member: Member{Name: "tun", NF: "tunnel"}, Egress: true}}
	if fmt.Sprint(c.NICNFs) != fmt.Sprint(nic) {
		t.Errorf("NIC NFs %+v, want %+v", c.NICNFs, nic)
	}
	if fmt.Sprint(c.Members) != fmt.Sprint([]Member{{Name: "nat", NF: "nat"}, {Name: "cha", NF: "bpf"}, {Name: "acl", NF: "acl"}}) {
		t.Errorf("members %+v", c.Members)
	}
}

func Test_SetPlacement_splits_switch_NFs_before_and_after_the_server_part(t *testing.T) {
	c := &Chain{NFConfigs: []Member{{Name: "acl", NF: "acl"}, {Name: "nat", NF: "nat"}, {Name: "tunnel", NF: "tunnel"}}}
	c.SetPlacement(Placement{NFs: []PlacedNF{{Name: "acl", Target: "switch"}, {Name: "nat", Target: "server"}, {Name: "tunnel", Target: "switch"}}})
	want := []SwitchNF{{Member: Member{Name: "acl", NF: "acl"}}, {Member: Member{Name: "tunnel", NF: "tunnel"}, AfterServer: true}}
	if fmt.Sprint(c.SwitchNFs) != fmt.Sprint(want) || c.SwitchBetweenServers() != "" {
		t.Fatalf("switch NFs %+v, between %q", c.SwitchNFs, c.SwitchBetweenServers())
	}
	c.SetPlacement(Placement{NFs: []PlacedNF{{Name: "acl", Target: "switch"}, {Name: "nat", Target: "switch"}, {Name: "tunnel", Target: "switch"}}})
	if len(c.SwitchNFs) != 3 || c.SwitchNFs[2].AfterServer || len(c.Members) != 0 {
		t.Fatalf("a switch-only chain runs every NF on the way in: %+v", c.SwitchNFs)
	}
}

func Test_Validate_rejects_bad_input_before_asking_the_placer(t *testing.T) {
	cases := map[string]struct {
		ann   map[string]string
		field string
	}{
		"missing filter": {map[string]string{AnnotationChain: "ACL", AnnotationSLO: "t_min=1Gbps"}, "annotations.com.keel.filter"},
		"bad filter":     {map[string]string{AnnotationChain: "ACL", AnnotationFilter: "ip and and", AnnotationSLO: "t_min=1Gbps"}, "annotations.com.keel.filter"},
	}
	for name, c := range cases {
		fp := okPlacer()
		v, _ := validator(fp)
		_, _, err := v.Validate(context.Background(), deployment("c", c.ann), nil, nil)
		var inv *InvalidError
		if !errors.As(err, &inv) || inv.Field != c.field || fp.called != 0 {
			t.Errorf("%s: got %v (placer called %d times), want field %s", name, err, fp.called, c.field)
		}
	}
}

func Test_Validate_maps_placer_errors_to_annotations(t *testing.T) {
	// the placer's own account of where the error is in the user's annotation, as it is
	for _, e := range []struct {
		in   *pb.SpecError
		want string
	}{
		{&pb.SpecError{Chain: "c", Field: AnnotationChain, Column: 7, Message: "unknown NF or chain 'Foo'"},
			"annotations.com.keel.chain: column 7: unknown NF or chain 'Foo'"},
		{&pb.SpecError{Chain: "c", Field: AnnotationSLO, Column: 1, Message: "p99 '100': expected a delay like 100us"},
			"annotations.com.keel.slo: column 1: p99 '100': expected a delay like 100us"},
		{&pb.SpecError{Chain: "c", Field: AnnotationSLO, Message: "t_max (1 Gbps) is below t_min (2 Gbps)"},
			"annotations.com.keel.slo: t_max (1 Gbps) is below t_min (2 Gbps)"},
	} {
		fp := okPlacer()
		fp.parse = &pb.ParseResponse{Ok: false, Errors: []*pb.SpecError{e.in}}
		v, _ := validator(fp)
		_, _, err := v.Validate(context.Background(), deployment("c", good), nil, nil)
		if err == nil || err.Error() != e.want {
			t.Errorf("got %v, want %s", err, e.want)
		}
	}
	fp := okPlacer()
	fp.place = &pb.PlaceResponse{Ok: true, Feasible: false, Reason: "not enough cores"}
	v, _ := validator(fp)
	_, _, err := v.Validate(context.Background(), deployment("c", good), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "annotations.com.keel.slo: no placement") || !strings.Contains(err.Error(), "not enough cores") {
		t.Fatalf("got %v", err)
	}
}

func Test_Validate_explains_a_full_rack_in_the_users_chain_names(t *testing.T) {
	older := &Chain{Name: "chain2", Spec: "NAT", SLOText: "t_min=10Mbps", SLO: SLO{TMinGbps: 0.01},
		Placement: Placement{Subgroups: []Subgroup{{ID: 0, Server: "local", Cores: 1}}}}
	other := &Chain{Name: "chain3", Spec: "Dedup", SLOText: "t_min=10Mbps", SLO: SLO{TMinGbps: 0.01},
		Placement: Placement{Subgroups: []Subgroup{{ID: 0, Server: "local", Cores: 1}}}}
	fp := okPlacer()
	fp.parse.Chains[0].TMinGbps = 0.001 // t_min=1Mbps, as the placer reads it
	fp.placeFn = func(in *pb.PlaceRequest) *pb.PlaceResponse {
		if len(in.Chains) > 1 { // with the deployed chains
			return &pb.PlaceResponse{Ok: true, Feasible: false, Reason: "chain chain3: no placement meets every chain's t_min within cores, links and switch"}
		}
		return okPlacer().place // alone it fits, in one subgroup
	}
	v, _ := validator(fp)
	v.Topology = "servers:\n  - {name: local, cores: 2}\n"
	slo := map[string]string{AnnotationChain: goodChain, AnnotationFilter: "dst net 198.18.3.0/24", AnnotationSLO: "t_min=1Mbps"}
	_, _, err := v.Validate(context.Background(), deployment("chain9", slo), []*Chain{older, other}, nil)
	want := "annotations.com.keel.slo: no room for chain9 beside the deployed chains: it needs at least 1 server core(s) at t_min=1Mbps " +
		"(one per server subgroup), and the deployed chains use 2 of the rack's 2 (chain2 1, chain3 1); remove a chain or add a worker " +
		"(placer: chain chain3: no placement meets every chain's t_min within cores, links and switch)"
	if err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
	// Infeasible alone too: the SLO itself is out of this rack's reach.
	fp.placeFn = func(*pb.PlaceRequest) *pb.PlaceResponse {
		return &pb.PlaceResponse{Ok: true, Feasible: false, Reason: "chain chain9: no candidate placement meets its SLO"}
	}
	_, _, err = v.Validate(context.Background(), deployment("chain9", slo), []*Chain{older}, nil)
	want = "annotations.com.keel.slo: no placement of chain9 meets t_min=1Mbps on this rack, even with no other chain deployed: " +
		"chain chain9: no candidate placement meets its SLO"
	if err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
}

func Test_Validate_refuses_a_filter_that_overlaps_a_deployed_chains(t *testing.T) {
	fp := okPlacer()
	v, _ := validator(fp)
	deployed := &Chain{Name: "chain3", Spec: "NAT", Filter: "dst net 198.18.3.0/24"}
	_, _, err := v.Validate(context.Background(), deployment("copy", good), []*Chain{deployed}, nil)
	want := `annotations.com.keel.filter: "dst net 198.18.3.0/24" overlaps the filter of chain chain3 ("dst net 198.18.3.0/24"): both match udp 198.18.0.1:1024 -> 198.18.3.1:1024`
	if err == nil || !strings.HasPrefix(err.Error(), want) || fp.called != 0 {
		t.Fatalf("got %v (placer called %d times)", err, fp.called)
	}
	deployed.Filter = "dst net 198.18.4.0/24"
	if _, _, err := v.Validate(context.Background(), deployment("copy", good), []*Chain{deployed}, nil); err != nil {
		t.Fatalf("disjoint filters: %v", err)
	}
}

func Test_SLO_TMinText(t *testing.T) {
	for in, want := range map[float64]string{0.001: "1Mbps", 0.01: "10Mbps", 1: "1Gbps", 2.5: "2.5Gbps", 0: "0bps", 1e-6: "1kbps"} {
		if got := (SLO{TMinGbps: in}).TMinText(); got != want {
			t.Errorf("%g Gbps: %q, want %q", in, got, want)
		}
	}
}

func Test_Kind_requires_the_label_when_chain_annotations_are_present(t *testing.T) {
	ann := map[string]string{AnnotationChain: "ACL"}
	fd := &types.FunctionDeployment{Service: "x", Annotations: &ann}
	if _, err := Kind(fd); err == nil || !strings.Contains(err.Error(), "labels.com.keel.kind: missing") {
		t.Fatalf("got %v", err)
	}
	labels := map[string]string{LabelKind: "vnf"}
	fd.Labels = &labels
	if _, err := Kind(fd); err == nil || !strings.Contains(err.Error(), `unknown kind "vnf"`) {
		t.Fatalf("got %v", err)
	}
	if k, err := Kind(&types.FunctionDeployment{Service: "web"}); k != "" || err != nil {
		t.Fatalf("normal function: %q %v", k, err)
	}
}

// A chain's flows move between its instances only when every NF an instance runs keeps per-flow
// state; a tenant NF that declares global state (KEEL_NF_STATE) pins them.
func Test_Validate_records_whether_each_NF_s_flows_can_move(t *testing.T) {
	fp := okPlacer()
	fp.parse.Chains[0].Nodes = append(fp.parse.Chains[0].Nodes, &pb.NfNode{Name: "ttlguard", Nf: "ttlguard", ArgsJson: `{"min_ttl": 10}`})
	fp.place.Chains = fp.place.Chains[:1]
	fp.place.Chains[0].Nfs = append(fp.place.Chains[0].Nfs, &pb.PlacedNf{Name: "ttlguard", Nf: "ttlguard", Target: "server", Server: "w1"})
	v, _ := validator(fp)
	global := *ttlguard
	global.State = &nfcatalog.State{Scope: "global", Doc: "counts TTLs over all flows"}
	tenants := []TenantNF{{Name: "TTLGuard", Image: "keel/nf-ttlguard:latest", NF: &global}}
	ann := map[string]string{AnnotationChain: goodChain + " -> ttlguard(min_ttl=10)", AnnotationFilter: "ip", AnnotationSLO: "t_min=1Gbps"}
	c, _, err := v.Validate(context.Background(), deployment("guarded", ann), nil, tenants)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Members) != 2 || !c.Members[0].Movable || c.Members[1].Movable || c.Unmovable() != "ttlguard" {
		t.Fatalf("members %+v, unmovable %q", c.Members, c.Unmovable())
	}
	c.Members = c.Members[:1]
	if c.Unmovable() != "" {
		t.Fatalf("unmovable %q", c.Unmovable())
	}
}
