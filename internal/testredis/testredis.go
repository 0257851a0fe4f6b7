// SPDX-License-Identifier: Apache-2.0

// Package testredis starts a throw-away redis-server for a package's tests: open to every
// client (Start), or with keel's control-plane ACL file (StartACL), as make up runs it.
package testredis

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a throw-away redis-server on a loopback port, without persistence of its data
// (but with StartACLAOF).
type Server struct {
	Addr    string // HOST:PORT
	Socket  string // unix:PATH, the same server
	ACLFile string // with StartACL: its ACL file (ACL SAVE writes it)
	bin     string
	dir     string
	port    int
	aof     bool
	cmd     *exec.Cmd
}

// Start starts redis-server on a free loopback port and stops it when the test ends. It skips
// the test when redis-server is not installed.
func Start(t testing.TB) *Server {
	t.Helper()
	return start(t, "", false)
}

// StartACL is Start with keel's control-plane users (deploy/redis/users.acl.in: the default
// user off, keel-gateway and keel-agent) logging in with passwords[user]; it returns once the
// server answers.
func StartACL(t testing.TB, passwords map[string]string) *Server {
	t.Helper()
	return startACL(t, passwords, false)
}

// StartACLAOF is StartACL with the append-only file on (fsync'd at every write), as make up
// runs Redis: Restart then brings the data back.
func StartACLAOF(t testing.TB, passwords map[string]string) *Server {
	t.Helper()
	return startACL(t, passwords, true)
}

func startACL(t testing.TB, passwords map[string]string, aof bool) *Server {
	t.Helper()
	_, self, _, _ := goruntime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(self), "..", "..", "deploy", "redis", "users.acl.in"))
	if err != nil {
		t.Fatal(err)
	}
	var acl strings.Builder
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "user ") {
			continue
		}
		f := strings.Fields(line)
		pw, ok := passwords[f[1]]
		if strings.Contains(line, "{password}") && !ok {
			t.Fatalf("StartACL: no password for %s", f[1])
		}
		acl.WriteString(strings.ReplaceAll(line, "{password}", ">"+pw) + "\n")
	}
	file := filepath.Join(t.TempDir(), "users.acl")
	if err := os.WriteFile(file, []byte(acl.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	s := start(t, file, aof)
	s.await(t)
	return s
}

func start(t testing.TB, aclFile string, aof bool) *Server {
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
		ACLFile: aclFile, bin: bin, dir: t.TempDir(), port: port, aof: aof}
	s.run(t)
	t.Cleanup(s.stop)
	return s
}

func (s *Server) run(t testing.TB) {
	t.Helper()
	aof := []string{"--appendonly", "no"}
	if s.aof {
		aof = []string{"--appendonly", "yes", "--appendfsync", "always"}
	}
	args := append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(s.port), "--save", "",
		"--dir", s.dir, "--unixsocket", strings.TrimPrefix(s.Socket, "unix:"), "--unixsocketperm", "700"}, aof...)
	if s.ACLFile != "" {
		args = append(args, "--aclfile", s.ACLFile)
	}
	s.cmd = exec.Command(s.bin, args...)
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
}

func (s *Server) stop() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
}

// Restart stops the server and starts it again on the same port: empty (a Redis that lost
// its data: restarted without persistence, or with an AOF behind its writes), or with
// StartACLAOF what its append-only file holds; with StartACL it loads its ACL file again. It returns once the new server accepts connections.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.stop()
	s.run(t)
	s.await(t)
}

func (s *Server) await(t testing.TB) {
	t.Helper()
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

// Client returns a client of the server logged in as user with password ("" "": Redis'
// default user), closed when the test ends.
func (s *Server) Client(t testing.TB, user, password string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Username: user, Password: password, MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}
