// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/pcapfilter"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
)

// Flow reconciliation with the ToR. keel-torctl reports each expired flow rule once, on the
// WatchFlowsRemoved stream (FollowTor); a report made while the stream is down (the gateway
// or torctl restarting) is lost, and the gateway would count that flow for good: its instance
// never reaches zero flows and never gives its core back. SyncFlows closes that gap the level-
// triggered way: it compares the flows the gateway holds with the flow rules torctl holds on
// the switch (its record: the rules the switch acknowledged, less those it reported removed,
// read back from the switch whenever it connects; cheap enough to list every 10 s at thousands
// of flows, where reading the switch's table back costs torctl ~0.1 ms a rule), and releases
// those the switch no longer has.
//
// A flow is released only when two listings in a row, at least one interval apart, lack it
// and it was assigned before the first of them: a rule being installed right now, or one the
// switch lost and torctl is putting back from ListFlows (after an OVS restart), is not
// mistaken for an expired one. A listing that fails (torctl down, switch not connected) says
// nothing and is skipped.

// flowSync is SyncFlows' memory between listings: when each missing flow was first missed.
type flowSync struct {
	missing map[string]time.Time
}

// SyncFlows reconciles the gateway's flows with torctl's until ctx ends: a first listing at
// once, then one every interval; a listing that fails is tried again after a second (at most
// interval), so that flows a previous run of the stack left behind (the gateway started on its
// Redis, the switch empty) are released one interval after torctl answers, not two.
func (c *Controller) SyncFlows(ctx context.Context, tor pb.TorControlClient, interval time.Duration, logf func(string, ...any)) {
	fs := &flowSync{missing: map[string]time.Time{}}
	retry := min(time.Second, interval)
	for wait := time.Duration(0); ; {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		n, err := c.syncFlowsOnce(ctx, tor, fs, time.Now(), interval)
		wait = interval
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			logf("flow reconciliation with keel-torctl skipped: %v", err)
			wait = retry
		} else if n > 0 {
			logf("flow reconciliation: released %d flow(s) whose ToR rules are gone (their expiry was not reported)", n)
		}
	}
}

// syncFlowsOnce is one round of SyncFlows at now: it lists both sides and releases the flows
// missing from the switch in this listing and the one at least gap before. It returns how
// many it released.
func (c *Controller) syncFlowsOnce(ctx context.Context, tor pb.TorControlClient, fs *flowSync, now time.Time, gap time.Duration) (int, error) {
	// The gateway's flows first: one assigned after this read is not judged this round.
	held, err := c.Store.Flows(ctx, "")
	if err != nil {
		return 0, fmt.Errorf("the gateway's flows: %w", err)
	}
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	installed, err := tor.ListFlows(lctx, &pb.ListTorFlowsRequest{KeysOnly: true})
	if err != nil {
		return 0, fmt.Errorf("keel-torctl ListFlows: %w", err)
	}
	onSwitch, err := packedFlows(installed.GetPackedFlows())
	if err != nil {
		return 0, fmt.Errorf("keel-torctl ListFlows: %w", err)
	}
	// (a keel-torctl from before keys_only answers with whole records)
	for _, f := range installed.GetFlows() {
		if flow, err := ParseFlow(f.GetAssignment().GetFlow()); err == nil && !f.GetReinjectOnly() {
			onSwitch[FlowKey(flow)] = true
		}
	}
	released := 0
	missing := map[string]time.Time{}
	for _, f := range held {
		if onSwitch[f.Key] || !f.Since.Before(now.Add(-gap)) {
			continue
		}
		first, seen := fs.missing[f.Key]
		if !seen {
			missing[f.Key] = now
			continue
		}
		if now.Sub(first) < gap {
			missing[f.Key] = first
			continue
		}
		ok, err := c.Release(ctx, f.Key)
		if err != nil {
			return released, err
		}
		if ok {
			released++
		}
	}
	fs.missing = missing
	return released, nil
}

// packedFlowLen is the size of one flow in ListTorFlowsResponse.packed_flows: IPv4 source and
// destination, source and destination port (network order), IP protocol.
const packedFlowLen = 13

// packedFlows is the set of flow keys in a ListTorFlowsResponse.packed_flows.
func packedFlows(b []byte) (map[string]bool, error) {
	if len(b)%packedFlowLen != 0 {
		return nil, fmt.Errorf("packed_flows: %d bytes is not a whole number of %d-byte flows", len(b), packedFlowLen)
	}
	out := make(map[string]bool, len(b)/packedFlowLen)
	for ; len(b) > 0; b = b[packedFlowLen:] {
		out[FlowKey(pcapfilter.Flow{Src: netip.AddrFrom4([4]byte(b[0:4])), Dst: netip.AddrFrom4([4]byte(b[4:8])),
			SrcPort: binary.BigEndian.Uint16(b[8:10]), DstPort: binary.BigEndian.Uint16(b[10:12]), Proto: b[12]})] = true
	}
	return out, nil
}
