// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/keel-nfv/keel/agent/internal/vf"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"github.com/keel-nfv/keel/xdp"
)

// BPFFS is where the agent pins its instances' XDP maps and links (a bpffs, mounted if absent).
const BPFFS = "/sys/fs/bpf"

// nicParts are the instances' NIC parts this agent has loaded (the chain's nic_nfs, run in
// XDP on the instance's VF): ingress on vf0 in position 0's network namespace, before the
// server NFs; egress on the VF's host side (the OVS port), after them. Their maps and links
// are pinned, so an agent that exits leaves them running, and one that starts loads them
// again over the same maps (flow state and counters kept) and swaps its programs in
// through the pinned links: no packet of a running flow passes without them.
type nicParts struct {
	mu    sync.Mutex
	parts map[string]*nicPart
}

type nicPart struct {
	key             string // the nic_nfs it runs, as nicKey writes them
	ingress, egress *xdp.Chain
}

func nicSpecs(ch *pb.Chain, egress bool) []xdp.Spec {
	var out []xdp.Spec
	for _, n := range ch.GetNicNfs() {
		if n.Egress == egress {
			out = append(out, xdp.Spec{NF: n.Nf, Config: n.ConfigJson})
		}
	}
	return out
}

func nicKey(ch *pb.Chain) string {
	var b strings.Builder
	for _, n := range ch.GetNicNfs() {
		fmt.Fprintf(&b, "%s|%s|%t\n", n.Nf, n.ConfigJson, n.Egress)
	}
	return b.String()
}

func sameNFs(a, b []xdp.Spec) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].NF != b[i].NF {
			return false
		}
	}
	return true
}

// pinDir is where the instance's NIC part is pinned.
func (a *Agent) pinDir(id string) string {
	return filepath.Join(BPFFS, "keel", vf.WorkerPortID(a.cfg.Worker), strings.ReplaceAll(id, "/", "_"))
}

// applyNIC makes the instance's NIC part what its chain says: a new configuration of the same
// NFs is written into their maps in place; other NFs are loaded and attached, replacing
// what ran through the pinned links. pid is position 0's process (for vf0); 0 if unknown,
// which only a first attach needs.
func (a *Agent) applyNIC(in *pb.ChainInstance, ch *pb.Chain, pid int) error {
	a.nic.mu.Lock()
	defer a.nic.mu.Unlock()
	if a.nic.parts == nil {
		a.nic.parts = map[string]*nicPart{}
	}
	key := nicKey(ch)
	cur := a.nic.parts[in.Id]
	if cur != nil && cur.key == key {
		return nil
	}
	if key == "" {
		return a.removeNICLocked(in.Id)
	}
	ing, eg := nicSpecs(ch, false), nicSpecs(ch, true)
	if cur != nil && sameNFs(cur.ingress.Specs(), ing) && sameNFs(cur.egress.Specs(), eg) {
		if err := cur.ingress.Reconfigure(ing); err != nil {
			return fmt.Errorf("NIC part of %s: %w", in.Id, err)
		}
		if err := cur.egress.Reconfigure(eg); err != nil {
			return fmt.Errorf("NIC part of %s: %w", in.Id, err)
		}
		cur.key = key
		a.Log.Info("NIC part reconfigured in place", "instance", in.Id)
		return nil
	}
	if err := xdp.EnsureBPFFS(BPFFS); err != nil {
		return err
	}
	dir := a.pinDir(in.Id)
	next := &nicPart{key: key}
	var err error
	if next.ingress, err = xdp.Load(ing, xdp.Options{Exit: xdp.ExitPass, PinDir: filepath.Join(dir, "ingress")}); err != nil {
		return fmt.Errorf("NIC part of %s: ingress: %w", in.Id, err)
	}
	if next.egress, err = xdp.Load(eg, xdp.Options{Exit: xdp.ExitPass, PinDir: filepath.Join(dir, "egress")}); err != nil {
		next.ingress.Close()
		return fmt.Errorf("NIC part of %s: egress: %w", in.Id, err)
	}
	if err := a.attachNIC(in, next, dir, pid); err != nil {
		next.ingress.Close()
		next.egress.Close()
		return fmt.Errorf("NIC part of %s: %w", in.Id, err)
	}
	if cur != nil {
		cur.ingress.Close()
		cur.egress.Close()
	}
	a.nic.parts[in.Id] = next
	return nil
}

