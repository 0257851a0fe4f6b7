// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/keel-nfv/keel/agent/internal/reconcile"
	"github.com/keel-nfv/keel/agent/internal/runtime"
	"github.com/keel-nfv/keel/agent/internal/vf"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
)

// observed is the worker's actual state in one pass.
type observed struct {
	actual     map[string]reconcile.Actual
	containers map[string][]runtime.Container // by instance
	vlans      map[string][]uint32            // VLANs of each instance's VFs and labels
	tenants    map[string]string              // from the containers' labels
}

var groupStates = map[pb.GroupState]reconcile.GroupState{
	pb.GroupState_GROUP_STATE_DETACHED:  reconcile.GroupDetached,
	pb.GroupState_GROUP_STATE_ATTACHED:  reconcile.GroupAttached,
	pb.GroupState_GROUP_STATE_DETACHING: reconcile.GroupDetaching,
	pb.GroupState_GROUP_STATE_CUT_OFF:   reconcile.GroupCutOff,
	pb.GroupState_GROUP_STATE_FAILED:    reconcile.GroupFailed,
	pb.GroupState_GROUP_STATE_FINISHED:  reconcile.GroupFinished,
}

// observe reads containers (by the worker label), the VFs, coopsched's sgroups and the
// pktbuf directories. Any source that does not answer fails the whole pass: acting on a
// partial view would tear down healthy instances.
func (a *Agent) observe(ctx context.Context) (*observed, error) {
	o := &observed{actual: map[string]reconcile.Actual{}, containers: map[string][]runtime.Container{},
		vlans: map[string][]uint32{}, tenants: map[string]string{}}
	get := func(id string) reconcile.Actual {
		act, ok := o.actual[id]
		if !ok {
			act.ID = id
		}
		return act
	}
	// The three reads go at once: an attach waits for the pass, and one after the other they
	// took 45-90 ms here (the VF list runs ovs-vsctl and ip), most of an attach's delay.
	var (
		list             []runtime.Container
		vfs              []vf.VF
		st               *pb.StatusResponse
		errC, errV, errS error
		wg               sync.WaitGroup
	)
	wg.Add(3)
	go func() {
		defer wg.Done()
		list, errC = a.Runtime.List(ctx, map[string]string{LabelWorker: a.cfg.Worker})
	}()
	go func() { defer wg.Done(); vfs, errV = a.VF.List(ctx) }()
	go func() { defer wg.Done(); st, errS = a.Coopsched.Status(ctx, &pb.StatusRequest{}) }()
	wg.Wait()
	if errC != nil {
		return nil, errC
	}
	for _, c := range list {
		id := c.Labels[LabelInstance]
		k, err := strconv.Atoi(c.Labels[LabelPosition])
		if id == "" || err != nil {
			continue
		}
		act := get(id)
		rc := reconcile.Container{Position: k, Spec: c.Labels[LabelSpec], Running: c.Running}
		if !c.Running {
			full, err := a.Runtime.Inspect(ctx, c.ID)
			if err != nil {
				return nil, err
			}
			rc.Why = runtime.Why(full)
		}
		act.Containers = append(act.Containers, rc)
		if act.Created.IsZero() || c.Created.Before(act.Created) {
			act.Created = c.Created
		}
		o.actual[id] = act
		o.containers[id] = append(o.containers[id], c)
		o.tenants[id] = c.Labels[LabelTenant]
		if v, err := strconv.ParseUint(c.Labels[LabelVLAN], 10, 32); err == nil {
			o.vlans[id] = appendNew(o.vlans[id], uint32(v))
		}
	}
	for _, act := range o.actual {
		sort.Slice(act.Containers, func(i, j int) bool { return act.Containers[i].Position < act.Containers[j].Position })
	}

	if errV != nil {
		return nil, errV
	}
	a.mu.Lock()
	byVLAN := map[uint32]string{}
	for id, in := range a.instances {
		byVLAN[in.Vlan] = id
	}
	a.mu.Unlock()
	for id, vs := range o.vlans {
		for _, v := range vs {
			byVLAN[v] = id
		}
	}
	for _, v := range vfs {
		id := v.Instance
		if id == "" {
			id = byVLAN[v.VLAN]
		}
		if id == "" {
			continue
		}
		act := get(id)
		act.VF = act.VF || v.Wired
		o.actual[id] = act
		o.vlans[id] = appendNew(o.vlans[id], v.VLAN)
	}

	if errS != nil {
		return nil, fmt.Errorf("coopsched status: %w", errS)
	}
	for _, g := range st.Groups {
		id, ok := InstanceOfGroup(g.GroupId)
		if !ok {
			continue
		}
		_, known := o.actual[id]
		if !known && !strings.HasPrefix(g.PktbufPath, a.cfg.PktbufDir+"/") {
			continue // not one of this agent's sgroups
		}
		act := get(id)
		act.Group = groupStates[g.State]
		act.GroupCore = int32(g.Core)
		act.GroupBatch = g.Batch
		o.actual[id] = act
	}

	// An instance's directories: its pktbuf directory, and its secrets directory (an
	// instance that is gone but for its Redis login is removed, login and all).
	dirs := []string{a.cfg.PktbufDir}
	if a.cfg.NFLogins() {
		dirs = append(dirs, a.cfg.SecretsDir)
	}
	for _, dir := range dirs {
		ents, err := os.ReadDir(dir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		for _, e := range ents {
			if id, ok := InstanceOfGroup(e.Name()); ok && e.IsDir() {
				act := get(id)
				act.Dir = true
				o.actual[id] = act
			}
		}
	}
	return o, nil
}

func appendNew(s []uint32, v uint32) []uint32 {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}
