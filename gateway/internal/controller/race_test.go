// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/events"
	"github.com/keel-nfv/keel/gateway/internal/metrics"
	"github.com/keel-nfv/keel/gateway/internal/provider"
	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/keel-nfv/keel/gateway/internal/testredis"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// raceFlow is the i-th flow of the race test: its own source port and address, to chain3.
func raceFlow(i int) *pb.FiveTuple {
	return &pb.FiveTuple{SrcIp: fmt.Sprintf("198.18.0.%d", 1+i/50000), DstIp: "198.18.3.1",
		SrcPort: uint32(1024 + i%50000), DstPort: 80, Proto: 6}
}

// incarnation names one instance for its life: ids and VLANs are reused after a removal, the
// pair of them not while the instance lives. The watcher forgets an incarnation when it
// hears of its removal.
type incarnation struct {
	id   string
	vlan uint32
}

// Test_concurrent_flows_scale_redeploy_and_stats_keep_every_count: thousands of new and
// ending flows race faas-cli scale and redeploy of their chain, the agent's status reports and
// the control loop, all against one Redis. Afterwards every instance's flow count is the
// number of its live flows, every flow the ingress holds still has its instance (none was
// removed while attached), and no instance that started draining lost the mark while it lived.
func Test_concurrent_flows_scale_redeploy_and_stats_keep_every_count(t *testing.T) {
	redis := testredis.Start(t)
	st := redis.Store(t)
	ctx := context.Background()
	hub := events.NewHub()
	p := &provider.Provider{Store: st, Validator: onServer{}, Metrics: metrics.New(), Hub: hub, PoolSize: 2,
		DrainTimeout: time.Hour}
	srv := newServer(st, hub, p)
	cores := []uint32{1, 2, 3, 4, 5, 6, 7, 8}
	if _, err := srv.RegisterWorker(ctx, &pb.RegisterWorkerRequest{Worker: "local", CoreIds: cores}); err != nil {
		t.Fatal(err)
	}
	if err := p.Deploy(ctx, chainDeployment("NAT", "dst net 198.18.3.0/24"), false); err != nil {
		t.Fatal(err)
	}

	// Every instance the provider marked draining and did not remove, from the events it
	// published after each write.
	var drainMu sync.Mutex
	drained := map[incarnation]bool{}
	watch, cancel := hub.Subscribe()
	watchDone, cutOff := make(chan struct{}), false
	var cancelled atomic.Bool
	go func() {
		defer close(watchDone)
		for ev := range watch {
			in := ev.GetInstance()
			if in == nil {
				continue
			}
			drainMu.Lock()
			switch {
			case ev.Kind == pb.WatchEvent_INSTANCE_REMOVED:
				delete(drained, incarnation{in.Id, in.Vlan})
			case in.Draining:
				drained[incarnation{in.Id, in.Vlan}] = true
			}
			drainMu.Unlock()
		}
		cutOff = !cancelled.Load() // the hub cut the watcher off: it missed events
	}()

	const assigners, flowsEach = 6, 300
	var live sync.Map // flow index -> instance id, for the flows assigned and not released
	var wg, flowing sync.WaitGroup
	errs := make(chan error, 64)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
	}
	stop := make(chan struct{})
	for a := 0; a < assigners; a++ {
		flowing.Add(1)
		go func(a int) {
			defer flowing.Done()
			rng := rand.New(rand.NewPCG(uint64(a), 1))
			var mine []int
			for k := 0; k < flowsEach; k++ {
				i := a*flowsEach + k
				r, err := srv.AssignFlow(ctx, &pb.AssignFlowRequest{Flow: raceFlow(i), Chain: "chain3"})
				if status.Code(err) == codes.Unavailable {
					continue // the instance went meanwhile: the ingress asks again, as a new flow here
				}
				if err != nil {
					fail(fmt.Errorf("assign flow %d: %w", i, err))
					return
				}
				if r.Assigned && r.Instance != nil {
					live.Store(i, r.Instance.Id)
					mine = append(mine, i)
				}
				if len(mine) > 0 && rng.IntN(3) == 0 {
					j := rng.IntN(len(mine))
					f := mine[j]
					mine = append(mine[:j], mine[j+1:]...)
					live.Delete(f)
					if _, err := srv.ReleaseFlow(ctx, &pb.ReleaseFlowRequest{Flow: raceFlow(f)}); err != nil {
						fail(fmt.Errorf("release flow %d: %w", f, err))
						return
					}
				}
			}
		}(a)
	}
	// faas-cli scale and redeploy, the agent's reports and the control loop, as the flows come and go.
	loop := func(name string, steps int, step func(n int) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; n < steps; n++ {
				if err := step(n); err != nil {
					fail(fmt.Errorf("%s %d: %w", name, n, err))
					return
				}
			}
		}()
	}
	loop("scale", 200, func(n int) error { return p.Scale(ctx, "chain3", uint64(1+n%4)) })
	loop("redeploy", 40, func(n int) error {
		time.Sleep(10 * time.Millisecond)
		return p.Deploy(ctx, chainDeployment([]string{"ACL -> NAT", "NAT"}[n%2], "dst net 198.18.3.0/24"), true)
	})
	loop("stats", 2000, func(n int) error {
		insts, err := st.Instances(ctx, "chain3")
		if err != nil || len(insts) == 0 {
			return err
		}
		in := insts[n%len(insts)]
		err = srv.applyStats(ctx, &pb.InstanceStats{Instance: in.ID, Phase: "ready", RatePps: float64(n % 1000), Packets: uint64(n)})
		if status.Code(err) == codes.NotFound {
			return nil
		}
		return err
	})
	loop("reconcile", 300, func(int) error { time.Sleep(2 * time.Millisecond); return srv.Reconcile(ctx) })
	checked := make(chan struct{})
	go func() {
		defer close(checked)
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if err := drainKept(ctx, st, &drainMu, drained); err != nil {
				fail(err)
				return
			}
		}
	}()
	flowing.Wait()
	wg.Wait()
	close(stop)
	<-checked
	cancelled.Store(true)
	cancel()
	<-watchDone
	if cutOff {
		t.Fatal("the test's watcher fell behind the hub and was cut off: it cannot tell drained instances")
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}

	// What Redis holds, read by a store with a fresh cache.
	fresh := redis.Store(t)
	insts, err := fresh.Instances(ctx, "chain3")
	if err != nil {
		t.Fatal(err)
	}
	flows, err := fresh.Flows(ctx, "chain3")
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]uint32{}
	for _, f := range flows {
		per[f.Instance]++
	}
	byID := map[string]*store.Instance{}
	for _, in := range insts {
		byID[in.ID] = in
		if in.Flows != per[in.ID] {
			t.Errorf("instance %s counts %d flow(s), but %d are assigned to it", in.ID, in.Flows, per[in.ID])
		}
	}
	for id := range per {
		if byID[id] == nil {
			t.Errorf("%d flow(s) are assigned to instance %s, which is gone", per[id], id)
		}
	}
	held := map[string]string{}
	for _, f := range flows {
		held[f.Key] = f.Instance
	}
	lost := 0
	live.Range(func(k, v any) bool {
		i := k.(int)
		ft := raceFlow(i)
		key := fmt.Sprintf("%d %s:%d %s:%d", ft.Proto, ft.SrcIp, ft.SrcPort, ft.DstIp, ft.DstPort)
		if got, ok := held[key]; !ok || got != v.(string) {
			lost++
			if lost <= 5 {
				t.Errorf("flow %d was assigned to %s and never released, but the store holds %q for it (its instance removed while attached?)", i, v, got)
			}
		}
		return true
	})
	if lost > 5 {
		t.Errorf("... %d live flows lost in all", lost)
	}
	if err := drainKept(ctx, fresh, &drainMu, drained); err != nil {
		t.Error(err)
	}
	drainMu.Lock()
	t.Logf("%d instance(s) drained, %d instance(s) and %d flow(s) left", len(drained), len(insts), len(flows))
	drainMu.Unlock()
}

// drainKept fails when an instance that was marked draining, and not removed, is in the
// store without the mark. An instance removed just before another took its id and VLAN may
// be read before its removal is heard: a mismatch counts once it outlasts the removal's event.
func drainKept(ctx context.Context, st *store.Store, mu *sync.Mutex, drained map[incarnation]bool) error {
	lost := func() ([]*store.Instance, error) {
		insts, err := st.Instances(ctx, "chain3")
		if err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		var out []*store.Instance
		for _, in := range insts {
			if drained[incarnation{in.ID, in.VLAN}] && !in.Draining {
				out = append(out, in)
			}
		}
		return out, nil
	}
	first, err := lost()
	if err != nil || len(first) == 0 {
		return err
	}
	time.Sleep(50 * time.Millisecond)
	again, err := lost()
	if err != nil {
		return err
	}
	var errs []error
	for _, in := range again {
		errs = append(errs, fmt.Errorf("instance %s (VLAN %d) was marked draining and lost the mark: %+v", in.ID, in.VLAN, in))
	}
	return errors.Join(errs...)
}
