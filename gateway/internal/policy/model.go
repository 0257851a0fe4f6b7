// SPDX-License-Identifier: Apache-2.0

package policy

// Model is what the controller knows of a chain beyond its record: its cost per packet on
// one core, its latency profile, and from both its per-core load threshold.
type Model struct {
	Chain   Chain
	Cost    Cost
	Profile *Profile
}

// Unmeetable returns the lightest-load point of the model's profile when the chain's SLO
// cannot be met at any per-core load (its threshold is 0 though it has a profile: even
// alone on a core, at its lightest measured load, the chain's p99 is over the bound, so no
// number of instances would meet it); ok is false when the SLO can be met or there is
// nothing to judge it by.
func (m *Model) Unmeetable() (lightest Point, ok bool) {
	if m == nil || m.Profile == nil || len(m.Profile.Points) == 0 || m.Chain.Threshold > 0 {
		return Point{}, false
	}
	lightest = m.Profile.Points[0]
	for _, pt := range m.Profile.Points {
		if pt.Load < lightest.Load {
			lightest = pt
		}
	}
	return lightest, true
}
