// SPDX-License-Identifier: Apache-2.0

package costs

import (
	"errors"
	"testing"

	"github.com/keel-nfv/keel/gateway/internal/policy"
)

// countingModeler models every chain alike and counts its calls; fail makes it fail.
type countingModeler struct {
	calls int
	fail  bool
}

func (m *countingModeler) Model(name string, nfs []string, p99us float64) (*policy.Model, error) {
	m.calls++
	if m.fail {
		return nil, errors.New("no costs")
	}
	return &policy.Model{Chain: policy.Chain{Name: name, SLOus: p99us, Threshold: 0.9},
		Cost: policy.Cost{NFCycles: make([]float64, len(nfs))}}, nil
}

func Test_Cache_builds_each_model_once_and_hands_out_copies(t *testing.T) {
	inner := &countingModeler{}
	c := &Cache{Modeler: inner}
	a, err := c.Model("chain2", []string{"acl", "urlfilter", "encrypt"}, 200)
	if err != nil {
		t.Fatal(err)
	}
	// The provider's deploy check built it; the controller's first flow finds it.
	a.Chain.Threshold, a.Cost.NFCycles[0] = 0.1, 99 // a caller changing its copy
	b, err := c.Model("chain2", []string{"acl", "urlfilter", "encrypt"}, 200)
	if err != nil || inner.calls != 1 {
		t.Fatalf("second call: err %v, %d builds, want 1", err, inner.calls)
	}
	if b.Chain.Threshold != 0.9 || b.Cost.NFCycles[0] != 0 {
		t.Fatalf("cached model changed through a caller's copy: %+v", b)
	}
	// Another SLO, NF list or chain is another model.
	for _, args := range []struct {
		name string
		nfs  []string
		p99  float64
	}{{"chain2", []string{"acl", "urlfilter", "encrypt"}, 100}, {"chain2", []string{"acl", "urlfilter"}, 200},
		{"chain3", []string{"acl", "urlfilter", "encrypt"}, 200}} {
		if _, err := c.Model(args.name, args.nfs, args.p99); err != nil {
			t.Fatal(err)
		}
	}
	if inner.calls != 4 {
		t.Fatalf("%d builds, want 4 (one per distinct chain, NFs and SLO)", inner.calls)
	}
}

func Test_Cache_keeps_no_error(t *testing.T) {
	inner := &countingModeler{fail: true}
	c := &Cache{Modeler: inner}
	if _, err := c.Model("chain3", []string{"nat"}, 100); err == nil {
		t.Fatal("the modeler's error was not returned")
	}
	inner.fail = false
	if m, err := c.Model("chain3", []string{"nat"}, 100); err != nil || m == nil || inner.calls != 2 {
		t.Fatalf("after an error: %v, %v, %d builds, want the model built again", m, err, inner.calls)
	}
}
