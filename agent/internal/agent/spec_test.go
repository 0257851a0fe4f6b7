// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/keel-nfv/keel/agent/internal/runtime"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
)

func testSpecConfig() SpecConfig {
	return SpecConfig{Worker: "local", PktbufDir: "/run/keel/pktbuf", CoopschedNFSocket: "/run/keel/coopsched-nf.sock",
		RedisSocket: "/run/keel/redis.sock", Cpuset: "1", VFDriver: "af_packet", StatsIntervalMs: 1000, RTRuntimeUs: 10000, WaitIfaceMs: 30000}
}

func testChain() *pb.Chain {
	return &pb.Chain{Name: "c3", Tenant: "openfaas-fn", MemoryBytes: 512 << 20, Members: []*pb.ChainMember{
		{Name: "ACL", Nf: "acl", Image: "keel/nf-base", ConfigJson: `{"rules":[]}`},
		{Name: "NAT", Nf: "nat", Image: "keel/nf-base", ConfigJson: `{"external_ip":"198.18.0.1"}`}}}
}

func Test_GroupID_round_trips_through_InstanceOfGroup(t *testing.T) {
	for _, id := range []string{"c3/0", "a.b-c/12"} {
		got, ok := InstanceOfGroup(GroupID(id))
		if !ok || got != id {
			t.Fatalf("%s -> %s -> %s %v", id, GroupID(id), got, ok)
		}
	}
	for _, bad := range []string{"c1", "c1.", ".1", "c1.x"} {
		if _, ok := InstanceOfGroup(bad); ok {
			t.Errorf("%q taken for an instance", bad)
		}
	}
}

func Test_Specs_run_keel_nf_per_member_with_position_0_owning_the_VF(t *testing.T) {
	in := &pb.ChainInstance{Id: "c3/1", Chain: "c3", Vlan: 101}
	specs := testSpecConfig().Specs(in, testChain())
	if len(specs) != 2 {
		t.Fatalf("%d specs", len(specs))
	}
	s0 := strings.Join(specs[0].Args, " ")
	want0 := `--nf acl={"rules":[]} --chain-id c3.1 --position 0 --of 2 --pktbuf /run/keel/pktbuf/c3.1/pktbuf ` +
		`--coopsched unix:/run/keel/coopsched.sock --stats /run/keel/pktbuf/c3.1/stats-0.json --stats-interval 1000 ` +
		`--redis unix:/run/keel/redis.sock --tenant openfaas-fn --wait-iface vf0:30000 -- --no-pci --no-huge -m 256 ` +
		`--file-prefix=keel-c3.1-0 --no-telemetry --log-level=error --vdev net_af_packet0,iface=vf0`
	if s0 != want0 {
		t.Fatalf("position 0 args:\n got  %s\n want %s", s0, want0)
	}
	if s1 := strings.Join(specs[1].Args, " "); strings.Contains(s1, " -- ") || !strings.Contains(s1, "--position 1 --of 2") {
		t.Fatalf("position 1 args: %s", s1)
	}
	if specs[1].Name != "keel-c3.1-1" || specs[1].Labels[LabelInstance] != "c3/1" || specs[1].Labels[LabelVLAN] != "101" ||
		specs[1].Labels[LabelTenant] != "openfaas-fn" || specs[1].Cpuset != "1" || specs[1].MemoryBytes != 512<<20 ||
		specs[1].RTRuntimeUs != 10000 || len(specs[1].CapAdd) != 0 || strings.Join(specs[0].CapAdd, ",") != "NET_ADMIN" {
		t.Fatalf("position 1: %+v", specs[1])
	}
	mounts := map[string]string{}
	for _, m := range specs[0].Mounts {
		mounts[m.Target] = m.Source
	}
	if mounts["/run/keel/pktbuf/c3.1"] != "/run/keel/pktbuf/c3.1" || mounts["/run/keel/coopsched.sock"] != "/run/keel/coopsched-nf.sock" ||
		mounts["/run/keel/redis.sock"] != "/run/keel/redis.sock" || len(mounts) != 3 {
		t.Fatalf("mounts %v", mounts)
	}
}

func Test_Specs_hash_changes_with_what_defines_the_instance(t *testing.T) {
	cfg := testSpecConfig()
	in := &pb.ChainInstance{Id: "c3/1", Chain: "c3", Vlan: 101}
	h := cfg.Specs(in, testChain())[0].Labels[LabelSpec]
	if h2 := cfg.Specs(in, testChain())[1].Labels[LabelSpec]; h2 != h {
		t.Fatal("positions of one instance carry different hashes")
	}
	attached := &pb.ChainInstance{Id: "c3/1", Chain: "c3", Vlan: 101, State: "attached", Core: 1, Batch: 8}
	if cfg.Specs(attached, testChain())[0].Labels[LabelSpec] != h {
		t.Fatal("attaching changed the spec")
	}
	moved := &pb.ChainInstance{Id: "c3/1", Chain: "c3", Vlan: 102}
	if cfg.Specs(moved, testChain())[0].Labels[LabelSpec] == h {
		t.Fatal("a new VLAN kept the spec")
	}
	ch := testChain()
	ch.Members[1].ConfigJson = `{"external_ip":"198.18.0.2"}`
	if cfg.Specs(in, ch)[0].Labels[LabelSpec] == h {
		t.Fatal("a new NF configuration kept the spec")
	}
}

