// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keel-nfv/keel/agent/internal/vf"
	"github.com/keel-nfv/keel/internal/controltoken"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// syncBuffer is a log sink the agent's goroutine writes while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// followWith runs an agent's gateway loop against a gateway that wants token, the agent
// dialling with opts, until the test ends; it returns the gateway and the agent's log.
func followWith(t *testing.T, token string, opts ...grpc.DialOption) (*fakeControl, *syncBuffer, *Agent) {
	t.Helper()
	fc := &fakeControl{live: make(chan *pb.WatchEvent)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(controltoken.UnaryServerInterceptor(token)),
		grpc.StreamInterceptor(controltoken.StreamServerInterceptor(token)))
	pb.RegisterControlServer(srv, fc)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	logs := &syncBuffer{}
	a := New(Config{SpecConfig: SpecConfig{Worker: "w1"}, Cores: []int32{1}},
		Deps{VF: vf.NewOVSVeth("", "", "w1"), Control: pb.NewControlClient(conn), Log: slog.New(slog.NewTextHandler(logs, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.followGateway(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return fc, logs, a
}

func Test_followGateway_without_the_gateways_token_is_refused_and_says_so(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	for name, opts := range map[string][]grpc.DialOption{
		"no token":    nil,
		"wrong token": {controltoken.WithToken("fedcba9876543210fedcba9876543210")},
	} {
		t.Run(name, func(t *testing.T) {
			fc, logs, a := followWith(t, token, opts...)
			waitFor(t, "the refusal in the agent's log", 5*time.Second, func() bool {
				return strings.Contains(logs.String(), "refused this agent's control-plane token")
			})
			if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "Unauthenticated") {
				t.Fatalf("the refusal is not an error naming the gRPC status:\n%s", logs)
			}
			fc.mu.Lock()
			regs := len(fc.regs)
			fc.mu.Unlock()
			a.mu.Lock()
			connected, synced := a.connected, a.synced
			a.mu.Unlock()
			if regs != 0 || connected || synced {
				t.Fatalf("refused agent registered %d times, connected %v, synced %v", regs, connected, synced)
			}
		})
	}
}

func Test_followGateway_with_the_gateways_token_registers_and_syncs(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	fc, logs, a := followWith(t, token, controltoken.WithToken(token))
	waitFor(t, "the agent in sync", 5*time.Second, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return a.synced
	})
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if len(fc.regs) != 1 || fc.regs[0].Worker != "w1" {
		t.Fatalf("registrations %v", fc.regs)
	}
	if strings.Contains(logs.String(), "refused") {
		t.Fatalf("log:\n%s", logs)
	}
}
