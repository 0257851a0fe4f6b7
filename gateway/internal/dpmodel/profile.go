// SPDX-License-Identifier: Apache-2.0

package dpmodel

import (
	"fmt"
	"hash/fnv"
	"math"

	"github.com/keel-nfv/keel/gateway/internal/policy"
)

// ProfilePackets is how many packets DeriveProfile measures at each load (after a warm-up
// of a tenth of that).
const ProfilePackets = 500_000

// DeriveProfile is a chain's latency profile on one core from the queueing model of batched
// service (Galleon eq. 1, Fig. 4): one core, one sgroup at batch bursts per turn, Poisson
// arrivals at loads 0.05, 0.10 … 1.00 of the core's max rate for the cost and batch
// (cost.Rate(batch, 32)), and at each load the p50 and p99 latency and the longest queue.
func DeriveProfile(chain string, cost policy.Cost, batch, pktBytes int, seed uint64) policy.Profile {
	batch = max(1, batch)
	maxPps := cost.Rate(batch, BurstSize)
	p := policy.Profile{Chain: chain, PacketBytes: pktBytes, FreqHz: cost.FreqHz, Batch: batch, MaxPps: maxPps,
		Method: fmt.Sprintf("keel-sim queueing model (dpmodel): one core, Poisson arrivals, turns of up to %d bursts of %d, eq. 1 service, %d packets per load", batch, BurstSize, ProfilePackets)}
	h := fnv.New64a()
	h.Write([]byte(chain))
	base := seed ^ h.Sum64()
	for i := 1; i <= 20; i++ {
		load := float64(i) * 0.05
		pt := RunLoad(cost, batch, load*maxPps, ProfilePackets, base+uint64(i))
		pt.Load = float64(i) / 20
		p.Points = append(p.Points, pt)
	}
	return p
}

// RunLoad runs one core with one sgroup at pps for about packets packets (after a tenth of
// that as warm-up) and reports p50, p99 and the longest queue.
func RunLoad(cost policy.Cost, batch int, pps float64, packets int, seed uint64) policy.Point {
	var hist Hist
	c := NewCore(cost.FreqHz, seed, 0)
	g := NewSGroup("profile", cost, batch, DefaultQueueCap, &hist, seed*7+1, 0)
	c.Attach(g, 0, 0)
	g.SetRate(0, pps)
	warm := float64(packets) / 10 / pps
	c.RunUntil(warm)
	hist.Reset()
	g.QueueMax = 0
	c.RunUntil(warm + float64(packets)/pps)
	r3 := func(x float64) float64 { return math.Round(x*1e3) / 1e3 }
	return policy.Point{P50us: r3(hist.Quantile(0.5) * 1e6), P99us: r3(hist.Quantile(0.99) * 1e6), QueueMax: float64(g.QueueMax)}
}

// MaxRate is the rate one saturated core serves for the cost at batch bursts per turn, from
// the model (arrivals at twice eq. 1's rate for the given duration of simulated time).
func MaxRate(cost policy.Cost, batch int, seconds float64, seed uint64) float64 {
	var hist Hist
	c := NewCore(cost.FreqHz, seed, 0)
	g := NewSGroup("max", cost, batch, DefaultQueueCap, &hist, seed*7+1, 0)
	c.Attach(g, 0, 0)
	g.SetRate(0, 2*cost.Rate(max(1, batch), BurstSize))
	c.RunUntil(seconds / 10)
	s0 := g.Served
	c.RunUntil(seconds * 1.1)
	return float64(g.Served-s0) / (c.T - seconds/10)
}
