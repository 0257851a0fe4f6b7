// SPDX-License-Identifier: Apache-2.0

package control

import (
	"context"
	"os"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/store"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
)

// ChainSecrets gives the agent of req.Worker the values of the faas-cli secrets the chain of
// instance req.Instance lists (the version the instance runs), to mount read-only into the
// instance's containers. Only the worker the instance is placed on gets them; like every call
// of keel.v1.Control it needs the control-plane token.
func (s *Server) ChainSecrets(ctx context.Context, req *pb.ChainSecretsRequest) (*pb.ChainSecretsResponse, error) {
	i := strings.LastIndex(req.Instance, "/")
	if i <= 0 || req.Worker == "" {
		return nil, status.Errorf(codes.InvalidArgument, "instance %q (CHAIN/N) and worker are required", req.Instance)
	}
	in, err := s.Store.Instance(ctx, req.Instance[:i], req.Instance)
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	if in == nil || in.Worker != req.Worker {
		return nil, status.Errorf(codes.NotFound, "no instance %s on worker %s", req.Instance, req.Worker)
	}
	name, listed := req.Instance[:i], []string(nil)
	if in.Runs != nil {
		listed = in.Runs.Secrets
	} else {
		f, err := store.Get[chain.Function](ctx, s.Store, name)
		if err != nil || f.Chain == nil {
			return nil, status.Errorf(codes.NotFound, "chain %s: %v", name, err)
		}
		listed = f.Chain.Secrets
	}
	resp := &pb.ChainSecretsResponse{}
	for _, secret := range listed {
		if s.Secrets == nil {
			return nil, status.Error(codes.FailedPrecondition, "this gateway keeps no secrets")
		}
		path, err := s.Secrets.Path(secret)
		if err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "chain %s: secret %s: %v (faas-cli secret create %s)", name, secret, err, secret)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "secret %s: %v", secret, err)
		}
		resp.Secrets = append(resp.Secrets, &pb.Secret{Name: secret, Value: b})
	}
	return resp, nil
}
