// SPDX-License-Identifier: Apache-2.0

package store

// Chain instances: one owner for each part of an instance (proto/keel/v1/control.proto's
// ChainInstance says the same).
//
//   - spec, keel:instances:<chain> (id -> JSON instanceSpec): what the gateway wants — worker,
//     VLAN, VF port, state, core, batch, overload and drain marks. Two parts of the gateway
//     write it, the provider (create, drain, remove) and the controller (attach, detach, move,
//     batch, overload), so every write is a compare-and-set on its generation (Gen), checked
//     and bumped by a Lua script (a record of before this layout, without one, counts as
//     generation 0): a writer that read an older spec gets ErrStale and reads
//     again, never overwriting the other's change.
//   - status, keel:status:<chain> (id -> JSON instanceStatus): what the instance's agent
//     reports (phase, restarts, rates, counters). One writer: the agent's stats stream.
//   - flows, keel:instflows:<id> (a set of flow keys) beside keel:flows: an instance's flow
//     count is the size of its set, changed only by the scripts that assign and release a flow
//     and remove an instance, so it always equals its live flows.
//   - the controller's bookkeeping (loads, idle times): in memory only (SetNote), rebuilt
//     from spec and status by the controller after a restart.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
)

const (
	keyStatus    = "keel:status:"    // + chain: hash instance id -> JSON instanceStatus
	keyInstFlows = "keel:instflows:" // + instance id: set of the flow keys assigned to it
)

// Instance is one instance of a chain on a worker (Galleon: an sgroup with its VF and VLAN),
// as its owners wrote it: spec, status, flows and the controller's notes.
type Instance struct {
	// Spec: the gateway's, written by compare-and-set on Gen.
	ID         string `json:"id"`
	Chain      string `json:"chain"`
	Worker     string `json:"worker"`
	VFPort     uint32 `json:"vf_port"`
	VLAN       uint32 `json:"vlan"`
	State      string `json:"state"` // pooled | attached
	Core       int32  `json:"core"`  // -1 while pooled
	Cores      int    `json:"cores"`
	Batch      uint32 `json:"batch"` // bursts per turn the gateway wants
	Overloaded bool   `json:"overloaded"`
	// OverloadReason is the policy's reason for the mark (policy.Reason); "" when not marked.
	OverloadReason string    `json:"overload_reason,omitempty"`
	Why            string    `json:"why,omitempty"` // why the spec is as it is, for describe
	Gen            uint64    `json:"gen"`           // the spec's generation: bumped by every write
	Draining       bool      `json:"draining,omitempty"`
	DrainUntil     time.Time `json:"drain_until,omitzero"`
	// Runs is the previous version of the chain a draining instance still runs (a rolling
	// update: it keeps its flows, takes no new ones and goes when they end or at DrainUntil).
	Runs *pb.Chain `json:"runs,omitempty"`

	// Status: the agent's report.
	Phase      string    `json:"phase,omitempty"`      // starting | ready | failed | removing
	Reason     string    `json:"reason,omitempty"`     // why it failed
	Restarts   uint64    `json:"restarts,omitempty"`   // rebuilds after failures, as the agent counts them
	ReportedAt time.Time `json:"reported_at,omitzero"` // the agent's latest report of it
	RateGbps   float64   `json:"rate_gbps"`            // offered on its VF
	RatePps    float64   `json:"rate_pps,omitempty"`   // packets/s offered on its VF
	// Its server sojourn over the agent's last window (position 0's measurement): p50, p99,
	// p99.9 in µs, the window's length, and the bound on the wait in the VF's queue it hides.
	P99us            float64 `json:"p99_us"`
	P50us            float64 `json:"p50_us,omitempty"`
	P999us           float64 `json:"p999_us,omitempty"`
	SojournWindowS   float64 `json:"sojourn_window_s,omitempty"`
	RxWaitBoundP99us float64 `json:"rx_wait_bound_p99_us,omitempty"`
	Packets          uint64  `json:"packets"`    // offered on its VF
	VFDropped        uint64  `json:"vf_dropped"` // refused by its VF (its receive side full)
	// What its NFs report of themselves (their statistics files): shown, never decided by.
	NFQueueLen uint32 `json:"nf_reported_queue_len"`
	NFDrops    uint64 `json:"nf_reported_drops"`
	// The last cycles per packet measured over real packets: its threads' CPU time
	// (coopsched's schedstat account) per packet handed over on its VF.
	CyclesPerPacket float64 `json:"cycles_per_packet,omitempty"`

	// Flows: the size of its flow set.
	Flows uint32 `json:"flows"`

	// Note: the controller's bookkeeping, in memory.
	Note `json:"-"`
}

