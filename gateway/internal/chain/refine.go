// SPDX-License-Identifier: Apache-2.0

package chain

// The placer's refinement of a placement (keel-place place --refine all, issue 17): after
// Lemur's rack placement, SmartChain or UNO split each server's NFs between its SmartNIC and
// its CPU, and Octans maps the CPU's subgroups onto NUMA nodes and cores.

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// RefineAll is the PlaceRequest.refine value that runs every refinement step.
const RefineAll = "all"

// Refined is where the placer's refinement puts a chain's NFs on the servers Lemur chose.
// Agents act on its SmartNIC part (Chain.NICNFs run in XDP, SetPlacement); Octans' cores are
// not applied yet: agents run the server NFs on the cores coopsched gives them.
type Refined struct {
	// NFs are the chain's NFs that a SmartNIC step (SmartChain or UNO) placed.
	NFs []RefinedNF `json:"nfs,omitempty"`
	// Subgroups are the chain's server subgroups (or pieces of one, when it has more cores
	// than a NUMA node) that Octans mapped onto a node and cores.
	Subgroups []RefinedSubgroup `json:"subgroups,omitempty"`
	// Steps are the refinement steps run on the servers the chain uses, with their gains.
	Steps []RefineStep `json:"steps,omitempty"`
}

// RefinedNF is one NF on a server with a SmartNIC after SmartChain or UNO.
type RefinedNF struct {
	Name   string `json:"name"`
	Server string `json:"server"`
	Target string `json:"target"` // smartnic | server
	// Position is SmartChain's: nic-ingress (before the CPU), cpu or nic-egress (after it);
	// empty for UNO, which does not order NFs.
	Position string `json:"position,omitempty"`
	Algo     string `json:"algo"` // smartchain | uno
}

// RefinedSubgroup is one server subgroup of the chain (Subgroup is its Lemur id) on a NUMA
// node and cores after Octans.
type RefinedSubgroup struct {
	Subgroup int      `json:"subgroup"`
	Server   string   `json:"server"`
	NFs      []string `json:"nfs"`
	Node     int      `json:"node"`
	Cores    []int    `json:"cores"`
}

// RefineStep is one step on one server and its measure before (Lemur's choice, or Octans'
// locality-first baseline) and after; After is nil when the step found no solution (Reason).
type RefineStep struct {
	Server  string   `json:"server"`
	Algo    string   `json:"algo"`
	Measure string   `json:"measure"`
	Before  *float64 `json:"before"`
	After   *float64 `json:"after"`
	Reason  string   `json:"reason,omitempty"`
}

// WantsRefine tells whether a topology YAML declares a SmartNIC or a server with more than
// one NUMA node, the servers the placer's refinement changes something on; false if the YAML
// does not parse (the placer reports that).
func WantsRefine(topology string) bool {
	var t struct {
		Servers []struct {
			NUMANodes int `yaml:"numa_nodes"`
			NICs      []struct {
				SmartNIC any `yaml:"smartnic"`
			} `yaml:"nics"`
		} `yaml:"servers"`
	}
	if yaml.Unmarshal([]byte(topology), &t) != nil {
		return false
	}
	for _, s := range t.Servers {
		if s.NUMANodes > 1 {
			return true
		}
		for _, n := range s.NICs {
			if n.SmartNIC != nil {
				return true
			}
		}
	}
	return false
}

// refineReport is PlaceResponse.refine_json (keel-place place --refine --json's "refine").
type refineReport struct {
	Servers []struct {
		Server string       `json:"server"`
		NIC    []reportStep `json:"nic"`
		NUMA   *reportStep  `json:"numa"`
	} `json:"servers"`
}

type reportStep struct {
	Algo    string   `json:"algo"`
	Measure string   `json:"measure"`
	Before  *float64 `json:"before"`
	After   *float64 `json:"after"`
	Reason  string   `json:"reason"`
	NFs     []struct {
		Chain    string `json:"chain"`
		NF       string `json:"nf"`
		Target   string `json:"target"`
		Position string `json:"position"`
	} `json:"nfs"`
	Subgroups []struct {
		Chain    string   `json:"chain"`
		Subgroup int      `json:"subgroup"`
		NFs      []string `json:"nfs"`
		Node     int      `json:"node"`
		Cores    []int    `json:"cores"`
	} `json:"subgroups"`
}

func parseRefine(text string) (*refineReport, error) {
	if text == "" {
		return nil, nil
	}
	var r refineReport
	if err := json.Unmarshal([]byte(text), &r); err != nil {
		return nil, fmt.Errorf("placer returned a bad refine report: %w", err)
	}
	return &r, nil
}

