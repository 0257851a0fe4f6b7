// SPDX-License-Identifier: Apache-2.0

// Package xdp runs the NIC-placed NFs of a chain instance as eBPF/XDP programs: it loads the
// objects compiled from xdp/bpf/ (one per NF, plus the entry program keel_rx), writes each
// NF's configuration into its maps, composes them in chain order through the instance's
// program array, attaches the entry to the instance's VF and reads the NFs' counters.
//
// The objects are loaded with cilium/ebpf's LoadCollectionSpec rather than bpf2go bindings:
// an instance loads the same object once per position with its own constants and maps, for
// chains it learns at run time, so generated per-object Go types would add nothing but a
// second copy of every object in the Go binaries; make build compiles xdp/bpf/*.c into
// build/xdp/ beside build/bin/, where keel-agent and keel-xdp find them.
package xdp

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/cilium/ebpf"
)

// XDP verdicts a chain's NIC part ends with.
const (
	ExitPass uint32 = 2 // XDP_PASS: on to the instance's server NFs
	ExitTX   uint32 = 3 // XDP_TX: back out of the VF toward the ToR (no server NF)
)

// Spec is one NIC-placed NF of an instance, in chain order.
type Spec struct {
	NF     string // the catalogue NF: acl, tunnel, ...
	Config string // its keel-nf JSON configuration
}

// Options say where the objects are, how the NIC part ends and where its maps are pinned.
type Options struct {
	Objects string // directory of rx.o and NAME.o (ObjectsDir() by default)
	Exit    uint32 // ExitPass or ExitTX
	// PinDir, if set, pins every map under it (on bpffs). Loading again with the same PinDir
	// and NFs reuses the pinned maps, their flow state and counters included.
	PinDir string
}

// Chain is the loaded NIC part of one instance.
type Chain struct {
	specs []Spec
	opts  Options
	rx    *ebpf.Collection
	nfs   []*ebpf.Collection
	progs *ebpf.Map // keel_chain
}

// ObjectsDir is where make build puts the objects: $KEEL_XDP_OBJECTS, else ../xdp beside the
// running binary's directory (build/bin -> build/xdp).
func ObjectsDir() string {
	if d := os.Getenv("KEEL_XDP_OBJECTS"); d != "" {
		return d
	}
	exe, err := os.Executable()
	if err != nil {
		return "build/xdp"
	}
	return filepath.Join(filepath.Dir(filepath.Dir(exe)), "xdp")
}

// Load verifies (the kernel's verifier runs on each program), configures and composes the NFs.
func Load(specs []Spec, opts Options) (*Chain, error) {
	if len(specs) > maxNFs {
		return nil, fmt.Errorf("%d NIC NFs, an instance runs at most %d", len(specs), maxNFs)
	}
	if opts.Objects == "" {
		opts.Objects = ObjectsDir()
	}
	if opts.Exit != ExitPass && opts.Exit != ExitTX {
		return nil, fmt.Errorf("exit verdict %d is neither XDP_PASS nor XDP_TX", opts.Exit)
	}
	applies := make([]func(*ebpf.Collection) error, len(specs))
	for i, s := range specs {
		k, ok := kinds[s.NF]
		if !ok {
			return nil, fmt.Errorf("NF #%d: %s does not run in XDP (these do: %s)", i+1, s.NF, strings.Join(Names(), ", "))
		}
		c, err := parseConfig(s.NF, s.Config)
		if err != nil {
			return nil, err
		}
		if applies[i], err = k.parse(c); err != nil {
			return nil, err
		}
	}
	c := &Chain{specs: specs, opts: opts}
	var err error
	c.rx, err = c.load("rx", "rx", next(0, len(specs)), nil)
	if err != nil {
		return nil, err
	}
	c.progs = c.rx.Maps["keel_chain"]
	for i, s := range specs {
		coll, err := c.load(s.NF, fmt.Sprintf("%d-%s", i, s.NF), next(i+1, len(specs)), c.progs)
		if err == nil {
			c.nfs = append(c.nfs, coll)
			err = applies[i](coll)
		}
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("NF #%d %s: %w", i+1, s.NF, err)
		}
	}
	// Last to first: a packet never jumps into a slot whose successor is missing.
	for i := len(c.nfs) - 1; i >= 0; i-- {
		if err := c.progs.Put(uint32(i), c.nfs[i].Programs[kinds[specs[i].NF].program]); err != nil {
			c.Close()
			return nil, fmt.Errorf("keel_chain slot %d: %w", i, err)
		}
	}
	for i := len(c.nfs); i < maxNFs; i++ {
		if err := c.progs.Delete(uint32(i)); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			c.Close()
			return nil, fmt.Errorf("keel_chain slot %d: %w", i, err)
		}
	}
	return c, nil
}

const maxNFs = 16 // KEEL_MAX_NFS

func next(i, n int) uint32 {
	if i >= n {
		return 0xffffffff // KEEL_LAST
	}
	return uint32(i)
}