// Note is the controller's bookkeeping of an instance (gateway/internal/policy's inputs it
// computes): kept in this process's memory, never in Redis.
type Note struct {
	FlowsAtStats uint32    `json:"flows_at_stats,omitempty"` // flows assigned when RatePps was measured
	NewVFDropped uint64    `json:"new_vf_dropped,omitempty"` // VFDropped's increase at the last report
	IdleSince    time.Time `json:"idle_since,omitzero"`      // attached and without flows since then
	Load         float64   `json:"load,omitempty"`           // estimated fraction of a core, at the last decision
	Threshold    float64   `json:"threshold,omitempty"`      // the chain's per-core load threshold then
	RateStale    bool      `json:"rate_stale,omitempty"`     // RatePps was measured before its last attach or detach
}

// Proto is the instance's wire form (keel.v1.ChainInstance).
func (in *Instance) Proto() *pb.ChainInstance {
	return &pb.ChainInstance{Id: in.ID, Chain: in.Chain, Worker: in.Worker, VfPort: in.VFPort, Vlan: in.VLAN,
		State: in.State, Core: in.Core, Flows: in.Flows, RateGbps: in.RateGbps, P99Us: in.P99us, Overloaded: in.Overloaded,
		Phase: in.Phase, Reason: in.Reason, Batch: in.Batch, Draining: in.Draining, Runs: in.Runs}
}

// Instance states.
const (
	Pooled   = "pooled"
	Attached = "attached"
)

// instanceSpec is the spec's record in Redis.
type instanceSpec struct {
	ID         string    `json:"id"`
	Chain      string    `json:"chain"`
	Worker     string    `json:"worker"`
	VFPort     uint32    `json:"vf_port"`
	VLAN       uint32    `json:"vlan"`
	State      string    `json:"state"`
	Core       int32     `json:"core"`
	Cores      int       `json:"cores"`
	Batch      uint32    `json:"batch"`
	Overloaded bool      `json:"overloaded"`
	OverReason string    `json:"overload_reason,omitempty"`
	Why        string    `json:"why,omitempty"`
	Gen        uint64    `json:"gen"`
	Draining   bool      `json:"draining,omitempty"`
	DrainUntil time.Time `json:"drain_until,omitzero"`
	Runs       *pb.Chain `json:"runs,omitempty"`
}

// instanceStatus is the status's record in Redis.
type instanceStatus struct {
	Phase           string    `json:"phase,omitempty"`
	Reason          string    `json:"reason,omitempty"`
	Restarts        uint64    `json:"restarts,omitempty"`
	ReportedAt      time.Time `json:"reported_at,omitzero"`
	RateGbps        float64   `json:"rate_gbps,omitempty"`
	RatePps         float64   `json:"rate_pps,omitempty"`
	P99us           float64   `json:"p99_us,omitempty"`
	P50us           float64   `json:"p50_us,omitempty"`
	P999us          float64   `json:"p999_us,omitempty"`
	SojournWindowS  float64   `json:"sojourn_window_s,omitempty"`
	RxWaitP99us     float64   `json:"rx_wait_bound_p99_us,omitempty"`
	Packets         uint64    `json:"packets,omitempty"`
	VFDropped       uint64    `json:"vf_dropped,omitempty"`
	NFQueueLen      uint32    `json:"nf_reported_queue_len,omitempty"`
	NFDrops         uint64    `json:"nf_reported_drops,omitempty"`
	CyclesPerPacket float64   `json:"cycles_per_packet,omitempty"`
}

