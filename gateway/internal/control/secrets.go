// SPDX-License-Identifier: Apache-2.0

package control

import (
	"context"
	"os"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

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
	c := in.Runs
	if c == nil {
		f, err := s.Store.Get(ctx, req.Instance[:i])
		if err != nil || f.Chain == nil {
			return nil, status.Errorf(codes.NotFound, "chain %s: %v", req.Instance[:i], err)
		}
		c = f.Chain
	}
	resp := &pb.ChainSecretsResponse{}
	for _, name := range c.Secrets {
		if s.Provider == nil || s.Provider.Secrets == nil {
			return nil, status.Error(codes.FailedPrecondition, "this gateway keeps no secrets")
		}
		path, err := s.Provider.Secrets.Path(name)
		if err != nil {
			return nil, status.Errorf(codes.FailedPrecondition, "chain %s: secret %s: %v (faas-cli secret create %s)", c.Name, name, err, name)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, status.Errorf(codes.Unavailable, "secret %s: %v", name, err)
		}
		resp.Secrets = append(resp.Secrets, &pb.Secret{Name: name, Value: b})
	}
	return resp, nil
}
