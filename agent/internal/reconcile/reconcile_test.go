// SPDX-License-Identifier: Apache-2.0

package reconcile

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

func desired(id string, core int32) Desired {
	return Desired{ID: id, Tenant: "t", Members: 2, Spec: "s1", Core: core}
}

func healthy(id string, g GroupState, core int32) Actual {
	return Actual{ID: id, Created: t0.Add(-time.Minute), VF: true, Group: g, GroupCore: core, GroupBatch: 1, Dir: true,
		Containers: []Container{{Position: 0, Spec: "s1", Running: true}, {Position: 1, Spec: "s1", Running: true}}}
}

func diff(t *testing.T, in Input, want ...Action) {
	t.Helper()
	if in.Now.IsZero() {
		in.Now = t0
	}
	got := Diff(in)
	if len(got) == 0 && len(want) == 0 {
		return
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Diff:\n got  %v\n want %v", got, want)
	}
}

func Test_Diff_creates_a_desired_instance_that_does_not_exist(t *testing.T) {
	diff(t, Input{Synced: true, Desired: map[string]Desired{"c/0": desired("c/0", -1)}},
		Action{Kind: Create, ID: "c/0"})
}

func Test_Diff_creates_over_a_leftover_directory(t *testing.T) {
	diff(t, Input{Desired: map[string]Desired{"c/0": desired("c/0", -1)},
		Actual: map[string]Actual{"c/0": {ID: "c/0", Dir: true}}},
		Action{Kind: Create, ID: "c/0"})
}

func Test_Diff_does_nothing_for_a_healthy_pooled_instance(t *testing.T) {
	diff(t, Input{Synced: true, Desired: map[string]Desired{"c/0": desired("c/0", -1)},
		Actual: map[string]Actual{"c/0": healthy("c/0", GroupDetached, 0)}})
}

func Test_Diff_attaches_a_detached_instance_the_gateway_attached(t *testing.T) {
	diff(t, Input{Desired: map[string]Desired{"c/0": desired("c/0", 1)},
		Actual: map[string]Actual{"c/0": healthy("c/0", GroupDetached, 0)}},
		Action{Kind: Attach, ID: "c/0", Core: 1})
}

func Test_Diff_detaches_an_attached_instance_that_is_pooled_again(t *testing.T) {
	diff(t, Input{Desired: map[string]Desired{"c/0": desired("c/0", -1)},
		Actual: map[string]Actual{"c/0": healthy("c/0", GroupAttached, 1)}},
		Action{Kind: Detach, ID: "c/0", Reason: "pooled"})
}

func Test_Diff_moves_an_instance_to_another_core_by_detaching_first(t *testing.T) {
	diff(t, Input{Desired: map[string]Desired{"c/0": desired("c/0", 2)},
		Actual: map[string]Actual{"c/0": healthy("c/0", GroupAttached, 1)}},
		Action{Kind: Detach, ID: "c/0", Reason: "moves from core 1 to 2"})
	diff(t, Input{Desired: map[string]Desired{"c/0": desired("c/0", 2)},
		Actual: map[string]Actual{"c/0": healthy("c/0", GroupDetached, 1)}},
		Action{Kind: Attach, ID: "c/0", Core: 2})
}

func Test_Diff_sets_the_batch_before_attaching(t *testing.T) {
	d := desired("c/0", 1)
	d.Batch = 8
	diff(t, Input{Desired: map[string]Desired{"c/0": d}, Actual: map[string]Actual{"c/0": healthy("c/0", GroupDetached, 0)}},
		Action{Kind: SetBatch, ID: "c/0", Batch: 8}, Action{Kind: Attach, ID: "c/0", Core: 1})
}

func Test_Diff_leaves_the_batch_alone_when_the_gateway_sets_none(t *testing.T) {
	a := healthy("c/0", GroupAttached, 1)
	a.GroupBatch = 32
	diff(t, Input{Desired: map[string]Desired{"c/0": desired("c/0", 1)}, Actual: map[string]Actual{"c/0": a}})
}

func Test_Diff_waits_while_the_group_forms_or_detaches(t *testing.T) {
	for _, g := range []GroupState{GroupNone, GroupDetaching} {
		a := healthy("c/0", g, 1)
		a.Created = t0.Add(-time.Second)
		diff(t, Input{Desired: map[string]Desired{"c/0": desired("c/0", 1)}, Actual: map[string]Actual{"c/0": a},
			RegisterTimeout: 30 * time.Second})
	}
}

func Test_Diff_fails_an_instance_whose_NFs_never_register(t *testing.T) {
	a := healthy("c/0", GroupNone, 0)
	diff(t, Input{Desired: map[string]Desired{"c/0": desired("c/0", -1)}, Actual: map[string]Actual{"c/0": a},
		RegisterTimeout: 30 * time.Second},
		Action{Kind: Fail, ID: "c/0", Reason: "the NFs did not register with coopsched within 30s"})
}

func Test_Diff_fails_an_instance_whose_container_died(t *testing.T) {
	a := healthy("c/0", GroupAttached, 1)
	a.Containers[1] = Container{Position: 1, Spec: "s1", Why: "exited with code 137 (OOM killed)"}
	diff(t, Input{Desired: map[string]Desired{"c/0": desired("c/0", 1)}, Actual: map[string]Actual{"c/0": a}},
		Action{Kind: Fail, ID: "c/0", Reason: "NF container 1: exited with code 137 (OOM killed)"})
}

