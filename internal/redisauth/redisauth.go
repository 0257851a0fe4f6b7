// SPDX-License-Identifier: Apache-2.0

// Package redisauth is how keel's control plane logs in to Redis: a Redis ACL user
// (--redis-user) and its password read from a file (--redis-password-file; never a flag or
// the environment), and start-up errors that say whether Redis refused the login or did not
// answer. keel-gateway and keel-agent share it.
package redisauth

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Login is who a client logs in to Redis as. The zero Login logs in as nobody: Redis'
// default user, which make up and the Kubernetes manifests switch off.
type Login struct {
	User     string
	Password string
	File     string // where Password came from, for messages
}

// Flags are the --redis-user and --redis-password-file flags of a component.
type Flags struct {
	User         string
	PasswordFile string
}

// Register adds the flags to fs; user is the component's user in make up's ACL file.
func (f *Flags) Register(fs *flag.FlagSet, user string) {
	fs.StringVar(&f.User, "redis-user", "", "the Redis ACL `USER` to log in as (make up: "+user+"; empty: Redis' default user, without a password)")
	fs.StringVar(&f.PasswordFile, "redis-password-file", "", "`FILE` holding --redis-user's password (its first line; make up: run/secrets/redis-"+
		strings.TrimPrefix(user, "keel-")+", mode 0600)")
}

// Login reads the password file: the login the flags name.
func (f *Flags) Login() (Login, error) {
	switch {
	case f.User == "" && f.PasswordFile == "":
		return Login{}, nil
	case f.PasswordFile == "":
		return Login{}, fmt.Errorf("--redis-user %s needs --redis-password-file", f.User)
	case f.User == "":
		return Login{}, errors.New("--redis-password-file needs --redis-user")
	}
	pw, err := ReadPasswordFile(f.PasswordFile)
	if err != nil {
		return Login{}, fmt.Errorf("--redis-password-file: %w", err)
	}
	return Login{User: f.User, Password: pw, File: f.PasswordFile}, nil
}

// ReadPasswordFile returns the first line of path, surrounding white space dropped; an
// empty one is an error.
func ReadPasswordFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pw := strings.TrimSpace(line)
	if pw == "" {
		return "", fmt.Errorf("%s: no password in its first line", path)
	}
	return pw, nil
}

// Options returns the client options for addr, HOST:PORT or unix:PATH, logged in as l.
func Options(addr string, l Login) *redis.Options {
	opt := &redis.Options{Network: "tcp", Addr: addr, Username: l.User, Password: l.Password}
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		opt.Network, opt.Addr = "unix", path
	}
	return opt
}

// Refused reports whether err is Redis refusing the login or a command (WRONGPASS, NOAUTH,
// NOPERM), not Redis being unreachable.
func Refused(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := re.Error()
	return strings.HasPrefix(msg, "WRONGPASS") || strings.HasPrefix(msg, "NOAUTH") || strings.HasPrefix(msg, "NOPERM")
}

// Ping checks that Redis at addr answers c, logged in as l; the error says whether the login
// was refused (naming the user and the password file, never the password) or Redis did not
// answer.
func Ping(ctx context.Context, c *redis.Client, addr string, l Login) error {
	err := c.Ping(ctx).Err()
	if err == nil {
		return nil
	}
	if !Refused(err) {
		return fmt.Errorf("redis %s does not answer: %w", addr, err)
	}
	if l.User == "" {
		return fmt.Errorf("redis %s refuses a client that does not log in (%w): give --redis-user and --redis-password-file", addr, err)
	}
	return fmt.Errorf("redis %s refuses user %s (--redis-user) with the password in %s (--redis-password-file): %w", addr, l.User, l.File, err)
}
