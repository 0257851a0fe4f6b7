// SPDX-License-Identifier: Apache-2.0

// Package costs turns keel's measured per-NF cycle counts (bench/results/nf_profile.json)
// and the chain-length benchmark (bench/results/chain_length.json) into a policy.Cost for a
// chain: Galleon eq. 1's inputs. keel-sim uses it for every simulated chain; keel-gateway can
// use it to compute a chain's profile at deploy time.
//
// Cycles stay cycles: a measurement taken on a TSC of tsc_hz is used as is on a core of
// another clock; only policy.Cost.FreqHz changes the rate.
package costs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"sort"
	"strings"

	"github.com/keel-nfv/keel/gateway/internal/policy"
)

// Defaults used when a file is absent. They are the values of the files committed with
// keel (nf_profile.json and chain_length.json of the 2 GHz bench machine).
const (
	// DefaultTscHz is the TSC of the machine the default numbers were measured on.
	DefaultTscHz = 2.0e9
	// DefaultIOCycles is rx + tx + run loop per packet: single_cycles_per_pkt −
	// nf_cycles_per_pkt of a one-NF chain (1091 − 879) in chain_length.json.
	DefaultIOCycles = 212.0
	// DefaultHandoffCycles is chain_length.json's measured handoff_cycles: one yield from
	// an NF process to the next under coopsched.
	DefaultHandoffCycles = 1559.0
	// BurstMax is the NIC's receive burst (b_m of Galleon eq. 1).
	BurstMax = 32
	// ACLRules is the ACL size used for the chains keel-sim evaluates: the 10-rule rows.
	ACLRules = 10
)

// point is a measured cycles per packet at a packet size.
type point struct{ bytes, cycles float64 }

// defaultNF is nf_profile.json as committed (acl and bpf at 10 rules), cycles per packet
// at 80 and 1500 bytes; "copy" is PktBuf::Push (into the chain buffer) at 100 and 1500.
var defaultNF = map[string][]point{
	"acl":       {{80, 36.4}, {1500, 68.6}},
	"bpf":       {{80, 46.6}, {1500, 56.0}},
	"nat":       {{80, 237.0}, {1500, 243.9}},
	"tunnel":    {{80, 20.0}, {1500, 24.0}},
	"detunnel":  {{80, 20.2}, {1500, 40.6}},
	"ipv4fwd":   {{80, 63.5}, {1500, 63.4}},
	"urlfilter": {{80, 236.8}, {1500, 233.2}},
	"encrypt":   {{80, 615.5}, {1500, 4588.9}},
	"decrypt":   {{80, 642.8}, {1500, 1515.0}},
	"chacha":    {{80, 488.3}, {1500, 2335.2}},
	"dedup":     {{80, 137.5}, {1500, 1127.5}},
	"rededup":   {{80, 118.9}, {1500, 1243.2}},
	"limiter":   {{80, 10.2}, {1500, 6.8}},
	"monitor":   {{80, 41.4}, {1500, 61.1}},
	"lb":        {{80, 161.0}, {1500, 177.8}},
	"macswap":   {{80, 24.1}, {1500, 27.8}},
}

var defaultCopy = []point{{100, 22.4}, {1500, 140.6}}

// Table is the cost of every profiled NF and of the chain machinery.
type Table struct {
	TscHz         float64 // the clock the cycles were measured at (informational)
	IOCycles      float64 // per packet, once per chain
	HandoffCycles float64 // per NF and turn of an isolated chain
	nf            map[string][]point
	copy          []point
	Source        string // where the numbers came from
}

// Default is the table of the committed measurements, used when the files are absent.
func Default() *Table {
	t := &Table{TscHz: DefaultTscHz, IOCycles: DefaultIOCycles, HandoffCycles: DefaultHandoffCycles,
		nf: map[string][]point{}, copy: append([]point(nil), defaultCopy...), Source: "built-in defaults"}
	for k, v := range defaultNF {
		t.nf[k] = append([]point(nil), v...)
	}
	return t
}

type nfProfileFile struct {
	TscHz float64 `json:"tsc_hz"`
	Rows  []struct {
		NF     string   `json:"nf"`
		Bytes  float64  `json:"pkt_bytes"`
		Cycles float64  `json:"cycles_per_pkt"`
		Rules  *float64 `json:"rules"`
	} `json:"rows"`
}

