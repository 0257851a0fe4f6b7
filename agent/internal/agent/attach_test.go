// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/keel-nfv/keel/agent/internal/reconcile"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc"
)

// coopschedAttach records the Attach calls keel-coopsched gets.
type coopschedAttach struct {
	pb.CoopschedClient
	mu    sync.Mutex
	calls []string
}

func (c *coopschedAttach) Attach(_ context.Context, r *pb.AttachRequest, _ ...grpc.CallOption) (*pb.GroupStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, fmt.Sprintf("%s@%d", r.GroupId, r.Core))
	return &pb.GroupStatus{GroupId: r.GroupId}, nil
}

func (c *coopschedAttach) SetBatch(_ context.Context, r *pb.SetBatchRequest, _ ...grpc.CallOption) (*pb.GroupStatus, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls = append(c.calls, fmt.Sprintf("%s batch %d", r.GroupId, r.Batch))
	return &pb.GroupStatus{GroupId: r.GroupId}, nil
}

func (c *coopschedAttach) taken() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.calls
	c.calls = nil
	return out
}

// pooledInstance is an agent whose last pass saw chain3/0 pooled: two NF containers running,
// its VF wired, its sgroup registered and detached. The gateway has just attached it on
// core 1 (a scale-out). It returns the agent, the id and coopsched.
func pooledInstance(t *testing.T) (*Agent, string, *coopschedAttach) {
	t.Helper()
	a, id, _ := agentWithOneInstance(t, Config{SpecConfig: SpecConfig{Worker: "w1"}, AttachOnEvent: true, PassWaitsForAttach: true}, nil)
	cs := &coopschedAttach{}
	a.Coopsched = cs
	a.synced = true
	a.chains["chain3"] = &pb.Chain{Name: "chain3", Tenant: "t1",
		Members: []*pb.ChainMember{{Name: "acl", Nf: "acl"}, {Name: "nat", Nf: "nat"}}}
	a.instances[id] = &pb.ChainInstance{Id: id, Chain: "chain3", Worker: "w1", State: "attached", Core: 1, Vlan: 101}
	d, ok := a.desiredOf(a.instances[id])
	if !ok {
		t.Fatal("no desired state for the instance")
	}
	a.lastActual = map[string]reconcile.Actual{id: {ID: id, VF: true, Dir: true,
		Containers: []reconcile.Container{{Position: 0, Spec: d.Spec, Running: true}, {Position: 1, Spec: d.Spec, Running: true}},
		Group:      reconcile.GroupDetached, GroupCore: -1}}
	return a, id, cs
}

func Test_attachNow_attaches_a_pooled_instance_the_gateway_attached_without_waiting_for_a_pass(t *testing.T) {
	a, id, cs := pooledInstance(t)
	ctx := context.Background()
	a.attachNow(ctx, id)
	a.workers.Wait()
	if got := cs.taken(); len(got) != 1 || got[0] != GroupID(id)+"@1" {
		t.Fatalf("coopsched got %v, want one attach of %s on core 1", got, GroupID(id))
	}
	if a.busy[id] {
		t.Fatal("the instance is still marked busy")
	}
	// More events for the instance (its flow count changes) before the next pass: no
	// second attach.
	a.attachNow(ctx, id)
	a.workers.Wait()
	if got := cs.taken(); len(got) != 0 {
		t.Fatalf("a second event attached again: %v", got)
	}
	// Moved to core 2 by the controller: it attaches there (coopsched says whether it can).
	a.instances[id].Core = 2
	a.attachNow(ctx, id)
	a.workers.Wait()
	if got := cs.taken(); len(got) != 1 || got[0] != GroupID(id)+"@2" {
		t.Fatalf("coopsched got %v, want an attach on core 2", got)
	}
}

func Test_attachNow_carries_a_batch_change_with_the_attach(t *testing.T) {
	a, id, cs := pooledInstance(t)
	a.instances[id].Batch = 8
	a.attachNow(context.Background(), id)
	a.workers.Wait()
	got := cs.taken()
	if len(got) != 2 || got[0] != GroupID(id)+" batch 8" || got[1] != GroupID(id)+"@1" {
		t.Fatalf("coopsched got %v, want the batch set, then the attach", got)
	}
}

