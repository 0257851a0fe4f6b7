// SPDX-License-Identifier: Apache-2.0

package controltoken

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// control answers ListFlows (unary) and Watch (a stream) and counts the calls that got
// through to it.
type control struct {
	pb.UnimplementedControlServer
	mu    sync.Mutex
	calls int
}

func (c *control) ListFlows(context.Context, *pb.ListFlowsRequest) (*pb.ListFlowsResponse, error) {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	return &pb.ListFlowsResponse{}, nil
}

func (c *control) Watch(_ *pb.WatchRequest, s pb.Control_WatchServer) error {
	c.mu.Lock()
	c.calls++
	c.mu.Unlock()
	return s.Send(&pb.WatchEvent{Kind: pb.WatchEvent_SYNCED})
}

func (c *control) served() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// serve starts a Control server that wants token; it returns the server's address.
func serve(t *testing.T, token string, c *control) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.UnaryInterceptor(UnaryServerInterceptor(token)),
		grpc.StreamInterceptor(StreamServerInterceptor(token)))
	pb.RegisterControlServer(s, c)
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	return ln.Addr().String()
}

func client(t *testing.T, addr string, opts ...grpc.DialOption) pb.ControlClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewControlClient(conn)
}

// calls makes one unary and one streaming call; it returns their errors.
func calls(ctx context.Context, c pb.ControlClient) (unary, stream error) {
	_, unary = c.ListFlows(ctx, &pb.ListFlowsRequest{})
	w, err := c.Watch(ctx, &pb.WatchRequest{Watcher: "test"})
	if err == nil {
		_, err = w.Recv()
	}
	return unary, err
}

func Test_interceptors_refuse_calls_without_the_right_token(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	srv := &control{}
	addr := serve(t, token, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	cases := []struct {
		name string
		c    pb.ControlClient
		ctx  context.Context
		want string // in the status message
	}{
		{"no token", client(t, addr), ctx, "no \"authorization: Bearer TOKEN\" metadata"},
		{"wrong token", client(t, addr, WithToken("fedcba9876543210fedcba9876543210")), ctx, "wrong token"},
		{"a prefix of the token", client(t, addr, WithToken(token[:16])), ctx, "wrong token"},
		{"not a bearer", client(t, addr), metadata.AppendToOutgoingContext(ctx, Header, token), "is not \"Bearer TOKEN\""},
	}
	for _, tc := range cases {
		u, s := calls(tc.ctx, tc.c)
		for kind, err := range map[string]error{"unary": u, "stream": s} {
			if status.Code(err) != codes.Unauthenticated || !strings.Contains(status.Convert(err).Message(), tc.want) {
				t.Errorf("%s, %s call: got %v, want UNAUTHENTICATED with %q", tc.name, kind, err, tc.want)
			}
		}
	}
	if n := srv.served(); n != 0 {
		t.Fatalf("%d refused calls reached the service", n)
	}

	u, s := calls(ctx, client(t, addr, WithToken(token)))
	if u != nil || s != nil {
		t.Fatalf("right token: unary %v, stream %v", u, s)
	}
	if n := srv.served(); n != 2 {
		t.Fatalf("right token: %d calls reached the service, want 2", n)
	}
}

func Test_Ensure_creates_a_private_token_once_then_reads_it_back(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secrets", "control-token")
	tok, created, err := Ensure(path)
	if err != nil || !created || len(tok) != 64 {
		t.Fatalf("first start: %q %v %v", tok, created, err)
	}
	st, _ := os.Stat(path)
	dst, _ := os.Stat(filepath.Dir(path))
	if st.Mode().Perm() != 0o600 || dst.Mode().Perm() != 0o700 {
		t.Fatalf("file mode %v, directory mode %v; want 0600, 0700", st.Mode(), dst.Mode())
	}
	again, created, err := Ensure(path)
	if err != nil || created || again != tok {
		t.Fatalf("second start: %q %v %v", again, created, err)
	}
	if read, err := Read(path); err != nil || read != tok {
		t.Fatalf("Read: %q %v", read, err)
	}
	left, _ := os.ReadDir(filepath.Dir(path))
	if len(left) != 1 {
		t.Fatalf("the secrets directory holds %d files, want the token only", len(left))
	}
}

func Test_Ensure_by_servers_starting_together_gives_one_token(t *testing.T) {
	path := filepath.Join(t.TempDir(), "control-token")
	toks := make([]string, 8)
	var wg sync.WaitGroup
	for i := range toks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tok, _, err := Ensure(path)
			if err != nil {
				t.Error(err)
			}
			toks[i] = tok
		}()
	}
	wg.Wait()
	for _, tok := range toks[1:] {
		if tok != toks[0] {
			t.Fatalf("tokens differ: %q", toks)
		}
	}
}

func Test_Read_refuses_missing_short_and_spaced_tokens(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{"short": "abc\n", "spaced": "0123456789 abcdef0123"} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(text), 0o600)
		if _, err := Read(p); err == nil {
			t.Errorf("%s token %q: no error", name, text)
		}
		if _, _, err := Ensure(p); err == nil {
			t.Errorf("Ensure kept the %s token %q", name, text)
		}
	}
	if _, err := Read(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func Test_RequireHTTP_takes_only_the_bearer_token(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	h := RequireHTTP(token, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("logs")) }))
	for _, c := range []struct {
		auth string
		code int
		want string
	}{
		{"", http.StatusUnauthorized, `no "authorization: Bearer TOKEN" header`},
		{"Basic YWRtaW46eA==", http.StatusUnauthorized, `is not "Bearer TOKEN"`},
		{"Bearer wrong", http.StatusUnauthorized, "wrong token"},
		{"Bearer " + token, http.StatusOK, "logs"},
	} {
		req := httptest.NewRequest(http.MethodGet, "/logs?chain=c", nil)
		if c.auth != "" {
			req.Header.Set("Authorization", c.auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != c.code || !strings.Contains(rec.Body.String(), c.want) {
			t.Errorf("%q: %d %q, want %d with %q", c.auth, rec.Code, rec.Body, c.code, c.want)
		}
	}
	req := httptest.NewRequest(http.MethodGet, "/logs", nil)
	SetHTTP(req, token)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("SetHTTP's request: %d", rec.Code)
	}
}
