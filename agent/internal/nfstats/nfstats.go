// SPDX-License-Identifier: Apache-2.0

// Package nfstats reads the statistics files keel-nf writes (--stats FILE, rewritten every
// --stats-interval; keel-nf --help documents them, and keel-chain writes the same schema),
// turns counters into rates, and decides when a change is worth
// reporting to the gateway (Galleon §5.1: event-driven, not a tight poll).
package nfstats

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
)

// File is one keel-nf statistics file (position K of an instance).
type File struct {
	Position int `json:"position"`
	Of       int `json:"of"`
	NFs      []struct {
		NF              string  `json:"nf"`
		PacketsIn       uint64  `json:"packets_in"`
		PacketsOut      uint64  `json:"packets_out"`
		Dropped         uint64  `json:"dropped"`
		CyclesPerPacket float64 `json:"cycles_per_packet"`
		Flows           struct {
			Evictions uint64 `json:"evictions"`
			Refusals  uint64 `json:"refusals"`
		} `json:"flows"`
	} `json:"nfs"`
	// Position 0 only.
	Port *struct {
		RxPackets   uint64  `json:"rx_packets"`
		RxBytes     uint64  `json:"rx_bytes"`
		TxPackets   uint64  `json:"tx_packets"`
		TxDropped   uint64  `json:"tx_dropped"`
		CopyDropped uint64  `json:"copy_dropped"`
		RxMalformed uint64  `json:"rx_malformed"`
		RxQueueLen  *uint64 `json:"rx_queue_len"`
	} `json:"port"`
	// Busy cycles of position 0's turns that received packets, each on average.
	CyclesPerBatch float64 `json:"cycles_per_batch"`
	// Position 0: the packets' server sojourn and the bound on their wait in the VF's queue,
	// cumulative histograms in TSC cycles at TscHz (sojourn.go).
	TscHz       float64   `json:"tsc_hz"`
	Sojourn     *histJSON `json:"sojourn"`
	RxWaitBound *histJSON `json:"rx_wait_bound"`
	// Descriptors of the chain buffer this position refused (written out of bounds by the
	// position before it, WrittenBy); each one is a packet dropped.
	BadDescriptors struct {
		WrittenBy int    `json:"written_by"`
		Count     uint64 `json:"count"`
	} `json:"bad_descriptors"`
}

// Parse decodes a statistics file.
func Parse(b []byte) (*File, error) {
	var f File
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("keel-nf stats: %w", err)
	}
	return &f, nil
}

// NF is one NF process's counters.
type NF struct {
	Name            string
	Position        int
	PacketsIn       uint64
	PacketsOut      uint64
	Dropped         uint64
	CyclesPerPacket float64
	// The NF's flow table: idle flows evicted, new flows refused because it was full.
	FlowEvictions uint64
	FlowRefusals  uint64
}

// Sample is an instance's counters at one moment.
type Sample struct {
	At             time.Time // when position 0 last wrote its file
	Packets        uint64    // received on the VF
	Bytes          uint64
	Drops          uint64            // dropped by NFs, on transmit, in the copy and as malformed
	DropsBy        map[string]uint64 // Drops by reason: nf, tx, copy, malformed, descriptor (DropReasons)
	QueueLen       uint32
	CyclesPerBatch float64
	NFs            []NF // in chain order; a position whose file is not there yet is absent
	// Position 0's cumulative sojourn and queue-wait bound histograms (nil if its file has
	// none, or a malformed one) and its TSC rate.
	Sojourn, RxWaitBound *Hist
	TscHz                float64
}

// DropReasons are the reasons an instance's drops are counted under (a bounded label set).
// descriptor: a chain-buffer descriptor out of bounds, refused by the NF after the one that wrote it.
var DropReasons = []string{"nf", "tx", "copy", "malformed", "descriptor"}

// Opener reads position k's statistics file: its content and when it was last written
// (ReadBeneath and ReadInRoot are the two ways keel-agent has).
type Opener func(k int) ([]byte, time.Time, error)