func Test_attachNow_leaves_everything_but_a_plain_attach_to_the_pass(t *testing.T) {
	for name, change := range map[string]func(a *Agent, id string){
		"pooled by the gateway":     func(a *Agent, id string) { a.instances[id].State, a.instances[id].Core = "pooled", -1 },
		"attached with no core yet": func(a *Agent, id string) { a.instances[id].Core = -1 },
		"not in sync with the gateway": func(a *Agent, id string) {
			a.synced = false
		},
		"an action in flight": func(a *Agent, id string) { a.busy[id] = true },
		"failing":             func(a *Agent, id string) { a.fails[id] = &failure{count: 1} },
		"never seen by a pass": func(a *Agent, id string) {
			delete(a.lastActual, id)
		},
		"an NF container exited (the pass fails it)": func(a *Agent, id string) {
			act := a.lastActual[id]
			act.Containers = []reconcile.Container{act.Containers[0], {Position: 1, Spec: act.Containers[0].Spec, Why: "exit 1"}}
			a.lastActual[id] = act
		},
		"a spec change (the pass replaces it)": func(a *Agent, id string) {
			act := a.lastActual[id]
			act.Containers = []reconcile.Container{{Position: 0, Spec: "old", Running: true}, {Position: 1, Spec: "old", Running: true}}
			a.lastActual[id] = act
		},
		"its sgroup still forming": func(a *Agent, id string) {
			act := a.lastActual[id]
			act.Group = reconcile.GroupNone
			a.lastActual[id] = act
		},
		"already attached on another core (the pass detaches first)": func(a *Agent, id string) {
			act := a.lastActual[id]
			act.Group, act.GroupCore = reconcile.GroupAttached, 0
			a.lastActual[id] = act
		},
		"its chain unknown":       func(a *Agent, id string) { delete(a.chains, "chain3") },
		"--attach-on-event=false": func(a *Agent, id string) { a.cfg.AttachOnEvent = false },
		"under Kubernetes with Pod cores (the pass finds the core)": func(a *Agent, id string) {
			a.cfg.PodCores = true
		},
	} {
		t.Run(name, func(t *testing.T) {
			a, id, cs := pooledInstance(t)
			change(a, id)
			busy := a.busy[id]
			a.attachNow(context.Background(), id)
			a.workers.Wait()
			if got := cs.taken(); len(got) != 0 {
				t.Fatalf("coopsched got %v, want nothing", got)
			}
			if a.busy[id] != busy {
				t.Fatalf("busy %v after, was %v", a.busy[id], busy)
			}
		})
	}
}

func Test_a_pass_does_not_act_on_an_instance_attachNow_is_attaching(t *testing.T) {
	a, id, _ := pooledInstance(t)
	if !a.claim(id) {
		t.Fatal("a free instance could not be claimed")
	}
	if a.claim(id) {
		t.Fatal("an instance claimed twice")
	}
}

func Test_attachNow_does_not_attach_what_the_pass_attached_after_its_view(t *testing.T) {
	// The pass saw the instance detached and attached it; the gateway's event for the same
	// attach arrives after that, before the next pass.
	a, id, cs := pooledInstance(t)
	a.fast(context.Background(), reconcile.Action{Kind: reconcile.Attach, ID: id, Core: 1}, "pass")
	if got := cs.taken(); len(got) != 1 {
		t.Fatalf("the pass's attach: %v", got)
	}
	a.attachNow(context.Background(), id)
	a.workers.Wait()
	if got := cs.taken(); len(got) != 0 {
		t.Fatalf("the event attached again after the pass: %v", got)
	}
}

