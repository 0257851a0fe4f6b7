// SPDX-License-Identifier: Apache-2.0

package store_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/keel-nfv/keel/internal/redisauth"
	"github.com/keel-nfv/keel/internal/testredis"
	"github.com/openfaas/faas-provider/types"
)

// Test_the_store_works_as_make_ups_keel_gateway_user runs the store's kinds of Redis calls
// (strings, sets, hashes, MULTI/EXEC, its Lua script, SCAN and DEL of orphan NF state, INFO
// of the recheck) logged in as keel-gateway of deploy/redis/users.acl.in, which Redis refuses
// keys outside keel:* and admin commands.
func Test_the_store_works_as_make_ups_keel_gateway_user(t *testing.T) {
	srv := testredis.StartACL(t, map[string]string{"keel-gateway": "gatewaypw", "keel-agent": "agentpw"})
	ctx := context.Background()
	if _, err := store.New(ctx, srv.Addr, redisauth.Login{User: "keel-gateway", Password: "wrong", File: "/x/redis-gateway"}); err == nil ||
		!strings.Contains(err.Error(), "keel-gateway") || !strings.Contains(err.Error(), "/x/redis-gateway") {
		t.Fatalf("a wrong password: %v", err)
	}
	st, err := store.New(ctx, srv.Addr, redisauth.Login{User: "keel-gateway", Password: "gatewaypw"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	f := &chain.Function{Deployment: types.FunctionDeployment{Service: "hello", Image: "keel/hello"}, Replicas: 1}
	if err := st.Put(ctx, f); err != nil {
		t.Fatal(err)
	}
	if fs, err := store.List[chain.Function](ctx, st); err != nil || len(fs) != 1 {
		t.Fatalf("List: %d %v", len(fs), err)
	}
	vlan, err := st.AllocVLAN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	in := &store.Instance{ID: "c/0", Chain: "c", Worker: "local", VLAN: vlan, State: store.Attached, Core: 1}
	if err := st.PutInstance(ctx, in); err != nil {
		t.Fatal(err)
	}
	key := store.FlowKey(17, netip.MustParseAddr("198.18.0.1"), 1024, netip.MustParseAddr("198.18.3.1"), 5001)
	if err := st.AssignFlow(ctx, &store.Flow{Key: key, Chain: "c", Instance: in.ID, VLAN: vlan}, in, true); err != nil {
		t.Fatal(err)
	}
	if err := st.CountInvocation(ctx, "hello"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recheck(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.DeleteOrphanState(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteInstance(ctx, in, false); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(ctx, "hello"); err != nil {
		t.Fatal(err)
	}

	gw := srv.Client(t, "keel-gateway", "gatewaypw")
	for what, err := range map[string]error{
		"SET other":  gw.Set(ctx, "other", "x", 0).Err(),
		"FLUSHALL":   gw.FlushAll(ctx).Err(),
		"KEYS":       gw.Keys(ctx, "*").Err(),
		"CONFIG GET": gw.ConfigGet(ctx, "dir").Err(),
		"ACL USERS":  gw.Do(ctx, "ACL", "USERS").Err(),
	} {
		if err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
			t.Errorf("keel-gateway's %s: %v, want NOPERM", what, err)
		}
	}
}
