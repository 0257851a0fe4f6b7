// SPDX-License-Identifier: Apache-2.0

// Package chain turns a chain's OpenFaaS deployment (labels and annotations) into a validated,
// placed chain: the spec through the placer, the filter through libpcap, the SLO syntax.
package chain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/keel-nfv/keel/gateway/internal/nfcatalog"
	"github.com/keel-nfv/keel/gateway/internal/pcapfilter"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"github.com/keel-nfv/keel/xdp"
	"github.com/openfaas/faas-provider/types"
	"gopkg.in/yaml.v3"
)

// Labels and annotations a tenant uses in stack.yml.
const (
	LabelKind        = "com.keel.kind"
	KindNF           = "nf"
	KindChain        = "chain"
	AnnotationChain  = "com.keel.chain"
	AnnotationFilter = "com.keel.filter"
	AnnotationSLO    = "com.keel.slo"
	// LabelCycles is a packet function's server cycles per packet, for the placer.
	LabelCycles = "com.keel.cycles"
	// LabelStateful says whether a packet function keeps per-flow state ("true" or "false");
	// the placer never replicates a stateful NF over cores and takes an NF without it as stateful.
	LabelStateful = "com.keel.stateful"
	// AnnotationNF is a packet function's catalogue entry ({"name": NF, "args": [...]}), read
	// when the gateway has no container engine to ask the image (keel-nf --list --json).
	AnnotationNF = "com.keel.nf"
	// LibraryImage runs the library's NFs.
	LibraryImage = "keel/nf-base:latest"
	// RuntimeImage is what a chain's image field names (stack.yml: image: keel/chain:latest):
	// keel's chain runtime, not an image of its own. Nothing of that name is built or pulled;
	// a chain's NF containers run from LibraryImage and its packet functions' images.
	RuntimeImage = "keel/chain"
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
	// Refined is the placer's refinement on servers with a SmartNIC or several NUMA nodes;
	// nil when the topology has neither (WantsRefine).
	Refined *Refined `json:"refined,omitempty"`
}

// Member is one server-placed NF of a chain and how a worker runs it as a keel-nf process.
type Member struct {
	Name   string `json:"name"`   // the NF's name in the chain
	NF     string `json:"nf"`     // the registered NF name keel-nf runs
	Image  string `json:"image"`  // keel/nf-base for library NFs, the tenant's image for theirs
	Config string `json:"config"` // the keel-nf configuration, JSON
	// Movable: the NF's state is per-flow with this configuration (nfcatalog.NF.Movable), so a
	// flow can move to another instance with it; false for global state (and for chains
	// recorded before issue 37).
	Movable bool `json:"movable,omitempty"`
}

// SwitchNF is one NF of a chain that keel-torctl runs on the ToR as OpenFlow rules, before the
// chain's server NFs or, with AfterServer, on the way back from them.
type SwitchNF struct {
	Member
	AfterServer bool `json:"after_server,omitempty"`
}