func Test_the_attach_delay_runs_from_the_gateways_event_to_the_attach(t *testing.T) {
	a, id, cs := pooledInstance(t)
	attached := a.instances[id]
	a.instances[id] = &pb.ChainInstance{Id: id, Chain: "chain3", Worker: "w1", State: "pooled", Core: -1, Vlan: 101}
	event := func(in *pb.ChainInstance) {
		ev := &pb.WatchEvent{Kind: pb.WatchEvent_INSTANCE_CHANGED, Instance: in}
		a.mu.Lock()
		a.noteAttachAsked(ev)
		applyEvent(a.chains, a.instances, ev, "w1")
		a.mu.Unlock()
		a.attachNow(context.Background(), id)
		a.workers.Wait()
	}
	event(attached)
	if got := cs.taken(); len(got) != 1 {
		t.Fatalf("coopsched got %v, want the attach", got)
	}
	count := func(via string) uint64 {
		m := &dto.Metric{}
		if err := a.attachDelay.WithLabelValues(via).(prometheus.Histogram).Write(m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount()
	}
	if count("event") != 1 || count("pass") != 0 {
		t.Fatalf("delays measured: event %d, pass %d; want one by the event", count("event"), count("pass"))
	}
	// Later events of the attached instance (its flow count) measure nothing more, and an
	// instance the gateway created attached (no pooled one to take) is no scale-out onto the pool.
	event(attached)
	other := &pb.ChainInstance{Id: "chain3/9", Chain: "chain3", Worker: "w1", State: "attached", Core: 1}
	a.mu.Lock()
	a.noteAttachAsked(&pb.WatchEvent{Kind: pb.WatchEvent_INSTANCE_CHANGED, Instance: other})
	asked := len(a.attachAsked)
	a.mu.Unlock()
	if count("event") != 1 || asked != 0 {
		t.Fatalf("event count %d, %d attaches awaited; want 1 and none", count("event"), asked)
	}
}

func Test_a_pass_whose_view_was_read_before_an_attach_does_not_undo_its_mark(t *testing.T) {
	// The pass began reading coopsched (instance detached), attachNow attached it, then the
	// pass stored its view: the next event must not attach again on that stale view.
	a, id, cs := pooledInstance(t)
	passStart := time.Now()
	a.attachNow(context.Background(), id)
	a.workers.Wait()
	cs.taken()
	stale := a.lastActual
	a.mu.Lock()
	a.keepView(stale, passStart)
	a.mu.Unlock()
	a.attachNow(context.Background(), id)
	a.workers.Wait()
	if got := cs.taken(); len(got) != 0 {
		t.Fatalf("attached again on a view read before the attach: %v", got)
	}
	// A pass that began after the attach and still sees it detached (coopsched lost it):
	// the next event attaches again.
	a.mu.Lock()
	a.keepView(stale, time.Now())
	a.mu.Unlock()
	a.attachNow(context.Background(), id)
	a.workers.Wait()
	if got := cs.taken(); len(got) != 1 {
		t.Fatalf("a fresh view of a detached instance: %v, want an attach", got)
	}
}

// coopschedBarrier holds the first Attach until a second one arrives (or 2 s pass).
type coopschedBarrier struct {
	pb.CoopschedClient
	mu       sync.Mutex
	calls    int
	both     chan struct{}
	together bool
}

func (c *coopschedBarrier) Attach(_ context.Context, r *pb.AttachRequest, _ ...grpc.CallOption) (*pb.GroupStatus, error) {
	c.mu.Lock()
	c.calls++
	first := c.calls == 1
	if !first {
		close(c.both)
	}
	c.mu.Unlock()
	if first {
		select {
		case <-c.both:
			c.mu.Lock()
			c.together = true
			c.mu.Unlock()
		case <-time.After(2 * time.Second):
		}
	}
	return &pb.GroupStatus{GroupId: r.GroupId}, nil
}

func Test_attachNow_attaches_two_scale_outs_at_once(t *testing.T) {
	// The first flows after a deploy scale out two chains at once: the second attach must not
	// wait for the first one's coopsched call.
	a, id, _ := pooledInstance(t)
	id2 := "chain3/1"
	a.instances[id2] = &pb.ChainInstance{Id: id2, Chain: "chain3", Worker: "w1", State: "attached", Core: 1, Vlan: 102}
	d2, _ := a.desiredOf(a.instances[id2])
	act := a.lastActual[id]
	act.ID = id2
	act.Containers = []reconcile.Container{{Position: 0, Spec: d2.Spec, Running: true}, {Position: 1, Spec: d2.Spec, Running: true}}
	a.lastActual[id2] = act
	cs := &coopschedBarrier{both: make(chan struct{})}
	a.Coopsched = cs
	a.attachNow(context.Background(), id)
	a.attachNow(context.Background(), id2)
	a.workers.Wait()
	if cs.calls != 2 || !cs.together {
		t.Fatalf("%d attaches, together %v: want both at once", cs.calls, cs.together)
	}
}

// coopschedHeld holds every Attach until release is closed.
type coopschedHeld struct {
	pb.CoopschedClient
	started chan struct{}
	release chan struct{}
}

func (c *coopschedHeld) Attach(_ context.Context, r *pb.AttachRequest, _ ...grpc.CallOption) (*pb.GroupStatus, error) {
	close(c.started)
	<-c.release
	return &pb.GroupStatus{GroupId: r.GroupId}, nil
}

func Test_a_pass_waits_for_an_attach_on_the_event_before_it_reads_the_worker(t *testing.T) {
	// The pass the same event kicks must not fork ovs-vsctl and ip while the attach's
	// coopsched call is under way: it waits, then reads a worker that has the attach.
	a, id, _ := pooledInstance(t)
	cs := &coopschedHeld{started: make(chan struct{}), release: make(chan struct{})}
	a.Coopsched = cs
	a.attachNow(context.Background(), id)
	<-cs.started
	passGoes := make(chan struct{})
	go func() {
		a.mu.Lock()
		a.waitEventAttaches()
		a.mu.Unlock()
		close(passGoes)
	}()
	select {
	case <-passGoes:
		t.Fatal("the pass went on while the attach was under way")
	case <-time.After(100 * time.Millisecond):
	}
	close(cs.release)
	select {
	case <-passGoes:
	case <-time.After(5 * time.Second):
		t.Fatal("the pass still waited after the attach ended")
	}
	a.workers.Wait()
	a.mu.Lock()
	if a.eventAttaches != 0 || a.busy[id] {
		t.Fatalf("after the attach: %d under way, busy %v", a.eventAttaches, a.busy[id])
	}
	a.mu.Unlock()

	// --pass-waits-for-attach=false (for comparison): the pass does not wait.
	a.cfg.PassWaitsForAttach = false
	a.attachedNow = map[string]attachMark{}
	cs = &coopschedHeld{started: make(chan struct{}), release: make(chan struct{})}
	a.Coopsched = cs
	a.attachNow(context.Background(), id)
	<-cs.started
	a.mu.Lock()
	a.waitEventAttaches()
	a.mu.Unlock()
	close(cs.release)
	a.workers.Wait()
}
