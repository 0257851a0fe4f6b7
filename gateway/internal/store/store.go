// SPDX-License-Identifier: Apache-2.0

// Package store keeps the gateway's functions, chains, chain instances and workers in Redis,
// so that a restarted gateway serves the same deployment.
package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/keel-nfv/keel/internal/redisauth"
	"github.com/redis/go-redis/v9"
)

// Redis keys. Every key of a function is removed with it; sets vanish when emptied.
const (
	keyFunctions = "keel:functions"   // set of function names
	keyFunction  = "keel:function:"   // + name: JSON Function
	keyInstances = "keel:instances:"  // + chain: hash instance id -> JSON instance spec (instances.go)
	keyVLANs     = "keel:vlans"       // set of VLAN ids in use
	keyWorkers   = "keel:workers"     // hash worker -> JSON Worker
	keyCalls     = "keel:invocations" // hash function -> calls through the proxy
	keyFlows     = "keel:flows"       // hash flow key (FlowKey) -> JSON Flow
	// keyState is keel-nf's NF state (nf-runtime's redis_mirror), not the gateway's:
	// keel:state:<tenant>:<group>:<key>, group an instance of a chain (<chain>.<n>).
	keyState = "keel:state:"
)

// ErrNotFound is returned for a function that is not deployed.
var ErrNotFound = errors.New("not found")

// Record is what the store keeps of one deployed function (chain.Function): a value that
// encodes to JSON and names its function. The store does not look inside it.
type Record interface {
	RecordName() string
}

// Worker is a registered worker.
type Worker struct {
	Name    string            `json:"name"`
	Address string            `json:"address"`
	Cores   uint32            `json:"cores"`
	CoreIDs []uint32          `json:"core_ids"` // the cores coopsched manages on the worker
	VFPorts map[uint32]string `json:"vf_ports"`
	Seen    time.Time         `json:"seen"`
}

// Flow is one live flow assignment: the ToR sends the flow to Instance (VLAN) on Worker, or
// through the switch only when Instance is "".
type Flow struct {
	Key      string    `json:"key"` // FlowKey
	Chain    string    `json:"chain"`
	Instance string    `json:"instance,omitempty"`
	VLAN     uint32    `json:"vlan,omitempty"`
	Worker   string    `json:"worker,omitempty"`
	Since    time.Time `json:"since"`
	// Ingress is the keel-ingress that asked for the assignment (AssignFlowRequest.ingress_id):
	// the one that holds the flow's packets if it moves (issue 37). "" in records written
	// before it was kept: such a flow does not move.
	Ingress string `json:"ingress,omitempty"`
}

// FlowKey names a flow by its 5-tuple: "PROTO SRC:SPORT DST:DPORT" with canonical addresses.
func FlowKey(proto uint8, src netip.Addr, sport uint16, dst netip.Addr, dport uint16) string {
	return fmt.Sprintf("%d %s %s", proto, netip.AddrPortFrom(src, sport), netip.AddrPortFrom(dst, dport))
}

// Store is the Redis-backed state of one gateway, read through a write-through cache of it
// (cache.go).
type Store struct {
	rdb *redis.Client

	wmu   sync.Mutex   // held by each write across its Redis call and its cache update
	mu    sync.RWMutex // guards c, gen, runID
	c     *cache
	gen   uint64
	runID string // the Redis server the cache was filled from
}

// New connects to Redis at addr, HOST:PORT or unix:PATH (a Unix socket: a round trip costs
// the gateway less CPU than over loopback TCP), logged in as login, and checks that it
// answers; the error says whether Redis refused the login or did not answer.
func New(ctx context.Context, addr string, login redisauth.Login) (*Store, error) {
	s := &Store{c: newCache()}
	opt := redisauth.Options(addr, login)
	opt.OnConnect = s.connected
	s.rdb = redis.NewClient(opt)
	if err := redisauth.Ping(ctx, s.rdb, addr, login); err != nil {
		s.rdb.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the Redis connection.
func (s *Store) Close() error { return s.rdb.Close() }

// AddHook instruments the Redis client (tests count the round trips a call makes with it).
func (s *Store) AddHook(h redis.Hook) { s.rdb.AddHook(h) }

// Put creates or replaces a function's record.
func (s *Store) Put(ctx context.Context, f Record) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	name := f.RecordName()
	s.wmu.Lock()
	defer s.wmu.Unlock()
	c := s.current()
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, keyFunction+name, b, 0)
		p.SAdd(ctx, keyFunctions, name)
		return nil
	})
	if err != nil {
		s.drop(c)
		return fmt.Errorf("store %s: %w", name, err)
	}
	s.update(c, func(c *cache) {
		if c.functions != nil {
			c.functions[name] = b
		}
		s.gen++
	})
	return nil
}

