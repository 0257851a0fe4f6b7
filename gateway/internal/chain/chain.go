// SPDX-License-Identifier: Apache-2.0

// Package chain turns a chain's OpenFaaS deployment (labels and annotations) into a validated,
// placed chain: the spec through the placer, the filter through libpcap, the SLO syntax.
package chain

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/keel-nfv/keel/gateway/internal/pcapfilter"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"github.com/openfaas/faas-provider/types"
)

// Labels and annotations a tenant uses in stack.yml.
const (
	LabelKind        = "com.keel.kind"
	KindNF           = "nf"
	KindChain        = "chain"
	AnnotationChain  = "com.keel.chain"
	AnnotationFilter = "com.keel.filter"
	AnnotationSLO    = "com.keel.slo"
)

// InvalidError is a deployment that cannot be accepted; Field names the label or annotation.
type InvalidError struct {
	Field   string
	Problem string
}

func (e *InvalidError) Error() string { return e.Field + ": " + e.Problem }

func invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// PlacedNF is where one NF of a chain runs.
type PlacedNF struct {
	Name     string `json:"name"`
	NF       string `json:"nf"`
	Target   string `json:"target"` // switch | smartnic | server
	Server   string `json:"server,omitempty"`
	Subgroup int    `json:"subgroup"` // -1 when not on a server
}

// Subgroup is a run-to-completion group of NFs on one server's cores.
type Subgroup struct {
	ID     int      `json:"id"`
	Server string   `json:"server"`
	Cores  int      `json:"cores"`
	NFs    []string `json:"nfs"`
}

// Placement is the placer's answer for one chain.
type Placement struct {
	RateGbps  float64    `json:"rate_gbps"`
	LatencyUs float64    `json:"latency_us"`
	NFs       []PlacedNF `json:"nfs"`
	Subgroups []Subgroup `json:"subgroups"`
}

// Member is one server-placed NF of a chain and how a worker runs it as a keel-nf process.
type Member struct {
	Name   string `json:"name"`   // the NF's name in the chain
	NF     string `json:"nf"`     // the registered NF name keel-nf runs
	Image  string `json:"image"`  // keel/nf-base for library NFs, the tenant's image for theirs
	Config string `json:"config"` // the keel-nf configuration, JSON
}

// Chain is a validated chain as the gateway stores it.
type Chain struct {
	Name      string    `json:"name"`
	Spec      string    `json:"spec"` // the com.keel.chain expression
	Filter    string    `json:"filter"`
	SLOText   string    `json:"slo_text"`
	SLO       SLO       `json:"slo"`
	NFs       []string  `json:"nfs"` // NF instance names in chain order (tenant NFs by function name)
	Placement Placement `json:"placement"`
	// Members are the NFs an instance runs on its worker (the server-placed ones), in order.
	Members []Member `json:"members"`
	// Tenant is the function's namespace; it names the NF state in Redis.
	Tenant string `json:"tenant"`
	// MemoryBytes and CPUs limit each NF container (from the function's limits; 0 = none).
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"`
}

// Summary is a one-line description: NFs with their targets.
func (c *Chain) Summary() string {
	parts := make([]string, 0, len(c.Placement.NFs))
	for _, n := range c.Placement.NFs {
		where := n.Target
		if n.Server != "" {
			where += ":" + n.Server
		}
		parts = append(parts, n.Name+"@"+where)
	}
	if len(parts) == 0 {
		return strings.Join(c.NFs, " -> ")
	}
	return strings.Join(parts, " -> ")
}

// Validator checks chains against the placer and places them with the chains already deployed.
type Validator struct {
	Placer   pb.PlacerClient
	Topology string // topology YAML for Place
	Algo     string // placement algorithm ("" = the placer's default)
}

// Kind returns the keel kind of a deployment ("" for a normal function) or an InvalidError.
func Kind(fd *types.FunctionDeployment) (string, error) {
	var labels, ann map[string]string
	if fd.Labels != nil {
		labels = *fd.Labels
	}
	if fd.Annotations != nil {
		ann = *fd.Annotations
	}
	kind, has := labels[LabelKind]
	switch {
	case !has:
		for _, a := range []string{AnnotationChain, AnnotationFilter, AnnotationSLO} {
			if _, ok := ann[a]; ok {
				return "", invalid("labels."+LabelKind, "missing: a function with annotation %s must have label %s=chain", a, LabelKind)
			}
		}
		return "", nil
	case kind == KindNF || kind == KindChain:
		return kind, nil
	default:
		return "", invalid("labels."+LabelKind, "unknown kind %q (expected nf or chain)", kind)
	}
}

var identRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate checks a chain deployment and places it together with the deployed chains
// (others, without a chain of the same name). tenantNFs are the deployed packet functions by
// name; the placer sees each as a server-only stand-in NF. It returns the new chain and the
// placement of every chain by name; bad input is an *InvalidError.
func (v *Validator) Validate(ctx context.Context, fd *types.FunctionDeployment, others []*Chain, tenantNFs []string) (*Chain, map[string]Placement, error) {
	ann := map[string]string{}
	if fd.Annotations != nil {
		ann = *fd.Annotations
	}
	c := &Chain{Name: fd.Service}
	for _, a := range []string{AnnotationChain, AnnotationFilter, AnnotationSLO} {
		if strings.TrimSpace(ann[a]) == "" {
			return nil, nil, invalid("annotations."+a, "missing (a chain needs %s, %s and %s)", AnnotationChain, AnnotationFilter, AnnotationSLO)
		}
	}
	c.Spec = strings.TrimSpace(ann[AnnotationChain])
	c.Filter = strings.TrimSpace(ann[AnnotationFilter])
	c.SLOText = strings.TrimSpace(ann[AnnotationSLO])
	if strings.Contains(c.Spec, "\n") {
		return nil, nil, invalid("annotations."+AnnotationChain, "must be one line")
	}
	slo, err := ParseSLO(c.SLOText)
	if err != nil {
		return nil, nil, invalid("annotations."+AnnotationSLO, "%v", err)
	}
	c.SLO = slo
	if _, err := pcapfilter.Compile(c.Filter); err != nil {
		return nil, nil, invalid("annotations."+AnnotationFilter, "%q is not a valid pcap filter: %v", c.Filter, err)
	}

	funcs := standIns(tenantNFs)
	spec := chainSpec(0, c) + funcs
	pr, err := v.Placer.Parse(ctx, &pb.ParseRequest{Spec: spec})
	if err != nil {
		return nil, nil, fmt.Errorf("placer Parse: %w", err)
	}
	if !pr.Ok {
		return nil, nil, specError(pr.Errors)
	}
	for _, n := range pr.Chains[0].Nodes {
		c.NFs = append(c.NFs, n.Name)
	}

	all := append([]*Chain{c}, others...)
	var b strings.Builder
	for i, o := range all {
		b.WriteString(chainSpec(i, o))
	}
	b.WriteString(funcs)
	pl, err := v.Placer.Place(ctx, &pb.PlaceRequest{Spec: b.String(), TopologyYaml: v.Topology, Algo: v.Algo})
	if err != nil {
		return nil, nil, fmt.Errorf("placer Place: %w", err)
	}
	if !pl.Ok {
		if len(pl.Errors) > 0 {
			return nil, nil, specError(pl.Errors)
		}
		return nil, nil, fmt.Errorf("placer rejected the topology: %s", pl.InputError)
	}
	if !pl.Feasible {
		return nil, nil, invalid("annotations."+AnnotationSLO, "no placement meets every chain's t_min on this rack: %s", pl.Reason)
	}
	placements := map[string]Placement{}
	for _, pc := range pl.Chains {
		var idx int
		if _, err := fmt.Sscanf(pc.Name, "c%d", &idx); err != nil || idx >= len(all) {
			return nil, nil, fmt.Errorf("placer returned unknown chain %q", pc.Name)
		}
		placements[all[idx].Name] = fromProto(pc)
	}
	c.Placement = placements[c.Name]
	return c, placements, nil
}

// chainSpec renders chain number i as three lines of the chain language: flow, chain, binding.
func chainSpec(i int, c *Chain) string {
	return fmt.Sprintf("flow f%d = [{}]\nchain c%d = %s\nf%d : c%d @ %s\n", i, i, c.Spec, i, i, c.SLO.binding())
}

// standIns declares each tenant NF as a func the placer knows: a server-only library NF.
func standIns(names []string) string {
	sorted := append([]string(nil), names...)
	sort.Strings(sorted)
	var b strings.Builder
	for _, n := range sorted {
		if identRe.MatchString(n) {
			fmt.Fprintf(&b, "func %s = UrlFilter()\n", n)
		}
	}
	return b.String()
}

// specError maps placer diagnostics of the first chain's lines to the annotation they came from.
func specError(errs []*pb.SpecError) error {
	e := errs[0]
	prefix := len("chain c0 = ")
	switch e.Line {
	case 2:
		col := int(e.Column) - prefix
		if col < 1 {
			col = 1
		}
		return invalid("annotations."+AnnotationChain, "column %d: %s", col, e.Message)
	case 3:
		return invalid("annotations."+AnnotationSLO, "%s", e.Message)
	default:
		return invalid("annotations."+AnnotationChain, "%s", e.Message)
	}
}

func fromProto(pc *pb.PlacedChain) Placement {
	p := Placement{RateGbps: pc.RateGbps, LatencyUs: pc.LatencyUs}
	for _, n := range pc.Nfs {
		p.NFs = append(p.NFs, PlacedNF{Name: n.Name, NF: n.Nf, Target: n.Target, Server: n.Server, Subgroup: int(n.Subgroup)})
	}
	for _, s := range pc.Subgroups {
		p.Subgroups = append(p.Subgroups, Subgroup{ID: int(s.Id), Server: s.Server, Cores: int(s.Cores), NFs: s.Nfs})
	}
	return p
}
