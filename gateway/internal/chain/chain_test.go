// SPDX-License-Identifier: Apache-2.0

package chain

import (
	"context"
	"errors"
	"strings"
	"testing"

	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"github.com/openfaas/faas-provider/types"
	"google.golang.org/grpc"
)

// fakePlacer records the specs it sees and answers with canned responses.
type fakePlacer struct {
	parse  *pb.ParseResponse
	place  *pb.PlaceResponse
	specs  []string
	called int
}

func (f *fakePlacer) Parse(_ context.Context, in *pb.ParseRequest, _ ...grpc.CallOption) (*pb.ParseResponse, error) {
	f.specs = append(f.specs, in.Spec)
	f.called++
	return f.parse, nil
}

func (f *fakePlacer) Place(_ context.Context, in *pb.PlaceRequest, _ ...grpc.CallOption) (*pb.PlaceResponse, error) {
	f.specs = append(f.specs, in.Spec)
	f.called++
	return f.place, nil
}

func deployment(name string, ann map[string]string) *types.FunctionDeployment {
	labels := map[string]string{LabelKind: KindChain}
	return &types.FunctionDeployment{Service: name, Labels: &labels, Annotations: &ann}
}

var good = map[string]string{AnnotationChain: "ACL -> NAT", AnnotationFilter: "dst net 198.18.3.0/24", AnnotationSLO: "p99=100us,t_min=1Gbps"}

func okPlacer() *fakePlacer {
	return &fakePlacer{
		parse: &pb.ParseResponse{Ok: true, Chains: []*pb.ChainGraph{{Name: "c0", Nodes: []*pb.NfNode{{Name: "acl"}, {Name: "nat"}}}}},
		place: &pb.PlaceResponse{Ok: true, Feasible: true, Chains: []*pb.PlacedChain{
			{Name: "c0", RateGbps: 2, Nfs: []*pb.PlacedNf{{Name: "acl", Nf: "acl", Target: "switch", Subgroup: -1}, {Name: "nat", Nf: "nat", Target: "server", Server: "w1"}},
				Subgroups: []*pb.PlacedSubgroup{{Id: 0, Server: "w1", Cores: 1, Nfs: []string{"nat"}}}},
			{Name: "c1", RateGbps: 5}}},
	}
}

func Test_Validate_places_the_new_chain_with_the_deployed_ones(t *testing.T) {
	fp := okPlacer()
	v := &Validator{Placer: fp, Topology: "x"}
	other := &Chain{Name: "older", Spec: "Tunnel", SLO: SLO{TMinGbps: 1}}
	c, placements, err := v.Validate(context.Background(), deployment("nat-chain", good), []*Chain{other}, []string{"ttlguard", "bad-name"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.NFs, ",") != "acl,nat" || c.Placement.Subgroups[0].Server != "w1" || placements["older"].RateGbps != 5 {
		t.Fatalf("got %+v %+v", c, placements)
	}
	if c.Summary() != "acl@switch -> nat@server:w1" {
		t.Fatalf("summary %q", c.Summary())
	}
	place := fp.specs[1]
	for _, want := range []string{"chain c0 = ACL -> NAT\n", "f0 : c0 @ {'t_min': '1Gbps', 'd_max': '100us'}", "chain c1 = Tunnel\n", "func ttlguard = UrlFilter()\n"} {
		if !strings.Contains(place, want) {
			t.Errorf("Place spec lacks %q:\n%s", want, place)
		}
	}
	if strings.Contains(place, "bad-name") {
		t.Errorf("a name that is not an identifier reached the placer:\n%s", place)
	}
}

func Test_Validate_rejects_bad_input_before_asking_the_placer(t *testing.T) {
	cases := map[string]struct {
		ann   map[string]string
		field string
	}{
		"missing filter": {map[string]string{AnnotationChain: "ACL", AnnotationSLO: "t_min=1Gbps"}, "annotations.com.keel.filter"},
		"bad SLO":        {map[string]string{AnnotationChain: "ACL", AnnotationFilter: "ip", AnnotationSLO: "t_min=fast"}, "annotations.com.keel.slo"},
		"bad filter":     {map[string]string{AnnotationChain: "ACL", AnnotationFilter: "ip and and", AnnotationSLO: "t_min=1Gbps"}, "annotations.com.keel.filter"},
		"two lines":      {map[string]string{AnnotationChain: "ACL\n-> NAT", AnnotationFilter: "ip", AnnotationSLO: "t_min=1Gbps"}, "annotations.com.keel.chain"},
	}
	for name, c := range cases {
		fp := okPlacer()
		_, _, err := (&Validator{Placer: fp}).Validate(context.Background(), deployment("c", c.ann), nil, nil)
		var inv *InvalidError
		if !errors.As(err, &inv) || inv.Field != c.field || fp.called != 0 {
			t.Errorf("%s: got %v (placer called %d times), want field %s", name, err, fp.called, c.field)
		}
	}
}

func Test_Validate_maps_placer_errors_to_annotations(t *testing.T) {
	fp := okPlacer()
	fp.parse = &pb.ParseResponse{Ok: false, Errors: []*pb.SpecError{{Line: 2, Column: 18, Message: "unknown NF or chain 'Foo'"}}}
	_, _, err := (&Validator{Placer: fp}).Validate(context.Background(), deployment("c", good), nil, nil)
	if err == nil || err.Error() != "annotations.com.keel.chain: column 7: unknown NF or chain 'Foo'" {
		t.Fatalf("got %v", err)
	}
	fp = okPlacer()
	fp.place = &pb.PlaceResponse{Ok: true, Feasible: false, Reason: "not enough cores"}
	_, _, err = (&Validator{Placer: fp}).Validate(context.Background(), deployment("c", good), nil, nil)
	if err == nil || !strings.Contains(err.Error(), "annotations.com.keel.slo: no placement") || !strings.Contains(err.Error(), "not enough cores") {
		t.Fatalf("got %v", err)
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
