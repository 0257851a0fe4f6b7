package sim

import (
	"os"
	"testing"

	"github.com/keel-nfv/keel/gateway/internal/costs"
	"github.com/keel-nfv/keel/gateway/internal/policy"
)

func TestQuick(t *testing.T) {
	if os.Getenv("QUICK") == "" {
		t.Skip()
	}
	tbl, _ := costs.Load("../../../bench/results/nf_profile.json", "../../../bench/results/chain_length.json")
	sc, err := LoadScenario("../../../bench/scenarios/"+os.Getenv("QUICK"), tbl)
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []policy.Config{policy.Keel(), policy.Metron()} {
		row, err := Run(sc, os.Getenv("CHAIN"), cfg, tbl, os.Stderr)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%+v", row)
	}
}
