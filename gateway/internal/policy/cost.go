// SPDX-License-Identifier: Apache-2.0

package policy

import "math"

// Cost is what one core spends on a chain instance, in TSC cycles per packet, split the way
// Galleon's eq. 1 splits it.
type Cost struct {
	NFCycles      []float64 // T_{v,i}: each server NF, in chain order
	IOCycles      float64   // receive, transmit and the run loop, once per packet
	CopyCycles    float64   // copy into the chain buffer; paid only by isolated chains (≥ 2 NFs)
	HandoffCycles float64   // T_ctx·Freq: one yield between NF processes under coopsched
	FreqHz        float64   // the core's clock
	BurstMax      int       // b_m: packets per burst at most (the NIC's burst, 32)
}

// N is the number of server NFs (processes) of the chain.
func (c Cost) N() int { return len(c.NFCycles) }

// Isolated tells whether the chain runs as several processes under coopsched, paying the
// copy into the chain buffer and one handoff per NF and turn (a one-NF chain pays neither).
func (c Cost) Isolated() bool { return len(c.NFCycles) > 1 }

// nfSum is Σ_i T_{v,i}.
func (c Cost) nfSum() float64 {
	s := 0.0
	for _, t := range c.NFCycles {
		s += t
	}
	return s
}

// SingleCycles is the cycles per packet of the chain run to completion in one thread, with
// no isolation: the denominator of R̂_v in Galleon eq. 3 plus the I/O every packet pays.
func (c Cost) SingleCycles() float64 { return c.nfSum() + c.IOCycles }

// Cycles is the cycles per packet of the isolated chain at B bursts per turn of b packets
// each (b ∈ [1, b_m]): Galleon eq. 1's denominator, Σ T + N·T_ctx·Freq/(B·b), plus I/O and
// the copy.
func (c Cost) Cycles(bursts int, fill float64) float64 {
	cyc := c.SingleCycles()
	if !c.Isolated() {
		return cyc
	}
	if bursts < 1 {
		bursts = 1
	}
	fill = math.Max(1, math.Min(fill, float64(c.burstMax())))
	return cyc + c.CopyCycles + float64(c.N())*c.HandoffCycles/(float64(bursts)*fill)
}

// Rate is Galleon eq. 1: the packets per second one core sustains at B bursts per turn of
// b packets each.
func (c Cost) Rate(bursts int, fill float64) float64 { return c.FreqHz / c.Cycles(bursts, fill) }

// SingleRate is R̂_v of Galleon eq. 3: the chain run in a single thread.
func (c Cost) SingleRate() float64 { return c.FreqHz / c.SingleCycles() }

// MaxRate is the most packets per second one core sustains for the chain at full bursts and
// the largest batch.
func (c Cost) MaxRate(maxBursts int) float64 { return c.Rate(maxBursts, float64(c.burstMax())) }

func (c Cost) burstMax() int {
	if c.BurstMax <= 0 {
		return 32
	}
	return c.BurstMax
}

// Batch solves Galleon eqs. 2–3: the fewest bursts per turn B (1 ≤ B ≤ maxBursts) with
// R_v(B, b) ≥ p·R̃_v at bursts of b packets, where R_v is eq. 1,
//
//	R_v = Freq / (Σ_i T_{v,i} + N·T_ctx·Freq / (B_v·b_v))   (1)
//	min B_v  s.t.  R_v ≥ p·R̂_v,  R̂_v = Freq / Σ_i T_{v,i}   (2), (3)
//
// with keel's I/O and copy as per-packet terms of their own, and R̃_v the isolated chain's
// rate without handoffs (R̂_v of eq. 3 plus the copy into the chain buffer, which no batch
// size recovers). This bounds the handoffs' share of the core's time to 1−p, as Galleon §4.3
// intends. A chain of one NF has no handoff: B = 1. It is keel's one copy of the rule: the
// controller runs it before each SetBatch, keel-sim in its model, and the benchmarks through
// `keel-sim batch`.
func (c Cost) Batch(p, fill float64, maxBursts int) int {
	if !c.Isolated() || maxBursts <= 1 || p <= 0 || p >= 1 {
		return 1
	}
	fill = math.Max(1, math.Min(fill, float64(c.burstMax())))
	// Freq/(S + N·h/(B·b)) ≥ p·Freq/S  ⇔  B ≥ N·h / (b·S·(1/p − 1)), S = single + copy.
	s := c.SingleCycles() + c.CopyCycles
	b := int(math.Ceil(float64(c.N()) * c.HandoffCycles / (fill * s * (1/p - 1))))
	return max(1, min(b, maxBursts))
}