// NICNF is one NF of a chain that its instances run in XDP on their VF (the worker's eBPF
// SmartNIC, xdp/), before the server NFs or, with Egress, after them.
type NICNF struct {
	Member
	Egress bool `json:"egress,omitempty"`
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
	// NFConfigs are every NF of the chain in order with its configuration; Members is the
	// subset the placement puts on servers (SetPlacement).
	NFConfigs []Member `json:"nf_configs"`
	// SwitchNFs are the NFs the placement puts on the ToR switch, in order (SetPlacement).
	SwitchNFs []SwitchNF `json:"switch_nfs,omitempty"`
	// NICNFs are the NFs the placement puts on the worker's SmartNIC, in order (SetPlacement).
	NICNFs []NICNF `json:"nic_nfs,omitempty"`
	// Tenant is the function's namespace; it names the NF state in Redis.
	Tenant string `json:"tenant"`
	// Secrets are the faas-cli secrets the chain's NFs may name ({"secret": NAME}), sorted;
	// keel-agent mounts their values read-only into the instance's containers.
	Secrets []string `json:"secrets,omitempty"`
	// MemoryBytes and CPUs limit each NF container (from the function's limits; 0 = none).
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"`
	// ReinjectVLAN is the chain's reinject VLAN (keel.v1.Chain.reinject_vlan): keel-ingress
	// tags a switch-only flow's first packets with it, and keel-torctl's chain reinject rule
	// runs them through the chain's switch NFs. From the instance VLANs' range, for the
	// chain's life (kept by a redeploy, released by faas-cli remove); 0 for a chain stored
	// before there were any.
	ReinjectVLAN uint32 `json:"reinject_vlan,omitempty"`
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

// SetPlacement records the chain's placement: the NFs it puts on servers as Members, on the
// switch as SwitchNFs and on the SmartNIC as NICNFs. An NF goes to the SmartNIC where the
// refinement (SmartChain, UNO) or Lemur puts it there, keel runs it in XDP, and it can run
// there in chain order: in the run of NIC NFs before the instance's first server NF
// (ingress) or after its last (egress). Any other stays on the server, as do NFs keel has no
// XDP program for (the catalogue's EBPF targets follow Lemur's SmartNIC, which runs bpf).
func (c *Chain) SetPlacement(p Placement) {
	c.Placement = p
	target := map[string]string{}
	for _, n := range p.NFs {
		target[n.Name] = n.Target
	}
	if p.Refined != nil {
		for _, rn := range p.Refined.NFs {
			target[rn.Name] = rn.Target
		}
	}
	xdpNFs := map[string]bool{}
	for _, n := range xdp.Names() {
		xdpNFs[n] = true
	}
	var local []Member // the NFs an instance runs on its worker, in order
	c.Members, c.SwitchNFs, c.NICNFs = nil, nil, nil
	for _, m := range c.NFConfigs {
		switch target[m.Name] {
		case "server", "smartnic":
			local = append(local, m)
		case "switch":
			c.SwitchNFs = append(c.SwitchNFs, SwitchNF{Member: m, AfterServer: len(local) > 0})
		}
	}
	onNIC := func(m Member) bool { return target[m.Name] == "smartnic" && xdpNFs[m.NF] }
	head := 0
	for head < len(local) && onNIC(local[head]) {
		head++
	}
	tail := len(local)
	if head == len(local) && head > 0 {
		// An instance is built around its server NFs: a chain the placement puts wholly on
		// the NIC keeps its last NF on the server (a NIC-only instance is not built yet).
		head--
	} else {
		for tail > head && onNIC(local[tail-1]) {
			tail--
		}
	}
	for i, m := range local {
		switch {
		case i < head:
			c.NICNFs = append(c.NICNFs, NICNF{Member: m})
		case i >= tail:
			c.NICNFs = append(c.NICNFs, NICNF{Member: m, Egress: true})
		default:
			c.Members = append(c.Members, m)
		}
	}
}

// SwitchBetweenServers names a switch NF that the placement puts between two server NFs ("" if
// none): the ToR runs a chain's switch NFs before its server NFs or after them, and a packet
// cannot go back to the switch and then to the server again.
func (c *Chain) SwitchBetweenServers() string {
	for _, sw := range c.SwitchNFs {
		if !sw.AfterServer {
			continue
		}
		for _, m := range c.Members {
			if indexOf(c.NFConfigs, m.Name) > indexOf(c.NFConfigs, sw.Name) {
				return sw.Name
			}
		}
	}
	return ""
}

// Unmovable names the first NF an instance runs whose state is not per-flow ("" if none): the
// chain's flows can move between its instances only when every Member's state moves with them.
func (c *Chain) Unmovable() string {
	for _, m := range c.Members {
		if !m.Movable {
			return m.Name
		}
	}
	return ""
}

func indexOf(ms []Member, name string) int {
	for i, m := range ms {
		if m.Name == name {
			return i
		}
	}
	return -1
}

// TenantNF is a deployed packet function that chains may name by its function name.
type TenantNF struct {
	Name   string        // the function's name
	Image  string        // its image (entrypoint: keel-nf --load the tenant's NF)
	NF     *nfcatalog.NF // the NF its image adds to keel-nf; nil: unknown, it takes no arguments
	Cycles float64       // server cycles per packet (label com.keel.cycles); 0: the placer's default
	// Stateful is label com.keel.stateful; nil: not declared, the placer takes it as stateful.
	Stateful *bool
}

// Validator checks chains against the placer and the NF catalogue and places them with the
// chains already deployed.
type Validator struct {
	Placer   pb.PlacerClient
	Topology string // topology YAML for Place
	Algo     string // placement algorithm ("" = the placer's default)
	// Catalog is the library's NF catalogue (keel-nf --list --json).
	Catalog *nfcatalog.Catalog
	// Check runs a library NF's Init on its configuration (keel-nf --check).
	Check nfcatalog.Checker
	// Runner runs a tenant NF's image to check its configuration with the image's own keel-nf;
	// nil: tenant NFs are checked by their schema only.
	Runner nfcatalog.Runner
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

// CheckImage accepts a chain's image field when it is empty or names the chain runtime
// (RuntimeImage, any tag or digest), and refuses anything else: an image there is most likely
// a normal function or packet function labelled as a chain by mistake (issue 18 item 5).
func CheckImage(image string) error {
	repo := image
	if i := strings.IndexByte(repo, '@'); i >= 0 {
		repo = repo[:i]
	}
	if i := strings.LastIndexByte(repo, ':'); i > strings.LastIndexByte(repo, '/') {
		repo = repo[:i]
	}
	if image == "" || repo == RuntimeImage {
		return nil
	}
	return invalid("image", "%q is not keel's chain runtime: a chain (label %s=%s) names image %s:latest, which no build "+
		"makes and nothing pulls (its NFs run from %s and its packet functions' images); to run %s as a normal function "+
		"or a packet function, change the label", image, LabelKind, KindChain, RuntimeImage, LibraryImage, image)
}

var identRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Validate checks a chain deployment and places it together with the deployed chains
// (others, without a chain of the same name). tenantNFs are the deployed packet functions; the
// placer knows them by function name with their arguments. Each NF's arguments become its
// keel-nf configuration, checked by the NF's schema and its Init (keel-nf --check). It returns
// the new chain and the placement of every chain by name; bad input is an *InvalidError.
func (v *Validator) Validate(ctx context.Context, fd *types.FunctionDeployment, others []*Chain, tenantNFs []TenantNF) (*Chain, map[string]Placement, error) {
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
	flt, err := pcapfilter.Compile(c.Filter)
	if err != nil {
		return nil, nil, invalid("annotations."+AnnotationFilter, "%q is not a valid pcap filter: %v", c.Filter, err)
	}
	// A new flow goes to one chain: two chains whose filters match the same flow would leave
	// the choice to the order of names.
	for _, o := range others {
		of, err := pcapfilter.Compile(o.Filter)
		if err != nil {
			continue // refused at its deploy
		}
		if f, ok := pcapfilter.Overlap(flt, of); ok {
			return nil, nil, invalid("annotations."+AnnotationFilter, "%q overlaps the filter of chain %s (%q): both match %v; "+
				"a flow belongs to one chain, so narrow one of them (e.g. add \"and not dst net ...\")", c.Filter, o.Name, o.Filter, f)
		}
	}

	tenants, tenantJSON, err := tenantEntries(tenantNFs)
	if err != nil {
		return nil, nil, err
	}
	// One request: the placer parses the deployed chains and the new one (last: an expression
	// it reads past its end reaches no other's) by their annotations, checks their NFs'
	// arguments against the NF catalogue's schemas, says where in the user's text it is
	// wrong, and places them all.
	var sources []*pb.ChainSource
	known := map[string]bool{}
	for _, o := range append(append([]*Chain(nil), others...), c) {
		sources = append(sources, source(o))
		known[o.Name] = true
	}
	refine := ""
	if WantsRefine(v.Topology) {
		refine = RefineAll
	}
	pl, err := v.Placer.Place(ctx, &pb.PlaceRequest{Chains: sources, TopologyYaml: v.Topology, Algo: v.Algo, TenantNfsJson: tenantJSON, Refine: refine})
	if err != nil {
		return nil, nil, fmt.Errorf("placer Place: %w", err)
	}
	if !pl.Ok {
		if len(pl.Errors) > 0 {
			return nil, nil, placerError(c.Name, pl.Errors)
		}
		return nil, nil, fmt.Errorf("placer rejected the topology: %s", pl.InputError)
	}
	if len(pl.Graphs) != len(sources) || pl.Graphs[len(sources)-1].Name != c.Name {
		return nil, nil, fmt.Errorf("placer Place: %d parsed chains for %d, the last not %s", len(pl.Graphs), len(sources), c.Name)
	}
	g := pl.Graphs[len(sources)-1]
	c.SLO = sloOf(g)
	for _, n := range g.Nodes {
		c.NFs = append(c.NFs, n.Name)
	}
	c.Secrets = append([]string(nil), fd.Secrets...)
	sort.Strings(c.Secrets)
	if c.NFConfigs, err = v.configure(ctx, g.Nodes, tenants, c.Secrets); err != nil {
		return nil, nil, err
	}
	if !pl.Feasible {
		return nil, nil, v.noRoom(ctx, c, others, tenantJSON, pl.Reason)
	}
	report, err := parseRefine(pl.RefineJson)
	if err != nil {
		return nil, nil, err
	}
	placements := map[string]Placement{}
	for _, pc := range pl.Chains {
		if !known[pc.Name] {
			return nil, nil, fmt.Errorf("placer returned unknown chain %q", pc.Name)
		}
		p := fromProto(pc)
		p.Refined = report.refinedFor(pc.Name, p)
		placements[pc.Name] = p
	}
	c.SetPlacement(placements[c.Name])
	if nf := c.SwitchBetweenServers(); nf != "" {
		return nil, nil, invalid("annotations."+AnnotationChain, "the placement puts %s on the switch between NFs that run on a server; "+
			"keel's ToR runs a chain's switch NFs only before or after its server NFs (place %s on the server, e.g. with a tenant NF, or reorder the chain)", nf, nf)
	}
	return c, placements, nil
}

// noRoom explains why no placement exists: the chain's SLO cannot be met on this rack even
// alone, or the deployed chains hold the server cores it needs (each server subgroup takes at
// least one whole core).
func (v *Validator) noRoom(ctx context.Context, c *Chain, others []*Chain, tenantJSON, reason string) error {
	field := "annotations." + AnnotationSLO
	if len(others) == 0 {
		return invalid(field, "no placement of %s meets t_min=%s on this rack: %s", c.Name, c.SLO.TMinText(), reason)
	}
	alone, err := v.Placer.Place(ctx, &pb.PlaceRequest{Chains: []*pb.ChainSource{source(c)}, TopologyYaml: v.Topology, Algo: v.Algo, TenantNfsJson: tenantJSON})
	if err != nil {
		return fmt.Errorf("placer Place: %w", err)
	}
	if !alone.Ok || !alone.Feasible || len(alone.Chains) == 0 {
		return invalid(field, "no placement of %s meets t_min=%s on this rack, even with no other chain deployed: %s",
			c.Name, c.SLO.TMinText(), alone.Reason)
	}
	need := len(alone.Chains[0].Subgroups)
	used, users := 0, []string{}
	for _, o := range others {
		n := 0
		for _, sg := range o.Placement.Subgroups {
			n += sg.Cores
		}
		if n > 0 {
			used += n
			users = append(users, fmt.Sprintf("%s %d", o.Name, n))
		}
	}
	rack := ""
	if total := ServerCores(v.Topology); total > 0 {
		rack = fmt.Sprintf(" of the rack's %d", total)
	}
	return invalid(field, "no room for %s beside the deployed chains: it needs at least %d server core(s) at t_min=%s "+
		"(one per server subgroup), and the deployed chains use %d%s (%s); remove a chain or add a worker (placer: %s)",
		c.Name, need, c.SLO.TMinText(), used, rack, strings.Join(users, ", "), reason)
}

// ServerCores is the number of server cores in a topology YAML; 0 if it does not parse.
func ServerCores(topology string) int {
	var t struct {
		Servers []struct {
			Cores int `yaml:"cores"`
		} `yaml:"servers"`
	}
	if yaml.Unmarshal([]byte(topology), &t) != nil {
		return 0
	}
	n := 0
	for _, s := range t.Servers {
		n += s.Cores
	}
	return n
}

// tenantEntries returns the tenant NFs by lower-case name and their catalogue entries for the
// placer (ParseRequest.tenant_nfs_json); names that are not identifiers cannot be named in a
// chain and are left out.
func tenantEntries(nfs []TenantNF) (map[string]*TenantNF, string, error) {
	type entry struct {
		Name     string          `json:"name"`
		Help     string          `json:"help,omitempty"`
		Args     []nfcatalog.Arg `json:"args"`
		Cycles   float64         `json:"cycles,omitempty"`
		Stateful *bool           `json:"stateful,omitempty"`
	}
	sorted := append([]TenantNF(nil), nfs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	byName := map[string]*TenantNF{}
	entries := []entry{}
	for i := range sorted {
		t := &sorted[i]
		if !identRe.MatchString(t.Name) {
			continue
		}
		e := entry{Name: t.Name, Args: []nfcatalog.Arg{}, Cycles: t.Cycles, Stateful: t.Stateful}
		if t.NF != nil {
			e.Help, e.Args = t.NF.Help, t.NF.Args
		}
		byName[strings.ToLower(t.Name)] = t
		entries = append(entries, e)
	}
	if len(entries) == 0 {
		return byName, "", nil
	}
	out, err := json.Marshal(entries)
	return byName, string(out), err
}

// configure turns each NF's chain-language arguments into its keel-nf configuration, checked
// by the NF's schema and by its Init: library NFs with the local keel-nf, tenant NFs with
// their image's keel-nf (or by the schema alone without a container engine).
// An argument {"secret": NAME} must name one of the chain's secrets (stack.yml's secrets).
func (v *Validator) configure(ctx context.Context, nodes []*pb.NfNode, tenants map[string]*TenantNF, secrets []string) ([]Member, error) {
	out := make([]Member, 0, len(nodes))
	for _, n := range nodes {
		var (
			schema  *nfcatalog.NF
			image   string
			checker nfcatalog.Checker
		)
		if t, ok := tenants[strings.ToLower(n.Nf)]; ok {
			schema, image = t.NF, t.Image
			if schema == nil {
				schema = &nfcatalog.NF{Name: strings.ToLower(t.Name)}
			} else if v.Runner != nil {
				checker = &nfcatalog.Image{Runner: v.Runner, Image: t.Image}
			}
		} else if schema = v.Catalog.Lookup(n.Nf); schema != nil {
			image, checker = LibraryImage, v.Check
		} else {
			return nil, fmt.Errorf("placer returned NF %q, which is neither a library NF nor a deployed packet function", n.Nf)
		}
		config, err := schema.Config(n.Name, n.ArgsJson)
		if err == nil {
			refs, rerr := nfcatalog.SecretRefs(config)
			if rerr != nil {
				return nil, fmt.Errorf("NF %s: %w", n.Name, rerr)
			}
			for _, r := range refs {
				if i := sort.SearchStrings(secrets, r); i == len(secrets) || secrets[i] != r {
					return nil, invalid("annotations."+AnnotationChain, "NF %s: secret %q is not one of the chain's secrets "+
						"(list it in stack.yml: secrets: [%s], after faas-cli secret create %s)", n.Name, r, r, r)
				}
			}
			if _, inImage := checker.(*nfcatalog.Image); inImage && len(refs) > 0 {
				// A secret never goes on a container's command line: a tenant NF's Init sees
				// the value when the NF starts (a refusal then shows in the instance's phase).
				checker = nil
			}
		}
		if err == nil && checker != nil {
			err = checker.Check(ctx, n.Name, schema.Name, config)
		}
		var bad *nfcatalog.ArgError
		if errors.As(err, &bad) {
			return nil, invalid("annotations."+AnnotationChain, "%v", bad)
		}
		if err != nil {
			return nil, fmt.Errorf("check NF %s: %w", n.Name, err)
		}
		movable, err := schema.Movable(config)
		if err != nil {
			return nil, fmt.Errorf("NF %s: %w", n.Name, err)
		}
		out = append(out, Member{Name: n.Name, NF: schema.Name, Image: image, Config: config, Movable: movable})
	}
	return out, nil
}

// source is a chain as the placer takes it: by its name and annotations.
func source(c *Chain) *pb.ChainSource {
	return &pb.ChainSource{Name: c.Name, Expression: c.Spec, Slo: c.SLOText}
}

// placerError is the placer's first error in chain name, named by the annotation it is in and
// its column there (the placer's own account, in the user's text); an error in another
// (deployed) chain is not the user's input.
func placerError(name string, errs []*pb.SpecError) error {
	for _, e := range errs {
		if e.Chain != name {
			continue
		}
		if e.Column > 0 {
			return invalid("annotations."+e.Field, "column %d: %s", e.Column, e.Message)
		}
		return invalid("annotations."+e.Field, "%s", e.Message)
	}
	e := errs[0]
	return fmt.Errorf("placer: deployed chain %s no longer parses (annotation %s, column %d): %s", e.Chain, e.Field, e.Column, e.Message)
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