// refinedFor picks chain name's part of the report (by the chain's name, as the placer reports it);
// p is its placement, which says the servers it uses. Nil when nothing concerns the chain.
func (r *refineReport) refinedFor(name string, p Placement) *Refined {
	if r == nil {
		return nil
	}
	uses := map[string]bool{}
	for _, n := range p.NFs {
		if n.Server != "" {
			uses[n.Server] = true
		}
	}
	out := &Refined{}
	for _, s := range r.Servers {
		if !uses[s.Server] {
			continue
		}
		steps := s.NIC
		if s.NUMA != nil {
			steps = append(append([]reportStep(nil), steps...), *s.NUMA)
		}
		for _, st := range steps {
			out.Steps = append(out.Steps, RefineStep{Server: s.Server, Algo: st.Algo, Measure: st.Measure,
				Before: st.Before, After: st.After, Reason: st.Reason})
			for _, n := range st.NFs {
				if n.Chain == name {
					out.NFs = append(out.NFs, RefinedNF{Name: n.NF, Server: s.Server, Target: n.Target, Position: n.Position, Algo: st.Algo})
				}
			}
			for _, g := range st.Subgroups {
				if g.Chain == name {
					out.Subgroups = append(out.Subgroups, RefinedSubgroup{Subgroup: g.Subgroup, Server: s.Server, NFs: g.NFs, Node: g.Node, Cores: g.Cores})
				}
			}
		}
	}
	if len(out.Steps) == 0 {
		return nil
	}
	return out
}

// RefinedSummary is the chain's NFs in order with where the refinement puts them, in the
// style of Summary: nat@server:w1 node=1 cores=8-11 for a server NF that Octans mapped,
// acl@smartnic-ingress:w1 for an NF SmartChain runs on the SmartNIC before the CPU; NFs no
// step moved keep Lemur's target. Empty without a refinement.
func (c *Chain) RefinedSummary() string {
	r := c.Placement.Refined
	if r == nil {
		return ""
	}
	parts := make([]string, 0, len(c.Placement.NFs))
	for _, n := range c.Placement.NFs {
		target, server := n.Target, n.Server
		for _, rn := range r.NFs {
			if rn.Name != n.Name || rn.Server != n.Server {
				continue
			}
			target = rn.Target
			if rn.Target == "smartnic" && rn.Position != "" {
				target = "smartnic-" + strings.TrimPrefix(rn.Position, "nic-")
			}
		}
		where := target
		if server != "" {
			where += ":" + server
		}
		if target == "server" {
			nodes, cores := map[int]bool{}, []int{}
			for _, g := range r.Subgroups {
				if g.Server == server && contains(g.NFs, n.Name) {
					nodes[g.Node] = true
					cores = append(cores, g.Cores...)
				}
			}
			if len(nodes) > 0 {
				where += " node=" + intList(keys(nodes)) + " cores=" + intList(cores)
			}
		}
		parts = append(parts, n.Name+"@"+where)
	}
	return strings.Join(parts, " -> ")
}

// RefineGains says what each refinement step on the chain's servers gained, e.g.
// "smartchain on w1: latency benefit over all-CPU, us 40 -> 66". Empty without a refinement.
func (c *Chain) RefineGains() string {
	r := c.Placement.Refined
	if r == nil {
		return ""
	}
	parts := make([]string, 0, len(r.Steps))
	for _, s := range r.Steps {
		after := "no solution"
		if s.After != nil {
			after = num(*s.After)
		}
		line := fmt.Sprintf("%s on %s: %s %s -> %s", s.Algo, s.Server, s.Measure, numOr(s.Before), after)
		if s.Reason != "" {
			line += " (" + s.Reason + ")"
		}
		parts = append(parts, line)
	}
	return strings.Join(parts, "; ")
}

func contains(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}

func keys(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// intList writes sorted integers with runs collapsed: 0-3,8,10-11.
func intList(xs []int) string {
	s := append([]int(nil), xs...)
	sort.Ints(s)
	var parts []string
	for i := 0; i < len(s); {
		j := i
		for j+1 < len(s) && s[j+1] <= s[j]+1 {
			j++
		}
		if s[j] == s[i] {
			parts = append(parts, strconv.Itoa(s[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", s[i], s[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

func numOr(v *float64) string {
	if v == nil {
		return "-"
	}
	return num(*v)
}

func num(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
