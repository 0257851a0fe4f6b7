// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-nfv/keel/agent/internal/reconcile"
	"github.com/keel-nfv/keel/internal/redisauth"
	"github.com/keel-nfv/keel/internal/testredis"
	"github.com/redis/go-redis/v9"
)

// nfLoginOf reads an instance's login file as keel-nf does: "USER PASSWORD".
func nfLoginOf(t *testing.T, cfg SpecConfig, id string) (user, password string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(cfg.SecretDir(id), RedisAuthName))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		t.Fatalf("login file of %s: %d words, want USER PASSWORD", id, len(f))
	}
	return f[0], f[1]
}

func noperm(t *testing.T, what string, err error) {
	t.Helper()
	if err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Fatalf("%s: %v, want NOPERM", what, err)
	}
}

// aclAgent is an agent logged in to a Redis with make up's ACL file as keel-agent, with its
// NFs' logins in a temporary secrets directory.
func aclAgent(t *testing.T) (*Agent, *testredis.Server) {
	t.Helper()
	srv := testredis.StartACL(t, map[string]string{"keel-gateway": "gatewaypw", "keel-agent": "agentpw"})
	login := redisauth.Login{User: "keel-agent", Password: "agentpw", File: "test"}
	rdb := redis.NewClient(redisauth.Options(srv.Addr, login))
	t.Cleanup(func() { rdb.Close() })
	if err := redisauth.Ping(context.Background(), rdb, srv.Addr, login); err != nil {
		t.Fatal(err)
	}
	cfg := Config{SpecConfig: SpecConfig{Worker: "w", PktbufDir: t.TempDir(), RedisSocket: "/run/redis.sock",
		SecretsDir: filepath.Join(t.TempDir(), "secrets")}}
	return New(cfg, Deps{Redis: rdb, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}), srv
}

func Test_ensureNFUser_allows_only_the_instances_own_state(t *testing.T) {
	a, srv := aclAgent(t)
	ctx := context.Background()
	if err := a.ensureNFUser(ctx, "acme", "fw/0"); err != nil {
		t.Fatal(err)
	}
	if err := a.ensureNFUser(ctx, "other", "nat/1"); err != nil {
		t.Fatal(err)
	}
	user, pw := nfLoginOf(t, a.cfg.SpecConfig, "fw/0")
	if user != "keel-nf.fw.0" || len(pw) != 64 {
		t.Fatalf("login %q with a %d-character password", user, len(pw))
	}
	file := filepath.Join(a.cfg.SecretDir("fw/0"), RedisAuthName)
	for path, want := range map[string]os.FileMode{file: 0o600, a.cfg.SecretDir("fw/0"): 0o700 | os.ModeDir} {
		if st, err := os.Stat(path); err != nil || st.Mode() != want {
			t.Fatalf("%s: mode %v (%v), want %v", path, st.Mode(), err, want)
		}
	}

	nf := srv.Client(t, user, pw)
	own := "keel:state:acme:fw.0:0-nat"
	if err := nf.HSet(ctx, own, "flow", "v").Err(); err != nil {
		t.Fatal(err)
	}
	if keys, _, err := nf.HScan(ctx, own, 0, "", 100).Result(); err != nil || len(keys) != 2 {
		t.Fatalf("HSCAN of its own state: %v %v", keys, err)
	}
	if v, err := nf.HGet(ctx, own, "flow").Result(); err != nil || v != "v" {
		t.Fatalf("HGET: %q %v", v, err)
	}
	if err := nf.HDel(ctx, own, "flow").Err(); err != nil {
		t.Fatal(err)
	}
	if err := nf.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"keel:state:other:nat.1:0-nat", "keel:state:other:fw.0:0-nat",
		"keel:state:acme:fw.01:0-nat", "keel:state:acme:nat.1:0-nat", "keel:function:fw", "keel:instances:fw"} {
		noperm(t, "HSET "+key, nf.HSet(ctx, key, "flow", "v").Err())
		noperm(t, "HSCAN "+key, nf.HScan(ctx, key, 0, "", 10).Err())
	}
	noperm(t, "GET keel:function:fw", nf.Get(ctx, "keel:function:fw").Err())
	noperm(t, "KEYS", nf.Keys(ctx, "*").Err())
	noperm(t, "SCAN", nf.Scan(ctx, 0, "*", 10).Err())
	noperm(t, "FLUSHALL", nf.FlushAll(ctx).Err())
	noperm(t, "CONFIG GET", nf.ConfigGet(ctx, "dir").Err())
	noperm(t, "ACL SETUSER", nf.Do(ctx, "ACL", "SETUSER", "x", "on").Err())
	noperm(t, "PUBLISH", nf.Publish(ctx, "c", "m").Err())

	// The agent's own user is no more than it needs either.
	noperm(t, "the agent's GET keel:function:fw", a.Redis.Get(ctx, "keel:function:fw").Err())
	noperm(t, "the agent's FLUSHALL", a.Redis.FlushAll(ctx).Err())

	// Made again (agent restart, reconcile): the same password, the NF keeps working.
	b := New(a.cfg, a.Deps)
	if err := b.ensureNFUser(ctx, "acme", "fw/0"); err != nil {
		t.Fatal(err)
	}
	if _, again := nfLoginOf(t, a.cfg.SpecConfig, "fw/0"); again != pw {
		t.Fatal("the password changed when the user was made again")
	}
	if err := srv.Client(t, user, pw).HSet(ctx, own, "flow", "w").Err(); err != nil {
		t.Fatal(err)
	}

	// ACL SAVE: the user outlives a Redis restart.
	srv.Restart(t)
	if err := srv.Client(t, user, pw).HSet(ctx, own, "flow", "x").Err(); err != nil {
		t.Fatalf("after a Redis restart: %v", err)
	}

	if err := a.deleteNFUser(ctx, "fw/0"); err != nil {
		t.Fatal(err)
	}
	if err := srv.Client(t, user, pw).Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
		t.Fatalf("the removed instance's user still logs in: %v", err)
	}
	if _, err := os.Stat(a.cfg.SecretDir("fw/0")); !os.IsNotExist(err) {
		t.Fatalf("the removed instance's secrets directory: %v", err)
	}
	srv.Restart(t)
	if err := srv.Client(t, user, pw).Ping(ctx).Err(); err == nil {
		t.Fatal("the removed instance's user came back with Redis' ACL file")
	}
	if users, err := a.Redis.Do(ctx, "ACL", "USERS").StringSlice(); err != nil || strings.Contains(strings.Join(users, " "), "fw.0") {
		t.Fatalf("users %v %v", users, err)
	}
}

