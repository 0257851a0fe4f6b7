// SPDX-License-Identifier: Apache-2.0

// keel-xdp runs the NIC part of a chain, keel's XDP network functions, without a NIC: through
// the kernel's BPF_PROG_TEST_RUN, on a capture (run) or on synthetic frames (bench).
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/keel-nfv/keel/xdp"
)

const usage = `usage: keel-xdp run --chain EXPR --in IN.pcap --out OUT.pcap [--exit pass|tx] [--objects DIR]
       keel-xdp bench [--repeat N] [--json FILE] [--objects DIR]
       keel-xdp list

Runs keel's XDP network functions (the NFs the placer puts on an eBPF SmartNIC) in the
kernel through BPF_PROG_TEST_RUN: no NIC is needed. Each frame goes through keel_rx, which
drops what keel-nf's receive path drops as malformed, then through the chain's NFs in order,
as on an instance's VF.

  run    reads IN.pcap, writes the frames XDP passes on (XDP_PASS or XDP_TX) to OUT.pcap in
         order, and prints what was dropped, by program and reason, on stderr. Frames
         shorter than an Ethernet header never reach XDP (the kernel refuses them, a NIC
         does not deliver them): they are counted as truncated_eth.
  bench  prints ns/packet of each NF alone and of keel_rx, at 64 and 1024 bytes, as the
         kernel's test_run measures it over --repeat runs (default 1000000) in 7 rounds,
         minus what test_run costs for an empty program (the median of the rounds); --json FILE
         writes the figures as JSON too.
  list   prints the NFs that run in XDP.

  --chain EXPR   the NIC part: keel-chain's --nf items joined by "->", in chain order, e.g.
                 'acl={"rules":[{"dst_ip":"198.18.0.0/15"}]} -> tunnel={"vlan":7} -> macswap'
  --exit V       what the last NF does with a packet it passes: pass (on to the server NFs,
                 the default) or tx (a chain wholly on the NIC: back out of the VF)
  --objects DIR  the compiled NFs (default: ../xdp beside this binary, or $KEEL_XDP_OBJECTS)

Needs root (CAP_BPF and CAP_NET_ADMIN). Exit status: 0 done, 1 failure, 2 usage error.
`

func main() {
	if len(os.Args) < 2 {
		usageError("missing command (run, bench or list)")
	}
	switch os.Args[1] {
	case "run":
		os.Exit(run(os.Args[2:]))
	case "bench":
		os.Exit(bench(os.Args[2:]))
	case "list":
		fmt.Println(strings.Join(xdp.Names(), "\n"))
	case "-h", "--help", "help":
		fmt.Print(usage)
	default:
		usageError("unknown command " + os.Args[1])
	}
}

func usageError(msg string) {
	fmt.Fprintf(os.Stderr, "keel-xdp: %s\n%s", msg, usage)
	os.Exit(2)
}

func flags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

func parse(fs *flag.FlagSet, args []string) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Print(usage)
			os.Exit(0)
		}
		usageError(err.Error())
	}
	if fs.NArg() > 0 {
		usageError("unexpected argument " + fs.Arg(0))
	}
}

func fail(err error) int {
	fmt.Fprintf(os.Stderr, "keel-xdp: %v\n", err)
	return 1
}

func run(args []string) int {
	fs := flags("run")
	expr := fs.String("chain", "", "")
	in := fs.String("in", "", "")
	out := fs.String("out", "", "")
	exit := fs.String("exit", "pass", "")
	objects := fs.String("objects", "", "")
	parse(fs, args)
	if *expr == "" || *in == "" || *out == "" {
		usageError("run needs --chain, --in and --out")
	}
	verdict := map[string]uint32{"pass": xdp.ExitPass, "tx": xdp.ExitTX}[*exit]
	if verdict == 0 {
		usageError("--exit is pass or tx, not " + *exit)
	}
	specs, err := xdp.ParseChain(*expr)
	if err != nil {
		usageError("--chain: " + err.Error())
	}
	for i, s := range specs {
		if err := xdp.Validate(s.NF, s.Config); err != nil {
			usageError(fmt.Sprintf("--chain item #%d: %v", i+1, err))
		}
	}
	frames, err := xdp.ReadPcap(*in)
	if err != nil {
		return fail(err)
	}
	chain, err := xdp.Load(specs, xdp.Options{Objects: *objects, Exit: verdict})
	if err != nil {
		return fail(err)
	}
	defer chain.Close()
	var passed [][]byte
	runts, txed := 0, 0
	for i, f := range frames {
		if len(f) < 14 {
			runts++
			continue
		}
		v, o, err := chain.Run(f)
		if err != nil {
			return fail(fmt.Errorf("frame %d (%d bytes): %w", i+1, len(f), err))
		}
		if v == xdp.ExitPass || v == xdp.ExitTX {
			passed = append(passed, o)
		}
		if v == xdp.ExitTX {
			txed++
		}
	}
	f, err := os.Create(*out)
	if err != nil {
		return fail(err)
	}
	w := bufio.NewWriter(f)
	if err := xdp.WritePcap(w, passed); err != nil {
		return fail(err)
	}
	if err := w.Flush(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		return fail(err)
	}
	counters, err := chain.Counters()
	if err != nil {
		return fail(err)
	}
	dropped := len(frames) - len(passed)
	fmt.Fprintf(os.Stderr, "keel-xdp: %d frames in, %d passed, %d dropped (XDP_PASS %d, XDP_TX %d)\n",
		len(frames), len(passed), dropped, len(passed)-txed, txed)
	if runts > 0 {
		fmt.Fprintf(os.Stderr, "  rx: %d dropped (truncated_eth: %d shorter than an Ethernet header)\n", runts, runts)
	}
	for _, c := range counters {
		if c.Dropped == 0 {
			continue
		}
		name := c.NF
		if c.Position >= 0 {
			name = fmt.Sprintf("#%d %s", c.Position+1, c.NF)
		}
		fmt.Fprintf(os.Stderr, "  %s: %d dropped%s\n", name, c.Dropped, own(c.Own))
	}
	return 0
}

