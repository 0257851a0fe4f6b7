// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/keel-nfv/keel/agent/internal/reconcile"
	"github.com/keel-nfv/keel/agent/internal/runtime"
	"github.com/keel-nfv/keel/agent/internal/vf"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// coopschedTimeout bounds one coopsched call (Detach waits for a batch boundary, bounded
// by coopsched itself).
const coopschedTimeout = 5 * time.Second

// fast runs an attach, detach or batch change inline: they take microseconds to
// milliseconds, and scale-out must not wait behind a container start.
// via says who runs it: "pass" or "event" (attachNow).
func (a *Agent) fast(ctx context.Context, act reconcile.Action, via string) {
	ctx, cancel := context.WithTimeout(ctx, coopschedTimeout)
	defer cancel()
	group := GroupID(act.ID)
	var err error
	called := time.Now()
	switch act.Kind {
	case reconcile.Attach:
		_, err = a.Coopsched.Attach(ctx, &pb.AttachRequest{GroupId: group, Core: uint32(act.Core)})
	case reconcile.Detach:
		var r *pb.DetachResponse
		if r, err = a.Coopsched.Detach(ctx, &pb.DetachRequest{GroupId: group}); err == nil && !r.AtBoundary {
			a.Log.Warn("detach: the chain did not reach a batch boundary in time and was stopped", "instance", act.ID, "wait_us", r.WaitUs)
		}
	case reconcile.SetBatch:
		_, err = a.Coopsched.SetBatch(ctx, &pb.SetBatchRequest{GroupId: group, Batch: act.Batch})
	}
	done := time.Now() // coopsched runs it from here (an attach): the delay ends here, not after a.mu below
	a.countAction(act.Kind.String(), err)
	if err != nil {
		a.Log.Warn("reconcile: action failed; retried on the next pass", "action", act.String(), "err", err)
		return
	}
	a.mu.Lock()
	switch act.Kind {
	case reconcile.Attach:
		a.attachedNow[act.ID] = attachMark{core: act.Core, at: time.Now()} // the last pass's view no longer says so
	case reconcile.Detach:
		delete(a.attachedNow, act.ID)
	}
	asked, ok := a.attachAsked[act.ID]
	if ok && act.Kind == reconcile.Attach {
		delete(a.attachAsked, act.ID)
	}
	a.mu.Unlock()
	if ok && act.Kind == reconcile.Attach {
		d := done.Sub(asked)
		a.attachDelay.WithLabelValues(via).Observe(d.Seconds())
		a.Log.Info("attached a pooled instance", "instance", act.ID, "core", act.Core, "via", via,
			"since_event_ms", float64(d.Microseconds())/1000, "coopsched_ms", float64(done.Sub(called).Microseconds())/1000,
			"logged_after_ms", float64(time.Since(done).Microseconds())/1000)
	}
	a.Kick()
}

