// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/keel-nfv/keel/agent/internal/reconcile"
	"github.com/redis/go-redis/v9"
)

// An instance's NFs log in to Redis as a user of their own that may touch only the
// instance's state, keel:state:<tenant>:<group>:*, with only the commands keel-nf's Redis
// mirror sends. The tenant is the gateway's (pb.Chain), never the NF's. The agent makes the
// user before the instance's containers start, makes it again when Redis lost it, and
// deletes it with the instance's state.

// RedisAuthName is the file in an instance's secrets directory that holds its NFs' Redis
// login: one line "USER PASSWORD" (keel-nf --redis-auth-file), mode 0600.
const RedisAuthName = "redis"

// nfUserTimeout bounds the Redis calls that check or make the users in one pass.
const nfUserTimeout = 2 * time.Second

// NFUser is the Redis ACL user of an instance's NFs.
func NFUser(instance string) string { return "keel-nf." + GroupID(instance) }

// NFUserRules are the ACL SETUSER rules of an instance's user after its password: its own
// state keys, no channel, and HSCAN, HSET, HDEL, HGET and PING only.
func NFUserRules(tenant, instance string) []string {
	return []string{"~" + stateKeys(tenant, instance), "resetchannels", "-@all",
		"+hscan", "+hset", "+hdel", "+hget", "+ping"}
}

// stateKeys is the key pattern of an instance's NF state (see nf-runtime redis_mirror).
func stateKeys(tenant, instance string) string {
	return "keel:state:" + globEscape(tenant) + ":" + globEscape(GroupID(instance)) + ":*"
}

// nfLogin returns the password of an instance's NFs from its secrets file, first writing the
// file with a new random password (mode 0600, directory 0700) unless it holds one for the
// instance's user: a password stays the same across agent restarts and rebuilds.
func (c SpecConfig) nfLogin(instance string) (string, error) {
	dir := c.SecretDir(instance)
	file := filepath.Join(dir, RedisAuthName)
	if b, err := os.ReadFile(file); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 && f[0] == NFUser(instance) {
			return f[1], nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	pw := hex.EncodeToString(b)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, "."+RedisAuthName+"-*") // mode 0600
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	_, werr := fmt.Fprintf(tmp, "%s %s\n", NFUser(instance), pw)
	if err := errors.Join(werr, tmp.Close()); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return "", err
	}
	return pw, nil
}

// ensureNFUser makes (or makes again: idempotent) the Redis user of an instance's NFs and
// saves Redis' ACL file.
func (a *Agent) ensureNFUser(ctx context.Context, tenant, id string) error {
	pw, err := a.cfg.nfLogin(id)
	if err != nil {
		return fmt.Errorf("redis login of %s: %w", id, err)
	}
	args := []any{"ACL", "SETUSER", NFUser(id), "reset", "on", ">" + pw}
	for _, r := range NFUserRules(tenant, id) {
		args = append(args, r)
	}
	if err := a.Redis.Do(ctx, args...).Err(); err != nil {
		return fmt.Errorf("redis user of %s: %w", id, err)
	}
	if err := a.saveACL(ctx); err != nil {
		return err
	}
	a.mu.Lock()
	a.nfUsers[id] = tenant
	a.mu.Unlock()
	a.Log.Info("made the NFs' Redis user", "instance", id, "tenant", tenant)
	return nil
}

// deleteNFUser deletes the Redis user of a removed instance and its secrets directory.
func (a *Agent) deleteNFUser(ctx context.Context, id string) error {
	if err := a.Redis.Do(ctx, "ACL", "DELUSER", NFUser(id)).Err(); err != nil {
		return fmt.Errorf("redis user of %s: %w", id, err)
	}
	if err := a.saveACL(ctx); err != nil {
		return err
	}
	a.mu.Lock()
	delete(a.nfUsers, id)
	a.mu.Unlock()
	if err := os.RemoveAll(a.cfg.SecretDir(id)); err != nil {
		return err
	}
	return nil
}

// saveACL writes Redis' users to its ACL file, so they outlive a Redis restart. A Redis
// without a writable ACL file (--aclfile; a read-only Secret under Kubernetes) keeps them
// until it restarts, and the agent makes them again then (ensureNFUsers): a warning, once.
func (a *Agent) saveACL(ctx context.Context) error {
	err := a.Redis.Do(ctx, "ACL", "SAVE").Err()
	var re redis.Error
	if errors.As(err, &re) {
		if a.aclUnsaved.CompareAndSwap(false, true) {
			a.Log.Warn("redis keeps the NFs' users only until it restarts (the agent makes them again then): ACL SAVE failed", "err", err)
		}
		return nil
	}
	return err
}

// ensureNFUsers makes the Redis user of every desired instance whose containers exist
// (and that no slow action holds) if Redis lacks it (it restarted without its ACL file) or
// this agent has not made it since it started (it re-adopted the instance), so users follow
// the gateway's tenants and the agent's rules.
func (a *Agent) ensureNFUsers(ctx context.Context, desired map[string]reconcile.Desired, obs *observed, busy map[string]bool) {
	if !a.cfg.NFLogins() || a.Redis == nil {
		return
	}
	a.mu.Lock()
	var due []reconcile.Desired
	for id, d := range desired {
		if !busy[id] && len(obs.actual[id].Containers) > 0 {
			due = append(due, d)
		}
	}
	made := map[string]string{}
	for id, t := range a.nfUsers {
		made[id] = t
	}
	a.mu.Unlock()
	if len(due) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, nfUserTimeout)
	defer cancel()
	users, err := a.Redis.Do(ctx, "ACL", "USERS").StringSlice()
	if err != nil {
		a.Log.Warn("reconcile: cannot list Redis' users; the NFs' users are checked on the next pass", "err", err)
		return
	}
	have := map[string]bool{}
	for _, u := range users {
		have[u] = true
	}
	for _, d := range due {
		if t, ok := made[d.ID]; ok && t == d.Tenant && have[NFUser(d.ID)] {
			continue
		}
		if err := a.ensureNFUser(ctx, d.Tenant, d.ID); err != nil {
			a.Log.Warn("reconcile: the NFs' Redis user; retried on the next pass", "instance", d.ID, "err", err)
			return
		}
	}
}