// load loads object NAME.o for one position: its constants set, keel_chain shared, its maps
// pinned under PinDir/dir.
func (c *Chain) load(name, dir string, nextSlot uint32, progs *ebpf.Map) (*ebpf.Collection, error) {
	path := filepath.Join(c.opts.Objects, name+".o")
	spec, err := ebpf.LoadCollectionSpec(path)
	if err != nil {
		return nil, fmt.Errorf("%w (make build compiles xdp/bpf into build/xdp)", err)
	}
	for v, val := range map[string]uint32{"keel_next": nextSlot, "keel_exit": c.opts.Exit} {
		sv := spec.Variables[v]
		if sv == nil {
			return nil, fmt.Errorf("%s: no constant %s", path, v)
		}
		if err := sv.Set(val); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, v, err)
		}
	}
	opts := ebpf.CollectionOptions{}
	if progs != nil {
		opts.MapReplacements = map[string]*ebpf.Map{"keel_chain": progs}
	}
	if c.opts.PinDir != "" {
		pin := filepath.Join(c.opts.PinDir, dir)
		if err := os.MkdirAll(pin, 0o700); err != nil {
			return nil, err
		}
		for n, m := range spec.Maps {
			if !strings.HasPrefix(n, ".") {
				m.Pinning = ebpf.PinByName
			}
		}
		opts.Maps.PinPath = pin
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, opts)
	if err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("%s: the verifier refuses it: %+v", path, ve)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return coll, nil
}

// Entry is the program to attach to the VF (and to run in tests): keel_rx.
func (c *Chain) Entry() *ebpf.Program { return c.rx.Programs[rxKind.program] }

// Specs are the NFs the chain runs, in order.
func (c *Chain) Specs() []Spec { return c.specs }

// Reconfigure writes new configurations of the same NFs into their maps while the programs
// run (a redeploy that changes only arguments); it refuses a different list of NFs.
func (c *Chain) Reconfigure(specs []Spec) error {
	if len(specs) != len(c.specs) {
		return fmt.Errorf("reconfigure: %d NFs instead of %d: load the chain again", len(specs), len(c.specs))
	}
	applies := make([]func(*ebpf.Collection) error, len(specs))
	for i, s := range specs {
		if s.NF != c.specs[i].NF {
			return fmt.Errorf("reconfigure: NF #%d is %s, was %s: load the chain again", i+1, s.NF, c.specs[i].NF)
		}
		cf, err := parseConfig(s.NF, s.Config)
		if err != nil {
			return err
		}
		if applies[i], err = kinds[s.NF].parse(cf); err != nil {
			return err
		}
	}
	for i, apply := range applies {
		if err := apply(c.nfs[i]); err != nil {
			return fmt.Errorf("NF #%d %s: %w", i+1, specs[i].NF, err)
		}
	}
	c.specs = specs
	return nil
}

// Run runs one frame through the NIC part with BPF_PROG_TEST_RUN: the verdict and the frame
// as XDP leaves it.
func (c *Chain) Run(frame []byte) (uint32, []byte, error) {
	opts := ebpf.RunOptions{Data: frame, DataOut: make([]byte, len(frame)+256)}
	verdict, err := c.Entry().Run(&opts)
	if err != nil {
		return 0, nil, err
	}
	return verdict, opts.DataOut, nil
}

// Close releases the programs and maps (pinned maps stay pinned: Unpin removes them).
func (c *Chain) Close() {
	for _, coll := range c.nfs {
		coll.Close()
	}
	if c.rx != nil {
		c.rx.Close()
	}
}

// Counters are one program's counters, summed over CPUs.
type Counters struct {
	NF       string            // "rx" for the entry program
	Position int               // in the NIC part, -1 for rx
	In       uint64            // packets it saw
	Out      uint64            // packets it passed on
	Dropped  uint64            // packets it dropped
	Own      map[string]uint64 // the NF's own counters (e.g. no_route_drops)
}

// keelCounters is struct keel_counters of keel_xdp.h.
type keelCounters struct{ C [16]uint64 }

// Counters reads every program's keel_stats: rx first, then the NFs in order.
func (c *Chain) Counters() ([]Counters, error) {
	out := make([]Counters, 0, 1+len(c.nfs))
	read := func(coll *ebpf.Collection, nf string, pos int, k kind) error {
		var per []keelCounters
		if err := coll.Maps["keel_stats"].Lookup(uint32(0), &per); err != nil {
			return fmt.Errorf("%s keel_stats: %w", nf, err)
		}
		var sum keelCounters
		for _, p := range per {
			for i := range sum.C {
				sum.C[i] += p.C[i]
			}
		}
		ct := Counters{NF: nf, Position: pos, In: sum.C[0], Out: sum.C[1], Dropped: sum.C[2], Own: map[string]uint64{}}
		for i, name := range k.counters {
			ct.Own[name] = sum.C[3+i]
		}
		out = append(out, ct)
		return nil
	}
	if err := read(c.rx, "rx", -1, rxKind); err != nil {
		return nil, err
	}
	for i, coll := range c.nfs {
		if err := read(coll, c.specs[i].NF, i, kinds[c.specs[i].NF]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Program is the program of the NIC part's NF i (in chain order).
func (c *Chain) Program(i int) *ebpf.Program { return c.nfs[i].Programs[kinds[c.specs[i].NF].program] }