type chainLengthFile struct {
	TscHz   float64 `json:"tsc_hz"`
	Handoff float64 `json:"handoff_cycles"`
	Rows    []struct {
		Length int     `json:"length"`
		Bytes  float64 `json:"packet_bytes"` // absent in files of one packet size
		NF     float64 `json:"nf_cycles_per_pkt"`
		Single float64 `json:"single_cycles_per_pkt"`
		// Each mode's cycles a packet by kind (bench/chain_length.py's cycle account).
		Breakdown map[string]map[string]float64 `json:"breakdown"`
	} `json:"rows"`
}

// isolationKinds are the cycle-account kinds isolation adds to a packet's trip: entering the
// chain buffer (copy_in; with the port receiving into it, none), the descriptors every
// position reads and writes (view), and leaving it (copy_out).
var isolationKinds = []string{"copy_in", "view", "copy_out"}

// isolationPoints is, at each packet size the file measured chains of 2+ NFs at, the median
// over those lengths of what keel spent a packet on isolationKinds beyond the chain in one
// process: the measured successor of nf_profile.json's bare copy.
func isolationPoints(f *chainLengthFile) []point {
	by := map[float64][]float64{}
	for _, r := range f.Rows {
		k, s := r.Breakdown["keel"], r.Breakdown["single"]
		if r.Length < 2 || r.Bytes <= 0 || k == nil || s == nil {
			continue
		}
		c := 0.0
		for _, kind := range isolationKinds {
			c += k[kind] - s[kind]
		}
		by[r.Bytes] = append(by[r.Bytes], math.Max(0, c))
	}
	var out []point
	for b, cs := range by {
		sort.Float64s(cs)
		m := cs[len(cs)/2]
		if len(cs)%2 == 0 {
			m = (cs[len(cs)/2-1] + m) / 2
		}
		out = append(out, point{b, m})
	}
	return out
}

// Load reads the two benchmark files; a path that is "" or names no file keeps the defaults
// for what that file gives. A file that exists but cannot be read or parsed is an error.
func Load(nfProfilePath, chainLengthPath string) (*Table, error) {
	t := Default()
	var src []string
	if nfProfilePath != "" {
		b, err := os.ReadFile(nfProfilePath)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			src = append(src, "NF defaults ("+nfProfilePath+" absent)")
		case err != nil:
			return nil, err
		default:
			var f nfProfileFile
			if err := json.Unmarshal(b, &f); err != nil {
				return nil, fmt.Errorf("%s: %v", nfProfilePath, err)
			}
			nf := map[string][]point{}
			var cp []point
			for i, r := range f.Rows {
				if r.NF == "" || r.Bytes <= 0 || r.Cycles < 0 {
					return nil, fmt.Errorf("%s: rows[%d]: needs nf, pkt_bytes > 0 and cycles_per_pkt ≥ 0", nfProfilePath, i)
				}
				if r.Rules != nil && int(*r.Rules) != ACLRules {
					continue
				}
				if r.NF == "copy" {
					cp = append(cp, point{r.Bytes, r.Cycles})
					continue
				}
				nf[strings.ToLower(r.NF)] = append(nf[strings.ToLower(r.NF)], point{r.Bytes, r.Cycles})
			}
			if len(nf) == 0 {
				return nil, fmt.Errorf("%s: no NF rows", nfProfilePath)
			}
			t.nf = nf
			if len(cp) > 0 {
				t.copy = cp
			}
			if f.TscHz > 0 {
				t.TscHz = f.TscHz
			}
			src = append(src, nfProfilePath)
		}
	}
	if chainLengthPath != "" {
		b, err := os.ReadFile(chainLengthPath)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			src = append(src, "chain defaults ("+chainLengthPath+" absent)")
		case err != nil:
			return nil, err
		default:
			var f chainLengthFile
			if err := json.Unmarshal(b, &f); err != nil {
				return nil, fmt.Errorf("%s: %v", chainLengthPath, err)
			}
			if f.Handoff <= 0 {
				return nil, fmt.Errorf("%s: handoff_cycles: must be positive", chainLengthPath)
			}
			t.HandoffCycles = f.Handoff
			// The I/O of the smallest packets the file has a one-NF row for (80 B).
			found, bytes := false, 0.0
			for _, r := range f.Rows {
				if r.Length == 1 && (!found || r.Bytes < bytes) {
					bytes = r.Bytes
					if r.Single < r.NF {
						return nil, fmt.Errorf("%s: rows (length 1): single_cycles_per_pkt < nf_cycles_per_pkt", chainLengthPath)
					}
					t.IOCycles, found = r.Single-r.NF, true
				}
			}
			if !found {
				return nil, fmt.Errorf("%s: rows: no length-1 row to take the I/O cycles from", chainLengthPath)
			}
			if iso := isolationPoints(&f); len(iso) > 0 {
				t.copy = iso
			}
			src = append(src, chainLengthPath)
		}
	}
	for _, pts := range t.nf {
		sortPoints(pts)
	}
	sortPoints(t.copy)
	if len(src) > 0 {
		t.Source = strings.Join(src, ", ")
	}
	return t, nil
}

