// SPDX-License-Identifier: Apache-2.0

// Package measure holds what keel measures of a chain instance outside the tenant's code,
// the figures the controller decides by: the VF's counters on the host side (packets
// offered to the instance, and refused because its receive side was full) and coopsched's
// account of the sgroup's CPU time (the kernel's schedstat, which coopsched reads). It
// also checks the figures the instance's NFs write in their statistics files against
// these: a tenant's code runs in those processes and can write any figure it likes.
package measure

import (
	"time"

	"github.com/keel-nfv/keel/agent/internal/nfstats"
	"github.com/keel-nfv/keel/agent/internal/vf"
)

// Sample is keel's measurement of an instance at one moment.
type Sample struct {
	At     time.Time
	VF     vf.Counters
	CPUns  uint64 // the sgroup's threads' CPU time (coopsched Status, GroupStatus.cpu_ns)
	HasCPU bool   // coopsched knows the sgroup
}

// Figures are the rates keel measured between two samples.
type Figures struct {
	OfferedPPS      float64 // packets offered to the instance per second (handed over or refused)
	OfferedGbps     float64 // the bytes it was handed, in Gbit/s
	DeliveredPPS    float64 // packets handed to the instance per second
	CyclesPerPacket float64 // TSC cycles its threads ran per packet handed over; 0 if none was or CPU is unknown
}

// Between is the figures between prev and cur at a TSC of tscHz: zero when no time passed
// or a counter went backwards (the VF or the sgroup was made again).
func Between(prev, cur Sample, tscHz float64) Figures {
	dt := cur.At.Sub(prev.At).Seconds()
	p, c := prev.VF, cur.VF
	if dt <= 0 || c.RxPackets < p.RxPackets || c.RxBytes < p.RxBytes || c.RxDropped < p.RxDropped {
		return Figures{}
	}
	delivered := c.RxPackets - p.RxPackets
	f := Figures{
		OfferedPPS:   float64(delivered+c.RxDropped-p.RxDropped) / dt,
		OfferedGbps:  float64(c.RxBytes-p.RxBytes) * 8 / dt / 1e9,
		DeliveredPPS: float64(delivered) / dt,
	}
	if delivered > 0 && prev.HasCPU && cur.HasCPU && cur.CPUns >= prev.CPUns && tscHz > 0 {
		f.CyclesPerPacket = float64(cur.CPUns-prev.CPUns) * tscHz / 1e9 / float64(delivered)
	}
	return f
}

// The figures an NF's statistics file is checked on (the label values of
// keel_agent_nf_stats_mismatch_total).
const (
	FigureRate   = "rate"
	FigureQueue  = "queue"
	FigureCycles = "cycles"
)

// CheckedFigures lists the figures Check checks.
var CheckedFigures = []string{FigureRate, FigureQueue, FigureCycles}

// Tolerances of Check. keel's counters and an NF's file are read at different moments
// (the file is rewritten every stats interval, the agent samples on its own tick), so two
// honest rates over a changing load differ by what changed in between; the NF's cycles are
// an average since it started, keel's over the last interval.
const (
	RateTolerance   = 0.25   // the NF's rate may exceed keel's by this fraction ...
	RateSlackPPS    = 1000.0 // ... plus this many packets/s (low rates are noise)
	QueueSlack      = 32     // packets (one burst) beyond what keel handed over and the NF did not take
	CyclesTolerance = 0.5    // the NF's cycles per packet may exceed keel's by this fraction
)

// Mismatch is one NF figure that keel's measurement contradicts.
type Mismatch struct {
	Figure string
	NF     float64 // what the NF's file says
	Keel   float64 // the bound keel's measurement sets
}

// Check compares what the NFs report with keel's figures: nfPPS is the rate position 0's
// file shows, nf its latest files, vf the VF counters read after them, fig keel's figures
// over the last interval. Each check is one-sided, on what no honest NF can report:
//   - rate: more packets per second than the VF handed over (an NF receives fewer when
//     its receive ring overflows, never more);
//   - queue: more packets waiting than the VF handed over and the NF has not received
//     (its rx counter and queue length are written together; the VF's counter is read
//     later, so it can only have grown);
//   - cycles: more cycles per packet in its NFs than its threads ran in all (coopsched's
//     account includes the I/O, the handoffs and the idle polls as well).
func Check(nfPPS float64, nf nfstats.Sample, vfc vf.Counters, fig Figures) []Mismatch {
	var out []Mismatch
	if limit := fig.DeliveredPPS*(1+RateTolerance) + RateSlackPPS; nfPPS > limit {
		out = append(out, Mismatch{FigureRate, nfPPS, fig.DeliveredPPS})
	}
	waiting := float64(0)
	if vfc.RxPackets > nf.Packets {
		waiting = float64(vfc.RxPackets - nf.Packets)
	}
	if q := float64(nf.QueueLen); q > waiting+QueueSlack {
		out = append(out, Mismatch{FigureQueue, q, waiting})
	}
	if fig.CyclesPerPacket > 0 {
		sum := 0.0
		for _, n := range nf.NFs {
			sum += n.CyclesPerPacket
		}
		if sum > fig.CyclesPerPacket*(1+CyclesTolerance) {
			out = append(out, Mismatch{FigureCycles, sum, fig.CyclesPerPacket})
		}
	}
	return out
}