// Get returns one function's record, decoded into a new T, or ErrNotFound.
func Get[T any](ctx context.Context, s *Store, name string) (*T, error) {
	var b []byte
	err := s.read(ctx, false, hasFunctions, s.fetchFunctions, func(c *cache) { b = c.functions[name] })
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if b == nil {
		return nil, ErrNotFound
	}
	var f T
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("decode %s: %w", name, err)
	}
	return &f, nil
}

// List returns every function's record, sorted by name, each decoded into a new T for the
// caller (see Generation for a caller that reads them often).
func List[T any](ctx context.Context, s *Store) ([]*T, error) {
	var names []string
	var recs [][]byte
	err := s.read(ctx, false, hasFunctions, s.fetchFunctions, func(c *cache) {
		names = slices.Sorted(maps.Keys(c.functions))
		for _, n := range names {
			recs = append(recs, c.functions[n])
		}
	})
	if err != nil {
		return nil, err
	}
	out := make([]*T, 0, len(names))
	for i, b := range recs {
		var f T
		if err := json.Unmarshal(b, &f); err != nil {
			return nil, fmt.Errorf("decode %s: %w", names[i], err)
		}
		out = append(out, &f)
	}
	return out, nil
}

// DeleteOrphanState deletes the NF state (keel:state:*) of chains that are not deployed and
// returns how many keys it deleted. keel-agent deletes an instance's state when it removes
// the instance; a chain removed just before the stack stopped leaves its state behind, as
// the agent never saw its containers go. Call it before serving: a chain deployed meanwhile
// could have its first state written and then deleted.
func (s *Store) DeleteOrphanState(ctx context.Context) (int, error) {
	chains, err := s.rdb.SMembers(ctx, keyFunctions).Result()
	if err != nil {
		return 0, fmt.Errorf("orphan NF state: %w", err)
	}
	deployed := map[string]bool{}
	for _, c := range chains {
		deployed[c] = true
	}
	var orphans []string
	iter := s.rdb.Scan(ctx, 0, keyState+"*", 512).Iterator()
	for iter.Next(ctx) {
		parts := strings.SplitN(strings.TrimPrefix(iter.Val(), keyState), ":", 3)
		if len(parts) != 3 {
			continue // not keel-nf's shape: not ours to judge
		}
		group := parts[1]
		dot := strings.LastIndexByte(group, '.')
		if dot <= 0 || deployed[group[:dot]] {
			continue
		}
		orphans = append(orphans, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return 0, fmt.Errorf("orphan NF state: %w", err)
	}
	for i := 0; i < len(orphans); i += 512 {
		if err := s.rdb.Del(ctx, orphans[i:min(i+512, len(orphans))]...).Err(); err != nil {
			return i, fmt.Errorf("orphan NF state: %w", err)
		}
	}
	return len(orphans), nil
}

// Delete removes a function with its instances and flows and releases their VLANs, and the
// function's own VLANs given (a chain's reinject VLAN).
func (s *Store) Delete(ctx context.Context, name string, vlans ...uint32) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	insts, err := s.instances(ctx, true, name)
	if err != nil {
		return err
	}
	flows, err := s.chainFlows(ctx, true, name)
	if err != nil {
		return err
	}
	c := s.current()
	_, err = s.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, in := range insts {
			p.SRem(ctx, keyVLANs, in.VLAN)
			p.Del(ctx, keyInstFlows+in.ID)
		}
		for _, f := range flows {
			p.HDel(ctx, keyFlows, f.Key)
		}
		for _, v := range vlans {
			p.SRem(ctx, keyVLANs, v)
		}
		p.Del(ctx, keyInstances+name, keyStatus+name, keyFunction+name)
		p.HDel(ctx, keyCalls, name)
		p.SRem(ctx, keyFunctions, name)
		return nil
	})
	if err != nil {
		s.drop(c)
		return fmt.Errorf("delete %s: %w", name, err)
	}
	s.update(c, func(c *cache) {
		delete(c.functions, name)
		for _, f := range flows {
			delete(c.flows, f.Key)
		}
		c.instances[name] = map[string]*Instance{}
		s.gen++
	})
	return nil
}

