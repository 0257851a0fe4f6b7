// SPDX-License-Identifier: Apache-2.0

package control

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/keel-nfv/keel/gateway/internal/costs"
	"github.com/keel-nfv/keel/gateway/internal/dpmodel"
	"github.com/keel-nfv/keel/gateway/internal/policy"
	"github.com/keel-nfv/keel/gateway/internal/store"
)

// TenantCycles is the cost the model assumes for an NF the cost table does not know (a
// tenant's packet function): the placer's default.
const TenantCycles = 500

// CostModeler models a chain from measured NF costs (Galleon eq. 1's inputs) and its latency
// profile: a measured one from ProfileDir/profile_<chain>.json when the operator has it,
// else the queueing model of batched service (dpmodel.DeriveProfile, Galleon Fig. 4).
type CostModeler struct {
	Costs       *costs.Table
	ProfileDir  string  // "" = always model
	PacketBytes int     // the packet size the chain's cost is taken at
	FreqHz      float64 // the workers' core clock
}

// Model returns the chain's cost, profile and per-core load threshold under cfg.
func (m *CostModeler) Model(f *store.Function, cfg policy.Config) (*Model, error) {
	c := f.Chain
	if len(c.Members) == 0 {
		return nil, fmt.Errorf("chain %s has no server NF", c.Name)
	}
	cost := policy.Cost{IOCycles: m.Costs.IOCycles, HandoffCycles: m.Costs.HandoffCycles, FreqHz: m.FreqHz,
		BurstMax: costs.BurstMax}
	for _, mem := range c.Members {
		cyc, err := m.Costs.NFCycles(mem.NF, float64(m.PacketBytes))
		if err != nil {
			cyc = TenantCycles
		}
		cost.NFCycles = append(cost.NFCycles, cyc)
	}
	if cost.Isolated() {
		cost.CopyCycles = m.Costs.CopyCycles(float64(m.PacketBytes))
	}
	if !cfg.Isolation {
		cost = costs.RunToCompletion(cost)
	}
	batch := cfg.BatchFor(cost, costs.BurstMax)
	var nfs []string
	for _, mem := range c.Members {
		nfs = append(nfs, mem.NF)
	}
	prof, err := m.profile(c.Name, nfs)
	if prof == nil {
		p := dpmodel.DeriveProfile(c.Name, cost, batch, m.PacketBytes, 1)
		p.NFs = nfs
		if err != nil {
			p.Method += "; not the measured profile: " + err.Error()
		}
		prof = &p
	}
	thr := cfg.ThresholdFor(prof, c.SLO.P99us)
	return &Model{Chain: policy.Chain{Name: c.Name, SLOus: c.SLO.P99us, MaxPps: prof.MaxPps, Threshold: thr},
		Cost: cost, Profile: prof}, nil
}

// profile reads ProfileDir/profile_<chain>.json: nil when there is none, and an error
// (the file is then not used) when it is unreadable or was taken for other NFs or another
// clock.
func (m *CostModeler) profile(name string, nfs []string) (*policy.Profile, error) {
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