// Read reads the statistics files of an instance with n positions. Missing files are
// skipped: an NF writes its first file a stats interval after start.
func Read(open Opener, n int) (Sample, bool) {
	s := Sample{DropsBy: map[string]uint64{}}
	ok := false
	for k := 0; k < n; k++ {
		b, written, err := open(k)
		if err != nil {
			continue
		}
		f, err := Parse(b)
		if err != nil {
			continue
		}
		for _, nf := range f.NFs {
			s.NFs = append(s.NFs, NF{Name: nf.NF, Position: k, PacketsIn: nf.PacketsIn, PacketsOut: nf.PacketsOut,
				Dropped: nf.Dropped, CyclesPerPacket: nf.CyclesPerPacket,
				FlowEvictions: nf.Flows.Evictions, FlowRefusals: nf.Flows.Refusals})
			s.Drops += nf.Dropped
			s.DropsBy["nf"] += nf.Dropped
		}
		s.Drops += f.BadDescriptors.Count
		s.DropsBy["descriptor"] += f.BadDescriptors.Count
		if k == 0 && f.Port != nil {
			ok = true
			s.At = written
			s.Packets, s.Bytes = f.Port.RxPackets, f.Port.RxBytes
			s.Drops += f.Port.TxDropped + f.Port.CopyDropped + f.Port.RxMalformed
			s.DropsBy["tx"] += f.Port.TxDropped
			s.DropsBy["copy"] += f.Port.CopyDropped
			s.DropsBy["malformed"] += f.Port.RxMalformed
			if f.Port.RxQueueLen != nil {
				s.QueueLen = uint32(min(*f.Port.RxQueueLen, math.MaxUint32))
			}
			s.CyclesPerBatch = f.CyclesPerBatch
			if f.TscHz > 0 {
				s.TscHz = f.TscHz
				s.Sojourn, s.RxWaitBound = histOf(f.Sojourn), histOf(f.RxWaitBound)
			}
		}
	}
	return s, ok
}

// histOf is the file's histogram j, or nil if there is none or it does not fit the geometry.
func histOf(j *histJSON) *Hist {
	if j == nil {
		return nil
	}
	h := new(Hist)
	if j.toHist(h) != nil {
		return nil
	}
	return h
}

// Rate is the packet and bit rate between two samples of one instance (zero if the
// counters went backwards: the instance was rebuilt).
func Rate(prev, cur Sample) (pps, gbps float64) {
	dt := cur.At.Sub(prev.At).Seconds()
	if dt <= 0 || cur.Packets < prev.Packets || cur.Bytes < prev.Bytes {
		return 0, 0
	}
	return float64(cur.Packets-prev.Packets) / dt, float64(cur.Bytes-prev.Bytes) * 8 / dt / 1e9
}

// Report is what was last sent to the gateway for an instance, or is about to be.
type Report struct {
	Phase     string
	Reason    string
	Attached  bool
	Core      int32
	Batch     uint32
	RatePPS   float64 // keel's, on the VF
	VFDropped uint64  // keel's, on the VF
	Drops     uint64  // the NFs' own
	QueueLen  uint32  // the NFs' own
	Restarts  uint64
	// The server sojourn's p99 over the last window (position 0's measurement).
	SojournP99us float64
}

// Significant reports whether cur differs enough from the last report to send it now:
// any change of phase, attachment, core, batch or restarts, new drops (the VF's or the
// NFs'), a rate that moved by more than 10 % (or left or reached zero), or a NIC queue that
// started or stopped building, or a server sojourn p99 that moved by more than 10 %. The NFs'
// figures only make a report sooner; the gateway decides by keel's.
func Significant(last, cur Report) bool {
	if last.Phase != cur.Phase || last.Reason != cur.Reason || last.Attached != cur.Attached ||
		last.Core != cur.Core || last.Batch != cur.Batch || last.Restarts != cur.Restarts ||
		cur.Drops > last.Drops || cur.VFDropped > last.VFDropped {
		return true
	}
	if (last.RatePPS == 0) != (cur.RatePPS == 0) {
		return true
	}
	if last.RatePPS > 0 && math.Abs(cur.RatePPS-last.RatePPS) > 0.1*last.RatePPS {
		return true
	}
	if (last.QueueLen == 0) != (cur.QueueLen == 0) {
		return true
	}
	return math.Abs(cur.SojournP99us-last.SojournP99us) > 0.1*last.SojournP99us
}
