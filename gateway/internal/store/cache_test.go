// SPDX-License-Identifier: Apache-2.0

package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/keel-nfv/keel/gateway/internal/testredis"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"github.com/openfaas/faas-provider/types"
	"github.com/redis/go-redis/v9"
)

// contents is everything a store reads, as JSON: functions, workers, flows and the instances
// of the chains named.
func contents(t *testing.T, st *store.Store, chains ...string) string {
	t.Helper()
	ctx := context.Background()
	var all struct {
		Functions []*chain.Function
		Workers   map[string]*store.Worker
		Flows     []*store.Flow
		Instances map[string][]*store.Instance
	}
	var err error
	if all.Functions, err = store.List[chain.Function](ctx, st); err != nil {
		t.Fatal(err)
	}
	if all.Workers, err = st.Workers(ctx); err != nil {
		t.Fatal(err)
	}
	if all.Flows, err = st.Flows(ctx, ""); err != nil {
		t.Fatal(err)
	}
	all.Instances = map[string][]*store.Instance{}
	for _, c := range chains {
		if all.Instances[c], err = st.Instances(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	b, err := json.Marshal(all)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// sameAsRedis fails the test unless st reads what a store that has cached nothing reads.
func sameAsRedis(t *testing.T, srv *testredis.Server, st *store.Store, step string) {
	t.Helper()
	got, want := contents(t, st, "chain3", "chain4"), contents(t, srv.Store(t), "chain3", "chain4")
	if got != want {
		t.Fatalf("after %s the cache reads\n%s\nbut Redis holds\n%s", step, got, want)
	}
}

func chainFunction(name string) *chain.Function {
	return &chain.Function{Kind: chain.KindChain, Replicas: 2, Deployment: types.FunctionDeployment{Service: name,
		Labels: &map[string]string{chain.LabelKind: chain.KindChain}},
		Chain: &chain.Chain{Name: name, Spec: "NAT", Filter: "dst net 198.18.3.0/24", NFs: []string{"nat"}}}
}

func Test_the_cache_reads_what_Redis_holds_after_every_kind_of_write(t *testing.T) {
	srv := testredis.Start(t)
	st := srv.Store(t)
	ctx := context.Background()
	must := func(step string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", step, err)
		}
		sameAsRedis(t, srv, st, step)
	}
	sameAsRedis(t, srv, st, "nothing") // every part is cached from here on
	must("Put", st.Put(ctx, chainFunction("chain3")))
	must("Put of another", st.Put(ctx, chainFunction("chain4")))
	f := chainFunction("chain3")
	f.Replicas = 3
	must("Put that replaces", st.Put(ctx, f))
	must("PutWorker", st.PutWorker(ctx, &store.Worker{Name: "local", CoreIDs: []uint32{1}, VFPorts: map[uint32]string{2: "vf0"}}))
	a := &store.Instance{ID: "chain3/0", Chain: "chain3", Worker: "local", VLAN: 100, State: store.Pooled, Core: -1}
	b := &store.Instance{ID: "chain3/1", Chain: "chain3", Worker: "local", VLAN: 101, State: store.Pooled, Core: -1}
	must("PutInstance", st.PutInstance(ctx, a))
	must("PutInstance of another", st.PutInstance(ctx, b))
	a.State, a.Core, a.Flows, a.CyclesPerPacket = store.Attached, 1, 1, 120
	f1 := &store.Flow{Key: "17 198.18.0.1:1024 198.18.3.1:5001", Chain: "chain3", Instance: a.ID, VLAN: 100, Since: time.Now().UTC()}
	must("PutFlow", st.AssignFlow(ctx, f1, a, true))
	f2 := &store.Flow{Key: "17 198.18.0.1:1025 198.18.3.1:5001", Chain: "chain4", Since: time.Now().UTC()}
	must("PutFlow of a switch-only chain", st.PutFlow(ctx, f2))
	a.Draining, a.Runs = true, &pb.Chain{Name: "chain3", Spec: "ACL -> NAT"}
	must("UpdateInstance", st.UpdateSpec(ctx, a, false))
	a.Flows = 0
	must("DeleteFlow", ignoreCount(st.DeleteFlow(ctx, f1)))
	must("DeleteFlow of a switch-only chain", ignoreCount(st.DeleteFlow(ctx, f2)))
	must("PutFlow again", st.AssignFlow(ctx, f1, b, true))
	must("DeleteInstance", st.DeleteInstance(ctx, b, false))
	must("Delete", st.Delete(ctx, "chain3"))
	if in, err := st.Instance(ctx, "chain3", "chain3/0"); in != nil || err != nil {
		t.Fatalf("Instance of a removed chain: %v, %v", in, err)
	}
}

func Test_reads_are_copies_the_caller_may_change(t *testing.T) {
	st := testredis.Store(t)
	ctx := context.Background()
	if err := st.Put(ctx, chainFunction("chain3")); err != nil {
		t.Fatal(err)
	}
	in := &store.Instance{ID: "chain3/0", Chain: "chain3", VLAN: 100, State: store.Pooled, Core: -1,
		Runs: &pb.Chain{Name: "chain3", Spec: "NAT", Nfs: []string{"nat"}}}
	if err := st.PutInstance(ctx, in); err != nil {
		t.Fatal(err)
	}
	if err := st.PutWorker(ctx, &store.Worker{Name: "local", CoreIDs: []uint32{1}, VFPorts: map[uint32]string{2: "vf0"}}); err != nil {
		t.Fatal(err)
	}
	// What was written is not the cache's either.
	in.Flows, in.Runs.Nfs[0] = 7, "acl"
	before := contents(t, st, "chain3")

	insts, _ := st.Instances(ctx, "chain3")
	insts[0].Flows, insts[0].Runs.Nfs[0], insts[0].Runs.Spec = 9, "acl", "ACL"
	one, _ := st.Instance(ctx, "chain3", "chain3/0")
	one.State = store.Attached
	ws, _ := st.Workers(ctx)
	ws["local"].CoreIDs[0], ws["local"].VFPorts[2] = 5, "eth9"
	f, _ := store.Get[chain.Function](ctx, st, "chain3")
	(*f.Deployment.Labels)["team"], f.Chain.NFs[0] = "blue", "acl"
	all, _ := store.List[chain.Function](ctx, st)
	all[0].Replicas = 9
	if after := contents(t, st, "chain3"); after != before {
		t.Fatalf("changing what reads returned changed the store:\n%s\nwas\n%s", after, before)
	}
	if insts, _ := st.Instances(ctx, "chain3"); insts[0].Flows != 0 || insts[0].Runs.Nfs[0] != "nat" {
		t.Fatalf("instance read back %+v", insts[0])
	}
}

// AssignFlow changes the instance it read before PutFlow; a PutFlow that fails must leave the
// cache as Redis is.
func Test_a_failed_write_leaves_the_cache_as_Redis_is(t *testing.T) {
	srv := testredis.Start(t)
	st := srv.Store(t)
	ctx := context.Background()
	a := &store.Instance{ID: "chain3/0", Chain: "chain3", VLAN: 100, State: store.Pooled, Core: -1}
	if err := st.PutInstance(ctx, a); err != nil {
		t.Fatal(err)
	}
	sameAsRedis(t, srv, st, "PutInstance")
	in, _ := st.Instance(ctx, "chain3", "chain3/0")
	in.State, in.Core, in.Flows = store.Attached, 1, 1
	f := &store.Flow{Key: "17 198.18.0.1:1024 198.18.3.1:5001", Chain: "chain3", Instance: in.ID, VLAN: 100}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := st.AssignFlow(cancelled, f, in, true); err == nil {
		t.Fatal("PutFlow with a cancelled context succeeded")
	}
	sameAsRedis(t, srv, st, "a PutFlow that failed")
	if got, _ := st.Instance(ctx, "chain3", "chain3/0"); got.State != store.Pooled || got.Flows != 0 {
		t.Fatalf("after the failed PutFlow the instance reads %+v, want it pooled without flows", got)
	}
	// ErrGone: the instance was removed (through the store) after the caller read it.
	if err := st.DeleteInstance(ctx, a, false); err != nil {
		t.Fatal(err)
	}
	if err := st.AssignFlow(ctx, f, in, true); !errors.Is(err, store.ErrGone) {
		t.Fatalf("PutFlow on a removed instance: %v, want ErrGone", err)
	}
	sameAsRedis(t, srv, st, "a PutFlow on a removed instance")
	if err := st.UpdateSpec(ctx, in, false); !errors.Is(err, store.ErrGone) {
		t.Fatalf("UpdateInstance on a removed instance: %v, want ErrGone", err)
	}
	sameAsRedis(t, srv, st, "an UpdateInstance on a removed instance")
}

// loseReply makes the next command's reply fail after Redis ran the command: a timeout or a
// broken connection after the write went out. A new connection's handshake is left alone.
type loseReply struct{ armed bool }

var handshake = map[string]bool{"hello": true, "info": true, "client": true}

func (h *loseReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *loseReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if h.armed && !handshake[cmds[0].Name()] {
			h.armed = false
			for _, cmd := range cmds {
				cmd.SetErr(errors.New("i/o timeout"))
			}
			return cmds[0].Err()
		}
		return err
	}
}
func (h *loseReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.armed && !handshake[cmd.Name()] {
			h.armed = false
			cmd.SetErr(errors.New("i/o timeout"))
			return cmd.Err()
		}
		return err
	}
}