func own(m map[string]uint64) string {
	var parts []string
	for k, v := range m {
		if v > 0 {
			parts = append(parts, fmt.Sprintf("%s: %d", k, v))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	sort.Strings(parts)
	return " (" + strings.Join(parts, ", ") + ")"
}

// benchNFs are the configurations bench measures: those of keel-nfbench's rows where it has one
// (acl with 10 rules, the packet matching the last; ipv4fwd with a /16 and a /24 route).
var benchNFs = []xdp.Spec{
	{NF: "acl", Config: aclRules(10)},
	{NF: "tunnel", Config: `{"vlan":7}`},
	{NF: "detunnel", Config: `{}`},
	{NF: "ipv4fwd", Config: `{"routes":[{"prefix":"198.19.0.0/16","dst_mac":"02:00:00:00:00:03","port":1},` +
		`{"prefix":"198.19.1.0/24","dst_mac":"02:00:00:00:00:04","port":2}]}`},
	{NF: "lb", Config: `{"backends":["198.19.9.1","198.19.9.2","198.19.9.3","198.19.9.4"]}`},
	{NF: "macswap", Config: `{}`},
	{NF: "chacha", Config: `{"key":"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f","nonce":"000000000000004a00000000"}`},
}

func aclRules(n int) string {
	rules := make([]string, 0, n)
	for i := 0; i < n-1; i++ {
		rules = append(rules, fmt.Sprintf(`{"src_ip":"10.%d.0.0/16","dst_port":%d,"proto":"tcp","drop":true}`, i, 1000+i))
	}
	rules = append(rules, `{"dst_ip":"198.19.0.0/16"}`)
	return `{"rules":[` + strings.Join(rules, ",") + `]}`
}

// udpFrame is an Ethernet/IPv4/UDP frame of size bytes from 198.18.0.1 to 198.19.0.1, VLAN
// tagged for detunnel (which else only passes it).
func udpFrame(size int, tagged bool) []byte {
	f := make([]byte, size)
	copy(f, []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1})
	off := 12
	if tagged {
		copy(f[off:], []byte{0x81, 0x00, 0x00, 0x07})
		off += 4
	}
	copy(f[off:], []byte{0x08, 0x00})
	ip := f[off+2:]
	ipLen := size - off - 2
	ip[0], ip[8], ip[9] = 0x45, 255, 17
	binary.BigEndian.PutUint16(ip[2:], uint16(ipLen))
	copy(ip[12:], []byte{198, 18, 0, 1, 198, 19, 0, 1})
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	binary.BigEndian.PutUint16(ip[20:], 1000)
	binary.BigEndian.PutUint16(ip[22:], 5001)
	binary.BigEndian.PutUint16(ip[24:], uint16(ipLen-20))
	return f
}

// benchChunk is how many runs bench makes on one copy of the frame: the kernel runs the
// program again on the frame it left, so tunnel's pushes must stay within the headroom (50
// runs), ipv4fwd's TTL above 1 (250), and detunnel must find a tag every time (1 run). The
// others take the same path on the frame they leave (1000).
var benchChunk = map[string]int{"detunnel": 1, "tunnel": 50, "ipv4fwd": 250}

// benchRounds is how many rounds --repeat is split into.
const benchRounds = 7

// timeRuns runs prog repeat times on frame, chunk runs per copy of it, and returns the mean
// ns per run as the kernel measures it and the last verdict.
func timeRuns(prog *ebpf.Program, frame []byte, repeat, chunk int) (float64, uint32, error) {
	var total time.Duration
	var v uint32
	for done := 0; done < repeat; done += chunk {
		n := min(chunk, repeat-done)
		var d time.Duration
		var err error
		if v, d, err = prog.Benchmark(frame, n, nil); err != nil {
			return 0, 0, err
		}
		total += d * time.Duration(n)
	}
	return float64(total) / float64(repeat), v, nil
}

// emptyProgram is "return XDP_PASS": what test_run itself costs per run at a chunk size,
// subtracted from the NFs' figures.
func emptyProgram() (*ebpf.Program, error) {
	return ebpf.NewProgram(&ebpf.ProgramSpec{
		Type:         ebpf.XDP,
		License:      "Apache-2.0",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, int32(xdp.ExitPass)), asm.Return()},
	})
}

