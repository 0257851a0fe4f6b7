// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"errors"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/pcapfilter"
	"github.com/keel-nfv/keel/gateway/internal/store"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// FlowRequest is one new flow of AssignMany: its 5-tuple, the chain the ingress chose and
// the ingress (its id).
type FlowRequest struct {
	Flow    pcapfilter.Flow
	Hint    string
	Ingress string
}

// FlowResult is AssignMany's answer for one flow: what Assign would have returned for it.
type FlowResult struct {
	Resp *pb.AssignFlowResponse
	Err  error
}

// pendingAssign is a decided flow of a batch whose write is still to come.
type pendingAssign struct {
	i   int // its index in the batch
	e   *indexedChain
	rec *store.Flow
	in  *store.Instance
}

// AssignMany assigns a batch of new flows as Assign would one after the other, in order: one
// read of the controller's state for the batch, each flow decided on the view that counts the
// flows decided before it, and one Redis round trip for every flow that goes to an attached
// instance. A decision that attaches a pooled instance writes the instance's spec and so
// takes Assign's own step (the flows decided before it are written first); a flow whose
// instance changed meanwhile is decided again the same way. A flow that appears twice gets
// its first answer twice, and a flow assigned before gets its assignment again, so a batch
// sent again after a lost answer assigns nothing twice.
func (s *Controller) AssignMany(ctx context.Context, reqs []FlowRequest) []FlowResult {
	out := make([]FlowResult, len(reqs))
	ix, err := s.chains(ctx)
	if err != nil {
		for i := range out {
			out[i].Err = status.Error(codes.Unavailable, err.Error())
		}
		return out
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	first := map[string]int{} // flow key -> its first index in the batch
	dup := map[int]int{}      // a repeated flow's index -> its first index
	var st *state
	var pending []pendingAssign
	for i, r := range reqs {
		e, err := classify(ix, r.Flow, r.Hint)
		if err != nil {
			out[i].Err = err
			continue
		}
		if e == nil {
			out[i].Resp = &pb.AssignFlowResponse{Reason: "no chain's filter matches the flow"}
			continue
		}
		key := FlowKey(r.Flow)
		if j, ok := first[key]; ok {
			dup[i] = j
			continue
		}
		first[key] = i
		if e.switchOnly {
			out[i].Resp, out[i].Err = s.assignLocked(ctx, e, key, r.Ingress)
			continue
		}
		if resp, err := s.assignedBefore(ctx, e, key); resp != nil || err != nil {
			out[i] = FlowResult{resp, err}
			continue
		}
		if st == nil {
			if st, err = s.state(ctx); err != nil {
				out[i].Err = status.Error(codes.Unavailable, err.Error())
				st = nil
				continue
			}
		}
		a := s.Policy.Assign(st.view, e.name())
		in := st.insts[a.Instance]
		switch {
		case in == nil:
			out[i].Resp = &pb.AssignFlowResponse{Chain: e.name(), Reason: a.Reason}
		case a.Attach:
			s.writeAssigns(ctx, st, pending, out)
			pending, st = nil, nil
			out[i].Resp, out[i].Err = s.assignLocked(ctx, e, key, r.Ingress)
		default:
			for v := range st.view.Instances {
				if st.view.Instances[v].ID == in.ID {
					st.view.Instances[v].Flows++ // the next flow's decision counts this one
				}
			}
			pending = append(pending, pendingAssign{i: i, e: e, in: in,
				rec: &store.Flow{Key: key, Chain: e.name(), Since: time.Now().UTC(), Ingress: r.Ingress}})
		}
	}
	s.writeAssigns(ctx, st, pending, out)
	for i, j := range dup {
		out[i] = out[j]
	}
	return out
}

// writeAssigns records the decided flows in one Redis round trip and sets their answers; a
// flow whose instance was removed or changed since st was read is assigned again on its own.
func (s *Controller) writeAssigns(ctx context.Context, st *state, pending []pendingAssign, out []FlowResult) {
	if len(pending) == 0 {
		return
	}
	batch := make([]store.FlowAssign, len(pending))
	for k, p := range pending {
		batch[k] = store.FlowAssign{Flow: p.rec, In: p.in}
	}
	errs, err := s.Store.AssignFlows(ctx, batch)
	if err != nil {
		for _, p := range pending {
			out[p.i].Err = status.Error(codes.Unavailable, err.Error())
		}
		return
	}
	chains := map[string]bool{}
	var again []pendingAssign
	for k, p := range pending {
		if errors.Is(errs[k], store.ErrGone) || errors.Is(errs[k], store.ErrStale) {
			again = append(again, p)
			continue
		}
		note := p.in.Note
		note.IdleSince, note.Threshold = time.Time{}, st.view.Chains[p.e.name()].Threshold
		s.Store.SetNote(p.in.Chain, p.in.ID, note)
		out[p.i].Resp = &pb.AssignFlowResponse{Assigned: true, Chain: p.e.name(), Instance: p.in.Proto()}
		chains[p.e.name()] = true
	}
	for name := range chains {
		var insts []*store.Instance
		for _, x := range st.insts {
			if x.Chain == name {
				insts = append(insts, x)
			}
		}
		s.Pool.SetChainMetrics(st.chains[name], insts)
	}
	for _, p := range again {
		out[p.i].Resp, out[p.i].Err = s.assignLocked(ctx, p.e, p.rec.Key, p.rec.Ingress)
	}
}
