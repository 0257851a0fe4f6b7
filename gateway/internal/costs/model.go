// SPDX-License-Identifier: Apache-2.0

package costs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/keel-nfv/keel/gateway/internal/dpmodel"
	"github.com/keel-nfv/keel/gateway/internal/policy"
)

// TenantCycles is the cost the model assumes for an NF the cost table does not know (a
// tenant's packet function): the placer's default.
const TenantCycles = 500

// Modeler models a chain from measured NF costs (Galleon eq. 1's inputs) and its latency
// profile: a measured one from ProfileDir/profile_<chain>.json when the operator has it,
// else the queueing model of batched service (dpmodel.DeriveProfile, Galleon Fig. 4).
type Modeler struct {
	Costs       *Table
	Policy      policy.Config // the controller's, whose threshold and batch the model takes
	ProfileDir  string        // "" = always model
	PacketBytes int           // the packet size the chain's cost is taken at
	FreqHz      float64       // the workers' core clock
}

// Model returns the cost, profile and per-core load threshold of chain name, whose server
// NFs are nfs (in order) and whose SLO bounds its p99 by p99us (0: no bound).
func (m *Modeler) Model(name string, nfs []string, p99us float64) (*policy.Model, error) {
	if len(nfs) == 0 {
		return nil, fmt.Errorf("chain %s has no server NF", name)
	}
	cfg := m.Policy
	cost := policy.Cost{IOCycles: m.Costs.IOCycles, HandoffCycles: m.Costs.HandoffCycles, FreqHz: m.FreqHz,
		BurstMax: BurstMax}
	for _, nf := range nfs {
		cyc, err := m.Costs.NFCycles(nf, float64(m.PacketBytes))
		if err != nil {
			cyc = TenantCycles
		}
		cost.NFCycles = append(cost.NFCycles, cyc)
	}
	if cost.Isolated() {
		cost.CopyCycles = m.Costs.CopyCycles(float64(m.PacketBytes))
	}
	if !cfg.Isolation {
		cost = RunToCompletion(cost)
	}
	prof, err := m.profile(name, nfs)
	if prof != nil {
		thr := cfg.ThresholdFor(prof, p99us)
		return &policy.Model{Chain: policy.Chain{Name: name, SLOus: p99us, MaxPps: prof.MaxPps, Threshold: thr},
			Cost: cost, Profile: prof}, nil
	}
	batch, p, thr := cfg.Operating(cost, p99us, func(b int) policy.Profile {
		return dpmodel.DeriveProfile(name, cost, b, m.PacketBytes, 1)
	})
	p.NFs = nfs
	if err != nil {
		p.Method += "; not the measured profile: " + err.Error()
	}
	return &policy.Model{Chain: policy.Chain{Name: name, SLOus: p99us, MaxPps: p.MaxPps, Threshold: thr, BatchCap: batch},
		Cost: cost, Profile: &p}, nil
}

// profile reads ProfileDir/profile_<chain>.json: nil when there is none, and an error
// (the file is then not used) when it is unreadable or was taken for other NFs or another
// clock.
func (m *Modeler) profile(name string, nfs []string) (*policy.Profile, error) {
	if m.ProfileDir == "" {
		return nil, nil
	}
	path := filepath.Join(m.ProfileDir, "profile_"+name+".json")
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var p policy.Profile
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := p.Check(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(p.NFs) > 0 && !slices.Equal(p.NFs, nfs) {
		return nil, fmt.Errorf("%s: profiled NFs %v, but the chain runs %v on its worker", path, p.NFs, nfs)
	}
	if p.FreqHz > 0 && math.Abs(p.FreqHz-m.FreqHz) > 0.05*m.FreqHz {
		return nil, fmt.Errorf("%s: profiled at %.2f GHz, the cores run at %.2f GHz", path, p.FreqHz/1e9, m.FreqHz/1e9)
	}
	return &p, nil
}