// AllocVLAN reserves the lowest free VLAN id in 100..4092: 4093 is keel-ingress' in-band mark
// (nf-runtime/include/keel/inband.h), 4094 its normal path (ingress/src/dataplane.h).
func (s *Store) AllocVLAN(ctx context.Context) (uint32, error) {
	for v := uint32(100); v < 4093; v++ {
		ok, err := s.rdb.SAdd(ctx, keyVLANs, v).Result()
		if err != nil {
			return 0, fmt.Errorf("allocate VLAN: %w", err)
		}
		if ok == 1 {
			return v, nil
		}
	}
	return 0, errors.New("allocate VLAN: all VLAN ids are in use")
}

// VLANsInUse returns the VLAN ids taken (instances' and chains' reinject VLANs), sorted.
func (s *Store) VLANsInUse(ctx context.Context) ([]uint32, error) {
	members, err := s.rdb.SMembers(ctx, keyVLANs).Result()
	if err != nil {
		return nil, fmt.Errorf("VLANs in use: %w", err)
	}
	out := make([]uint32, 0, len(members))
	for _, m := range members {
		v, err := strconv.ParseUint(m, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("VLANs in use: %q: %w", m, err)
		}
		out = append(out, uint32(v))
	}
	slices.Sort(out)
	return out, nil
}

// FreeVLAN releases a VLAN id AllocVLAN gave (one no record holds: a deploy that failed).
func (s *Store) FreeVLAN(ctx context.Context, v uint32) error {
	if err := s.rdb.SRem(ctx, keyVLANs, v).Err(); err != nil {
		return fmt.Errorf("release VLAN %d: %w", v, err)
	}
	return nil
}

// PutWorker records a worker.
func (s *Store) PutWorker(ctx context.Context, w *Worker) error {
	b, err := json.Marshal(w)
	if err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	c := s.current()
	if err := s.rdb.HSet(ctx, keyWorkers, w.Name, b).Err(); err != nil {
		s.drop(c)
		return fmt.Errorf("store worker %s: %w", w.Name, err)
	}
	s.update(c, func(c *cache) {
		if c.workers != nil {
			c.workers[w.Name] = cloneWorker(w)
		}
	})
	return nil
}

// Workers returns the registered workers.
func (s *Store) Workers(ctx context.Context) (map[string]*Worker, error) {
	var out map[string]*Worker
	err := s.read(ctx, false, hasWorkers, s.fetchWorkers, func(c *cache) {
		out = make(map[string]*Worker, len(c.workers))
		for k, w := range c.workers {
			out[k] = cloneWorker(w)
		}
	})
	return out, err
}

// CountInvocation adds one call to a function's invocation count.
func (s *Store) CountInvocation(ctx context.Context, name string) error {
	return s.rdb.HIncrBy(ctx, keyCalls, name, 1).Err()
}

// Invocations returns a function's invocation count.
func (s *Store) Invocations(ctx context.Context, name string) (int64, error) {
	n, err := s.rdb.HGet(ctx, keyCalls, name).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	return n, err
}

// Flow returns the assignment of the flow with key, or nil if it has none.
func (s *Store) Flow(ctx context.Context, key string) (*Flow, error) {
	var out *Flow
	err := s.read(ctx, false, hasFlows, s.fetchFlows, func(c *cache) {
		if f := c.flows[key]; f != nil {
			cp := *f
			out = &cp
		}
	})
	if err != nil {
		return nil, fmt.Errorf("flow %s: %w", key, err)
	}
	return out, nil
}

// Flows returns the live flow assignments of chainName ("" = every chain), sorted by key.
func (s *Store) Flows(ctx context.Context, chainName string) ([]*Flow, error) {
	return s.chainFlows(ctx, false, chainName)
}

func (s *Store) chainFlows(ctx context.Context, held bool, chainName string) ([]*Flow, error) {
	var out []*Flow
	err := s.read(ctx, held, hasFlows, s.fetchFlows, func(c *cache) {
		for _, f := range c.flows {
			if chainName == "" || f.Chain == chainName {
				cp := *f
				out = append(out, &cp)
			}
		}
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	if out == nil {
		out = []*Flow{}
	}
	return out, nil
}
