// SPDX-License-Identifier: Apache-2.0

package control

import (
	"testing"

	"github.com/keel-nfv/keel/gateway/internal/store"
)

func Test_Pick_prefers_the_most_loaded_instance_that_is_not_overloaded(t *testing.T) {
	insts := []*store.Instance{
		{ID: "c/0", State: store.Attached, RateGbps: 0.9, Overloaded: true},
		{ID: "c/1", State: store.Attached, RateGbps: 0.5},
		{ID: "c/2", State: store.Attached, RateGbps: 0.2},
		{ID: "c/3", State: store.Pooled},
	}
	if got := Pick(insts); got.ID != "c/1" {
		t.Fatalf("got %s", got.ID)
	}
}

func Test_Pick_falls_back_to_an_idle_instance_then_nothing(t *testing.T) {
	insts := []*store.Instance{
		{ID: "c/0", State: store.Attached, Overloaded: true},
		{ID: "c/1", State: store.Pooled},
		{ID: "c/2", State: store.Pooled},
	}
	if got := Pick(insts); got.ID != "c/1" {
		t.Fatalf("got %s", got.ID)
	}
	if got := Pick(insts[:1]); got != nil {
		t.Fatalf("got %s, want none", got.ID)
	}
}

func Test_PickCore_takes_the_least_loaded_managed_core(t *testing.T) {
	insts := []*store.Instance{
		{ID: "a/0", State: store.Attached, Core: 1},
		{ID: "a/1", State: store.Attached, Core: 1},
		{ID: "b/0", State: store.Attached, Core: 3},
		{ID: "b/1", State: store.Pooled, Core: -1},
	}
	if got := PickCore([]uint32{1, 3}, insts); got != 3 {
		t.Fatalf("got core %d, want 3", got)
	}
	if got := PickCore([]uint32{3, 2}, nil); got != 2 {
		t.Fatalf("got core %d, want the lowest of equals, 2", got)
	}
	if got := PickCore(nil, insts); got != -1 {
		t.Fatalf("got core %d without managed cores, want -1", got)
	}
}