func round1(x float64) float64 { return math.Round(x*10) / 10 }

type benchRow struct {
	NF           string  `json:"nf"`
	PktBytes     int     `json:"pkt_bytes"`
	NsPerPkt     float64 `json:"ns_per_pkt"`
	NsMeasured   float64 `json:"ns_measured"`
	NsHarness    float64 `json:"ns_test_run_harness"`
	Verdict      string  `json:"verdict"`
	Repeat       int     `json:"repeat"`
	RunsPerFrame int     `json:"runs_per_frame"`
	Config       string  `json:"config,omitempty"`
}

func bench(args []string) int {
	fs := flags("bench")
	repeat := fs.Int("repeat", 1000000, "")
	out := fs.String("json", "", "")
	objects := fs.String("objects", "", "")
	parse(fs, args)
	if *repeat < 1 {
		usageError("--repeat must be at least 1")
	}
	var rows []benchRow
	names := map[uint32]string{0: "aborted", 1: "drop", 2: "pass", 3: "tx", 4: "redirect"}
	empty, err := emptyProgram()
	if err != nil {
		return fail(err)
	}
	defer empty.Close()
	measure := func(spec *xdp.Spec, size int) error {
		var specs []xdp.Spec
		name := "rx"
		if spec != nil {
			specs, name = []xdp.Spec{*spec}, spec.NF
		}
		chain, err := xdp.Load(specs, xdp.Options{Objects: *objects, Exit: xdp.ExitPass})
		if err != nil {
			return err
		}
		defer chain.Close()
		prog := chain.Entry()
		if spec != nil {
			prog = chain.Program(0)
		}
		chunk := benchChunk[name]
		if chunk == 0 {
			chunk = 1000
		}
		frame := udpFrame(size, name == "detunnel")
		// Rounds alternate the NF and the empty program, each timed right after the other:
		// the figure is the median over the rounds of the NF's time minus the empty one's,
		// and the least of each is shown beside it.
		ns, base := math.Inf(1), math.Inf(1)
		var diffs []float64
		var v uint32
		for r := 0; r < benchRounds; r++ {
			n, verdict, err := timeRuns(prog, frame, max(*repeat/benchRounds, 1), chunk)
			if err != nil {
				return fmt.Errorf("%s at %d bytes: %w", name, size, err)
			}
			b, _, err := timeRuns(empty, frame, max(*repeat/benchRounds, 1), chunk)
			if err != nil {
				return fmt.Errorf("empty program at %d bytes: %w", size, err)
			}
			ns, base, v = math.Min(ns, n), math.Min(base, b), verdict
			diffs = append(diffs, n-b)
		}
		sort.Float64s(diffs)
		row := benchRow{NF: name, PktBytes: size, NsPerPkt: round1(diffs[len(diffs)/2]), NsMeasured: round1(ns),
			NsHarness: round1(base), Verdict: names[v], Repeat: *repeat, RunsPerFrame: chunk}
		if spec != nil {
			row.Config = spec.Config
		}
		rows = append(rows, row)
		fmt.Printf("%-9s %5d B  %7.1f ns/packet  (%.1f measured - %.1f test_run harness)  %s\n",
			name, size, row.NsPerPkt, row.NsMeasured, row.NsHarness, row.Verdict)
		return nil
	}
	for _, size := range []int{64, 1024} {
		if err := measure(nil, size); err != nil {
			return fail(err)
		}
		for i := range benchNFs {
			if err := measure(&benchNFs[i], size); err != nil {
				return fail(err)
			}
		}
	}
	if *out != "" {
		data, _ := json.MarshalIndent(map[string]any{
			"method": "BPF_PROG_TEST_RUN of each NF's program alone (keel_rx alone as nf rx): mean ns per run as the kernel times it, median over 7 rounds of the NF minus a program that only returns XDP_PASS timed right after it; ns_measured and ns_test_run_harness: the least of each over the rounds",
			"rows":   rows,
		}, "", " ")
		if err := os.WriteFile(*out, append(data, '\n'), 0o644); err != nil {
			return fail(err)
		}
	}
	return 0
}
