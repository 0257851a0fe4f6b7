// SPDX-License-Identifier: Apache-2.0

package nfcatalog

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// testCatalog holds schemas as the library's NFs declare them (KEEL_NF_ARGS).
const testCatalog = `{"version": 1, "nfs": [
 {"name": "tunnel", "help": "pushes a VLAN tag", "args": [
   {"name": "vlan", "type": "integer", "minimum": 0, "maximum": 4095, "required": true, "doc": "VLAN id"}]},
 {"name": "nat", "help": "source NAT", "args": [
   {"name": "external_ip", "type": "ipv4", "required": true, "doc": "source address"},
   {"name": "port_range", "type": "array", "required": true, "min_items": 2, "max_items": 2,
    "items": {"type": "integer", "minimum": 1, "maximum": 65535}, "doc": "[lo, hi]"}]},
 {"name": "acl", "help": "5-tuple filter", "args": [
   {"name": "rules", "type": "array", "required": true, "doc": "rules", "items": {"type": "object", "fields": [
     {"name": "src_ip", "type": "cidr", "doc": "source"}, {"name": "dst_ip", "type": "cidr", "doc": "destination"},
     {"name": "dst_port", "type": "ports", "doc": "port"}, {"name": "proto", "type": "proto", "doc": "protocol"},
     {"name": "drop", "type": "boolean", "doc": "drop"}]}}]},
 {"name": "macswap", "help": "swaps MACs", "args": []},
 {"name": "ttlguard", "help": "drops low TTLs", "loaded_from": "/usr/lib/keel/nf/libnf.so", "args": [
   {"name": "min_ttl", "type": "integer", "minimum": 1, "maximum": 255, "default": 1, "doc": "lowest TTL"}]}]}`