func Test_a_write_whose_reply_is_lost_drops_the_cache(t *testing.T) {
	srv := testredis.Start(t)
	st := srv.Store(t)
	lose := &loseReply{}
	st.AddHook(lose)
	ctx := context.Background()
	in := &store.Instance{ID: "chain3/0", Chain: "chain3", VLAN: 100, State: store.Pooled, Core: -1}
	if err := st.PutInstance(ctx, in); err != nil {
		t.Fatal(err)
	}
	if err := st.AssignFlow(ctx, &store.Flow{Key: "17 198.18.0.1:1023 198.18.3.1:5001", Chain: "chain3", Instance: in.ID}, in, true); err != nil {
		t.Fatal(err)
	}
	sameAsRedis(t, srv, st, "PutFlow")
	for _, w := range []struct {
		what  string
		write func() error
	}{
		{"PutFlow", func() error {
			return st.AssignFlow(ctx, &store.Flow{Key: "17 198.18.0.1:1024 198.18.3.1:5001", Chain: "chain3", Instance: in.ID}, in, true)
		}},
		{"PutFlow of a switch-only chain", func() error {
			return st.PutFlow(ctx, &store.Flow{Key: "17 198.18.0.1:1025 198.18.4.1:5001", Chain: "chain4"})
		}},
		{"Put", func() error { return st.Put(ctx, chainFunction("chain4")) }},
		{"PutWorker", func() error { return st.PutWorker(ctx, &store.Worker{Name: "local"}) }},
		{"DeleteInstance", func() error { return st.DeleteInstance(ctx, in, false) }},
	} {
		lose.armed = true
		if err := w.write(); err == nil {
			t.Fatalf("%s: no error with the reply lost", w.what)
		}
		sameAsRedis(t, srv, st, w.what+" whose reply was lost")
	}
}

