// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/keel-nfv/keel/gateway/internal/costs"
	"github.com/keel-nfv/keel/gateway/internal/policy"
)

// DefaultFlowMoveCPUus is the control core's time a flow move costs when the scenario does
// not say: bench/results/migration.json's "moves".cpu_us_per_move, measured on this machine
// by bench/migration.py (keel-ingress, keel-gateway, keel-torctl and Redis CPU over the
// flows moved). No paper in /work/shared/papers gives it per flow.
const DefaultFlowMoveCPUus = 1176

// Scenario is one rack experiment (bench/scenarios/*.yaml).
type Scenario struct {
	Name    string      `yaml:"name"`
	Seed    uint64      `yaml:"seed"`
	Workers int         `yaml:"workers"`
	Cores   int         `yaml:"cores"` // managed cores per worker
	GHz     float64     `yaml:"ghz"`
	Chains  []ChainSpec `yaml:"chains"`
	Packets PacketSpec  `yaml:"packets"`
	Flows   FlowSpec    `yaml:"flows"`
	Phases  []Phase     `yaml:"phases"`
	// Together runs all the chains at once in one rack, where their sgroups compete for
	// cores; otherwise each chain runs on its own in the rack (as Galleon ran each chain's
	// experiment).
	Together bool `yaml:"together"`

	TorInstallMs float64 `yaml:"tor_install_ms"` // a new flow's rule reaches the ToR this long after its first packet
	ColdStartS   float64 `yaml:"cold_start_s"`   // a pooled instance is ready this long after it is created
	StatsMs      float64 `yaml:"stats_ms"`       // agents report every instance this often
	ControlMs    float64 `yaml:"control_ms"`     // Reclaim, Pool and Repack run this often
	MovePauseMs  float64 `yaml:"move_pause_ms"`  // an attach or a move keeps the sgroup from its core this long
	// A flow moved to another instance with its state (a policy with Moves.Enabled): its
	// packets are held at the ingress for flow_move_pause_ms (then released to the new
	// instance, in order), and the move costs flow_move_cpu_us of the control core. The
	// defaults: policy.DefaultMoves' pause (50 ms; migration.json's measured p50 is 47.4) and
	// DefaultFlowMoveCPUus (migration.json's measured CPU per move).
	FlowMovePauseMs float64 `yaml:"flow_move_pause_ms"`
	FlowMoveCPUus   float64 `yaml:"flow_move_cpu_us"`
	QueueCap        int     `yaml:"queue_cap"`   // NIC queue (VF ring) per instance, packets
	MaxSeconds      float64 `yaml:"max_seconds"` // stop here whatever the phases say

	file string
}

// ChainSpec is one chain of the scenario. Its traffic is the scenario's packets, flows and
// phases unless it gives its own (each field replaces the scenario's as a whole).
type ChainSpec struct {
	Name    string      `yaml:"name"`
	NFs     []string    `yaml:"nfs"`
	SLOus   float64     `yaml:"slo_us"`
	Packets *PacketSpec `yaml:"packets"`
	Flows   *FlowSpec   `yaml:"flows"`
	Phases  []Phase     `yaml:"phases"`
	// Pinned: an NF of the chain keeps global (not per-flow) state, so its flows never move.
	Pinned bool `yaml:"pinned"`

	tr traffic // filled by check
}

// traffic is what a chain's flows follow, checked and with the phases' derived fields set.
type traffic struct {
	packets   PacketSpec
	flows     FlowSpec
	phases    []Phase
	meanBytes float64
}

// PacketSpec is the packet size distribution: lognormal with the given median and σ of the
// log, cut to [min_bytes, max_bytes] (σ 0: every packet of the median size).
type PacketSpec struct {
	MedianBytes float64 `yaml:"median_bytes"`
	Sigma       float64 `yaml:"sigma"`
	MinBytes    float64 `yaml:"min_bytes"`
	MaxBytes    float64 `yaml:"max_bytes"`
}

// FlowSpec is what every flow shares: its lifetime is exponential with mean MeanS
// seconds (flows also end when the run ends), its packet rate is the phase's per-flow rate
// times a lognormal factor of mean 1 and σ RateSigma.
type FlowSpec struct {
	MeanS     float64 `yaml:"mean_s"`
	RateSigma float64 `yaml:"rate_sigma"`
}

// Phase is one stretch of the traffic. Flows arrive as a Poisson process of rate
// new_flows_per_s if given, else at the rate that makes the expected number of concurrent
// flows follow the phase's target (λ = C/mean_s + dC/dt): ramp goes linearly from the
// previous target to flows, steady holds flows, diurnal swings between flows_min and flows
// over period_s (starting at flows_min, or shift_s later in the cycle), flash holds the previous target; arrival_x
// multiplies the arrival rate (a flash crowd: 10). gbps is the offered load at flows
// concurrent flows and sets the per-flow rate of the flows that start in the phase (else the
// previous phase's). A phase ends after duration_s, or once packets packets have been offered
// since the start of the run.
type Phase struct {
	Kind         string  `yaml:"kind"`
	DurationS    float64 `yaml:"duration_s"`
	Packets      float64 `yaml:"packets"`
	Flows        float64 `yaml:"flows"`
	FlowsMin     float64 `yaml:"flows_min"`
	PeriodS      float64 `yaml:"period_s"`
	ShiftS       float64 `yaml:"shift_s"`
	Gbps         float64 `yaml:"gbps"`
	NewFlowsPerS float64 `yaml:"new_flows_per_s"`
	ArrivalX     float64 `yaml:"arrival_x"`

	target0, flowPps float64 // filled by check
}

