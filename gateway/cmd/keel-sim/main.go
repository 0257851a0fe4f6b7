// SPDX-License-Identifier: Apache-2.0

// keel-sim is keel's rack-scale simulator: it runs scenarios of flows through simulated
// workers whose cores are modelled turn by turn (gateway/internal/dpmodel), with keel's real
// controller policy making every decision, and it derives chains' latency profiles.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"

	"github.com/keel-nfv/keel/gateway/internal/costs"
	"github.com/keel-nfv/keel/gateway/internal/dpmodel"
	"github.com/keel-nfv/keel/gateway/internal/policy"
	"github.com/keel-nfv/keel/gateway/internal/sim"
)

const usage = `keel-sim — keel's rack-scale simulator

Usage:
  keel-sim run [--policy keel,metron] [--ablation] [--out FILE] SCENARIO.yaml...
  keel-sim migration [--out bench/results/migration.json] [--max-seconds S] SCENARIO.yaml...
  keel-sim profile --nfs NF,NF... [--pkt-bytes 1024] [--ghz 2.4] [--chain NAME] [--out FILE]
  keel-sim batch --nf-cycles C,C... --io-cycles C --handoff-cycles C --p P [--copy-cycles C]
                 [--fill N] [--max-bursts N] [--tsc-hz HZ] [--at B,B...]

run
  Simulates each scenario (bench/scenarios/*.yaml): every chain of it runs on its own in the
  scenario's rack (workers × managed cores at the scenario's clock), or, for a scenario with
  together: true, all its chains at once in the rack, once per policy, with
  keel's controller policy deciding where each new flow goes, when an instance is
  overloaded, how big each chain's pool is, when a core is given back and which sgroups share
  a core. Writes JSON:
    {"scenario": NAME or [NAMES], "rows": [{"scenario", "policy", "chain", "slo_us",
      "p99_us", "loss", "cores_avg", "cores_max", "p50_us", ...}, ...]}
  p99_us and p50_us are packet latencies (ingress to departure, µs); loss counts packets
  (NIC queue overflow and flows no instance could take); cores_avg is the time-averaged
  number of cores with at least one chain instance attached, cores_max its peak. When
  chains run together, a core is shared out equally among the sgroups attached to it
  (cores_avg: the chain's share, time-averaged; cores_max: the most cores holding one of
  its sgroups at once), and a row of chain "all" per policy has the rack's cores.

  --policy LIST   policies to compare side by side (keel, keel-moves, metron, metron-slo;
                  default keel,metron). keel-moves is keel that also moves live flows
                  between instances with their state (issue 37): it empties lightly used
                  instances to give their cores back and relieves overloaded ones; its rows
                  add flow_moves, move_cpu_cores (the control core's time the moves took,
                  as a share of a core) and move_slo_misses (10 s windows with a move in
                  which the chain's p99 missed its SLO)
  --ablation      add keel variants: keel-nopack (no packing), keel-fixedbatch (one burst
                  per turn), keel-fixedthr (threshold 0.9 whatever the SLO); and
                  metron-slo (Metron's runtime, no isolation, with keel's SLO thresholds)
  --out FILE      write the JSON there (default: standard output)
  --jobs N        runs in parallel (default: the number of CPUs)
  --nf-profile F, --chain-length F
                  cost inputs (default bench/results/nf_profile.json and chain_length.json;
                  built-in defaults when absent)
  -q              no progress lines on standard error
  --cpuprofile F  write a Go CPU profile of the run there (go tool pprof)

migration
  Runs each scenario under keel-moves, keel and metron side by side and writes the "sim"
  part of migration.json: per scenario {"scenario", "cores_with_moves" (keel-moves' cores
  plus its moves' control-core time), "cores_without" (keel's), "metron_cores", "loss" and
  "slo_misses" (keel-moves')}. A scenario's cores are its rack's (together) or the sum of
  its chains' racks. The file's "moves" part (the live measurement) is kept as it is, null
  if the file is new. A moved flow's packets are held for the scenario's
  flow_move_pause_ms (default 50: UNO §5.2's 40–50 ms with OpenNF's loss-free move; keel's
  measured median is 47.4 ms) and each move costs flow_move_cpu_us of the control core
  (default 1176: the "moves".cpu_us_per_move that bench/migration.py measured here).
  keel-moves empties an instance over several control rounds when the move budget or the
  held-packet bounds allow only part of its flows at once; it takes no new flows meanwhile.

  --out FILE        default bench/results/migration.json
  --max-seconds S   stop each run at S simulated seconds (a quick look; 0: the scenarios')
  --rows FILE       also write every run's rows there, as keel-sim run writes them
  --jobs N, --nf-profile F, --chain-length F, -q   as for run

profile
  Derives a chain's latency profile on one core from the queueing model (Galleon eq. 1,
  Fig. 4): p50/p99 latency and the longest NIC queue at loads 0.05 … 1.00 of the core's
  max rate, at the batch keel picks for the chain. Writes the policy.Profile JSON that
  keel's controller reads (bench/results/profile_<chain>.json).

  --nfs LIST      the chain's NFs in order (catalogue names: tunnel, ipv4fwd, acl, ...)
  --pkt-bytes N   packet size (default 1024)
  --ghz X         core clock (default 2.4)
  --chain NAME    the chain's name in the profile (default: the NFs joined by '-')
  --seed N        random seed (default 1)
  --out FILE      write the JSON there (default: standard output)

batch
  The bursts per turn B keel's controller runs a chain at, for costs measured on a data
  plane: Galleon eqs. 2–3, the fewest B with eq. 1's rate R(B) ≥ p·R̃, R̃ the isolated
  chain's rate without handoffs (policy.Cost.Batch, the code the controller runs before each
  SetBatch; a one-NF chain has no handoff and gets 1). Writes JSON:
    {"bursts_per_turn": B, "single_pps": R̂ (eq. 3), "rate_pps": R(B),
     "rates_pps": {"B'": R(B') for each --at}}

  --nf-cycles LIST   each NF's TSC cycles per packet, in chain order (T_v,i)
  --io-cycles C      receive, transmit and the run loop per packet
  --copy-cycles C    the copies into and out of the chain buffer per packet (chains of 2+)
  --handoff-cycles C one handoff between NF processes (T_ctx·Freq)
  --p P              the share of R̃ to keep, 0 < P < 1
  --fill N           packets per burst b_v (default 32, the burst)
  --max-bursts N     the most bursts per turn (default 64: keel-nf's chain buffer holds
                     64 bursts); a caller bounds it further, e.g. to keep a turn inside
                     coopsched's yield timeout
  --tsc-hz HZ        the clock the cycles are of, for the rates (default 1e9)
  --at LIST          bursts per turn to give eq. 1's rate at as well

The same inputs give the same output, byte for byte.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = runCmd(os.Args[2:])
	case "migration":
		err = migrationCmd(os.Args[2:])
	case "profile":
		err = profileCmd(os.Args[2:])
	case "batch":
		err = batchCmd(os.Args[2:], os.Stdout)
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		err = fmt.Errorf("unknown command %q (run, migration, profile or batch; --help)", os.Args[1])
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "keel-sim:", err)
		os.Exit(1)
	}
}

func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, usage) }
	return fs
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if path == "" || path == "-" {
		_, err = os.Stdout.Write(b)
		return err
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(path, b, 0o644)
}

func runCmd(args []string) error {
	fs := newFlags("run")
	pol := fs.String("policy", "keel,metron", "")
	abl := fs.Bool("ablation", false, "")
	out := fs.String("out", "", "")
	jobs := fs.Int("jobs", runtime.NumCPU(), "")
	nfp := fs.String("nf-profile", "bench/results/nf_profile.json", "")
	cl := fs.String("chain-length", "bench/results/chain_length.json", "")
	quiet := fs.Bool("q", false, "")
	cpuprof := fs.String("cpuprofile", "", "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("run: name at least one scenario file (bench/scenarios/*.yaml)")
	}
	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	tbl, err := costs.Load(*nfp, *cl)
	if err != nil {
		return err
	}
	cfgs, err := sim.Policies(*abl, strings.Split(*pol, ",")...)
	if err != nil {
		return fmt.Errorf("--policy: %v", err)
	}
	var scs []*sim.Scenario
	var names []string
	for _, p := range fs.Args() {
		sc, err := sim.LoadScenario(p, tbl)
		if err != nil {
			return err
		}
		scs = append(scs, sc)
		names = append(names, sc.Name)
	}
	progress := os.Stderr
	if *quiet {
		progress = nil
	}
	rows, err := sim.RunAll(scs, cfgs, tbl, *jobs, progress)
	if err != nil {
		return err
	}
	var scen any = names
	if len(names) == 1 {
		scen = names[0]
	}
	return writeJSON(*out, struct {
		Scenario any       `json:"scenario"`
		Costs    string    `json:"costs"`
		Method   string    `json:"method"`
		Rows     []sim.Row `json:"rows"`
	}{scen, tbl.Source, runMethod, rows})
}

// runMethod is how keel-sim run obtains its rows, written into its JSON.
const runMethod = "keel-sim run: discrete-event rack simulation (seeded, deterministic) with keel's controller " +
	"policy (gateway/internal/policy) deciding every assignment, overload mark, pool size, reclaim and repack; " +
	"cores modelled turn by turn (gateway/internal/dpmodel). A scenario without together runs each chain on its " +
	"own in the rack; with together, all its chains at once, where a core in use is shared out equally among the " +
	"sgroups attached to it: a chain's cores_avg is the time average of its sgroups' shares, its cores_max the most " +
	"cores holding one of its sgroups at once, and the row of chain \"all\" has the rack's cores in use " +
	"(cores_avg, cores_max), every packet (p99_us, loss) and meets_slo true only if every chain meets its SLO. " +
	"Policies: keel; metron (run to completion, no isolation, threshold 1.0, scale-out on queue build-up); " +
	"keel-nopack, keel-fixedbatch (one burst per turn), keel-fixedthr (threshold 0.9) change one choice of keel; " +
	"metron-slo is Metron's runtime with keel's SLO thresholds."

func profileCmd(args []string) error {
	fs := newFlags("profile")
	nfs := fs.String("nfs", "", "")
	pkt := fs.Int("pkt-bytes", 1024, "")
	ghz := fs.Float64("ghz", 2.4, "")
	chain := fs.String("chain", "", "")
	seed := fs.Uint64("seed", 1, "")
	out := fs.String("out", "", "")
	nfp := fs.String("nf-profile", "bench/results/nf_profile.json", "")
	cl := fs.String("chain-length", "bench/results/chain_length.json", "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *nfs == "" {
		return errors.New("profile: --nfs is required (e.g. --nfs tunnel,ipv4fwd)")
	}
	if *pkt < 64 || *pkt > 9000 {
		return fmt.Errorf("profile: --pkt-bytes %d out of range [64, 9000]", *pkt)
	}
	if *ghz <= 0 {
		return errors.New("profile: --ghz must be positive")
	}
	tbl, err := costs.Load(*nfp, *cl)
	if err != nil {
		return err
	}
	list := strings.Split(*nfs, ",")
	cost, err := tbl.Chain(list, *pkt, *ghz*1e9)
	if err != nil {
		return fmt.Errorf("profile: --nfs: %v", err)
	}
	name := *chain
	if name == "" {
		name = strings.Join(list, "-")
	}
	b := keelBatch(cost)
	p := dpmodel.DeriveProfile(name, cost, b, *pkt, *seed)
	p.NFs = list
	return writeJSON(*out, p)
}

// keelBatch is the bursts per turn keel's policy runs the chain at.
func keelBatch(c policy.Cost) int { return policy.Keel().BatchFor(c, dpmodel.BurstSize) }

// batchCmd writes the bursts per turn keel's controller picks for the measured costs given
// on the command line, and eq. 1's rates (see usage).
func batchCmd(args []string, w io.Writer) error {
	fs := newFlags("batch")
	nfs := fs.String("nf-cycles", "", "")
	ioCycles := fs.Float64("io-cycles", -1, "")
	cp := fs.Float64("copy-cycles", 0, "")
	handoff := fs.Float64("handoff-cycles", -1, "")
	p := fs.Float64("p", 0, "")
	fill := fs.Float64("fill", dpmodel.BurstSize, "")
	maxBursts := fs.Int("max-bursts", 64, "")
	hz := fs.Float64("tsc-hz", 1e9, "")
	at := fs.String("at", "", "")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cost := policy.Cost{IOCycles: *ioCycles, CopyCycles: *cp, HandoffCycles: *handoff, FreqHz: *hz,
		BurstMax: dpmodel.BurstSize}
	for _, s := range strings.Split(*nfs, ",") {
		c, err := strconv.ParseFloat(s, 64)
		if err != nil || c < 0 {
			return fmt.Errorf("batch: --nf-cycles: %q is not a cycle count", s)
		}
		cost.NFCycles = append(cost.NFCycles, c)
	}
	switch {
	case *ioCycles < 0 || *handoff < 0 || *cp < 0:
		return errors.New("batch: --io-cycles and --handoff-cycles are required, and no cycles are negative")
	case *p <= 0 || *p >= 1:
		return fmt.Errorf("batch: --p %v: must be between 0 and 1", *p)
	case *fill < 1 || *fill > dpmodel.BurstSize:
		return fmt.Errorf("batch: --fill %v: must be in [1, %d]", *fill, dpmodel.BurstSize)
	case *maxBursts < 1:
		return errors.New("batch: --max-bursts must be at least 1")
	case *hz <= 0:
		return errors.New("batch: --tsc-hz must be positive")
	}
	b := cost.Batch(*p, *fill, *maxBursts)
	out := struct {
		BurstsPerTurn int                `json:"bursts_per_turn"`
		SinglePps     float64            `json:"single_pps"`
		RatePps       float64            `json:"rate_pps"`
		RatesPps      map[string]float64 `json:"rates_pps"`
	}{b, cost.SingleRate(), cost.Rate(b, *fill), map[string]float64{}}
	if *at != "" {
		for _, s := range strings.Split(*at, ",") {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 {
				return fmt.Errorf("batch: --at: %q is not a number of bursts", s)
			}
			out.RatesPps[s] = cost.Rate(n, *fill)
		}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
