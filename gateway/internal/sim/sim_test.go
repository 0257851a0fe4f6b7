// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/keel-nfv/keel/gateway/internal/costs"
	"github.com/keel-nfv/keel/gateway/internal/policy"
)

// small is a rack of 2 workers × 4 cores with chain 2 of Galleon at ~1.5 cores of load.
const small = `
name: small
seed: 5
workers: 2
cores: 4
ghz: 2.4
chains:
  - {name: chain2, nfs: [acl, urlfilter, encrypt], slo_us: 100}
packets: {median_bytes: 1024, sigma: 0.25}
flows: {mean_s: 60, rate_sigma: 0.3}
phases:
  - {kind: ramp, duration_s: 8, flows: 150, gbps: 7}
  - {kind: steady, duration_s: 6}
`

func loadSmall(t *testing.T) (*Scenario, *costs.Table) {
	t.Helper()
	tbl := costs.Default()
	sc, err := ParseScenario("small.yaml", []byte(small), tbl)
	if err != nil {
		t.Fatal(err)
	}
	return sc, tbl
}

func Test_run_sameInputSameJSON(t *testing.T) {
	sc, tbl := loadSmall(t)
	var out [2][]byte
	for i := range out {
		rows, err := RunAll([]*Scenario{sc}, []policy.Config{policy.Keel(), policy.Metron()}, tbl, 2, nil)
		if err != nil {
			t.Fatal(err)
		}
		out[i], _ = json.Marshal(rows)
	}
	if !bytes.Equal(out[0], out[1]) {
		t.Fatalf("two runs differ:\n%s\n%s", out[0], out[1])
	}
}

func Test_run_keelMeetsSLOWithZeroLoss(t *testing.T) {
	sc, tbl := loadSmall(t)
	row, err := Run(sc, "chain2", policy.Keel(), tbl, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", row)
	if row.Loss != 0 || row.P99us > row.SLOus || row.Packets < 1_000_000 {
		t.Fatalf("keel: p99 %.1f µs (SLO %.0f), loss %d, %d packets", row.P99us, row.SLOus, row.Loss, row.Packets)
	}
	if row.CoresMax < 2 || row.CoresAvg <= 0 {
		t.Fatalf("keel used %.2f cores on average, %d at most: the load needs 2", row.CoresAvg, row.CoresMax)
	}
}

func Test_parseScenario_errorNamesFileAndField(t *testing.T) {
	tbl := costs.Default()
	for _, c := range []struct{ edit, want string }{
		{"nfs: [acl, urlfilter, encrypt]", `galleon.yaml: chains[0].nfs: unknown NF "foo"`},
		{"workers: 2", "galleon.yaml: workers: must be at least 1"},
		{"kind: ramp", `galleon.yaml: phases[0].kind: "rampp" is not ramp, steady, diurnal or flash`},
		{"seed: 5", "galleon.yaml: line"}, // unknown field
	} {
		repl := map[string]string{
			"nfs: [acl, urlfilter, encrypt]": "nfs: [acl, foo]",
			"workers: 2":                     "workers: 0",
			"kind: ramp":                     "kind: rampp",
			"seed: 5":                        "seed: 5\nsed: 6",
		}[c.edit]
		_, err := ParseScenario("galleon.yaml", []byte(strings.Replace(small, c.edit, repl, 1)), tbl)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s → %v; want %q", repl, err, c.want)
		}
	}
}

// together is two chains at once on one worker of 4 cores, chain3's traffic falling while
// chain2's rises.
const together = `
name: together
seed: 6
together: true
workers: 1
cores: 4
ghz: 2.4
packets: {median_bytes: 1024, sigma: 0.25}
flows: {mean_s: 10, rate_sigma: 0.3}
chains:
  - name: chain2
    nfs: [acl, urlfilter, encrypt]
    slo_us: 100
    phases:
      - {kind: ramp, duration_s: 4, flows: 20, gbps: 1}
      - {kind: diurnal, duration_s: 16, period_s: 32, flows_min: 20, flows: 120}
  - name: chain3
    nfs: [acl, nat]
    slo_us: 200
    packets: {median_bytes: 512, sigma: 0.25}
    phases:
      - {kind: ramp, duration_s: 4, flows: 120, gbps: 6}
      - {kind: diurnal, duration_s: 16, period_s: 32, shift_s: 16, flows_min: 20, flows: 120}
`

func Test_runTogether_chainsShareTheRack(t *testing.T) {
	tbl := costs.Default()
	sc, err := ParseScenario("together.yaml", []byte(together), tbl)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := RunAll([]*Scenario{sc}, []policy.Config{policy.Keel()}, tbl, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 || rows[0].Chain != "chain2" || rows[1].Chain != "chain3" || rows[2].Chain != "all" {
		t.Fatalf("rows %+v: want chain2, chain3, all", rows)
	}
	sum := 0.0
	for _, r := range rows[:2] {
		t.Logf("%+v", r)
		if r.Loss != 0 || !r.MeetsSLO || r.Packets == 0 {
			t.Errorf("%s: p99 %.1f µs (SLO %.0f), loss %d, %d packets", r.Chain, r.P99us, r.SLOus, r.Loss, r.Packets)
		}
		sum += r.CoresAvg
	}
	all := rows[2]
	t.Logf("%+v", all)
	if math.Abs(sum-all.CoresAvg) > 0.002 || all.CoresMax > 4 || all.Packets != rows[0].Packets+rows[1].Packets {
		t.Fatalf("the chains' shares sum to %.3f cores, the rack used %.3f (at most %d); packets %d", sum, all.CoresAvg, all.CoresMax, all.Packets)
	}
}

func Test_parseScenario_chainTrafficErrorsNameTheChain(t *testing.T) {
	bad := strings.Replace(together, "shift_s: 16,", "shift_s: -1,", 1)
	_, err := ParseScenario("together.yaml", []byte(bad), costs.Default())
	if err == nil || err.Error() != "together.yaml: chains[1].phases[1]: no field may be negative" {
		t.Fatalf("err = %v", err)
	}
}