// LoadScenario reads and checks a scenario file; errors name the file and the field.
func LoadScenario(path string, tbl *costs.Table) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseScenario(filepath.Base(path), b, tbl)
}

// ParseScenario is LoadScenario of bytes; name is the file name used in errors.
func ParseScenario(name string, b []byte, tbl *costs.Table) (*Scenario, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	sc := &Scenario{file: name}
	if err := dec.Decode(sc); err != nil {
		msg := strings.TrimPrefix(err.Error(), "yaml: unmarshal errors:\n")
		msg = strings.TrimPrefix(msg, "yaml: ")
		var lines []string
		for _, l := range strings.Split(msg, "\n") {
			l = strings.TrimSpace(l)
			if i := strings.Index(l, " in type "); i > 0 {
				l = l[:i]
			}
			lines = append(lines, l)
		}
		return nil, fmt.Errorf("%s: %s", name, strings.Join(lines, "; "))
	}
	if err := sc.check(tbl); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	return sc, nil
}

func (sc *Scenario) check(tbl *costs.Table) error {
	if sc.Name == "" {
		sc.Name = strings.TrimSuffix(sc.file, filepath.Ext(sc.file))
	}
	if sc.Workers <= 0 {
		return errors.New("workers: must be at least 1")
	}
	if sc.Cores <= 0 {
		return errors.New("cores: must be at least 1")
	}
	if sc.GHz <= 0 {
		return errors.New("ghz: must be positive")
	}
	if len(sc.Chains) == 0 {
		return errors.New("chains: at least one chain")
	}
	seen := map[string]bool{}
	for i, c := range sc.Chains {
		if c.Name == "" {
			return fmt.Errorf("chains[%d].name: missing", i)
		}
		if seen[c.Name] {
			return fmt.Errorf("chains[%d].name: %q twice", i, c.Name)
		}
		seen[c.Name] = true
		if len(c.NFs) == 0 {
			return fmt.Errorf("chains[%d].nfs: at least one NF", i)
		}
		for _, nf := range c.NFs {
			if _, err := tbl.NFCycles(nf, 1000); err != nil {
				return fmt.Errorf("chains[%d].nfs: unknown NF %q", i, nf)
			}
		}
		if c.SLOus < 0 {
			return fmt.Errorf("chains[%d].slo_us: must not be negative", i)
		}
	}
	def := func(v *float64, d float64) {
		if *v == 0 {
			*v = d
		}
	}
	def(&sc.TorInstallMs, 2)
	def(&sc.ColdStartS, 2)
	def(&sc.StatsMs, 100)
	def(&sc.ControlMs, 1000)
	def(&sc.MovePauseMs, 0.5)
	def(&sc.MaxSeconds, 7200)
	def(&sc.FlowMovePauseMs, float64(policy.DefaultMoves().Pause)/1e6)
	def(&sc.FlowMoveCPUus, DefaultFlowMoveCPUus)
	if sc.QueueCap == 0 {
		sc.QueueCap = 4096
	}
	if sc.TorInstallMs < 0 || sc.ColdStartS < 0 || sc.StatsMs <= 0 || sc.ControlMs <= 0 || sc.MovePauseMs < 0 || sc.QueueCap < 1 ||
		sc.FlowMovePauseMs < 0 || sc.FlowMoveCPUus < 0 {
		return errors.New("tor_install_ms, cold_start_s, move_pause_ms, flow_move_pause_ms, flow_move_cpu_us must be ≥ 0, stats_ms, control_ms and queue_cap > 0")
	}
	for i := range sc.Chains {
		c := &sc.Chains[i]
		pk, fl, ph := sc.Packets, sc.Flows, sc.Phases
		var pre [3]string // the field names' prefixes in errors: the chain's own fields
		own := fmt.Sprintf("chains[%d].", i)
		if c.Packets != nil {
			pk, pre[0] = *c.Packets, own
		}
		if c.Flows != nil {
			fl, pre[1] = *c.Flows, own
		}
		if c.Phases != nil {
			ph, pre[2] = c.Phases, own
		}
		tr, err := checkTraffic(pk, fl, append([]Phase(nil), ph...), pre)
		if err != nil {
			return err
		}
		c.tr = tr
	}
	return nil
}

