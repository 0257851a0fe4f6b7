// SPDX-License-Identifier: Apache-2.0

// Package testredis starts a throw-away redis-server for the gateway's unit tests, with its
// store on it.
package testredis

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/keel-nfv/keel/internal/redisauth"
	base "github.com/keel-nfv/keel/internal/testredis"
	"github.com/redis/go-redis/v9"
)

// Server is a throw-away redis-server (keel's internal/testredis) with the gateway's store
// on it.
type Server struct{ *base.Server }

// Start starts redis-server on a free loopback port and stops it when the test ends. It skips
// the test when redis-server is not installed.
func Start(t testing.TB) *Server {
	t.Helper()
	return &Server{base.Start(t)}
}

// Store returns a new store on the server over TCP (each has its own cache), closed when the
// test ends; it waits up to 10 s for the server to answer.
func (s *Server) Store(t testing.TB) *store.Store {
	t.Helper()
	return s.StoreAt(t, s.Addr)
}

// StoreAt is Store at addr: s.Addr or s.Socket.
func (s *Server) StoreAt(t testing.TB, addr string) *store.Store {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := store.New(ctx, addr, redisauth.Login{})
		cancel()
		if err == nil {
			t.Cleanup(func() { st.Close() })
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not answer within 10 s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Store starts a redis-server (Start) and returns a store on it.
func Store(t testing.TB) *store.Store {
	t.Helper()
	return Start(t).Store(t)
}

// Counter is a go-redis hook that counts round trips (one per command sent alone, one per
// pipeline or transaction) and the commands in them.
type Counter struct {
	trips, commands atomic.Int64
}

// Counted is Store with a Counter on its client.
func Counted(t testing.TB) (*store.Store, *Counter) {
	t.Helper()
	s := Store(t)
	return s, Count(s)
}

// Count puts a Counter on a store's client.
func Count(s *store.Store) *Counter {
	c := &Counter{}
	s.AddHook(c)
	return c
}

// Trips returns the round trips counted so far.
func (c *Counter) Trips() int64 { return c.trips.Load() }

// Commands returns the commands counted so far.
func (c *Counter) Commands() int64 { return c.commands.Load() }

// DialHook implements redis.Hook.
func (c *Counter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook.
func (c *Counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.trips.Add(1)
		c.commands.Add(1)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook.
func (c *Counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.trips.Add(1)
		c.commands.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}
