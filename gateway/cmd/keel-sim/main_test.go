// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/keel-nfv/keel/gateway/internal/policy"
)

// keel-sim batch is the controller's rule (policy.Cost.Batch) on the costs given: the bench
// calls it instead of keeping a copy of Galleon eqs. 1–3.
func Test_batchCmd_givesThePolicysBurstsPerTurnAndEq1Rates(t *testing.T) {
	var out bytes.Buffer
	err := batchCmd([]string{"--nf-cycles", "600,600,600", "--io-cycles", "200", "--copy-cycles", "125",
		"--handoff-cycles", "1600", "--p", "0.99", "--tsc-hz", "2.6e9", "--at", "1,64"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		BurstsPerTurn int                `json:"bursts_per_turn"`
		SinglePps     float64            `json:"single_pps"`
		RatePps       float64            `json:"rate_pps"`
		RatesPps      map[string]float64 `json:"rates_pps"`
	}
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	cost := policy.Cost{NFCycles: []float64{600, 600, 600}, IOCycles: 200, CopyCycles: 125, HandoffCycles: 1600,
		FreqHz: 2.6e9, BurstMax: 32}
	want := cost.Batch(0.99, 32, 64)
	// 3·1600 / (32 · 2125 · (1/0.99 − 1)) = 6.98: B = 7.
	if got.BurstsPerTurn != want || want != 7 {
		t.Errorf("bursts_per_turn = %d, the policy says %d (want 7)", got.BurstsPerTurn, want)
	}
	if got.RatePps != cost.Rate(7, 32) || got.SinglePps != cost.SingleRate() {
		t.Errorf("rates %v / %v, want %v / %v", got.RatePps, got.SinglePps, cost.Rate(7, 32), cost.SingleRate())
	}
	if got.RatesPps["1"] >= got.RatePps || got.RatesPps["64"] <= got.RatePps {
		t.Errorf("eq. 1 must rise with B: %v", got.RatesPps)
	}
}

func Test_batchCmd_refusesAShareOutsideZeroToOne(t *testing.T) {
	var out bytes.Buffer
	err := batchCmd([]string{"--nf-cycles", "600", "--io-cycles", "200", "--handoff-cycles", "1600", "--p", "1"}, &out)
	if err == nil {
		t.Fatal("--p 1 was accepted")
	}
}
