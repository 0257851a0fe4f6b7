// SPDX-License-Identifier: Apache-2.0

package sim

import (
	"bytes"
	"encoding/json"
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