// attachNIC attaches both entries. An empty part is attached too (keel_rx alone checks and
// passes), so that a later redeploy only swaps programs.
func (a *Agent) attachNIC(in *pb.ChainInstance, p *nicPart, dir string, pid int) error {
	pin := filepath.Join(dir, "ingress", "link")
	if _, err := os.Stat(pin); err != nil && pid <= 0 {
		return errors.New("position 0 is not running: vf0 cannot be found")
	}
	var mode string
	attach := func() error {
		var err error
		mode, err = xdp.Attach(p.ingress.Entry(), vf.InNetns, pin)
		return err
	}
	var err error
	if _, serr := os.Stat(pin); serr == nil {
		err = attach() // the pinned link is updated, from any namespace
	} else {
		err = xdp.InNetns(pid, attach)
	}
	if err != nil {
		return fmt.Errorf("ingress on %s: %w", vf.InNetns, err)
	}
	a.Log.Info("NIC part attached", "instance", in.Id, "where", "ingress "+vf.InNetns, "xdp", mode, "nfs", len(p.ingress.Specs()))
	if _, ok := a.VF.(*vf.OVSVeth); !ok {
		if len(p.egress.Specs()) > 0 {
			return errors.New("egress NFs need the embedded NIC (a VF's host side to attach to)")
		}
		return nil
	}
	host := vf.VethName(in.Vlan)
	if mode, err = xdp.Attach(p.egress.Entry(), host, filepath.Join(dir, "egress", "link")); err != nil {
		return fmt.Errorf("egress on %s: %w", host, err)
	}
	a.Log.Info("NIC part attached", "instance", in.Id, "where", "egress "+host, "xdp", mode, "nfs", len(p.egress.Specs()))
	return nil
}

// removeNIC detaches the instance's NIC part and deletes its pinned maps.
func (a *Agent) removeNIC(id string) error {
	a.nic.mu.Lock()
	defer a.nic.mu.Unlock()
	return a.removeNICLocked(id)
}

func (a *Agent) removeNICLocked(id string) error {
	if p := a.nic.parts[id]; p != nil {
		p.ingress.Close()
		p.egress.Close()
		delete(a.nic.parts, id)
	}
	if err := os.RemoveAll(a.pinDir(id)); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("NIC part of %s: %w", id, err)
	}
	return nil
}

// syncNIC brings every running instance's NIC part in line with its chain (a redeploy, or
// an agent that restarted) and removes the parts of instances this worker no longer runs.
func (a *Agent) syncNIC(obs *observed, busy map[string]bool) {
	type want struct {
		in  *pb.ChainInstance
		ch  *pb.Chain
		pid int
	}
	var todo []want
	live := map[string]bool{}
	a.mu.Lock()
	for id, in := range a.instances {
		live[id] = true
		ch := chainOf(a.chains, in)
		if ch == nil || busy[id] || !position0Runs(obs.actual[id]) {
			continue
		}
		pid := 0
		for _, c := range obs.containers[id] {
			if c.Labels[LabelPosition] == "0" {
				pid = c.Pid
			}
		}
		todo = append(todo, want{in, ch, pid})
	}
	a.mu.Unlock()
	for _, w := range todo {
		if len(w.ch.GetNicNfs()) == 0 && !a.hasNIC(w.in.Id) {
			continue
		}
		if err := a.applyNIC(w.in, w.ch, w.pid); err != nil {
			a.Log.Warn("NIC part: retried on the next pass", "instance", w.in.Id, "err", err)
		}
	}
	a.nic.mu.Lock()
	var gone []string
	for id := range a.nic.parts {
		if !live[id] && !busy[id] {
			gone = append(gone, id)
		}
	}
	a.nic.mu.Unlock()
	for _, id := range gone {
		if err := a.removeNIC(id); err != nil {
			a.Log.Warn("NIC part", "instance", id, "err", err)
		}
	}
}

func (a *Agent) hasNIC(id string) bool {
	a.nic.mu.Lock()
	defer a.nic.mu.Unlock()
	if a.nic.parts[id] != nil {
		return true
	}
	_, err := os.Stat(a.pinDir(id))
	return err == nil
}

// nicCounters are the counters of an instance's NIC part: keel_rx's and each NF's, by where
// the part runs (ingress or egress). They are keel's own figures: keel's programs count in
// maps no tenant code writes.
type nicCounter struct {
	where string
	xdp.Counters
}

// nicCounters reads every loaded instance's NIC counters (a.nic.mu taken; callers may hold a.mu).
func (a *Agent) nicCounters() map[string][]nicCounter {
	a.nic.mu.Lock()
	defer a.nic.mu.Unlock()
	out := map[string][]nicCounter{}
	for id, p := range a.nic.parts {
		for _, part := range []struct {
			where string
			c     *xdp.Chain
		}{{"ingress", p.ingress}, {"egress", p.egress}} {
			cs, err := part.c.Counters()
			if err != nil {
				continue
			}
			for _, c := range cs {
				out[id] = append(out[id], nicCounter{part.where, c})
			}
		}
	}
	return out
}
