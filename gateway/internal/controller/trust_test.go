// SPDX-License-Identifier: Apache-2.0

package controller

import (
	"context"
	"testing"

	pb "github.com/keel-nfv/keel/proto/keel/v1"
)

// An instance whose NFs' files claim overload (a rate far past a core's, a full receive queue,
// drops, a huge cost per packet) while keel's own figures say it is idle is not marked
// overloaded, and the next flow goes to it rather than attaching the pooled instance; the
// same report with the VF refusing packets (keel's count) is an overload, and the next flow
// scales out.
func Test_the_controller_scales_on_keels_figures_not_on_what_the_NFs_report(t *testing.T) {
	srv, st, _ := flowRack(t, false)
	ctx := context.Background()
	first := assign(t, srv, 0)
	id := first.Instance.Id
	forged := &pb.InstanceStats{Worker: "local", Instance: id, Phase: "ready", Attached: true, Core: 1, Batch: 1,
		RatePps: 100, RateGbps: 1e-6, Packets: 1000, CyclesPerPacket: 2e6,
		NfReportedRatePps: 50e6, NfReportedQueueLen: 4096, NfReportedDrops: 1e6, NfReportedCyclesPerBatch: 1e9,
		NfReportedNfs: []*pb.NfStats{{Name: "acl", CyclesPerPacket: 1e7}, {Name: "nat", Position: 1, CyclesPerPacket: 1e7}}}
	if err := srv.applyStats(ctx, forged); err != nil {
		t.Fatal(err)
	}
	in, err := st.Instance(ctx, "chain3", id)
	if err != nil {
		t.Fatal(err)
	}
	if in.Overloaded || in.RatePps != 100 || in.NFQueueLen != 4096 {
		t.Fatalf("after a forged report: overloaded %v (%s), rate %v, NF queue %v; want idle by keel's figures, the NF's queue kept for display",
			in.Overloaded, in.Why, in.RatePps, in.NFQueueLen)
	}
	if next := assign(t, srv, 1); next.Instance.Id != id {
		t.Fatalf("the next flow went to %s: the NFs' own figures scaled the chain out", next.Instance.Id)
	}

	refused := forged
	refused.VfDropped = 40
	if err := srv.applyStats(ctx, refused); err != nil {
		t.Fatal(err)
	}
	if in, _ := st.Instance(ctx, "chain3", id); !in.Overloaded || in.NewVFDropped != 40 {
		t.Fatalf("40 packets refused by the VF: overloaded %v (%s), new refusals %d", in.Overloaded, in.Why, in.NewVFDropped)
	}
	if next := assign(t, srv, 2); next.Instance.Id == id {
		t.Fatalf("the next flow went to the overloaded %s", id)
	}
	// The next report without new refusals clears the mark.
	if err := srv.applyStats(ctx, refused); err != nil {
		t.Fatal(err)
	}
	if in, _ := st.Instance(ctx, "chain3", id); in.Overloaded || in.NewVFDropped != 0 {
		t.Fatalf("no new refusals: overloaded %v (%s), new refusals %d", in.Overloaded, in.Why, in.NewVFDropped)
	}
}