func Test_Diff_fails_an_instance_whose_group_failed_was_cut_off_or_finished(t *testing.T) {
	for _, g := range []GroupState{GroupFailed, GroupCutOff, GroupFinished} {
		got := Diff(Input{Now: t0, Desired: map[string]Desired{"c/0": desired("c/0", 1)},
			Actual: map[string]Actual{"c/0": healthy("c/0", g, 1)}})
		if len(got) != 1 || got[0].Kind != Fail || !strings.HasPrefix(got[0].Reason, "coopsched:") {
			t.Fatalf("group %s: %v", g, got)
		}
	}
}

func Test_Diff_fails_an_instance_missing_a_container_or_its_VF(t *testing.T) {
	a := healthy("c/0", GroupDetached, 0)
	a.Containers = a.Containers[:1]
	diff(t, Input{Desired: map[string]Desired{"c/0": desired("c/0", -1)}, Actual: map[string]Actual{"c/0": a}},
		Action{Kind: Fail, ID: "c/0", Reason: "NF container 1 is missing"})
	a = healthy("c/0", GroupDetached, 0)
	a.VF = false
	diff(t, Input{Desired: map[string]Desired{"c/0": desired("c/0", -1)}, Actual: map[string]Actual{"c/0": a}},
		Action{Kind: Fail, ID: "c/0", Reason: "its VF is missing"})
}

func Test_Diff_rebuilds_a_failed_instance_only_after_its_backoff(t *testing.T) {
	in := Input{Desired: map[string]Desired{"c/0": desired("c/0", -1)},
		NotBefore: map[string]time.Time{"c/0": t0.Add(2 * time.Second)}}
	diff(t, in)
	in.Now = t0.Add(2 * time.Second)
	diff(t, in, Action{Kind: Create, ID: "c/0"})
}

func Test_Diff_replaces_an_instance_whose_spec_changed(t *testing.T) {
	d := desired("c/0", 1)
	d.Spec = "s2"
	diff(t, Input{Desired: map[string]Desired{"c/0": d}, Actual: map[string]Actual{"c/0": healthy("c/0", GroupAttached, 1)}},
		Action{Kind: Replace, ID: "c/0", Reason: "spec changed"})
}

func Test_Diff_removes_what_is_not_desired_only_after_sync(t *testing.T) {
	actual := map[string]Actual{"c/0": healthy("c/0", GroupAttached, 1), "c/1": {ID: "c/1", Dir: true}}
	diff(t, Input{Synced: false, Actual: actual})
	diff(t, Input{Synced: true, Actual: actual},
		Action{Kind: Remove, ID: "c/0", Reason: "not desired"}, Action{Kind: Remove, ID: "c/1", Reason: "not desired"})
}

func Test_Diff_removes_a_failed_instance_that_is_no_longer_desired(t *testing.T) {
	// Its teardown left nothing on the worker, but its NF state waits in Redis for a rebuild.
	in := Input{Now: t0, NotBefore: map[string]time.Time{"c/0": t0.Add(time.Minute)}}
	diff(t, in)
	in.Synced = true
	diff(t, in, Action{Kind: Remove, ID: "c/0", Reason: "not desired"})
}

func Test_Diff_skips_busy_instances(t *testing.T) {
	diff(t, Input{Synced: true, Desired: map[string]Desired{"c/0": desired("c/0", -1)},
		Actual: map[string]Actual{"c/1": healthy("c/1", GroupDetached, 0)}, Busy: map[string]bool{"c/0": true, "c/1": true}})
}

func Test_Diff_is_in_instance_order(t *testing.T) {
	got := Diff(Input{Now: t0, Desired: map[string]Desired{"b/0": desired("b/0", -1), "a/1": desired("a/1", -1), "a/0": desired("a/0", -1)}})
	var ids []string
	for _, a := range got {
		ids = append(ids, a.ID)
	}
	if strings.Join(ids, " ") != "a/0 a/1 b/0" {
		t.Fatalf("order %v", ids)
	}
}

func Test_Phase_follows_the_instance(t *testing.T) {
	d := desired("c/0", -1)
	cases := []struct {
		a      Actual
		failed bool
		want   string
	}{
		{Actual{}, false, "starting"},
		{Actual{}, true, "failed"},
		{healthy("c/0", GroupNone, 0), false, "starting"},
		{healthy("c/0", GroupDetached, 0), false, "ready"},
		{healthy("c/0", GroupAttached, 1), true, "ready"},
		{healthy("c/0", GroupFailed, 1), false, "starting"},
	}
	for i, c := range cases {
		if got := Phase(d, c.a, c.failed); got != c.want {
			t.Errorf("case %d: %s, want %s", i, got, c.want)
		}
	}
}

func Test_Backoff_doubles_from_one_second_to_a_minute(t *testing.T) {
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second,
		32 * time.Second, time.Minute, time.Minute}
	for i, w := range want {
		if got := Backoff(i + 1); got != w {
			t.Errorf("Backoff(%d) = %s, want %s", i+1, got, w)
		}
	}
	if Backoff(1000) != time.Minute {
		t.Error("Backoff(1000) is not capped")
	}
}
