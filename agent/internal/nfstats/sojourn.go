// SPDX-License-Identifier: Apache-2.0

package nfstats

import (
	"fmt"
	"math"
	"math/bits"
	"time"
)

// The bucket geometry of nf-runtime's sojourn histogram (keel/sojourn.h, LatencyHist):
// values under 2^SubBucketBits cycles have a bucket each, every power of two above is split
// into 2^SubBucketBits linear sub-buckets, and values past 2^(maxOctave+1) share the last.
const (
	SubBucketBits = 6
	sub           = 1 << SubBucketBits
	maxOctave     = 36
	// Buckets is the fixed number of counters a Hist holds.
	Buckets = (maxOctave - SubBucketBits + 2) * sub
)

// Hist is a sojourn histogram in TSC cycles, with LatencyHist's buckets: fixed memory,
// a quantile read as its bucket's upper edge (at most 1/64 over the true value, never under).
type Hist struct {
	counts [Buckets]uint64
	count  uint64
	sum    uint64
}

// BucketOf is the bucket of v cycles (LatencyHist::Bucket).
func BucketOf(v uint64) int {
	if v < sub {
		return int(v)
	}
	msb := bits.Len64(v) - 1
	if msb > maxOctave {
		return Buckets - 1
	}
	shift := msb - SubBucketBits
	return (shift+1)*sub + int((v>>shift)&(sub-1))
}

// lower is the smallest value of bucket b.
func lower(b int) uint64 {
	if b < sub {
		return uint64(b)
	}
	shift := b/sub - 1
	return uint64(sub+b%sub) << shift
}

// Upper is the largest value of bucket b.
func Upper(b int) uint64 {
	if b == Buckets-1 {
		return math.MaxUint64
	}
	return lower(b+1) - 1
}

// Record adds n packets of v cycles.
func (h *Hist) Record(v, n uint64) {
	h.counts[BucketOf(v)] += n
	h.count += n
	h.sum += v * n
}

// Count is the packets recorded; Sum their cycles.
func (h *Hist) Count() uint64 { return h.count }

// Sum is the recorded packets' cycles summed.
func (h *Hist) Sum() uint64 { return h.sum }

// Merge adds o's packets (another instance of the chain, another window).
func (h *Hist) Merge(o *Hist) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.count += o.count
	h.sum += o.sum
}

// Since is the window between earlier, a previous state of the same cumulative histogram,
// and h; false if some bucket went backwards (the instance was rebuilt: a new histogram).
func (h *Hist) Since(earlier *Hist) (Hist, bool) {
	var w Hist
	for i, c := range h.counts {
		if c < earlier.counts[i] {
			return Hist{}, false
		}
		w.counts[i] = c - earlier.counts[i]
	}
	w.count, w.sum = h.count-earlier.count, h.sum-earlier.sum
	return w, true
}

// Reset empties h.
func (h *Hist) Reset() { *h = Hist{} }

// Quantile is the q-quantile in cycles: the upper edge of the bucket of the ceil(q·n)-th
// smallest packet; 0 when empty.
func (h *Hist) Quantile(q float64) uint64 {
	if h.count == 0 {
		return 0
	}
	rank := max(uint64(math.Ceil(q*float64(h.count))), 1)
	var acc uint64
	for i, c := range h.counts {
		acc += c
		if acc >= rank {
			return Upper(i)
		}
	}
	return Upper(Buckets - 1)
}

// Buckets calls f with each non-empty bucket's upper edge (cycles) and count, ascending.
func (h *Hist) Buckets(f func(upper, n uint64)) {
	for i, c := range h.counts {
		if c > 0 {
			f(Upper(i), c)
		}
	}
}

// histJSON is a histogram as the statistics file holds it (LatencyHist::ToJson).
type histJSON struct {
	Unit          string      `json:"unit"`
	SubBucketBits int         `json:"sub_bucket_bits"`
	Count         uint64      `json:"count"`
	Sum           uint64      `json:"sum"`
	Buckets       [][2]uint64 `json:"buckets"`
}

// toHist checks the file's histogram against the geometry keel-agent knows and fills h.
func (j *histJSON) toHist(h *Hist) error {
	if j.Unit != "tsc_cycles" || j.SubBucketBits != SubBucketBits {
		return fmt.Errorf("sojourn histogram: unit %q, %d sub-bucket bits; want tsc_cycles, %d", j.Unit, j.SubBucketBits, SubBucketBits)
	}
	h.Reset()
	for _, b := range j.Buckets {
		if b[0] >= Buckets {
			return fmt.Errorf("sojourn histogram: bucket %d out of range (%d buckets)", b[0], Buckets)
		}
		h.counts[b[0]] += b[1]
		h.count += b[1]
	}
	h.sum = j.Sum
	return nil
}

// Window turns an instance's cumulative histogram into fixed windows: Observe gives it each
// new state; once Length has passed since the window began, the window closes (Last) and the
// next begins at that state (the per-window reset; the cumulative histogram is never reset).
// The first window a Window sees is not reported: it holds the packets the instance took in
// before it was watched (an instance attached while still starting sends, in its first
// turns, packets that waited for its later NFs to come up).
type Window struct {
	Length time.Duration
	start  Hist
	began  time.Time
	first  time.Time // the first Observe
	last   Hist
	lastAt time.Time     // when Last closed; zero before the first
	lastLn time.Duration // its length
}

// Observe takes the cumulative histogram cur as of at. A histogram that went backwards
// (position 0 restarted) begins a new window at it.
func (w *Window) Observe(cur *Hist, at time.Time) {
	if w.began.IsZero() {
		w.start, w.began, w.first = *cur, at, at
		return
	}
	d := at.Sub(w.began)
	if d < w.Length {
		if _, ok := cur.Since(&w.start); !ok {
			w.start, w.began = *cur, at
		}
		return
	}
	if win, ok := cur.Since(&w.start); ok && w.began.After(w.first) {
		w.last, w.lastAt, w.lastLn = win, at, d
	}
	w.start, w.began = *cur, at
}

// Last is the last complete window, its length and when it closed; ok false before one has.
func (w *Window) Last() (h *Hist, length time.Duration, at time.Time, ok bool) {
	return &w.last, w.lastLn, w.lastAt, !w.lastAt.IsZero()
}
