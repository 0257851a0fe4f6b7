// SPDX-License-Identifier: Apache-2.0

package store

// The store's cache: what this gateway last wrote to or read from Redis, so that the
// controller reads functions, instances, workers and flows for every new flow without a round
// trip, and decodes nothing it has not just written.
//
// Why it cannot go stale. The gateway is the only writer of keel's keys (agents and torctl go
// through its gRPC API), and every write goes through a Store method that, holding wmu across
// its Redis call and its cache update, applies the same change to the cache in the order Redis
// applied it. A part not read yet (or dropped) is filled from Redis under wmu, so no write can
// slip between the fill's read and its install. What remains is Redis changing under the
// gateway, and for each way it can the cache is dropped (every part refilled on its next read):
//   - a write whose outcome is unknown (an error: a timeout, a broken connection) drops it;
//   - a script that finds missing an instance the cache holds (ErrGone where the cache says
//     it exists) drops it: Redis lost data;
//   - a new connection to a Redis server whose run_id is not the one the cache was filled
//     from drops it: Redis restarted, and with AOF (appendfsync everysec) it may have lost the
//     last second of writes. The first command after a restart runs on a new connection,
//     whose OnConnect drops the cache before the command is sent; with Recheck sending one
//     every second, reads served from memory alone are stale for a second at most. A write
//     already computed from the old cache still goes out, as one in flight during any restart
//     would, and an instance write still only lands if Redis has the instance (ErrGone);
//   - Recheck, run every second by the gateway (RecheckEvery), compares the number of
//     functions, workers, flows and each cached chain's instances with Redis's and drops the
//     cache when one differs: a FLUSHALL, or a writer that is not this gateway. It is a
//     count, not a digest: such a writer changing a value in place goes unseen until the
//     gateway restarts. Comparing every value each second would cost a full read of the flows
//     (thousands at 1000 new flows/s) for a case the design excludes.
// Reads return copies, so no caller can change the cache by changing what it read.

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// cache holds the parts of Redis's content this gateway has read; a nil part (an absent chain
// in instances) has not been read since the cache was last dropped.
type cache struct {
	functions map[string][]byte               // name -> JSON Function, as in Redis
	workers   map[string]*Worker              // by name
	flows     map[string]*Flow                // by FlowKey
	instances map[string]map[string]*Instance // chain -> id -> instance
}

func newCache() *cache { return &cache{instances: map[string]map[string]*Instance{}} }

// Generation changes whenever a function is stored or deleted and whenever the cache is
// dropped. Read it before List: a caller that keeps what it built from List under this
// generation rebuilds it when Generation returns another.
func (s *Store) Generation() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.gen
}

// drop forgets the cache c, if it is still the store's.
func (s *Store) drop(c *cache) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c == c {
		s.c, s.gen = newCache(), s.gen+1
	}
}

// update applies a write that Redis has made to the cache c, if it is still the store's.
func (s *Store) update(c *cache, change func(c *cache)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.c == c {
		change(c)
	}
}

// current returns the cache that a writer (holding wmu) updates after its Redis call.
func (s *Store) current() *cache {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.c
}

// read calls view on the cache once the part that has(c) tells of is there, filling it from
// Redis with fetch first if it is not. A writer calls it with wmu held (held=true).
func (s *Store) read(ctx context.Context, held bool, has func(c *cache) bool,
	fetch func(ctx context.Context) (func(c *cache), error), view func(c *cache)) error {
	for {
		s.mu.RLock()
		if has(s.c) {
			view(s.c)
			s.mu.RUnlock()
			return nil
		}
		c := s.c
		s.mu.RUnlock()
		if !held {
			s.wmu.Lock()
		}
		// Under wmu no write runs, so what fetch reads is what the cache must hold, unless the
		// cache is dropped meanwhile (then update installs nothing and the loop reads again).
		var install func(*cache)
		var err error
		if s.current() == c {
			install, err = fetch(ctx)
		}
		if err == nil && install != nil {
			s.update(c, func(c *cache) {
				if !has(c) {
					install(c)
				}
			})
		}
		if !held {
			s.wmu.Unlock()
		}
		if err != nil {
			return err
		}
	}
}

func hasFunctions(c *cache) bool { return c.functions != nil }
func hasWorkers(c *cache) bool   { return c.workers != nil }
func hasFlows(c *cache) bool     { return c.flows != nil }

func hasInstances(chainName string) func(c *cache) bool {
	return func(c *cache) bool { _, ok := c.instances[chainName]; return ok }
}

func (s *Store) fetchFunctions(ctx context.Context) (func(c *cache), error) {
	names, err := s.rdb.SMembers(ctx, keyFunctions).Result()
	if err != nil {
		return nil, fmt.Errorf("list functions: %w", err)
	}
	fns := make(map[string][]byte, len(names))
	if len(names) > 0 {
		keys := make([]string, len(names))
		for i, n := range names {
			keys[i] = keyFunction + n
		}
		vals, err := s.rdb.MGet(ctx, keys...).Result()
		if err != nil {
			return nil, fmt.Errorf("read functions: %w", err)
		}
		for i, v := range vals {
			if b, ok := v.(string); ok { // a name without a record is no function
				fns[names[i]] = []byte(b)
			}
		}
	}
	return func(c *cache) { c.functions = fns }, nil
}

