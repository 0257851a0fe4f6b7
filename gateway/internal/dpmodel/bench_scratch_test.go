package dpmodel

import (
	"testing"

	"github.com/keel-nfv/keel/gateway/internal/costs"
)

func BenchmarkLoad(b *testing.B) {
	tb := costs.Default()
	c, _ := tb.Chain([]string{"tunnel", "ipv4fwd"}, 1024, 2.4e9)
	for i := 0; i < b.N; i++ {
		RunLoad(c, 5, 0.3*c.Rate(5, 32), 1_000_000, 1)
	}
}