// checkTraffic checks one chain's (or the scenario's) packets, flows and phases and fills
// the phases' derived fields; pre prefixes the names of packets, flows and phases in errors.
func checkTraffic(pk PacketSpec, fl FlowSpec, ph []Phase, pres [3]string) (traffic, error) {
	p := &pk
	if p.MedianBytes == 0 {
		p.MedianBytes = 1024
	}
	if p.MinBytes == 0 {
		p.MinBytes = 64
	}
	if p.MaxBytes == 0 {
		p.MaxBytes = 1500
	}
	if p.MedianBytes < p.MinBytes || p.MedianBytes > p.MaxBytes || p.Sigma < 0 {
		return traffic{}, errors.New(pres[0] + "packets: need min_bytes ≤ median_bytes ≤ max_bytes and sigma ≥ 0")
	}
	if fl.MeanS <= 0 {
		return traffic{}, errors.New(pres[1] + "flows.mean_s: must be positive")
	}
	if fl.RateSigma < 0 {
		return traffic{}, errors.New(pres[1] + "flows.rate_sigma: must not be negative")
	}
	pre := pres[2]
	if len(ph) == 0 {
		return traffic{}, errors.New(pre + "phases: at least one phase")
	}
	mean := meanBytes(*p)
	target, pps := 0.0, 0.0
	for i := range ph {
		ph := &ph[i]
		f := func(field string) error { return fmt.Errorf("%sphases[%d].%s", pre, i, field) }
		switch ph.Kind {
		case "ramp", "steady", "diurnal", "flash":
		default:
			return traffic{}, fmt.Errorf("%sphases[%d].kind: %q is not ramp, steady, diurnal or flash", pre, i, ph.Kind)
		}
		if ph.DurationS <= 0 && ph.Packets <= 0 {
			return traffic{}, fmt.Errorf("%v: duration_s or packets must be given", f("duration_s"))
		}
		if ph.DurationS < 0 || ph.Packets < 0 || ph.Flows < 0 || ph.FlowsMin < 0 || ph.Gbps < 0 || ph.NewFlowsPerS < 0 || ph.ArrivalX < 0 || ph.ShiftS < 0 {
			return traffic{}, fmt.Errorf("%sphases[%d]: no field may be negative", pre, i)
		}
		if ph.Kind == "ramp" && ph.DurationS <= 0 {
			return traffic{}, fmt.Errorf("%v: a ramp needs a duration", f("duration_s"))
		}
		if ph.Kind == "diurnal" && (ph.PeriodS <= 0 || ph.Flows <= 0) {
			return traffic{}, fmt.Errorf("%v: diurnal needs period_s and flows", f("period_s"))
		}
		if ph.Flows == 0 {
			ph.Flows = target
		}
		if ph.Kind != "ramp" && ph.Kind != "diurnal" && ph.Flows == 0 && ph.NewFlowsPerS == 0 {
			return traffic{}, fmt.Errorf("%v: no flow target before this phase", f("flows"))
		}
		if ph.ArrivalX == 0 {
			ph.ArrivalX = 1
		}
		if ph.Gbps > 0 {
			if ph.Flows <= 0 {
				return traffic{}, fmt.Errorf("%v: gbps needs a flow target to set the per-flow rate", f("flows"))
			}
			pps = ph.Gbps * 1e9 / (8 * mean * ph.Flows)
		}
		if pps <= 0 {
			return traffic{}, fmt.Errorf("%v: no per-flow rate yet (give gbps)", f("gbps"))
		}
		ph.target0, ph.flowPps = target, pps
		if ph.Kind == "flash" {
			ph.Flows = target
		} else {
			target = ph.Flows
		}
	}
	return traffic{packets: pk, flows: fl, phases: ph, meanBytes: mean}, nil
}

// meanBytes is the mean packet size of a cut lognormal (numerically, midpoint rule).
func meanBytes(p PacketSpec) float64 {
	if p.Sigma == 0 {
		return p.MedianBytes
	}
	const n = 20000
	sum, w := 0.0, 0.0
	for i := 0; i < n; i++ {
		z := -8 + 16*(float64(i)+0.5)/n
		d := math.Exp(-z * z / 2)
		x := math.Min(p.MaxBytes, math.Max(p.MinBytes, p.MedianBytes*math.Exp(p.Sigma*z)))
		sum += d * x
		w += d
	}
	return sum / w
}

// lambda is the flow arrival rate x seconds into phase ph.
func (tr *traffic) lambda(ph *Phase, x float64) float64 {
	if ph.NewFlowsPerS > 0 {
		return ph.NewFlowsPerS * ph.ArrivalX
	}
	L := tr.flows.MeanS
	var c, dc float64
	switch ph.Kind {
	case "ramp":
		c = ph.target0 + (ph.Flows-ph.target0)*math.Min(1, x/ph.DurationS)
		dc = (ph.Flows - ph.target0) / ph.DurationS
	case "diurnal":
		w := 2 * math.Pi / ph.PeriodS
		x += ph.ShiftS
		c = ph.FlowsMin + (ph.Flows-ph.FlowsMin)*(1-math.Cos(w*x))/2
		dc = (ph.Flows - ph.FlowsMin) * w * math.Sin(w*x) / 2
	default:
		c = ph.Flows
	}
	return math.Max(0, c/L+dc) * ph.ArrivalX
}
