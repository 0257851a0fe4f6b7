// SPDX-License-Identifier: Apache-2.0

package control

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/events"
	"github.com/keel-nfv/keel/gateway/internal/secrets"
	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/keel-nfv/keel/gateway/internal/testredis"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"github.com/openfaas/faas-provider/types"
)

// ChainSecrets gives the values of the secrets a chain lists to the agent of its instance's
// worker, and nothing to another worker or for an instance that does not exist.
func Test_ChainSecrets_go_to_the_worker_of_the_instance_only(t *testing.T) {
	st := testredis.Store(t)
	ctx := context.Background()
	dir := t.TempDir()
	srv := &Server{Store: st, Hub: events.NewHub(), Secrets: &secrets.Store{Dir: dir}}
	if err := st.Put(ctx, &chain.Function{Kind: chain.KindChain, Deployment: types.FunctionDeployment{Service: "chain3"},
		Chain: &chain.Chain{Name: "chain3", Spec: "NAT"}}); err != nil {
		t.Fatal(err)
	}
	if err := st.PutInstance(ctx, &store.Instance{ID: "chain3/0", Chain: "chain3", Worker: "local", VLAN: 100, State: store.Pooled, Core: -1}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "aes-key"), []byte("000102030405060708090a0b0c0d0e0f"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "unlisted"), []byte("not chain3's"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := store.Get[chain.Function](ctx, st, "chain3")
	if err != nil {
		t.Fatal(err)
	}
	f.Chain.Secrets = []string{"aes-key"}
	if err := st.Put(ctx, f); err != nil {
		t.Fatal(err)
	}
	insts, err := st.Instances(ctx, "chain3")
	if err != nil || len(insts) == 0 {
		t.Fatalf("chain3's instances: %v %v", insts, err)
	}
	id := insts[0].ID

	resp, err := srv.ChainSecrets(ctx, &pb.ChainSecretsRequest{Instance: id, Worker: "local"})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Secrets) != 1 || resp.Secrets[0].Name != "aes-key" || string(resp.Secrets[0].Value) != "000102030405060708090a0b0c0d0e0f" {
		t.Errorf("secrets %v, want aes-key only", resp.Secrets)
	}
	for _, req := range []*pb.ChainSecretsRequest{{Instance: id, Worker: "other"}, {Instance: "chain3/99", Worker: "local"}} {
		if _, err := srv.ChainSecrets(ctx, req); status.Code(err) != codes.NotFound {
			t.Errorf("%v: %v, want NotFound", req, err)
		}
	}
	if _, err := srv.ChainSecrets(ctx, &pb.ChainSecretsRequest{Instance: "nochain", Worker: "local"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("an id without /N: %v, want InvalidArgument", err)
	}
	// A listed secret deleted since the deploy: the agent learns which one.
	if err := os.Remove(filepath.Join(dir, "aes-key")); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.ChainSecrets(ctx, &pb.ChainSecretsRequest{Instance: id, Worker: "local"}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("a deleted secret: %v, want FailedPrecondition", err)
	}
}