// readHash reads a Redis hash of JSON records, decoded by field; what names them in errors
// ("workers" for reading the hash, "worker K" for decoding field K).
func readHash[T any](ctx context.Context, rdb redis.Cmdable, key, what string, one func(k string) string) (map[string]*T, error) {
	m, err := rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	out := make(map[string]*T, len(m))
	for k, v := range m {
		var rec T
		if err := json.Unmarshal([]byte(v), &rec); err != nil {
			return nil, fmt.Errorf("decode %s: %w", one(k), err)
		}
		out[k] = &rec
	}
	return out, nil
}

func (s *Store) fetchWorkers(ctx context.Context) (func(c *cache), error) {
	ws, err := readHash[Worker](ctx, s.rdb, keyWorkers, "workers", func(k string) string { return "worker " + k })
	if err != nil {
		return nil, err
	}
	return func(c *cache) { c.workers = ws }, nil
}

func (s *Store) fetchFlows(ctx context.Context) (func(c *cache), error) {
	fl, err := readHash[Flow](ctx, s.rdb, keyFlows, "flows", func(k string) string { return "flow " + k })
	if err != nil {
		return nil, err
	}
	return func(c *cache) { c.flows = fl }, nil
}

func cloneWorker(w *Worker) *Worker {
	c := *w
	c.CoreIDs = slices.Clone(w.CoreIDs)
	c.VFPorts = maps.Clone(w.VFPorts)
	return &c
}

// gone is a script's answer that instance in does not exist in Redis. If the cache holds it,
// Redis lost it behind the gateway's back, and the cache is dropped.
func (s *Store) gone(c *cache, in *Instance) {
	s.mu.RLock()
	_, held := c.instances[in.Chain][in.ID]
	s.mu.RUnlock()
	if held {
		s.drop(c)
	}
}

// connected is the client's OnConnect: a Redis server other than the one the cache was filled
// from (a restart changes run_id) drops the cache. A server that refuses INFO is not checked
// here; Recheck still is.
func (s *Store) connected(ctx context.Context, cn *redis.Conn) error {
	info, err := cn.Info(ctx, "server").Result()
	if err != nil {
		return nil
	}
	id := ""
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "run_id:"); ok {
			id = strings.TrimSpace(v)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if id != s.runID {
		if s.runID != "" {
			s.c, s.gen = newCache(), s.gen+1
		}
		s.runID = id
	}
	return nil
}

// Recheck compares the number of functions, workers, flows and instances of each chain the
// cache holds with Redis's, in one round trip, and drops the cache if one differs (see the top
// of this file for why a count is enough); it reports whether it did.
func (s *Store) Recheck(ctx context.Context) (bool, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	c := s.current()
	s.mu.RLock()
	var want []int
	p := s.rdb.Pipeline()
	var cmds []*redis.IntCmd
	if c.functions != nil {
		cmds, want = append(cmds, p.SCard(ctx, keyFunctions)), append(want, len(c.functions))
	}
	if c.workers != nil {
		cmds, want = append(cmds, p.HLen(ctx, keyWorkers)), append(want, len(c.workers))
	}
	if c.flows != nil {
		cmds, want = append(cmds, p.HLen(ctx, keyFlows)), append(want, len(c.flows))
	}
	for name, insts := range c.instances {
		cmds, want = append(cmds, p.HLen(ctx, keyInstances+name)), append(want, len(insts))
	}
	s.mu.RUnlock()
	if len(cmds) == 0 {
		return false, nil
	}
	if _, err := p.Exec(ctx); err != nil {
		return false, fmt.Errorf("recheck the cache: %w", err)
	}
	for i, cmd := range cmds {
		if int(cmd.Val()) != want[i] {
			s.drop(c)
			return true, nil
		}
	}
	return false, nil
}

// RecheckEvery runs Recheck every period until ctx ends; logf (nil: quiet) tells of each
// drop, and of an error when it is not the one the previous pass logged (Redis down says so
// once, not every second).
func (s *Store) RecheckEvery(ctx context.Context, period time.Duration, logf func(format string, args ...any)) {
	t := time.NewTicker(period)
	defer t.Stop()
	last := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		dropped, err := s.Recheck(ctx)
		if logf == nil || ctx.Err() != nil {
			continue
		}
		switch {
		case err != nil && err.Error() != last:
			logf("store: %v", err)
		case dropped:
			logf("store: Redis's keys no longer match what the gateway wrote (flushed, or written by another process): cache dropped, read again from Redis")
		}
		last = ""
		if err != nil {
			last = err.Error()
		}
	}
}
