// SPDX-License-Identifier: Apache-2.0

package store

// Flow moves (issue 37): the gateway keeps each FLOWS_MOVE it sent an ingress until the
// ingress's report (ReportMoves) comes back, and applies the report to the flows'
// assignments in one script. The record lives in Redis, not in the gateway's memory, so
// that a report is applied even by a gateway restarted (or a replica elected) meanwhile.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

const keyMove = "keel:move:" // + move id: JSON Move; + id + ":reported" once its report was applied

// MoveTTL is how long a move's record (and the mark of its applied report) is kept.
const MoveTTL = time.Hour

// Move is one FLOWS_MOVE the gateway sent an ingress: flows of a chain from one instance to
// another.
type Move struct {
	ID      string    `json:"id"`
	Ingress string    `json:"ingress"`
	Chain   string    `json:"chain"`
	From    string    `json:"from"`
	To      string    `json:"to"`
	Reason  string    `json:"reason"` // why the move was made (policy.Reason, or "operator")
	Flows   []string  `json:"flows"`  // flow keys (FlowKey)
	Sent    time.Time `json:"sent"`
}

// PutMove records a move before it is sent; an id used already is refused.
func (s *Store) PutMove(ctx context.Context, m *Move) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	ok, err := s.rdb.SetNX(ctx, keyMove+m.ID, b, MoveTTL).Result()
	if err != nil {
		return fmt.Errorf("record move %s: %w", m.ID, err)
	}
	if !ok {
		return fmt.Errorf("record move %s: the id is in use", m.ID)
	}
	return nil
}

// MoveByID returns the move recorded under id, or nil if there is none (never sent, or
// older than MoveTTL).
func (s *Store) MoveByID(ctx context.Context, id string) (*Move, error) {
	b, err := s.rdb.Get(ctx, keyMove+id).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("move %s: %w", id, err)
	}
	var m Move
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("move %s: %w", id, err)
	}
	return &m, nil
}

// MoveOutcome is what ApplyMove did with one flow.
type MoveOutcome int8

// ApplyMove's outcomes (the script's answers).
const (
	MoveGone        MoveOutcome = -2 // the destination instance no longer exists: nothing changed
	MoveNotOnSource MoveOutcome = -1 // the flow is assigned to another instance (or chain) than the move's source
	MoveNoFlow      MoveOutcome = 0  // the flow has no assignment (it ended meanwhile)
	MoveApplied     MoveOutcome = 1  // moved from the source to the destination now
	MoveAppliedOnce MoveOutcome = 2  // on the destination already: a report applied before
)

// Err is nil for MoveApplied and MoveAppliedOnce, else why the assignment was not moved.
func (o MoveOutcome) Err() error {
	switch o {
	case MoveApplied, MoveAppliedOnce:
		return nil
	case MoveGone:
		return errors.New("the destination instance no longer exists")
	case MoveNotOnSource:
		return errors.New("the flow is not assigned to the move's source instance")
	case MoveNoFlow:
		return errors.New("the flow has no assignment (it ended)")
	}
	return fmt.Errorf("unknown move outcome %d", o)
}

// flowsMoved moves flows' assignments from one instance of a chain to another: each flow
// that is assigned to the source gets the destination's instance, VLAN and worker, and
// leaves the source's flow set for the destination's. A flow already on the destination is
// left as it is (a report applied twice changes nothing); one on any other instance, or
// without an assignment, is refused. KEYS: the chain's spec hash, the source's and the
// destination's flow sets, the flows hash, the move's "reported" mark. ARGV: chain, source
// id, destination id, its VLAN, its worker, the mark's TTL in seconds, then the flow keys.
// Returns {1 if the mark was new else 0, source's flow count, destination's, then per flow
// its MoveOutcome}.
var flowsMoved = redis.NewScript(`
local first = redis.call('SET', KEYS[5], '1', 'NX', 'EX', ARGV[6]) and 1 or 0
local gone = redis.call('HEXISTS', KEYS[1], ARGV[3]) == 0
local out = {first, 0, 0}
for i = 7, #ARGV do
  local k = ARGV[i]
  local cur = redis.call('HGET', KEYS[4], k)
  local r = 0
  if cur then
    local f = cjson.decode(cur)
    if f.chain ~= ARGV[1] then r = -1
    elseif f.instance == ARGV[3] then r = 2
    elseif f.instance ~= ARGV[2] then r = -1
    elseif gone then r = -2
    else
      f.instance, f.vlan, f.worker = ARGV[3], tonumber(ARGV[4]), ARGV[5]
      redis.call('HSET', KEYS[4], k, cjson.encode(f))
      redis.call('SREM', KEYS[2], k)
      redis.call('SADD', KEYS[3], k)
      r = 1
    end
  end
  out[#out + 1] = r
end
out[2] = redis.call('SCARD', KEYS[2])
out[3] = redis.call('SCARD', KEYS[3])
return out
`)

// ApplyMove moves the assignments of the flows keys (flows of m that the ingress reports
// moved) from m.From to m.To in one step, and reports per flow what it did. first is true
// the first time a report of m is applied (a report sent again finds it false).
func (s *Store) ApplyMove(ctx context.Context, m *Move, keys []string) (first bool, out []MoveOutcome, err error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	var to *Instance
	if err := s.read(ctx, true, hasInstances(m.Chain), s.fetchInstances(m.Chain), func(c *cache) {
		if in := c.instances[m.Chain][m.To]; in != nil {
			to = cloneInstance(in)
		}
	}); err != nil {
		return false, nil, fmt.Errorf("move %s: %w", m.ID, err)
	}
	if to == nil {
		to = &Instance{ID: m.To, Chain: m.Chain} // the script finds it gone
	}
	args := make([]any, 0, 6+len(keys))
	args = append(args, m.Chain, m.From, m.To, to.VLAN, to.Worker, int64(MoveTTL/time.Second))
	for _, k := range keys {
		args = append(args, k)
	}
	c := s.current()
	ns, err := flowsMoved.Run(ctx, s.rdb, []string{keyInstances + m.Chain, keyInstFlows + m.From, keyInstFlows + m.To, keyFlows,
		keyMove + m.ID + ":reported"}, args...).Int64Slice()
	if err == nil && len(ns) != 3+len(keys) {
		err = fmt.Errorf("%d answers for %d flows", len(ns), len(keys))
	}
	if err != nil {
		s.drop(c)
		return false, nil, fmt.Errorf("move %s: %d flows from %s to %s: %w", m.ID, len(keys), m.From, m.To, err)
	}
	out = make([]MoveOutcome, len(keys))
	for i := range keys {
		out[i] = MoveOutcome(ns[3+i])
	}
	s.update(c, func(c *cache) {
		for i, k := range keys {
			if f := c.flows[k]; f != nil && out[i] == MoveApplied {
				f.Instance, f.VLAN, f.Worker = to.ID, to.VLAN, to.Worker
			}
		}
		if cur := c.instances[m.Chain][m.From]; cur != nil {
			cur.Flows = uint32(ns[1])
		}
		if cur := c.instances[m.Chain][m.To]; cur != nil {
			cur.Flows = uint32(ns[2])
		}
	})
	return ns[0] == 1, out, nil
}