// startSlow runs a create, replace, fail or remove in its own goroutine, the instance
// marked busy meanwhile; a pass follows when it ends.
func (a *Agent) startSlow(ctx context.Context, act reconcile.Action, obs *observed) {
	a.mu.Lock()
	a.busy[act.ID] = true
	in, ch := a.instances[act.ID], (*pb.Chain)(nil)
	if in != nil {
		ch = chainOf(a.chains, in)
	}
	var specs []runtime.Spec
	if in != nil && ch != nil {
		specs = a.cfg.Specs(in, ch)
	}
	failedTenant := ""
	if f := a.fails[act.ID]; f != nil {
		failedTenant = f.tenant
	}
	if st := a.status[act.ID]; st != nil {
		switch act.Kind {
		case reconcile.Create, reconcile.Replace:
			st.phase, st.reason = "starting", ""
		case reconcile.Fail:
			st.phase, st.reason = "failed", act.Reason
		}
	}
	a.mu.Unlock()
	a.reportNow()
	own := teardownInfo{containers: obs.containers[act.ID], vlans: obs.vlans[act.ID], tenant: obs.tenants[act.ID]}
	if in != nil {
		own.vlans = appendNew(own.vlans, in.Vlan)
	}
	tenant := "" // the gateway's, for the NFs' Redis user
	if ch != nil {
		tenant = ch.Tenant
	}
	if own.tenant == "" {
		own.tenant = tenant
	}
	if own.tenant == "" {
		own.tenant = failedTenant // a failed instance no longer desired: nothing else names it
	}
	a.workers.Add(1)
	go func() {
		defer a.workers.Done()
		select {
		case a.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		err := a.slow(context.WithoutCancel(ctx), act, in, tenant, specs, own)
		<-a.slots
		a.countAction(act.Kind.String(), err)
		a.mu.Lock()
		delete(a.busy, act.ID)
		a.mu.Unlock()
		if err == nil || act.Kind != reconcile.Remove {
			a.Kick() // a failed remove waits for the next resync: Redis may be down a while
		}
	}()
}

// teardownInfo is what a teardown must remove besides what its id names.
type teardownInfo struct {
	containers []runtime.Container
	vlans      []uint32
	tenant     string
}

func (a *Agent) slow(ctx context.Context, act reconcile.Action, in *pb.ChainInstance, tenant string, specs []runtime.Spec, own teardownInfo) error {
	switch act.Kind {
	case reconcile.Remove:
		err := a.teardown(ctx, act.ID, own)
		if err == nil {
			err = a.deleteState(ctx, own.tenant, act.ID)
		}
		if err == nil && a.cfg.NFLogins() && a.Redis != nil {
			err = a.deleteNFUser(ctx, act.ID)
		}
		if err == nil && a.cfg.SecretsDir != "" {
			err = os.RemoveAll(a.cfg.SecretDir(act.ID)) // the chain's secrets too
		}
		a.mu.Lock()
		if err == nil {
			delete(a.fails, act.ID)
		} else {
			// Once the containers are gone nothing on the worker names the instance: a failure
			// record (with the tenant of its state) makes the next passes retry the Remove.
			f := a.fails[act.ID]
			if f == nil {
				f = &failure{reason: "remove: " + err.Error()}
				a.fails[act.ID] = f
			}
			if own.tenant != "" {
				f.tenant = own.tenant
			}
		}
		a.mu.Unlock()
		a.logResult(act, err, time.Time{})
		return err
	case reconcile.Fail:
		reason := act.Reason + a.deadContainers(ctx, act.ID)
		err := a.teardown(ctx, act.ID, own)
		a.failed(act.ID, reason)
		a.logResult(act, err, time.Time{})
		return err
	case reconcile.Replace:
		if err := a.teardown(ctx, act.ID, own); err != nil {
			a.logResult(act, err, time.Time{})
			return err
		}
	}
	if in == nil || len(specs) == 0 {
		return nil // no longer desired: the next pass removes what is left
	}
	start := time.Now()
	err := a.create(ctx, in, tenant, specs)
	if err == nil {
		a.awaitGroup(ctx, in.Id)
	}
	if err != nil {
		// Whatever was made goes, so the rebuild starts clean; NF state stays in Redis.
		if terr := a.teardown(ctx, in.Id, teardownInfo{vlans: []uint32{in.Vlan}}); terr != nil {
			a.Log.Warn("teardown after a failed create", "instance", in.Id, "err", terr)
		}
		a.failed(in.Id, err.Error())
	}
	a.logResult(act, err, start)
	return err
}

func (a *Agent) logResult(act reconcile.Action, err error, start time.Time) {
	if err != nil {
		a.Log.Warn("reconcile: action failed", "action", act.String(), "err", err)
		return
	}
	if !start.IsZero() {
		a.Log.Info("reconcile: done", "action", act.String(), "containers_up_ms", time.Since(start).Milliseconds())
		return
	}
	a.Log.Info("reconcile: done", "action", act.String())
}

// failed records a failure: phase failed with the reason, and the backoff before the rebuild.
func (a *Agent) failed(id, reason string) {
	a.mu.Lock()
	f := a.fails[id]
	if f == nil {
		f = &failure{}
		a.fails[id] = f
	}
	f.count++
	f.reason = reason
	if st := a.status[id]; st != nil && st.tenant != "" {
		f.tenant = st.tenant
	}
	f.notBefore = time.Now().Add(reconcile.Backoff(f.count))
	if st := a.status[id]; st != nil {
		st.phase, st.reason, st.attached, st.core = "failed", reason, false, -1
		st.restarts++
	}
	a.mu.Unlock()
	a.Log.Warn("instance failed", "instance", id, "reason", reason, "rebuild_in", reconcile.Backoff(f.count).String())
	a.reportNow()
}

// create builds an instance: a fresh directory, its NFs' Redis user (of tenant) and its
// chain's secrets, position 0's container, its VF moved in, then the other positions (Docker; Kubernetes starts them
// together in one Pod; either way pre-deployed detached: Galleon §5.3). keel-nf announces
// each position to coopsched; the sgroup forms detached when all have.
func (a *Agent) create(ctx context.Context, in *pb.ChainInstance, tenant string, specs []runtime.Spec) error {
	dir := a.cfg.InstanceDir(in.Id)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("stale files of %s: %w", in.Id, err)
	}
	if err := a.removeNIC(in.Id); err != nil { // pins of an instance that went with its VF
		return fmt.Errorf("stale NIC part of %s: %w", in.Id, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("directory of %s: %w", in.Id, err)
	}
	if a.cfg.NFLogins() && a.Redis != nil {
		rctx, cancel := context.WithTimeout(ctx, nfUserTimeout)
		err := a.ensureNFUser(rctx, tenant, in.Id)
		cancel()
		if err != nil {
			return err
		}
	}
	if needsChainSecrets(specs) {
		sctx, cancel := context.WithTimeout(ctx, nfUserTimeout)
		err := a.writeChainSecrets(sctx, in.Id)
		cancel()
		if err != nil {
			return err
		}
	}
	a.mu.Lock()
	ch := chainOf(a.chains, in)
	a.mu.Unlock()
	_, err := a.Runtime.CreateInstance(ctx, specs, func(c runtime.Container) error {
		if err := a.plug(ctx, in, c); err != nil {
			return err
		}
		// The NIC part runs before the instance can be attached: a flow's first packet
		// already goes through it.
		if ch != nil && len(ch.NicNfs) > 0 {
			return a.applyNIC(in, ch, c.Pid)
		}
		return nil
	})
	return err
}

// plug gives the instance its VF in position 0's container c.
func (a *Agent) plug(ctx context.Context, in *pb.ChainInstance, c runtime.Container) error {
	// A device plugin's VF is the one the kubelet gave position 0's container.
	if pp, ok := a.VF.(vf.PodPlugger); ok {
		if pod, container, ok := runtime.PodContainer(c.ID); ok {
			return pp.PlugPod(ctx, in.Id, in.Vlan, c.Pid, pod, container)
		}
	}
	return a.VF.Plug(ctx, in.Id, in.Vlan, c.Pid)
}

// awaitGroup waits (bounded by --register-timeout) until the instance's NFs have formed
// their sgroup, so the pass that reports it ready and attaches it follows at once:
// coopsched has no event for a group that forms.
func (a *Agent) awaitGroup(ctx context.Context, id string) {
	deadline := time.Now().Add(a.cfg.RegisterTimeout)
	for time.Now().Before(deadline) {
		cctx, cancel := context.WithTimeout(ctx, coopschedTimeout)
		st, err := a.Coopsched.Status(cctx, &pb.StatusRequest{})
		cancel()
		if err != nil {
			return
		}
		for _, g := range st.Groups {
			if g.GroupId == GroupID(id) {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// deadContainers describes the instance's containers that have stopped ("" if none), so a
// failure coopsched saw first still names the exit code and last words of the NF.
func (a *Agent) deadContainers(ctx context.Context, id string) string {
	list, err := a.Runtime.List(ctx, map[string]string{LabelWorker: a.cfg.Worker, LabelInstance: id})
	if err != nil {
		return ""
	}
	s := ""
	for _, c := range list {
		if c.Running {
			continue
		}
		if full, err := a.Runtime.Inspect(ctx, c.ID); err == nil && !full.Running {
			s += fmt.Sprintf("; NF container %s: %s", c.Labels[LabelPosition], runtime.Why(full))
		}
	}
	return s
}

// teardown removes everything of an instance but its NF state and Redis user: the sgroup
// (threads back to CFS), the containers, the VF and the directory.
func (a *Agent) teardown(ctx context.Context, id string, own teardownInfo) error {
	var errs []error
	a.forgetPod(id)
	if err := a.removeNIC(id); err != nil {
		errs = append(errs, err)
	}
	cctx, cancel := context.WithTimeout(ctx, coopschedTimeout)
	_, err := a.Coopsched.Unregister(cctx, &pb.UnregisterRequest{GroupId: GroupID(id)})
	cancel()
	if err != nil && status.Code(err) != codes.NotFound {
		errs = append(errs, fmt.Errorf("coopsched unregister %s: %w", id, err))
	}
	list, err := a.Runtime.List(ctx, map[string]string{LabelWorker: a.cfg.Worker, LabelInstance: id})
	if err != nil {
		errs = append(errs, err)
		list = own.containers
	}
	for _, c := range list {
		if err := a.Runtime.Remove(ctx, c.ID); err != nil {
			errs = append(errs, err)
		}
	}
	for _, v := range own.vlans {
		if err := a.VF.Unplug(ctx, id, v); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(a.cfg.InstanceDir(id)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// deleteState deletes the NF state of a removed instance from Redis:
// keel:state:<tenant>:<group>:* (keel-nf's keys, see nf-runtime redis_mirror).
//
// The tenant comes from the instance's container labels or its chain. A remove that is
// retried after its first teardown took the containers but failed on the VF, the group or
// the directory sees neither (the chain is gone too): the instance's group id alone then
// names its state, as the gateway's chain names, and so group ids, are unique across tenants.
func (a *Agent) deleteState(ctx context.Context, tenant, id string) error {
	if a.Redis == nil {
		return nil
	}
	pattern := stateKeys(tenant, id)
	if tenant == "" {
		pattern = "keel:state:*:" + globEscape(GroupID(id)) + ":*"
	}
	iter := a.Redis.Scan(ctx, 0, pattern, 256).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return fmt.Errorf("redis scan %s: %w", pattern, err)
	}
	if len(keys) == 0 {
		return nil
	}
	if err := a.Redis.Del(ctx, keys...).Err(); err != nil {
		return fmt.Errorf("redis del %s: %w", pattern, err)
	}
	a.Log.Info("deleted NF state", "instance", id, "keys", strconv.Itoa(len(keys)))
	return nil
}

func globEscape(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)
	return r.Replace(s)
}