func Test_ensureNFUsers_makes_the_users_Redis_lost(t *testing.T) {
	a, srv := aclAgent(t)
	ctx := context.Background()
	desired := map[string]reconcile.Desired{"fw/0": {ID: "fw/0", Tenant: "acme"}, "fw/1": {ID: "fw/1", Tenant: "acme"}}
	obs := &observed{actual: map[string]reconcile.Actual{
		"fw/0": {ID: "fw/0", Containers: []reconcile.Container{{Position: 0, Running: true}}},
		"fw/1": {ID: "fw/1"}}} // not started yet: create makes its user
	a.ensureNFUsers(ctx, desired, obs, map[string]bool{})
	user, pw := nfLoginOf(t, a.cfg.SpecConfig, "fw/0")
	if err := srv.Client(t, user, pw).HSet(ctx, "keel:state:acme:fw.0:0-nat", "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a.cfg.SecretDir("fw/1")); !os.IsNotExist(err) {
		t.Fatal("a user for an instance without containers")
	}
	// Redis lost it (restarted without its ACL file, say): the next pass makes it again.
	if err := a.Redis.Do(ctx, "ACL", "DELUSER", user).Err(); err != nil {
		t.Fatal(err)
	}
	a.ensureNFUsers(ctx, desired, obs, map[string]bool{})
	if err := srv.Client(t, user, pw).HSet(ctx, "keel:state:acme:fw.0:0-nat", "f", "v").Err(); err != nil {
		t.Fatalf("not made again: %v", err)
	}
}

func Test_agent_refuses_a_wrong_Redis_password_naming_user_and_file(t *testing.T) {
	srv := testredis.StartACL(t, map[string]string{"keel-gateway": "gatewaypw", "keel-agent": "agentpw"})
	login := redisauth.Login{User: "keel-agent", Password: "notthepassword", File: "/etc/keel/redis-agent"}
	rdb := redis.NewClient(redisauth.Options(srv.Addr, login))
	defer rdb.Close()
	err := redisauth.Ping(context.Background(), rdb, srv.Addr, login)
	if !redisauth.Refused(err) || !strings.Contains(err.Error(), "keel-agent") || !strings.Contains(err.Error(), "/etc/keel/redis-agent") ||
		strings.Contains(err.Error(), "notthepassword") {
		t.Fatalf("%v", err)
	}
	anon := redis.NewClient(redisauth.Options(srv.Addr, redisauth.Login{}))
	defer anon.Close()
	if err := redisauth.Ping(context.Background(), anon, srv.Addr, redisauth.Login{}); !redisauth.Refused(err) ||
		!strings.Contains(err.Error(), "--redis-user") {
		t.Fatalf("the default user: %v", err)
	}
}

// A remove retried after its first teardown took the containers knows no tenant any more
// (no container labels, the chain gone): the instance's state must still go, and only its.
func Test_deleteState_without_a_tenant_deletes_only_the_instances_state(t *testing.T) {
	a, srv := aclAgent(t)
	ctx := context.Background()
	gw := srv.Client(t, "keel-gateway", "gatewaypw") // the agent may only read and delete NF state
	keys := map[string]bool{                         // key -> must survive
		"keel:state:acme:fw.0:0-nat":  false,
		"keel:state:acme:fw.0:1-lb":   false,
		"keel:state:acme:fw.10:0-nat": true,
		"keel:state:acme:fw.1:0-nat":  true,
		"keel:state:other:nat.0:0-x":  true,
	}
	for k := range keys {
		if err := gw.HSet(ctx, k, "flow", "v").Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.deleteState(ctx, "", "fw/0"); err != nil {
		t.Fatal(err)
	}
	for k, survive := range keys {
		n, err := gw.Exists(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if (n == 1) != survive {
			t.Errorf("%s: exists=%v, want %v", k, n == 1, survive)
		}
	}
}
