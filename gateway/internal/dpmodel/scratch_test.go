package dpmodel

import (
	"testing"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/costs"
	"github.com/keel-nfv/keel/gateway/internal/policy"
)

func TestScratch(t *testing.T) {
	tb, err := costs.Load("../../../bench/results/nf_profile.json", "../../../bench/results/chain_length.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, nfs := range [][]string{{"tunnel", "ipv4fwd"}, {"acl", "urlfilter", "encrypt"}, {"acl", "nat"}} {
		c, _ := tb.Chain(nfs, 1024, 2.4e9)
		for _, cfg := range []policy.Config{policy.Keel(), policy.Metron()} {
			cc := c
			if !cfg.Isolation {
				cc = costs.RunToCompletion(c)
			}
			b := cfg.BatchFor(cc, 32)
			t0 := time.Now()
			p := DeriveProfile("x", cc, b, 1024, 1)
			t.Logf("%v %s batch %d max %.3f Mpps cyc %.0f took %v", nfs, cfg.Name, b, p.MaxPps/1e6, cc.Cycles(b, 32), time.Since(t0))
			for _, pt := range p.Points {
				t.Logf("  %.2f p50 %.1f p99 %.1f q %.0f", pt.Load, pt.P50us, pt.P99us, pt.QueueMax)
			}
			t.Logf("thr 50/100/200: %.2f %.2f %.2f", p.Threshold(50), p.Threshold(100), p.Threshold(200))
		}
	}
}