// raw is a Redis client beside the store: another process that writes keel's keys, or an
// operator's redis-cli.
func raw(t *testing.T, srv *testredis.Server) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	return c
}

func Test_a_script_that_finds_a_cached_instance_missing_drops_the_cache(t *testing.T) {
	srv := testredis.Start(t)
	st := srv.Store(t)
	ctx := context.Background()
	a := &store.Instance{ID: "chain3/0", Chain: "chain3", VLAN: 100, State: store.Pooled, Core: -1}
	b := &store.Instance{ID: "chain3/1", Chain: "chain3", VLAN: 101, State: store.Pooled, Core: -1}
	for _, in := range []*store.Instance{a, b} {
		if err := st.PutInstance(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	sameAsRedis(t, srv, st, "PutInstance")
	if err := raw(t, srv).Del(ctx, "keel:instances:chain3").Err(); err != nil {
		t.Fatal(err)
	}
	gen := st.Generation()
	if err := st.UpdateSpec(ctx, a, false); !errors.Is(err, store.ErrGone) {
		t.Fatalf("UpdateInstance of an instance Redis lost: %v, want ErrGone", err)
	}
	if st.Generation() == gen {
		t.Fatal("the generation stayed when the cache was dropped")
	}
	sameAsRedis(t, srv, st, "an ErrGone for an instance the cache held") // chain3/1 is gone too
}

func Test_a_flushed_Redis_is_read_again_at_the_next_Recheck(t *testing.T) {
	srv := testredis.Start(t)
	st := srv.Store(t)
	ctx := context.Background()
	if err := st.Put(ctx, chainFunction("chain3")); err != nil {
		t.Fatal(err)
	}
	if err := st.PutInstance(ctx, &store.Instance{ID: "chain3/0", Chain: "chain3", VLAN: 100}); err != nil {
		t.Fatal(err)
	}
	sameAsRedis(t, srv, st, "Put")
	if dropped, err := st.Recheck(ctx); dropped || err != nil {
		t.Fatalf("Recheck of a cache that matches Redis: dropped %v, %v", dropped, err)
	}
	if err := raw(t, srv).FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if dropped, err := st.Recheck(ctx); !dropped || err != nil {
		t.Fatalf("Recheck after FLUSHALL: dropped %v, %v", dropped, err)
	}
	sameAsRedis(t, srv, st, "FLUSHALL and Recheck")
	if all, _ := store.List[chain.Function](ctx, st); len(all) != 0 {
		t.Fatalf("functions after FLUSHALL: %v", all)
	}
}

func Test_a_restarted_Redis_is_read_again_from_the_first_command(t *testing.T) {
	srv := testredis.Start(t)
	st := srv.Store(t)
	ctx := context.Background()
	if err := st.Put(ctx, chainFunction("chain3")); err != nil {
		t.Fatal(err)
	}
	if err := st.PutInstance(ctx, &store.Instance{ID: "chain3/0", Chain: "chain3", VLAN: 100}); err != nil {
		t.Fatal(err)
	}
	sameAsRedis(t, srv, st, "Put")
	srv.Restart(t) // empty: what an AOF behind its writes loses, all of it
	// Any command reaches the new server on a new connection, which drops the cache before
	// the command runs; no Recheck is needed.
	if _, err := st.Invocations(ctx, "chain3"); err != nil {
		t.Fatal(err)
	}
	if all, _ := store.List[chain.Function](ctx, st); len(all) != 0 {
		t.Fatalf("functions after the restart: %v", all)
	}
	sameAsRedis(t, srv, st, "a restart")
}

func Test_Generation_changes_with_the_functions_only(t *testing.T) {
	st := testredis.Store(t)
	ctx := context.Background()
	g0 := st.Generation()
	if err := st.Put(ctx, chainFunction("chain3")); err != nil {
		t.Fatal(err)
	}
	g1 := st.Generation()
	if err := st.PutInstance(ctx, &store.Instance{ID: "chain3/0", Chain: "chain3", VLAN: 100}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutWorker(ctx, &store.Worker{Name: "local"}); err != nil {
		t.Fatal(err)
	}
	g2 := st.Generation()
	if err := st.Delete(ctx, "chain3"); err != nil {
		t.Fatal(err)
	}
	g3 := st.Generation()
	if g1 == g0 || g2 != g1 || g3 == g2 {
		t.Fatalf("generations %d, Put %d, PutInstance and PutWorker %d, Delete %d", g0, g1, g2, g3)
	}
}

// Writers that race (the provider and the controller hold different locks) leave the cache
// as Redis is: each write's cache update follows its Redis call in Redis's order. (A check of
// the outcome under -race, not a sure detector of a missing write lock: the two orders only
// differ when the last writes to one instance cross between reply and update.)
func Test_racing_writers_leave_the_cache_as_Redis_is(t *testing.T) {
	srv := testredis.Start(t)
	st := srv.Store(t)
	ctx := context.Background()
	for _, id := range []string{"chain3/0", "chain3/1"} {
		if err := st.PutInstance(ctx, &store.Instance{ID: id, Chain: "chain3", VLAN: 100, State: store.Pooled, Core: -1}); err != nil {
			t.Fatal(err)
		}
	}
	sameAsRedis(t, srv, st, "PutInstance")
	done := make(chan error)
	for w := range 4 {
		go func() {
			var err error
			for i := range 100 {
				id := []string{"chain3/0", "chain3/1"}[(w+i)%2]
				in, rerr := st.Instance(ctx, "chain3", id)
				if rerr != nil {
					err = rerr
					break
				}
				in.Packets = uint64(1000*w + i)
				f := &store.Flow{Key: fmt.Sprintf("17 198.18.0.%d:%d 198.18.3.1:5001", w+1, 1024+i), Chain: "chain3", Instance: id}
				err = errors.Join(err, st.AssignFlow(ctx, f, in, false), st.UpdateStatus(ctx, in))
				switch i % 3 {
				case 1:
					err = errors.Join(err, ignoreCount(st.DeleteFlow(ctx, f)))
				case 2:
					err = errors.Join(err, st.Put(ctx, chainFunction(fmt.Sprintf("chain%d", 4+w))))
				}
			}
			done <- err
		}()
	}
	for range 4 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	sameAsRedis(t, srv, st, "racing writers")
}

func Test_New_reaches_Redis_on_its_Unix_socket(t *testing.T) {
	srv := testredis.Start(t)
	st := srv.StoreAt(t, srv.Socket)
	ctx := context.Background()
	if err := st.Put(ctx, chainFunction("chain3")); err != nil {
		t.Fatal(err)
	}
	if err := st.PutInstance(ctx, &store.Instance{ID: "chain3/0", Chain: "chain3", VLAN: 100}); err != nil {
		t.Fatal(err)
	}
	sameAsRedis(t, srv, st, "writes over the Unix socket")
}

// ignoreCount is the error of a DeleteFlow, its flow count aside.
func ignoreCount(_ uint32, err error) error { return err }
