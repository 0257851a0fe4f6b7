// SPDX-License-Identifier: Apache-2.0

package xdp

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// objects finds build/xdp for tests (make build compiles it) and skips where loading is not
// allowed.
func objects(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loading XDP programs needs root (CAP_BPF, CAP_NET_ADMIN)")
	}
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(filepath.Dir(file)), "build", "xdp")
	if d := os.Getenv("KEEL_XDP_OBJECTS"); d != "" {
		dir = d
	}
	if _, err := os.Stat(filepath.Join(dir, "rx.o")); err != nil {
		t.Fatalf("%s has no compiled XDP NFs: run make build", dir)
	}
	return dir
}

// frame is an Ethernet/IPv4/UDP frame 198.18.0.1:1000 -> dst:5001 with a correct IPv4 checksum.
func frame(dst [4]byte, ttl byte) []byte {
	f := make([]byte, 14+20+8+6)
	copy(f, []byte{2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0})
	ip := f[14:]
	ip[0], ip[8], ip[9] = 0x45, ttl, 17
	binary.BigEndian.PutUint16(ip[2:], 34)
	copy(ip[12:], []byte{198, 18, 0, 1})
	copy(ip[16:], dst[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	sum = sum&0xffff + sum>>16
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	binary.BigEndian.PutUint16(ip[20:], 1000)
	binary.BigEndian.PutUint16(ip[22:], 5001)
	binary.BigEndian.PutUint16(ip[24:], 14)
	return f
}

var configs = map[string]string{
	"macswap":  `{}`,
	"detunnel": `{}`,
	"tunnel":   `{"vlan":7}`,
	"acl":      `{"rules":[{"dst_ip":"198.19.0.0/16","proto":"udp","dst_port":"5000-5010"}]}`,
	"ipv4fwd":  `{"routes":[{"prefix":"198.19.0.0/16","dst_mac":"02:00:00:00:00:03","port":1}]}`,
	"lb":       `{"backends":["198.19.9.1","198.19.9.2"]}`,
	"chacha":   `{"key":"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f","nonce":"000000000000004a00000000"}`,
}

func Test_Load_every_nf_passes_the_kernel_verifier(t *testing.T) {
	dir := objects(t)
	for _, nf := range Names() {
		c, err := Load([]Spec{{NF: nf, Config: configs[nf]}}, Options{Objects: dir, Exit: ExitPass})
		if err != nil {
			t.Fatalf("%s: %v", nf, err)
		}
		v, _, err := c.Run(frame([4]byte{198, 19, 0, 1}, 64))
		c.Close()
		if err != nil || v != ExitPass {
			t.Errorf("%s: verdict %d, %v; want XDP_PASS", nf, v, err)
		}
	}
	if len(Names()) != 7 {
		t.Errorf("XDP NFs: %v", Names())
	}
}

func Test_Load_refuses_what_keel_nf_refuses(t *testing.T) {
	for _, tc := range []struct{ nf, config, want string }{
		{"acl", `{"rules":[{"dst_ip":"198.18.0.0/40"}]}`, "acl.rules[0].dst_ip: '198.18.0.0/40' is not an IPv4 CIDR"},
		{"acl", `{"rules":[{"dst_port":80,"proto":"icmp"}]}`, "acl.rules[0].proto: port fields need proto tcp or udp, got 1"},
		{"acl", `{"rules":[{"src_port":"9-3","proto":"tcp"}]}`, "acl.rules[0].src_port: '9-3' is not a port range"},
		{"acl", `{}`, "acl.rules: missing"},
		{"macswap", `{"x":1}`, "macswap.x: unknown field"},
		{"tunnel", `{"vlan":4096}`, "tunnel.vlan: 4096 is out of range 0..4095"},
		{"ipv4fwd", `{"routes":[{"prefix":"10.0.0.0/8","dst_mac":"02:00:00:00:00:01","port":1},` +
			`{"prefix":"10.1.0.0/8","dst_mac":"02:00:00:00:00:01","port":1}]}`, "ipv4fwd.routes[1].prefix: '10.1.0.0/8' is already routed by ipv4fwd.routes[0]"},
		{"ipv4fwd", `{"routes":[{"prefix":"10.0.0.0/8","dst_mac":"02:00:00:00:01","port":1}]}`, "is not a MAC address"},
		{"lb", `{"backends":[]}`, "lb.backends: needs at least one backend"},
		{"lb", `{"backends":["1.2.3"]}`, "lb.backends[0]: '1.2.3' is not an IPv4 address"},
		{"nat", `{}`, "nat does not run in XDP"},
		{"chacha", `{"key":"00","nonce":"000000000000004a00000000"}`, "chacha.key: expected 64 hex digits, got 2"},
		{"chacha", `{"key":"000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f","nonce":"00000000000000zz00000000"}`, "chacha.nonce: 'z' is not a hex digit"},
	} {
		err := Validate(tc.nf, tc.config)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: %v, want %q", tc.nf, tc.config, err, tc.want)
		}
	}
}

func Test_ParseChain_splits_on_arrows_outside_json(t *testing.T) {
	specs, err := ParseChain(`acl={"rules":[{"dst_ip":"198.18.0.0/15"}]} -> tunnel={"vlan":7}->macswap`)
	if err != nil {
		t.Fatal(err)
	}
	want := []Spec{{"acl", `{"rules":[{"dst_ip":"198.18.0.0/15"}]}`}, {"tunnel", `{"vlan":7}`}, {"macswap", ""}}
	if len(specs) != 3 || specs[0] != want[0] || specs[1] != want[1] || specs[2] != want[2] {
		t.Errorf("got %+v", specs)
	}
	if _, err := ParseChain("macswap -> -> acl"); err == nil || !strings.Contains(err.Error(), "#2 is empty") {
		t.Errorf("empty item: %v", err)
	}
}

func Test_Reconfigure_changes_tables_in_place(t *testing.T) {
	dir := objects(t)
	c, err := Load([]Spec{{"macswap", ""}, {"ipv4fwd", configs["ipv4fwd"]}}, Options{Objects: dir, Exit: ExitPass})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	entry := c.Entry()
	if v, out, _ := c.Run(frame([4]byte{198, 19, 0, 1}, 64)); v != ExitPass || out[5] != 3 {
		t.Fatalf("before: verdict %d, dst MAC %x", v, out[:6])
	}
	err = c.Reconfigure([]Spec{{"macswap", ""}, {"ipv4fwd", `{"routes":[{"prefix":"198.19.0.0/24","dst_mac":"02:00:00:00:00:09","port":4}]}`}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Entry() != entry {
		t.Error("Reconfigure replaced the entry program")
	}
	if v, out, _ := c.Run(frame([4]byte{198, 19, 0, 1}, 64)); v != ExitPass || out[5] != 9 {
		t.Errorf("after: verdict %d, dst MAC %x; want 02:00:00:00:00:09", v, out[:6])
	}
	// The /16 of the old configuration is gone: 198.19.1.1 has no route now.
	if v, _, _ := c.Run(frame([4]byte{198, 19, 1, 1}, 64)); v != 1 {
		t.Errorf("a prefix the new configuration dropped still routes (verdict %d)", v)
	}
	if err := c.Reconfigure([]Spec{{"macswap", ""}, {"lb", configs["lb"]}}); err == nil {
		t.Error("Reconfigure accepted a different NF")
	}
	cts, err := c.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if cts[0].NF != "rx" || cts[0].In != 3 || cts[2].NF != "ipv4fwd" || cts[2].Own["no_route_drops"] != 1 || cts[2].Out != 2 {
		t.Errorf("counters: %+v", cts)
	}
}

func Test_Load_with_the_same_pins_keeps_flow_state_and_counters(t *testing.T) {
	dir := objects(t)
	pins := t.TempDir()
	if err := unix.Mount("bpf", pins, "bpf", 0, ""); err != nil {
		t.Skipf("cannot mount a bpffs: %v", err)
	}
	defer unix.Unmount(pins, 0)
	specs := []Spec{{"lb", configs["lb"]}}
	first, err := Load(specs, Options{Objects: dir, Exit: ExitPass, PinDir: pins})
	if err != nil {
		t.Fatal(err)
	}
	_, out1, _ := first.Run(frame([4]byte{198, 19, 0, 1}, 64))
	first.Close() // the agent exits; the pinned maps stay

	// A restarted agent whose configuration lists the backends the other way round: the flow
	// keeps the backend it has, as keel-nf's LB keeps it through its FlowState.
	second, err := Load([]Spec{{"lb", `{"backends":["198.19.9.2","198.19.9.1"]}`}}, Options{Objects: dir, Exit: ExitPass, PinDir: pins})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	_, out2, _ := second.Run(frame([4]byte{198, 19, 0, 1}, 64))
	if !bytes.Equal(out1, out2) {
		t.Errorf("the flow changed backend across the reload: %x vs %x", out1[30:34], out2[30:34])
	}
	cts, _ := second.Counters()
	if cts[1].Own["new_flows"] != 1 || cts[1].In != 2 {
		t.Errorf("counters did not survive the reload: %+v", cts[1])
	}
	if _, err := os.Stat(filepath.Join(pins, "0-lb", "lb_flows")); err != nil {
		t.Errorf("lb_flows is not pinned: %v", err)
	}
}