func catalog(t *testing.T) *Catalog {
	t.Helper()
	c, err := Parse([]byte(testCatalog))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func config(t *testing.T, nf, args string) (string, error) {
	t.Helper()
	schema := catalog(t).Lookup(nf)
	if schema == nil {
		t.Fatalf("no NF %s", nf)
	}
	return schema.Config(nf, args)
}

func Test_Config_translates_chain_arguments_into_the_keel_nf_configuration(t *testing.T) {
	cases := map[string][2]string{
		"tunnel":  {`{"vlan": 7}`, `{"vlan":7}`},
		"nat":     {`{"external_ip": "198.18.100.1", "port_range": [1024, 65535]}`, `{"external_ip":"198.18.100.1","port_range":[1024,65535]}`},
		"acl":     {`{"rules": [{"dst_ip": "198.18.0.0/16", "drop": false}, {"proto": "udp", "dst_port": "53-54"}]}`, `{"rules":[{"drop":false,"dst_ip":"198.18.0.0/16"},{"dst_port":"53-54","proto":"udp"}]}`},
		"macswap": {`{}`, `{}`},
	}
	for nf, c := range cases {
		got, err := config(t, nf, c[0])
		if err != nil || got != c[1] {
			t.Errorf("%s(%s): got %s, %v; want %s", nf, c[0], got, err, c[1])
		}
	}
	if got, err := config(t, "macswap", ""); err != nil || got != "{}" {
		t.Errorf("no arguments: got %s, %v", got, err)
	}
}

func Test_tenant_NF_with_its_schema(t *testing.T) {
	c := catalog(t)
	loaded := c.Loaded()
	if len(loaded) != 1 || loaded[0].Name != "ttlguard" {
		t.Fatalf("loaded %+v", loaded)
	}
	if got, err := loaded[0].Config("guard", `{"min_ttl": 10}`); err != nil || got != `{"min_ttl":10}` {
		t.Fatalf("got %s %v", got, err)
	}
}

// fakeRunner answers RunOnce like an image whose entrypoint is keel-nf --load.
type fakeRunner struct {
	stdout, stderr string
	code           int
	args           [][]string
}

func (f *fakeRunner) RunOnce(_ context.Context, image string, args []string) ([]byte, []byte, int, error) {
	f.args = append(f.args, append([]string{image}, args...))
	return []byte(f.stdout), []byte(f.stderr), f.code, nil
}

func Test_Describe_reads_the_NF_the_image_adds(t *testing.T) {
	r := &fakeRunner{stdout: testCatalog}
	nf, err := Describe(context.Background(), r, "keel/nf-ttlguard:latest", "ttlguard")
	if err != nil || nf.Name != "ttlguard" || nf.Args[0].Name != "min_ttl" {
		t.Fatalf("got %+v %v", nf, err)
	}
	if strings.Join(r.args[0], " ") != "keel/nf-ttlguard:latest --list --json" {
		t.Fatalf("ran %v", r.args)
	}
	r = &fakeRunner{stdout: `{"version":1,"nfs":[{"name":"nat","args":[]}]}`}
	if _, err := Describe(context.Background(), r, "img", "x"); err == nil || !strings.Contains(err.Error(), "adds no NF") {
		t.Fatalf("got %v", err)
	}
	r = &fakeRunner{code: 127, stderr: "exec: no such file"}
	if _, err := Describe(context.Background(), r, "img", "x"); err == nil || !strings.Contains(err.Error(), "exit status 127") {
		t.Fatalf("got %v", err)
	}
}

func Test_Image_check_reads_keel_nf_check_messages(t *testing.T) {
	r := &fakeRunner{code: 2, stderr: "keel-nf: ttlguard.min_ttl: 0 is out of range [1, 255]\n"}
	err := (&Image{Runner: r, Image: "img"}).Check(context.Background(), "guard", "ttlguard", `{"min_ttl":0}`)
	var bad *ArgError
	if !errors.As(err, &bad) || bad.NF != "guard" || bad.Arg != "min_ttl" || bad.Problem != "0 is out of range [1, 255]" {
		t.Fatalf("got %v", err)
	}
	if strings.Join(r.args[0], " ") != `img --check --nf ttlguard={"min_ttl":0}` {
		t.Fatalf("ran %v", r.args)
	}
	r = &fakeRunner{code: 0}
	if err := (&Image{Runner: r, Image: "img"}).Check(context.Background(), "guard", "ttlguard", `{}`); err != nil {
		t.Fatal(err)
	}
}

func Test_FromAnnotation(t *testing.T) {
	nf, err := FromAnnotation(`{"name": "ttlguard", "args": [{"name": "min_ttl", "type": "integer", "doc": "d"}]}`)
	if err != nil || nf.Name != "ttlguard" || nf.Args[0].Type != "integer" {
		t.Fatalf("got %+v %v", nf, err)
	}
	if _, err := FromAnnotation(`{"args": []}`); err == nil {
		t.Fatal("want an error without a name")
	}
	if _, err := FromAnnotation(`{"name": "x", "argz": []}`); err == nil {
		t.Fatal("want an error for an unknown key")
	}
}

// keelNF is the built keel-nf (make build), or "" when there is none.
func keelNF(t *testing.T) string {
	_, file, _, _ := runtime.Caller(0)
	p := filepath.Join(filepath.Dir(file), "..", "..", "..", "build", "bin", "keel-nf")
	if _, err := os.Stat(p); err != nil {
		t.Skipf("%s is not built (make build)", p)
	}
	return p
}

func Test_the_real_catalogue_and_keel_nf_check(t *testing.T) {
	bin := keelNF(t)
	ctx := context.Background()
	c, err := List(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.NFs) != 17 || len(c.Loaded()) != 0 {
		t.Fatalf("%d NFs, %d loaded", len(c.NFs), len(c.Loaded()))
	}
	nat := c.Lookup("NAT")
	cfg, err := nat.Config("nat", `{"external_ip": "198.18.100.1", "port_range": [1024, 2047]}`)
	if err != nil {
		t.Fatal(err)
	}
	local := &Local{KeelNF: bin}
	if err := local.Check(ctx, "nat", "nat", cfg); err != nil {
		t.Fatal(err)
	}
	// Each NF's state as declared next to it (KEEL_NF_STATE): whether its flows can move.
	for _, m := range []struct {
		nf, config string
		movable    bool
	}{{"nat", cfg, true}, {"lb", `{}`, true}, {"monitor", `{}`, true}, {"acl", `{}`, true},
		{"dedup", `{}`, false}, {"rededup", `{}`, false},
		{"limiter", `{"rate_bps":1,"burst_bytes":1}`, false}, {"limiter", `{"rate_bps":1,"burst_bytes":1,"per_flow":true}`, true}} {
		if got, err := c.Lookup(m.nf).Movable(m.config); err != nil || got != m.movable {
			t.Errorf("%s %s: movable %v, %v; want %v", m.nf, m.config, got, err, m.movable)
		}
	}
	// Init checks what the schema cannot: a bpf filter that does not compile
	bpf, err := c.Lookup("bpf").Config("bpf_2", `{"filters": ["tcp prot 80"]}`)
	if err != nil {
		t.Fatal(err)
	}
	err = local.Check(ctx, "bpf_2", "bpf", bpf)
	var bad *ArgError
	if !errors.As(err, &bad) || bad.NF != "bpf_2" || bad.Arg != "filters" || !strings.HasPrefix(bad.Problem, "filters[0]: 'tcp prot 80' does not compile") {
		t.Fatalf("got %v", err)
	}
	err = local.Check(ctx, "nat", "nat", `{"external_ip":"notanip","port_range":[1,2]}`)
	if !errors.As(err, &bad) || bad.Arg != "external_ip" || bad.Problem != "'notanip' is not an IPv4 address" {
		t.Fatalf("got %v", err)
	}
}

func Test_Movable_follows_the_state_declaration(t *testing.T) {
	c, err := Parse([]byte(`{"version": 1, "nfs": [
 {"name": "old", "args": []},
 {"name": "nat", "args": [], "state": {"scope": "per-flow", "doc": "mappings"}},
 {"name": "dedup", "args": [], "state": {"scope": "global", "doc": "one cache"}},
 {"name": "limiter", "args": [{"name": "per_flow", "type": "boolean", "default": false, "doc": "d"}],
  "state": {"scope": "global", "doc": "one bucket", "per_flow_if": {"per_flow": true}}},
 {"name": "odd", "args": [], "state": {"scope": "mine", "doc": "?"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []struct {
		nf, config string
		want       bool
	}{{"old", "", true}, {"nat", `{}`, true}, {"dedup", `{}`, false}, {"limiter", `{}`, false},
		{"limiter", `{"per_flow":false}`, false}, {"limiter", `{"per_flow":true}`, true}} {
		if got, err := c.Lookup(m.nf).Movable(m.config); err != nil || got != m.want {
			t.Errorf("%s %s: %v, %v; want %v", m.nf, m.config, got, err, m.want)
		}
	}
	if _, err := c.Lookup("odd").Movable(`{}`); err == nil || !strings.Contains(err.Error(), `scope "mine"`) {
		t.Errorf("got %v", err)
	}
	if _, err := c.Lookup("limiter").Movable(`[1]`); err == nil {
		t.Error("a configuration that is not an object is accepted")
	}
}
