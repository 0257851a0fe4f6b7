// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"github.com/keel-nfv/keel/agent/internal/reconcile"
	"time"

	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Reconnect backoff toward the gateway, Docker's and coopsched's event streams.
const (
	backoffMin = 100 * time.Millisecond
	backoffMax = 5 * time.Second
)

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// followGateway registers the worker and follows Watch; when the stream ends it registers
// and watches again with backoff. Running instances are never touched because the
// gateway went away: the last desired state stays, only removals wait for a new SYNCED.
func (a *Agent) followGateway(ctx context.Context) {
	wait := backoffMin
	for ctx.Err() == nil {
		synced, err := a.watchOnce(ctx)
		a.mu.Lock()
		a.synced, a.connected = false, false
		a.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		if synced {
			wait = backoffMin
		}
		if status.Code(err) == codes.Unauthenticated {
			a.Log.Error("gateway: refused this agent's control-plane token (--control-token-file must hold "+
				"the gateway's token); trying again", "err", err, "in", wait.String())
		} else {
			a.Log.Warn("gateway: watch ended; reconnecting", "err", err, "in", wait.String())
		}
		if !sleepCtx(ctx, wait) {
			return
		}
		wait = min(2*wait, backoffMax)
	}
}

// watchOnce is one registration and Watch stream; it reports whether it reached SYNCED.
func (a *Agent) watchOnce(ctx context.Context) (bool, error) {
	req := &pb.RegisterWorkerRequest{Worker: a.cfg.Worker, Address: a.cfg.Address,
		Cores: uint32(len(a.cfg.Cores)), CoreIds: uint32s(a.cfg.Cores), VfCapacity: a.VF.Capacity()}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err := a.Control.RegisterWorker(rctx, req)
	cancel()
	if err != nil {
		return false, fmt.Errorf("register worker %s: %w", a.cfg.Worker, err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := a.Control.Watch(wctx, &pb.WatchRequest{Watcher: a.cfg.Worker})
	if err != nil {
		return false, fmt.Errorf("watch: %w", err)
	}
	a.mu.Lock()
	a.connected = true
	a.mu.Unlock()
	chains, instances := map[string]*pb.Chain{}, map[string]*pb.ChainInstance{}
	synced := false
	for {
		ev, err := stream.Recv()
		if err != nil {
			return synced, fmt.Errorf("watch: %w", err)
		}
		if !synced {
			if ev.Kind == pb.WatchEvent_SYNCED {
				synced = true
				a.mu.Lock()
				a.chains, a.instances, a.synced = chains, instances, true
				a.mu.Unlock()
				a.Log.Info("gateway: in sync", "chains", len(chains), "instances", len(instances))
				a.Kick()
				continue
			}
			applyEvent(chains, instances, ev, a.cfg.Worker)
			continue
		}
		a.mu.Lock()
		a.noteAttachAsked(ev)
		applyEvent(a.chains, a.instances, ev, a.cfg.Worker)
		a.mu.Unlock()
		if ev.Kind == pb.WatchEvent_INSTANCE_CHANGED && ev.Instance != nil && ev.Instance.Worker == a.cfg.Worker {
			a.attachNow(ctx, ev.Instance.Id)
		}
		a.Kick()
	}
}

// noteAttachAsked remembers when the gateway attached a pooled instance, one the last pass
// saw registered and detached, for keel_agent_attach_delay_seconds (a.mu held, before the
// event is applied).
func (a *Agent) noteAttachAsked(ev *pb.WatchEvent) {
	in := ev.Instance
	if ev.Kind != pb.WatchEvent_INSTANCE_CHANGED || in == nil || in.Worker != a.cfg.Worker || coreOf(in) < 0 {
		delete(a.attachAsked, ev.GetInstance().GetId())
		return
	}
	if prev := a.instances[in.Id]; prev != nil && coreOf(prev) >= 0 {
		return // attached before: the first event's time stands
	}
	if act, ok := a.lastActual[in.Id]; ok && act.Group == reconcile.GroupDetached {
		a.attachAsked[in.Id] = time.Now()
	}
}

// applyEvent applies one Watch event to the desired state of worker.
func applyEvent(chains map[string]*pb.Chain, instances map[string]*pb.ChainInstance, ev *pb.WatchEvent, worker string) {
	switch ev.Kind {
	case pb.WatchEvent_CHAIN_ADDED:
		if ev.Chain != nil {
			chains[ev.Chain.Name] = ev.Chain
		}
	case pb.WatchEvent_CHAIN_REMOVED:
		if ev.Chain != nil {
			delete(chains, ev.Chain.Name)
			for id, in := range instances {
				if in.Chain == ev.Chain.Name {
					delete(instances, id)
				}
			}
		}
	case pb.WatchEvent_INSTANCE_CHANGED:
		if in := ev.Instance; in != nil {
			if in.Worker == worker {
				instances[in.Id] = in
			} else {
				delete(instances, in.Id)
			}
		}
	case pb.WatchEvent_INSTANCE_REMOVED:
		if ev.Instance != nil {
			delete(instances, ev.Instance.Id)
		}
	}
}

func uint32s(v []int32) []uint32 {
	out := make([]uint32, len(v))
	for i, x := range v {
		out[i] = uint32(x)
	}
	return out
}

// followDocker turns Docker's container events into reconcile passes.
func (a *Agent) followDocker(ctx context.Context) {
	wait := backoffMin
	for ctx.Err() == nil {
		sctx, cancel := context.WithCancel(ctx)
		evs, errs := a.Runtime.Events(sctx, map[string]string{LabelWorker: a.cfg.Worker})
		a.Kick() // whatever happened while the stream was down
		err := func() error {
			for {
				select {
				case ev, ok := <-evs:
					if !ok {
						return ctx.Err()
					}
					switch ev.Action {
					case "die", "oom", "destroy", "stop", "kill":
						a.Log.Info("docker event", "action", ev.Action, "instance", ev.Labels[LabelInstance], "position", ev.Labels[LabelPosition])
						a.Kick()
					}
					wait = backoffMin
				case err := <-errs:
					return err
				}
			}
		}()
		cancel()
		if ctx.Err() != nil {
			return
		}
		a.Log.Warn("docker: event stream ended; reconnecting", "err", err, "in", wait.String())
		if !sleepCtx(ctx, wait) {
			return
		}
		wait = min(2*wait, backoffMax)
	}
}

// followCoopsched turns coopsched's watchdog events (cut-off, thread-exited) into passes.
func (a *Agent) followCoopsched(ctx context.Context) {
	wait := backoffMin
	var since uint64
	if st, err := a.Coopsched.Status(ctx, &pb.StatusRequest{}); err == nil {
		for _, e := range st.Events {
			since = max(since, e.Seq)
		}
	}
	for ctx.Err() == nil {
		stream, err := a.Coopsched.Events(ctx, &pb.EventsRequest{Since: since})
		for err == nil {
			var ev *pb.Event
			if ev, err = stream.Recv(); err == nil {
				since = ev.Seq
				wait = backoffMin
				a.Log.Info("coopsched event", "kind", ev.Kind, "group", ev.GroupId, "position", ev.Position, "message", ev.Message)
				a.Kick()
			}
		}
		if ctx.Err() != nil {
			return
		}
		a.Log.Warn("coopsched: event stream ended; reconnecting", "err", err, "in", wait.String())
		if !sleepCtx(ctx, wait) {
			return
		}
		wait = min(2*wait, backoffMax)
		a.Kick()
	}
}