func Test_Specs_give_each_instance_its_Redis_login_read_only_and_out_of_the_spec(t *testing.T) {
	cfg := testSpecConfig()
	cfg.SecretsDir = t.TempDir()
	in := &pb.ChainInstance{Id: "c3/1", Chain: "c3", Vlan: 101}
	specs := cfg.Specs(in, testChain())
	for _, s := range specs {
		if a := strings.Join(s.Args, " "); !strings.Contains(a, "--redis unix:/run/keel/redis.sock --tenant openfaas-fn --redis-auth-file /run/secrets/keel/redis") {
			t.Fatalf("%s: args %s", s.Name, a)
		}
		var secrets []runtime.Mount
		for _, m := range s.Mounts {
			if m.Target == SecretsIn {
				secrets = append(secrets, m)
			}
		}
		if len(secrets) != 1 || secrets[0].Source != filepath.Join(cfg.SecretsDir, "c3.1") || !secrets[0].ReadOnly || !secrets[0].Dir {
			t.Fatalf("%s: secrets mount %+v", s.Name, secrets)
		}
	}
	// The login file (its password) is no part of the spec: the hash stays when it is made.
	h := specs[0].Labels[LabelSpec]
	if _, err := cfg.nfLogin("c3/1"); err != nil {
		t.Fatal(err)
	}
	if cfg.Specs(in, testChain())[0].Labels[LabelSpec] != h {
		t.Fatal("the login file changed the spec")
	}
	_, pw := nfLoginOf(t, cfg, "c3/1")
	for _, s := range cfg.Specs(in, testChain()) {
		if b, _ := json.Marshal(s); strings.Contains(string(b), pw) {
			t.Fatalf("%s: the password is in the container's spec", s.Name)
		}
	}
}

func Test_Specs_without_Redis_socket_keep_no_NF_state(t *testing.T) {
	cfg := testSpecConfig()
	cfg.RedisSocket = ""
	cfg.VFDriver = "af_xdp"
	s := cfg.Specs(&pb.ChainInstance{Id: "c3/0", Vlan: 100}, testChain())
	if a := strings.Join(s[0].Args, " "); strings.Contains(a, "--redis") || !strings.Contains(a, "net_af_xdp0,iface=vf0") {
		t.Fatalf("args %s", a)
	}
	if len(s[0].Mounts) != 2 || strings.Join(s[0].CapAdd, ",") != "NET_ADMIN,BPF,PERFMON" || !s[0].MemlockUnlimited {
		t.Fatalf("spec %+v", s[0])
	}
}

// On Kubernetes Redis runs on another node: NFs reach it at an address over their Pod
// network, with the same login, and no socket is mounted.
func Test_Specs_with_an_NF_Redis_address_log_in_there_without_a_socket(t *testing.T) {
	cfg := testSpecConfig()
	cfg.RedisSocket, cfg.NFRedisAddr, cfg.SecretsDir = "", "redis.keel.svc:6379", t.TempDir()
	for _, s := range cfg.Specs(&pb.ChainInstance{Id: "c3/0", Vlan: 100}, testChain()) {
		if a := strings.Join(s.Args, " "); !strings.Contains(a, "--redis redis.keel.svc:6379 --tenant openfaas-fn --redis-auth-file /run/secrets/keel/redis") {
			t.Fatalf("%s: args %s", s.Name, a)
		}
		for _, m := range s.Mounts {
			if m.Target == RedisSocketIn {
				t.Fatalf("%s: mounts a Redis socket %+v", s.Name, m)
			}
		}
	}
	if !cfg.NFLogins() {
		t.Fatal("NFs reaching Redis at an address get logins of their own too")
	}
}

func Test_a_draining_instance_keeps_the_spec_of_the_version_it_runs(t *testing.T) {
	old := testChain()
	updated := testChain()
	updated.Members[1].ConfigJson = `{"external_ip":"198.18.0.2"}`
	chains := map[string]*pb.Chain{"c3": updated}
	cfg := testSpecConfig()
	draining := &pb.ChainInstance{Id: "c3/0", Chain: "c3", Vlan: 100, State: "attached", Core: 1, Draining: true, Runs: old}
	before := cfg.Specs(draining, old)[0].Labels[LabelSpec]
	if got := cfg.Specs(draining, chainOf(chains, draining))[0].Labels[LabelSpec]; got != before {
		t.Fatalf("a draining instance's spec changed with the chain's new version (%s -> %s): it would be rebuilt under its flows", before, got)
	}
	fresh := &pb.ChainInstance{Id: "c3/1", Chain: "c3", Vlan: 101}
	if chainOf(chains, fresh) != updated {
		t.Fatalf("an instance of the current version does not run the chain's current spec")
	}
}

// A chain that lists secrets gets them mounted read-only where keel-nf reads {"secret": NAME}
// from; the values are not in the spec (args, env, labels).
func Test_Specs_mount_the_chains_secrets_read_only(t *testing.T) {
	c := testSpecConfig()
	c.SecretsDir = "/run/keel/secrets"
	ch := testChain()
	in := &pb.ChainInstance{Id: "c3/1", Chain: "c3", Vlan: 101}
	for _, s := range c.Specs(in, ch) {
		for _, m := range s.Mounts {
			if m.Target == ChainSecretsIn {
				t.Fatalf("a chain without secrets mounts %v", m)
			}
		}
	}
	ch.Secrets = []string{"aes-key"}
	specs := c.Specs(in, ch)
	if !needsChainSecrets(specs) {
		t.Fatal("no chain secrets mount")
	}
	for _, s := range specs {
		var found bool
		for _, m := range s.Mounts {
			if m.Target == ChainSecretsIn {
				found = m.Source == "/run/keel/secrets/c3.1/chain" && m.ReadOnly && m.Dir
			}
		}
		if !found {
			t.Errorf("%s: mounts %+v, want /run/keel/secrets/c3.1/chain read-only at %s", s.Name, s.Mounts, ChainSecretsIn)
		}
	}
}
