// SPDX-License-Identifier: Apache-2.0

// Package testredis starts a throw-away redis-server for a package's unit tests.
package testredis

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/redis/go-redis/v9"
)

// Store starts redis-server on a free loopback port with no persistence, stops it when the
// test ends, and returns a store on it. It skips the test when redis-server is not installed.
func Store(t testing.TB) *store.Store {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server is not installed (apt-get install redis-server; make deps does)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no",
		"--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		s, err := store.New(ctx, addr)
		cancel()
		if err == nil {
			t.Cleanup(func() { s.Close() })
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not answer within 10 s: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	c := &Counter{}
	s.AddHook(c)
	return s, c
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