func specOf(in *Instance) instanceSpec {
	return instanceSpec{ID: in.ID, Chain: in.Chain, Worker: in.Worker, VFPort: in.VFPort, VLAN: in.VLAN, State: in.State,
		Core: in.Core, Cores: in.Cores, Batch: in.Batch, Overloaded: in.Overloaded, OverReason: in.OverloadReason, Why: in.Why,
		Gen: in.Gen, Draining: in.Draining, DrainUntil: in.DrainUntil, Runs: in.Runs}
}

func (sp *instanceSpec) applyTo(in *Instance) {
	in.ID, in.Chain, in.Worker, in.VFPort, in.VLAN, in.State = sp.ID, sp.Chain, sp.Worker, sp.VFPort, sp.VLAN, sp.State
	in.Core, in.Cores, in.Batch, in.Overloaded, in.Why, in.Gen = sp.Core, sp.Cores, sp.Batch, sp.Overloaded, sp.Why, sp.Gen
	in.Draining, in.DrainUntil, in.Runs = sp.Draining, sp.DrainUntil, sp.Runs
	in.OverloadReason = sp.OverReason
}

func statusOf(in *Instance) instanceStatus {
	return instanceStatus{Phase: in.Phase, Reason: in.Reason, Restarts: in.Restarts, ReportedAt: in.ReportedAt,
		RateGbps: in.RateGbps, RatePps: in.RatePps, P99us: in.P99us, P50us: in.P50us, P999us: in.P999us,
		SojournWindowS: in.SojournWindowS, RxWaitP99us: in.RxWaitBoundP99us, Packets: in.Packets, VFDropped: in.VFDropped,
		NFQueueLen: in.NFQueueLen, NFDrops: in.NFDrops, CyclesPerPacket: in.CyclesPerPacket}
}

func (st *instanceStatus) applyTo(in *Instance) {
	in.Phase, in.Reason, in.Restarts, in.ReportedAt = st.Phase, st.Reason, st.Restarts, st.ReportedAt
	in.RateGbps, in.RatePps, in.P99us, in.Packets, in.VFDropped = st.RateGbps, st.RatePps, st.P99us, st.Packets, st.VFDropped
	in.NFQueueLen, in.NFDrops, in.CyclesPerPacket = st.NFQueueLen, st.NFDrops, st.CyclesPerPacket
	in.P50us, in.P999us, in.SojournWindowS, in.RxWaitBoundP99us = st.P50us, st.P999us, st.SojournWindowS, st.RxWaitP99us
}

// Errors of the instance writes.
var (
	// ErrGone: the instance was removed since the caller read it (a chain removed or
	// redeployed meanwhile); nothing was written, so a removed instance never comes back.
	ErrGone = errors.New("instance no longer exists")
	// ErrStale: the instance's spec changed since the caller read it (its generation moved
	// on), or it carries flows the write requires it not to; nothing was written: read again.
	ErrStale = errors.New("instance changed meanwhile")
)