func sortPoints(p []point) { sort.Slice(p, func(i, j int) bool { return p[i].bytes < p[j].bytes }) }

// interp is linear in packet size between the measured sizes and beyond them along the
// nearest segment, never below 0.
func interp(p []point, bytes float64) float64 {
	if len(p) == 1 {
		return p[0].cycles
	}
	i := sort.Search(len(p), func(i int) bool { return p[i].bytes >= bytes })
	i = max(1, min(i, len(p)-1))
	a, b := p[i-1], p[i]
	if b.bytes == a.bytes {
		return a.cycles
	}
	return math.Max(0, a.cycles+(b.cycles-a.cycles)*(bytes-a.bytes)/(b.bytes-a.bytes))
}

// NFs lists the NF names the table knows.
func (t *Table) NFs() []string {
	var out []string
	for k := range t.nf {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// NFCycles is one NF's cycles per packet at a packet size.
func (t *Table) NFCycles(nf string, pktBytes float64) (float64, error) {
	p, ok := t.nf[strings.ToLower(nf)]
	if !ok || len(p) == 0 {
		return 0, fmt.Errorf("unknown NF %q (known: %s)", nf, strings.Join(t.NFs(), ", "))
	}
	return interp(p, pktBytes), nil
}

// CopyCycles is what isolation adds to a packet at a packet size: chain_length.json's measured
// copies and descriptor work when it has them per packet size, else nf_profile.json's copy.
func (t *Table) CopyCycles(pktBytes float64) float64 { return interp(t.copy, pktBytes) }

// Chain is the cost of a chain of the named NFs (catalogue names, in chain order) at a packet
// size on a core of freqHz. A chain of several NFs is isolated (copy, handoffs) as keel runs
// it; RunToCompletion gives the same chain in one thread.
func (t *Table) Chain(nfNames []string, pktBytes int, freqHz float64) (policy.Cost, error) {
	return t.ChainAt(nfNames, float64(pktBytes), freqHz)
}

// ChainAt is Chain at a fractional (mean) packet size: the costs are linear in size, so the
// cost at the mean size is the mean cost.
func (t *Table) ChainAt(nfNames []string, pktBytes, freqHz float64) (policy.Cost, error) {
	if len(nfNames) == 0 {
		return policy.Cost{}, errors.New("a chain needs at least one NF")
	}
	if freqHz <= 0 {
		return policy.Cost{}, errors.New("the core's clock must be positive")
	}
	c := policy.Cost{IOCycles: t.IOCycles, HandoffCycles: t.HandoffCycles, FreqHz: freqHz, BurstMax: BurstMax}
	for _, n := range nfNames {
		cyc, err := t.NFCycles(n, pktBytes)
		if err != nil {
			return policy.Cost{}, err
		}
		c.NFCycles = append(c.NFCycles, cyc)
	}
	if len(nfNames) > 1 {
		c.CopyCycles = t.CopyCycles(pktBytes)
	}
	return c, nil
}

// RunToCompletion is the chain run in a single thread as Metron runs it: the same NF and I/O
// cycles, no copy into a chain buffer, no handoff.
func RunToCompletion(c policy.Cost) policy.Cost {
	sum := 0.0
	for _, x := range c.NFCycles {
		sum += x
	}
	return policy.Cost{NFCycles: []float64{sum}, IOCycles: c.IOCycles, FreqHz: c.FreqHz, BurstMax: c.BurstMax}
}
