// SPDX-License-Identifier: Apache-2.0

package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"

	"github.com/keel-nfv/keel/gateway/internal/costs"
	"github.com/keel-nfv/keel/gateway/internal/policy"
	"github.com/keel-nfv/keel/gateway/internal/sim"
)

// MigrationRow is one scenario of migration.json's "sim" part (issue 37's schema).
type MigrationRow struct {
	Scenario       string  `json:"scenario"`
	CoresWithMoves float64 `json:"cores_with_moves"`
	CoresWithout   float64 `json:"cores_without"`
	MetronCores    float64 `json:"metron_cores"`
	Loss           uint64  `json:"loss"`
	SLOMisses      int     `json:"slo_misses"`
}

// migrationRows sums each scenario's rows per policy (the rack's row when its chains ran
// together, else its chains' rows, each run in a rack of its own): cores_with_moves is
// keel-moves' cores plus the control core's time its moves took, cores_without keel's,
// metron_cores Metron's; loss and slo_misses are keel-moves'.
func migrationRows(scs []*sim.Scenario, rows []sim.Row) ([]MigrationRow, error) {
	var out []MigrationRow
	for _, sc := range scs {
		type sum struct {
			cores float64
			loss  uint64
			miss  int
			n     int
		}
		by := map[string]*sum{}
		for _, r := range rows {
			if r.Scenario != sc.Name || (sc.Together && len(sc.Chains) > 1) != (r.Chain == "all") {
				continue
			}
			s := by[r.Policy]
			if s == nil {
				s = &sum{}
				by[r.Policy] = s
			}
			s.cores += r.CoresAvg + r.MoveCPUCores
			s.loss += r.Loss
			s.miss += r.MoveSLOMisses
			s.n++
		}
		w, wo, m := by["keel-moves"], by["keel"], by["metron"]
		if w == nil || wo == nil || m == nil {
			return nil, fmt.Errorf("scenario %s: missing a policy's rows", sc.Name)
		}
		r3 := func(x float64) float64 { return math.Round(x*1000) / 1000 }
		out = append(out, MigrationRow{Scenario: sc.Name, CoresWithMoves: r3(w.cores), CoresWithout: r3(wo.cores),
			MetronCores: r3(m.cores), Loss: w.loss, SLOMisses: w.miss})
	}
	return out, nil
}

// writeMigration writes rows into the "sim" part of the migration.json at path: a row
// replaces the file's row of the same scenario, the file's other rows stay (so scenarios may
// run apart), new ones are added at the end. The "moves" part a file there already has (the
// live measurement, made by another run) stays; null when there is none. A file that is not
// such a JSON object is an error, and is not overwritten.
func writeMigration(path string, rows []MigrationRow) error {
	moves := json.RawMessage("null")
	var out []MigrationRow
	if b, err := os.ReadFile(path); err == nil {
		var cur struct {
			Moves json.RawMessage `json:"moves"`
			Sim   []MigrationRow  `json:"sim"`
		}
		if err := json.Unmarshal(b, &cur); err != nil {
			return fmt.Errorf("%s: not a migration.json (%v); not overwritten", path, err)
		}
		if len(cur.Moves) > 0 {
			moves = cur.Moves
		}
		out = cur.Sim
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	for _, r := range rows {
		i := slices.IndexFunc(out, func(o MigrationRow) bool { return o.Scenario == r.Scenario })
		if i >= 0 {
			out[i] = r
		} else {
			out = append(out, r)
		}
	}
	return writeJSON(path, struct {
		Moves json.RawMessage `json:"moves"`
		Sim   []MigrationRow  `json:"sim"`
	}{moves, out})
}

func migrationCmd(args []string) error {
	fs := newFlags("migration")
	out := fs.String("out", "bench/results/migration.json", "")
	jobs := fs.Int("jobs", runtime.NumCPU(), "")
	maxS := fs.Float64("max-seconds", 0, "")
	nfp := fs.String("nf-profile", "bench/results/nf_profile.json", "")
	cl := fs.String("chain-length", "bench/results/chain_length.json", "")
	quiet := fs.Bool("q", false, "")
	rowsOut := fs.String("rows", "", "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("migration: name at least one scenario file (bench/scenarios/*.yaml)")
	}
	if *maxS < 0 {
		return errors.New("migration: --max-seconds must not be negative")
	}
	tbl, err := costs.Load(*nfp, *cl)
	if err != nil {
		return err
	}
	var scs []*sim.Scenario
	for _, p := range fs.Args() {
		sc, err := sim.LoadScenario(p, tbl)
		if err != nil {
			return err
		}
		if *maxS > 0 {
			sc.MaxSeconds = math.Min(sc.MaxSeconds, *maxS)
		}
		scs = append(scs, sc)
	}
	var progress io.Writer = os.Stderr
	if *quiet {
		progress = nil
	}
	cfgs := []policy.Config{sim.KeelMoves(), policy.Keel(), policy.Metron()}
	rows, err := sim.RunAll(scs, cfgs, tbl, *jobs, progress)
	if err != nil {
		return err
	}
	if *rowsOut != "" {
		if err := writeJSON(*rowsOut, struct {
			Rows []sim.Row `json:"rows"`
		}{rows}); err != nil {
			return err
		}
	}
	mrows, err := migrationRows(scs, rows)
	if err != nil {
		return err
	}
	return writeMigration(*out, mrows)
}