// Lua scripts (Redis runs each atomically). Their answers: 1 done, 0 the instance is gone,
// -1 its generation is not the caller's, -2 it has flows.
var (
	// KEYS: spec hash, flow set. ARGV: id, expected gen, new spec JSON (gen+1), "idle" to
	// require no flows.
	specCAS = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then return 0 end
if tostring(cjson.decode(cur).gen or 0) ~= ARGV[2] then return -1 end
if ARGV[4] == 'idle' and redis.call('SCARD', KEYS[2]) > 0 then return -2 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
`)
	// KEYS: spec hash, status hash, flow set. ARGV: id, spec JSON, status JSON.
	instanceCreate = redis.NewScript(`
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('DEL', KEYS[3])
return 1
`)
	// KEYS: spec hash, status hash. ARGV: id, status JSON.
	statusSet = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return 1
`)
	// One script for both ends of a flow (Redis then has it cached from the first flow on,
	// and each end costs one round trip). KEYS: spec hash, flow set, flows hash, invocations
	// hash. ARGV: "assign" | "release", flow key; for assign: flow JSON, chain, id, expected
	// gen, new spec JSON or "". Answers the instance's flow count (>= 1 for an assign).
	flowWrite = redis.NewScript(`
if ARGV[1] == 'release' then
  redis.call('HDEL', KEYS[3], ARGV[2])
  redis.call('SREM', KEYS[2], ARGV[2])
  return redis.call('SCARD', KEYS[2])
end
local cur = redis.call('HGET', KEYS[1], ARGV[5])
if not cur then return 0 end
if tostring(cjson.decode(cur).gen or 0) ~= ARGV[6] then return -1 end
if ARGV[7] ~= '' then redis.call('HSET', KEYS[1], ARGV[5], ARGV[7]) end
redis.call('HSET', KEYS[3], ARGV[2], ARGV[3])
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('HINCRBY', KEYS[4], ARGV[4], 1)
return redis.call('SCARD', KEYS[2])
`)
	// flowWrite's "release" for many flows at once (a batch of FlowRemoved). KEYS: the flows
	// hash, then per flow its instance's flow set. ARGV: per flow its key. Returns per flow its
	// instance's flow count after.
	flowsRelease = redis.NewScript(`
local out = {}
for i = 1, #ARGV do
  redis.call('HDEL', KEYS[1], ARGV[i])
  redis.call('SREM', KEYS[1 + i], ARGV[i])
  out[i] = redis.call('SCARD', KEYS[1 + i])
end
return out
`)
	// flowWrite's "assign" for many flows at once (AssignFlows). KEYS: flows hash, calls
	// hash, then per flow its instance's spec hash and flow set. ARGV: per flow its key, its
	// record, its chain, its instance's id and the generation expected of the instance. Returns
	// per flow what flowWrite would: the instance's flow count after, 0 or -1.
	flowsAssign = redis.NewScript(`
local out, gens = {}, {}
for i = 0, #ARGV / 5 - 1 do
  local spec, set, a = KEYS[3 + 2 * i], KEYS[4 + 2 * i], 5 * i
  local id = ARGV[a + 4]
  local gen = gens[spec .. ' ' .. id]
  if gen == nil then
    local cur = redis.call('HGET', spec, id)
    gen = cur and tostring(cjson.decode(cur).gen or 0) or false
    gens[spec .. ' ' .. id] = gen
  end
  if not gen then
    out[#out + 1] = 0
  elseif gen ~= ARGV[a + 5] then
    out[#out + 1] = -1
  else
    redis.call('HSET', KEYS[1], ARGV[a + 1], ARGV[a + 2])
    redis.call('SADD', set, ARGV[a + 1])
    redis.call('HINCRBY', KEYS[2], ARGV[a + 3], 1)
    out[#out + 1] = redis.call('SCARD', set)
  end
end
return out
`)
	// KEYS: spec hash, status hash, flow set, flows hash, VLAN set. ARGV: id, expected gen
	// ("" for any), VLAN, "idle" to require no flows. Removes the instance with its flows.
	instanceDelete = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur then return 0 end
