// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/control"
	"github.com/keel-nfv/keel/gateway/internal/kube"
	"github.com/keel-nfv/keel/gateway/internal/leader"
	"github.com/keel-nfv/keel/gateway/internal/metrics"
	"github.com/keel-nfv/keel/internal/controltoken"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func Test_parseFlags_defaults_are_the_documented_command_line(t *testing.T) {
	o, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := options{listen: "127.0.0.1:8080", grpcListen: "127.0.0.1:50051", redis: "127.0.0.1:6379", placer: "127.0.0.1:50062",
		secrets: "/var/lib/keel/secrets", topology: "deploy/local/topology.yaml", docker: "unix:///var/run/docker.sock",
		algo: "heuristic", pool: 1, poolMax: 2, scalePeriod: time.Second, keelNF: defaultKeelNF(),
		sample: 2 * time.Second, history: 10 * time.Minute,
		nfCosts: "bench/results/nf_profile.json", chainCosts: "bench/results/chain_length.json", packetBytes: 1024,
		kube: kube.Options{Backend: "docker", Namespace: "openfaas-fn", ClusterDomain: "cluster.local"}, upstreamUser: "admin",
		leader: leader.Options{Lease: "keel-gateway", LeaseDuration: leader.DefaultLeaseDuration,
			RenewDeadline: leader.DefaultRenewDeadline, RetryPeriod: leader.DefaultRetryPeriod},
		loadWindow: 10 * time.Second, downWindow: 30 * time.Second, wakeTimeout: 30 * time.Second, callTimeout: 2 * time.Minute, rpsTarget: 5,
		networkBudget: 10 * time.Microsecond, flowMoveTimeout: control.DefaultMoveTimeout}
	if *o != want {
		t.Fatalf("got %+v", *o)
	}
	if filepath.Base(o.keelNF) != "keel-nf" || !filepath.IsAbs(o.keelNF) {
		t.Fatalf("--keel-nf default %q is not the keel-nf beside the gateway", o.keelNF)
	}
}

func Test_parseFlags_rejects_a_history_shorter_than_a_sample(t *testing.T) {
	for _, args := range [][]string{{"--ui-sample", "0s"}, {"--ui-sample", "5s", "--ui-history", "1s"}} {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("%v: want an error", args)
		}
	}
}

func Test_parseFlags_rejects_stray_arguments(t *testing.T) {
	if _, err := parseFlags([]string{"--no-auth", "extra"}); err == nil {
		t.Fatal("want an error")
	}
	o, err := parseFlags([]string{"--no-auth", "--listen", "127.0.0.1:9"})
	if err != nil || !o.noAuth || o.listen != "127.0.0.1:9" {
		t.Fatalf("got %+v %v", o, err)
	}
}

func Test_grpcServer_refuses_Control_calls_without_the_token(t *testing.T) {
	const token = "0123456789abcdef0123456789abcdef"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpcServer(token, metrics.New())
	pb.RegisterControlServer(gs, pb.UnimplementedControlServer{})
	go func() { _ = gs.Serve(ln) }()
	defer gs.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []struct {
		name string
		opts []grpc.DialOption
		want codes.Code // Unimplemented: past the token check
	}{
		{"no token", nil, codes.Unauthenticated},
		{"wrong token", []grpc.DialOption{controltoken.WithToken("fedcba9876543210fedcba9876543210")}, codes.Unauthenticated},
		{"the token", []grpc.DialOption{controltoken.WithToken(token)}, codes.Unimplemented},
	} {
		conn, err := grpc.NewClient(ln.Addr().String(), append(c.opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
		if err != nil {
			t.Fatal(err)
		}
		cl := pb.NewControlClient(conn)
		_, uerr := cl.AssignFlow(ctx, &pb.AssignFlowRequest{})
		_, merr := cl.ReportMoves(ctx, &pb.ReportMovesRequest{IngressId: "ingress-0", MoveId: "m"})
		w, serr := cl.Watch(ctx, &pb.WatchRequest{Watcher: "test"})
		if serr == nil {
			_, serr = w.Recv()
		}
		conn.Close()
		if status.Code(uerr) != c.want || status.Code(serr) != c.want || status.Code(merr) != c.want {
			t.Errorf("%s: AssignFlow %v, Watch %v, ReportMoves %v; want %v", c.name, uerr, serr, merr, c.want)
		}
	}
}

func Test_parseFlags_refuses_an_upstream_beside_a_backend_of_its_own(t *testing.T) {
	for args, want := range map[string][]string{
		"leave out --backend kubernetes":                       {"--upstream-provider", "http://faas-netes:8081", "--backend", "kubernetes"},
		"--upstream-password-file without --upstream-provider": {"--upstream-password-file", "/dev/null"},
	} {
		if _, err := parseFlags(want); err == nil || !strings.Contains(err.Error(), args) {
			t.Errorf("%v: %v, want an error with %q", want, err, args)
		}
	}
	o, err := parseFlags([]string{"--upstream-provider", "http://faas-netes:8081", "--upstream-password-file", "/p"})
	if err != nil || o.upstream != "http://faas-netes:8081" || o.upstreamPasswordFile != "/p" || o.upstreamUser != "admin" {
		t.Fatalf("got %+v %v", o, err)
	}
}
