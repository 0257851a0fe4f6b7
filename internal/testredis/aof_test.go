// SPDX-License-Identifier: Apache-2.0

package testredis

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Redis 7.0 replays its append-only file as the default user and drops every MULTI/EXEC that
// user may not run (redis/redis#14541). With keel's ACL (deploy/redis/users.acl.in) a restarted
// Redis keeps keel-gateway's transactions, and a client that does not log in still may do
// nothing. With the default user's permissions taken away (-@all) this test fails: the
// function and its set membership are gone after the restart.
func Test_keels_ACL_keeps_transactions_across_a_restart(t *testing.T) {
	ctx := context.Background()
	pw := map[string]string{"keel-gateway": "g", "keel-agent": "a"}
	s := StartACLAOF(t, pw)
	c := s.Client(t, "keel-gateway", "g")
	if _, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, "keel:function:chain3", `{"kind":"chain"}`, 0)
		p.SAdd(ctx, "keel:functions", "chain3")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, "keel:instances:chain3", "chain3/0", "{}").Err(); err != nil {
		t.Fatal(err)
	}

	s.Restart(t)
	c = s.Client(t, "keel-gateway", "g")
	if got, err := c.SMembers(ctx, "keel:functions").Result(); err != nil || len(got) != 1 || got[0] != "chain3" {
		t.Errorf("keel:functions after a restart: %v %v, want [chain3]", got, err)
	}
	if got, err := c.Get(ctx, "keel:function:chain3").Result(); err != nil || got != `{"kind":"chain"}` {
		t.Errorf("keel:function:chain3 after a restart: %q %v", got, err)
	}
	if n, err := c.HLen(ctx, "keel:instances:chain3").Result(); err != nil || n != 1 {
		t.Errorf("keel:instances:chain3 after a restart: %d %v", n, err)
	}
	anon := s.Client(t, "", "")
	if err := anon.Get(ctx, "keel:function:chain3").Err(); err == nil || !isNoAuth(err) {
		t.Errorf("a client that did not log in read a key: %v, want NOAUTH", err)
	}
	if err := anon.Do(ctx, "AUTH", "default", "").Err(); err == nil {
		t.Errorf("logged in as the default user")
	}
}

func isNoAuth(err error) bool {
	return err != nil && len(err.Error()) >= 6 && err.Error()[:6] == "NOAUTH"
}