if ARGV[2] ~= '' and tostring(cjson.decode(cur).gen or 0) ~= ARGV[2] then return -1 end
if ARGV[4] == 'idle' and redis.call('SCARD', KEYS[3]) > 0 then return -2 end
for _, k in ipairs(redis.call('SMEMBERS', KEYS[3])) do redis.call('HDEL', KEYS[4], k) end
redis.call('DEL', KEYS[3])
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('SREM', KEYS[5], ARGV[3])
return 1
`)
)

// scriptErr turns a script's answer into ErrGone or ErrStale, naming what and the instance.
func scriptErr(what, id string, n int64) error {
	switch {
	case n == 0:
		return fmt.Errorf("%s: %s: %w", what, id, ErrGone)
	case n == -1:
		return fmt.Errorf("%s: %s: %w", what, id, ErrStale)
	case n == -2:
		return fmt.Errorf("%s: %s carries flows: %w", what, id, ErrStale)
	}
	return nil
}

// PutInstance creates a chain instance (the provider's creation of a pooled instance) with
// its first generation, and its status as in holds it (none yet, but for tests that
// start from a reported instance); every later change goes through UpdateSpec and
// UpdateStatus.
func (s *Store) PutInstance(ctx context.Context, in *Instance) error {
	in.Gen = 1
	sb, err1 := json.Marshal(specOf(in))
	tb, err2 := json.Marshal(statusOf(in))
	if err := errors.Join(err1, err2); err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	c := s.current()
	n, err := instanceCreate.Run(ctx, s.rdb, []string{keyInstances + in.Chain, keyStatus + in.Chain, keyInstFlows + in.ID},
		in.ID, sb, tb).Int64()
	if err != nil {
		s.drop(c)
		return fmt.Errorf("store instance %s: %w", in.ID, err)
	}
	if n == 0 {
		return fmt.Errorf("store instance %s: it exists already", in.ID)
	}
	in.Flows, in.Note = 0, Note{}
	s.update(c, func(c *cache) { c.putInstance(in) })
	return nil
}

// UpdateSpec writes in's spec if the stored one is still of generation in.Gen, and then
// bumps in.Gen; ErrGone if the instance was removed, ErrStale if its spec changed meanwhile.
// With idle, the write also requires the instance to carry no flow (ErrStale if it does).
// Status, flows and notes are not written.
func (s *Store) UpdateSpec(ctx context.Context, in *Instance, idle bool) error {
	next := specOf(in)
	next.Gen++
	b, err := json.Marshal(next)
	if err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	c := s.current()
	n, err := specCAS.Run(ctx, s.rdb, []string{keyInstances + in.Chain, keyInstFlows + in.ID},
		in.ID, strconv.FormatUint(in.Gen, 10), b, map[bool]string{true: "idle", false: ""}[idle]).Int64()
	if err != nil {
		s.drop(c)
		return fmt.Errorf("update instance %s: %w", in.ID, err)
	}
	if n == 0 {
		s.gone(c, in)
	}
	if err := scriptErr("update instance", in.ID, n); err != nil {
		if n == -1 {
			s.stale(c, in)
		}
		return err
	}
	in.Gen = next.Gen
	s.update(c, func(c *cache) {
		if cur := c.instances[in.Chain][in.ID]; cur != nil {
			next.applyTo(cur)
		}
	})
	return nil
}

// UpdateStatus writes in's status (the agent's report) if the instance exists; ErrGone if not.
func (s *Store) UpdateStatus(ctx context.Context, in *Instance) error {
	st := statusOf(in)
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	c := s.current()
	n, err := statusSet.Run(ctx, s.rdb, []string{keyInstances + in.Chain, keyStatus + in.Chain}, in.ID, b).Int64()
	if err != nil {
		s.drop(c)
		return fmt.Errorf("report of instance %s: %w", in.ID, err)
	}
	if n == 0 {
		s.gone(c, in)
		return scriptErr("report of instance", in.ID, n)
	}
	s.update(c, func(c *cache) {
		if cur := c.instances[in.Chain][in.ID]; cur != nil {
			st.applyTo(cur)
		}
	})
	return nil
}

// SetNote keeps the controller's bookkeeping of an instance, in memory, if the instance is
// cached (a dropped cache forgets it: the controller computes it again).
func (s *Store) SetNote(chainName, id string, n Note) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.c.instances[chainName][id]; cur != nil {
		cur.Note = n
	}
}

// AssignFlow records a flow assignment to instance in, in one step with its instance's flow
// set and one invocation of the chain (faas-cli's invocation count of a chain is the flows
// assigned to it), if in's spec is still of generation in.Gen; it sets in.Flows. With
// spec, in's spec is written in the same step (an attach for the flow) and in.Gen bumped.
// ErrGone or ErrStale, and nothing recorded, if the instance was removed or changed
// meanwhile. The flow's instance, VLAN and worker are set to in's.
func (s *Store) AssignFlow(ctx context.Context, f *Flow, in *Instance, spec bool) error {
	f.Instance, f.VLAN, f.Worker = in.ID, in.VLAN, in.Worker
	fb, err := json.Marshal(f)
	if err != nil {
		return err
	}
	next := specOf(in)
	var sb []byte
	if spec {
		next.Gen++
		if sb, err = json.Marshal(next); err != nil {
			return err
		}
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	c := s.current()
	n, err := flowWrite.Run(ctx, s.rdb, []string{keyInstances + in.Chain, keyInstFlows + in.ID, keyFlows, keyCalls},
		"assign", f.Key, fb, f.Chain, in.ID, strconv.FormatUint(in.Gen, 10), sb).Int64()
	if err != nil {
		s.drop(c)
		return fmt.Errorf("assign flow %s: %w", f.Key, err)
	}
	if n == 0 {
		s.gone(c, in)
	}
	if err := scriptErr("assign flow "+f.Key, in.ID, n); err != nil {
		if n == -1 {
			s.stale(c, in)
		}
		return err
	}
	in.Flows, in.Gen = uint32(n), next.Gen
	s.update(c, func(c *cache) {
		c.putFlow(f)
		if cur := c.instances[in.Chain][in.ID]; cur != nil {
			next.applyTo(cur)
			cur.Flows = uint32(n)
		}
	})
	return nil
}

// FlowAssign is one flow of AssignFlows and the instance it goes to.
type FlowAssign struct {
	Flow *Flow
	In   *Instance
}

// AssignFlows records several flow assignments to attached instances in one Redis round trip,
// each as AssignFlow (without spec) would: per flow nil, or ErrGone or ErrStale for that flow
// alone (nothing recorded for it). The second result is an error of the whole batch (Redis
// unreachable: nothing recorded). Entries that share an instance share its *Instance, whose
// Flows ends as the count after the last of them.
func (s *Store) AssignFlows(ctx context.Context, batch []FlowAssign) ([]error, error) {
	keys := []string{keyFlows, keyCalls}
	args := make([]any, 0, 5*len(batch))
	for _, b := range batch {
		f, in := b.Flow, b.In
		f.Instance, f.VLAN, f.Worker = in.ID, in.VLAN, in.Worker
		fb, err := json.Marshal(f)
		if err != nil {
			return nil, err
		}
		keys = append(keys, keyInstances+in.Chain, keyInstFlows+in.ID)
		args = append(args, f.Key, fb, f.Chain, in.ID, strconv.FormatUint(in.Gen, 10))
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	c := s.current()
	ns, err := flowsAssign.Run(ctx, s.rdb, keys, args...).Int64Slice()
	if err == nil && len(ns) != len(batch) {
		err = fmt.Errorf("%d answers for %d flows", len(ns), len(batch))
	}
	if err != nil {
		s.drop(c)
		return nil, fmt.Errorf("assign %d flows: %w", len(batch), err)
	}
	errs := make([]error, len(batch))
	for i, n := range ns {
		b := batch[i]
		if n == 0 {
			s.gone(c, b.In)
		}
		if errs[i] = scriptErr("assign flow "+b.Flow.Key, b.In.ID, n); errs[i] != nil {
			if n == -1 {
				s.stale(c, b.In)
			}
			continue
		}
		b.In.Flows = uint32(n)
		s.update(c, func(c *cache) {
			c.putFlow(b.Flow)
			if cur := c.instances[b.In.Chain][b.In.ID]; cur != nil {
				cur.Flows = uint32(n)
			}
		})
	}
	return errs, nil
}

// PutFlow records the assignment of a flow of a chain that runs on the switch only (no
// instance), with one invocation of the chain, in one step.
func (s *Store) PutFlow(ctx context.Context, f *Flow) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	c := s.current()
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, keyFlows, f.Key, b)
		p.HIncrBy(ctx, keyCalls, f.Chain, 1)
		return nil
	})
	if err != nil {
		s.drop(c)
		return fmt.Errorf("assign flow %s: %w", f.Key, err)
	}
	s.update(c, func(c *cache) { c.putFlow(f) })
	return nil
}

func (c *cache) putFlow(f *Flow) {
	if c.flows != nil {
		cp := *f
		c.flows[f.Key] = &cp
	}
}

// DeleteFlow removes a flow assignment and, in the same step, the flow from its instance's
// flow set; it returns the instance's flow count after (0 for a switch-only flow).
func (s *Store) DeleteFlow(ctx context.Context, f *Flow) (uint32, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	c := s.current()
	n, err := flowWrite.Run(ctx, s.rdb, []string{keyInstances + f.Chain, keyInstFlows + f.Instance, keyFlows, keyCalls},
		"release", f.Key).Int64()
	if err != nil {
		s.drop(c)
		return 0, fmt.Errorf("release flow %s: %w", f.Key, err)
	}
	s.update(c, func(c *cache) {
		delete(c.flows, f.Key)
		if cur := c.instances[f.Chain][f.Instance]; cur != nil {
			cur.Flows = uint32(n)
		}
	})
	return uint32(n), nil
}

// DeleteFlows is DeleteFlow for many flows in one Redis call (a batch of FlowRemoved events):
// per flow, its instance's flow count after.
func (s *Store) DeleteFlows(ctx context.Context, flows []*Flow) ([]uint32, error) {
	if len(flows) == 0 {
		return nil, nil
	}
	keys := make([]string, 0, 1+len(flows))
	args := make([]any, 0, len(flows))
	keys = append(keys, keyFlows)
	for _, f := range flows {
		keys = append(keys, keyInstFlows+f.Instance)
		args = append(args, f.Key)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	c := s.current()
	ns, err := flowsRelease.Run(ctx, s.rdb, keys, args...).Int64Slice()
	if err == nil && len(ns) != len(flows) {
		err = fmt.Errorf("%d answers for %d flows", len(ns), len(flows))
	}
	if err != nil {
		s.drop(c)
		return nil, fmt.Errorf("release %d flows: %w", len(flows), err)
	}
	out := make([]uint32, len(flows))
	s.update(c, func(c *cache) {
		for i, f := range flows {
			out[i] = uint32(ns[i])
			delete(c.flows, f.Key)
			if cur := c.instances[f.Chain][f.Instance]; cur != nil {
				cur.Flows = out[i]
			}
		}
	})
	return out, nil
}

// DeleteInstance removes one chain instance with its status, its flows and its VLAN, if its
// spec is still of generation in.Gen (ErrStale if not; in.Gen 0: whatever it is now). With
// idle, only an instance without flows is removed (ErrStale if it has some).
func (s *Store) DeleteInstance(ctx context.Context, in *Instance, idle bool) error {
	gen := ""
	if in.Gen != 0 {
		gen = strconv.FormatUint(in.Gen, 10)
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	c := s.current()
	n, err := instanceDelete.Run(ctx, s.rdb,
		[]string{keyInstances + in.Chain, keyStatus + in.Chain, keyInstFlows + in.ID, keyFlows, keyVLANs},
		in.ID, gen, in.VLAN, map[bool]string{true: "idle", false: ""}[idle]).Int64()
	if err != nil {
		s.drop(c)
		return fmt.Errorf("delete instance %s: %w", in.ID, err)
	}
	if n == 0 {
		s.gone(c, in)
	}
	if err := scriptErr("delete instance", in.ID, n); err != nil {
		if n == -1 {
			s.stale(c, in)
		}
		return err
	}
	s.update(c, func(c *cache) {
		for k, f := range c.flows {
			if f.Instance == in.ID && f.Chain == in.Chain {
				delete(c.flows, k)
			}
		}
		delete(c.instances[in.Chain], in.ID)
	})
	return nil
}

// putInstance records a copy of in, if its chain's instances are cached.
func (c *cache) putInstance(in *Instance) {
	if insts, ok := c.instances[in.Chain]; ok {
		insts[in.ID] = cloneInstance(in)
	}
}

// Instances returns a chain's instances sorted by id.
func (s *Store) Instances(ctx context.Context, chainName string) ([]*Instance, error) {
	return s.instances(ctx, false, chainName)
}

func (s *Store) instances(ctx context.Context, held bool, chainName string) ([]*Instance, error) {
	var out []*Instance
	err := s.read(ctx, held, hasInstances(chainName), s.fetchInstances(chainName), func(c *cache) {
		out = make([]*Instance, 0, len(c.instances[chainName]))
		for _, in := range c.instances[chainName] {
			out = append(out, cloneInstance(in))
		}
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return instanceLess(out[i].ID, out[j].ID) })
	return out, nil
}

// Instance returns one instance of a chain, or nil if it has none with that id.
func (s *Store) Instance(ctx context.Context, chainName, id string) (*Instance, error) {
	var out *Instance
	err := s.read(ctx, false, hasInstances(chainName), s.fetchInstances(chainName), func(c *cache) {
		if in := c.instances[chainName][id]; in != nil {
			out = cloneInstance(in)
		}
	})
	return out, err
}

// fetchInstances reads a chain's specs, statuses and flow counts in one round trip.
func (s *Store) fetchInstances(chainName string) func(ctx context.Context) (func(c *cache), error) {
	return func(ctx context.Context) (func(c *cache), error) {
		specs, err := readHash[instanceSpec](ctx, s.rdb, keyInstances+chainName, "instances of "+chainName,
			func(string) string { return "instance of " + chainName })
		if err != nil {
			return nil, err
		}
		stats, err := readHash[instanceStatus](ctx, s.rdb, keyStatus+chainName, "reports of "+chainName,
			func(k string) string { return "report of " + k })
		if err != nil {
			return nil, err
		}
		p := s.rdb.Pipeline()
		counts := map[string]*redis.IntCmd{}
		for id := range specs {
			counts[id] = p.SCard(ctx, keyInstFlows+id)
		}
		if len(counts) > 0 {
			if _, err := p.Exec(ctx); err != nil {
				return nil, fmt.Errorf("flows of %s's instances: %w", chainName, err)
			}
		}
		insts := make(map[string]*Instance, len(specs))
		for id, sp := range specs {
			in := &Instance{Flows: uint32(counts[id].Val())}
			sp.applyTo(in)
			if st := stats[id]; st != nil {
				st.applyTo(in)
			}
			insts[id] = in
		}
		return func(c *cache) { c.instances[chainName] = insts }, nil
	}
}

// cloneInstance is a copy of in that shares nothing with it.
func cloneInstance(in *Instance) *Instance {
	c := *in
	if in.Runs != nil {
		c.Runs = proto.Clone(in.Runs).(*pb.Chain)
	}
	return &c
}

// stale is a script's answer that instance in's spec is not of the generation the caller
// read. If the cache holds that generation, Redis changed behind the gateway's back, and the
// cache is dropped.
func (s *Store) stale(c *cache, in *Instance) {
	s.mu.RLock()
	cur := c.instances[in.Chain][in.ID]
	held := cur != nil && cur.Gen == in.Gen
	s.mu.RUnlock()
	if held {
		s.drop(c)
	}
}

func instanceLess(a, b string) bool {
	na, ea := strconv.Atoi(a[lastSlash(a)+1:])
	nb, eb := strconv.Atoi(b[lastSlash(b)+1:])
	if ea == nil && eb == nil && a[:lastSlash(a)] == b[:lastSlash(b)] {
		return na < nb
	}
	return a < b
}

func lastSlash(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '/' {
			return i
		}
	}
	return -1
}

// ChainSojourn is a chain's server sojourn as its attached instances measured it over their
// last windows: each quantile the largest of theirs, an upper bound of the chain's own (a
// mixture's quantile is never above its parts' largest).
type ChainSojourn struct {
	P50us, P99us, P999us float64
	WindowS              float64 // the longest window among them
	Measured             int     // attached instances that reported a window with packets
}

// SojournOf is the chain's server sojourn from its instances insts.
func SojournOf(insts []*Instance) ChainSojourn {
	var s ChainSojourn
	for _, in := range insts {
		if in.State != Attached || in.P99us <= 0 {
			continue
		}
		s.Measured++
		s.P50us, s.P99us, s.P999us = max(s.P50us, in.P50us), max(s.P99us, in.P99us), max(s.P999us, in.P999us)
		s.WindowS = max(s.WindowS, in.SojournWindowS)
	}
	return s
}
