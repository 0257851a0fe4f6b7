// SPDX-License-Identifier: Apache-2.0

package dpmodel

import (
	"math"
)

// Hist is an HDR-style histogram of latencies: log2 octaves of nanoseconds, each split into
// histSub linear sub-buckets (under 1.6 % relative error), counts as float64 so that a group
// of packets whose latencies spread evenly over a range can be added in one call.
type Hist struct {
	counts [histOct * histSub]float64
	total  float64
	max    float64 // seconds
}

const (
	histSub = 64
	histOct = 44 // 1 ns … 2^44 ns (about 4.9 hours)
)

// bucket of a value in ns: the octave from the float's exponent, the sub-bucket from the top
// bits of its mantissa (values under 1 ns go to bucket 0).
func bucket(ns float64) int {
	if ns < 1 {
		return 0
	}
	b := math.Float64bits(ns)
	i := int((b>>52)&0x7ff-1023)*histSub + int((b>>(52-6))&(histSub-1))
	return min(i, histOct*histSub-1)
}

// upper bound of bucket i in ns.
func upper(i int) float64 {
	oct, sub := i/histSub, i%histSub
	return math.Ldexp(1, oct) * (1 + float64(sub+1)/histSub)
}

// Add records n packets of latency v seconds.
func (h *Hist) Add(v float64, n float64) {
	if n <= 0 {
		return
	}
	h.counts[bucket(v*1e9)] += n
	h.total += n
	if v > h.max {
		h.max = v
	}
}

// AddRange records n packets whose latencies spread evenly over [lo, hi] seconds.
func (h *Hist) AddRange(lo, hi float64, n float64) {
	if n <= 0 {
		return
	}
	if hi < lo {
		lo, hi = hi, lo
	}
	// Clamp at 0 by comparison: math.Max's NaN and signed-zero cases cost time here (a call
	// per packet at low load) and change no bucket.
	if lo < 0 {
		lo = 0
	}
	if hi < 0 {
		hi = 0
	}
	if hi > h.max {
		h.max = hi
	}
	h.total += n
	ln, hn := lo*1e9, hi*1e9
	if hn-ln < 1e-3 {
		h.counts[bucket((ln+hn)/2)] += n
		return
	}
	// Evenly spread: up to rangePoints equally spaced points (the midpoints of equal
	// slots), each with its share of n.
	m := min(int(math.Ceil(n)), rangePoints)
	w, step := n/float64(m), (hn-ln)/float64(m)
	for j := 0; j < m; j++ {
		h.counts[bucket(ln+step*(float64(j)+0.5))] += w
	}
}

// rangePoints is how many points AddRange spreads a group of packets over.
const rangePoints = 32

// Merge adds o's counts to h.
func (h *Hist) Merge(o *Hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.total += o.total
	h.max = math.Max(h.max, o.max)
}

// Count is the number of packets recorded.
func (h *Hist) Count() float64 { return h.total }

// Max is the largest latency recorded, in seconds.
func (h *Hist) Max() float64 { return h.max }

// Quantile is the q-quantile in seconds (the upper edge of its bucket, at most Max): 0 when
// empty.
func (h *Hist) Quantile(q float64) float64 {
	if h.total <= 0 {
		return 0
	}
	want := q * h.total
	acc := 0.0
	for i, c := range h.counts {
		acc += c
		if c > 0 && acc >= want*(1-1e-12) {
			return math.Min(upper(i)/1e9, h.max)
		}
	}
	return h.max
}

// Reset empties the histogram.
func (h *Hist) Reset() { *h = Hist{} }

// Since is what h recorded after it was a copy of o (o a snapshot of h): a window of it. Its
// Max is h's, an upper bound of the window's (Quantile is at most Max).
func (h *Hist) Since(o *Hist) Hist {
	d := Hist{max: h.max}
	for i, c := range h.counts {
		d.counts[i] = math.Max(0, c-o.counts[i])
	}
	d.total = math.Max(0, h.total-o.total)
	return d
}
