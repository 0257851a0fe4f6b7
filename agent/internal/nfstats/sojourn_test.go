// SPDX-License-Identifier: Apache-2.0

package nfstats

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
	"unsafe"
)

func Test_Hist_quantiles_within_two_percent_of_a_sorted_reference(t *testing.T) {
	rng := rand.New(rand.NewPCG(32, 1))
	var h Hist
	ref := make([]uint64, 0, 100000)
	for i := 0; i < 100000; i++ {
		v := uint64(math.Pow(10, 2+6*rng.Float64())) // 100 cycles .. 10^8
		ref = append(ref, v)
		h.Record(v, 1)
	}
	slices.Sort(ref)
	for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 0.999, 1} {
		truth := ref[int(math.Ceil(q*float64(len(ref))))-1]
		got := h.Quantile(q)
		if got < truth || float64(got) > 1.02*float64(truth) {
			t.Errorf("q %v: %d, reference %d", q, got, truth)
		}
	}
}

func Test_Hist_buckets_match_the_runtime(t *testing.T) {
	// The same edges as nf-runtime's LatencyHist (sojourn_test.cc checks the C++ side).
	for _, c := range []struct {
		v uint64
		b int
	}{{0, 0}, {63, 63}, {64, 64}, {127, 127}, {128, 128}, {129, 128}, {130, 129}, {1 << 36, 31 * 64}, {math.MaxUint64, Buckets - 1}} {
		if got := BucketOf(c.v); got != c.b {
			t.Errorf("BucketOf(%d) = %d, want %d", c.v, got, c.b)
		}
	}
	for b := 0; b+1 < Buckets; b++ {
		if Upper(b)+1 != lower(b+1) || BucketOf(lower(b)) != b || BucketOf(Upper(b)) != b {
			t.Fatalf("bucket %d: [%d, %d]", b, lower(b), Upper(b))
		}
	}
}

func Test_Hist_merge_is_the_histogram_of_both(t *testing.T) {
	var a, b, both Hist
	for v := uint64(1); v < 50000; v += 3 {
		a.Record(v, 1)
		both.Record(v, 1)
	}
	for v := uint64(100000); v < 200000; v += 11 {
		b.Record(v, 2)
		both.Record(v, 2)
	}
	a.Merge(&b)
	if a != both {
		t.Fatal("merged histogram differs from the one that recorded both")
	}
}

func Test_Hist_is_fixed_memory(t *testing.T) {
	var h Hist
	size := unsafe.Sizeof(h)
	h.Record(math.MaxUint64, 1)
	h.Record(1<<60, 1000)
	if unsafe.Sizeof(h) != size || size != (Buckets+2)*8 || h.Quantile(1) != math.MaxUint64 {
		t.Fatalf("size %d, p100 %d", size, h.Quantile(1))
	}
}

func Test_Window_resets_each_window_and_not_the_cumulative_histogram(t *testing.T) {
	w := Window{Length: 5 * time.Second}
	t0 := time.Unix(995, 0)
	var cum Hist
	w.Observe(&cum, t0)
	cum.Record(9e9, 3) // what the instance did before it was watched: never reported
	t0 = t0.Add(5 * time.Second)
	w.Observe(&cum, t0)
	if _, _, _, ok := w.Last(); ok {
		t.Fatal("the first window was reported")
	}
	cum.Record(1000, 100) // window 1: fast
	w.Observe(&cum, t0.Add(2*time.Second))
	if _, _, _, ok := w.Last(); ok {
		t.Fatal("a window closed before its length passed")
	}
	w.Observe(&cum, t0.Add(5*time.Second))
	h, ln, _, ok := w.Last()
	if !ok || ln != 5*time.Second || h.Count() != 100 || h.Quantile(0.99) < 1000 || h.Quantile(0.99) > 1020 {
		t.Fatalf("window 1: ok %v, %v, %d packets, p99 %d", ok, ln, h.Count(), h.Quantile(0.99))
	}
	cum.Record(500000, 10) // window 2: slow, and only its own packets count
	w.Observe(&cum, t0.Add(10*time.Second))
	h, _, _, _ = w.Last()
	if h.Count() != 10 || h.Quantile(0.5) < 500000 {
		t.Fatalf("window 2: %d packets, p50 %d", h.Count(), h.Quantile(0.5))
	}
	if cum.Count() != 113 {
		t.Fatalf("cumulative %d", cum.Count())
	}
	// Position 0 restarted: its histogram begins again, the window at it.
	var fresh Hist
	fresh.Record(2000, 5)
	w.Observe(&fresh, t0.Add(12*time.Second))
	fresh.Record(2000, 5)
	w.Observe(&fresh, t0.Add(17*time.Second))
	h, _, at, _ := w.Last()
	if h.Count() != 5 || !at.Equal(t0.Add(17*time.Second)) {
		t.Fatalf("window after restart: %d packets, closed %v", h.Count(), at)
	}
}

func Test_Read_takes_position_0s_histograms(t *testing.T) {
	file := `{"position": 0, "of": 1, "tsc_hz": 2600000000, "nfs": [],
	  "port": {"rx_packets": 10},
	  "sojourn": {"unit": "tsc_cycles", "sub_bucket_bits": 6, "count": 10, "sum": 26000, "max": 2600,
	              "buckets": [[64, 4], [1120, 6]]},
	  "rx_wait_bound": {"unit": "tsc_cycles", "sub_bucket_bits": 6, "count": 10, "sum": 0, "max": 0, "buckets": [[0, 10]]}}`
	s, ok := Read(func(int) ([]byte, time.Time, error) { return []byte(file), time.Now(), nil }, 1)
	if !ok || s.Sojourn == nil || s.RxWaitBound == nil || s.TscHz != 2.6e9 {
		t.Fatalf("sample %+v", s)
	}
	if s.Sojourn.Count() != 10 || s.Sojourn.Quantile(0.4) != 64 || s.Sojourn.Quantile(0.5) != Upper(1120) {
		t.Fatalf("sojourn: %d packets, p40 %d, p50 %d", s.Sojourn.Count(), s.Sojourn.Quantile(0.4), s.Sojourn.Quantile(0.5))
	}
	bad := `{"position": 0, "of": 1, "tsc_hz": 2600000000, "nfs": [], "port": {"rx_packets": 10},
	  "sojourn": {"unit": "ns", "sub_bucket_bits": 6, "buckets": [[1, 1]]}}`
	s, _ = Read(func(int) ([]byte, time.Time, error) { return []byte(bad), time.Now(), nil }, 1)
	if s.Sojourn != nil {
		t.Fatal("a histogram of another geometry was taken")
	}
}
