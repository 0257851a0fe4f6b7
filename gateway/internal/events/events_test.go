// SPDX-License-Identifier: Apache-2.0

package events

import (
	"testing"

	pb "github.com/keel-nfv/keel/proto/keel/v1"
)

func Test_Hub_cuts_off_a_subscriber_that_falls_behind(t *testing.T) {
	h := NewHub()
	slow, cancelSlow := h.Subscribe()
	defer cancelSlow()
	fast, cancelFast := h.Subscribe()
	defer cancelFast()
	for i := 0; i < Backlog+1; i++ {
		h.Publish(&pb.WatchEvent{Kind: pb.WatchEvent_INSTANCE_CHANGED})
		if i < Backlog {
			<-fast
		}
	}
	n := 0
	for range slow {
		n++
	}
	if n != Backlog {
		t.Fatalf("slow subscriber read %d events before its channel closed, want %d", n, Backlog)
	}
	if _, ok := <-fast; !ok {
		t.Fatal("a subscriber that kept up was cut off")
	}
}
