// SPDX-License-Identifier: Apache-2.0

// Package testredis starts a throw-away redis-server for a package's unit tests.
package testredis

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/redis/go-redis/v9"
)

// Server is a throw-away redis-server on a loopback port, without persistence.
type Server struct {
	Addr     string // HOST:PORT
	Socket   string // unix:PATH, the same server
	bin, dir string
	port     int
	cmd      *exec.Cmd
}

// Start starts redis-server on a free loopback port and stops it when the test ends. It skips
// the test when redis-server is not installed.
func Start(t testing.TB) *Server {
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
	// The socket's directory is short: a Unix socket's path has at most 107 bytes, and
	// t.TempDir is named after the test.
	sock, err := os.MkdirTemp("", "keel-redis")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sock) })
	s := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), Socket: "unix:" + filepath.Join(sock, "redis.sock"),
		bin: bin, dir: t.TempDir(), port: port}
	s.run(t)
	t.Cleanup(s.stop)
	return s
}

func (s *Server) run(t testing.TB) {
	t.Helper()
	s.cmd = exec.Command(s.bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(s.port), "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--unixsocket", strings.TrimPrefix(s.Socket, "unix:"), "--unixsocketperm", "700")
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
}

func (s *Server) stop() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
}

// Restart stops the server and starts it again on the same port, empty: a Redis that lost
// its data (restarted without persistence, or with an AOF behind its writes). It returns
// once the new server accepts connections.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.stop()
	s.run(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", s.Addr)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not come back within 10 s: %v", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
		st, err := store.New(ctx, addr)
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
