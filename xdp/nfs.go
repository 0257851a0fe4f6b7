// SPDX-License-Identifier: Apache-2.0

package xdp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"

	"github.com/cilium/ebpf"
)

// A kind is one XDP network function of xdp/bpf/: its object file (NAME.o), its program, the
// names of its own counters (keel_stats after in, out and dropped) and how its JSON
// configuration becomes the contents of its maps. The configuration schema is the C++ NF's
// (functions/NAME/NAME.cc KEEL_NF_ARGS); parse refuses what keel-nf refuses.
type kind struct {
	program  string
	counters []string
	// parse validates a configuration and returns what writes it into the NF's maps. The
	// writes are ordered so that a running program never sees a half-written table (the
	// count of entries last).
	parse func(c cfg) (apply func(coll *ebpf.Collection) error, err error)
}

// kinds are the NFs that run on the NIC. The placer's other EBPF-marked NF, bpf, is not here:
// its filters are libpcap's classic BPF, which XDP could only run through a cBPF-to-eBPF
// translator keel does not have.
var kinds = map[string]kind{
	"macswap":  {program: "keel_macswap", parse: noArgs},
	"detunnel": {program: "keel_detunnel", parse: noArgs},
	"tunnel":   {program: "keel_tunnel", parse: parseTunnel},
	"acl":      {program: "keel_acl", parse: parseACL},
	"ipv4fwd":  {program: "keel_ipv4fwd", counters: []string{"ttl_drops", "no_route_drops"}, parse: parseIPv4Fwd},
	"lb":       {program: "keel_lb", counters: []string{"new_flows", "untracked_flows"}, parse: parseLB},
	"chacha":   {program: "keel_chacha", counters: []string{"too_long"}, parse: parseChaCha},
}

// rxKind is the entry program of every instance (xdp/bpf/rx.c).
var rxKind = kind{program: "keel_rx", counters: []string{"truncated_eth", "truncated_vlan", "bad_ipv4", "truncated_l4"}}

// Names lists the NFs keel can run in XDP, sorted.
func Names() []string {
	out := make([]string, 0, len(kinds))
	for n := range kinds {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Validate checks an NF's configuration as loading it would, without a kernel.
func Validate(nf, configJSON string) error {
	k, ok := kinds[nf]
	if !ok {
		return fmt.Errorf("%s does not run in XDP (these do: %v)", nf, Names())
	}
	c, err := parseConfig(nf, configJSON)
	if err != nil {
		return err
	}
	_, err = k.parse(c)
	return err
}

// onlyList reads a configuration whose one field, name, is a required array of at most max
// items (what names them in the error).
func onlyList(c cfg, name string, max int, what string) (cfg, []cfg, error) {
	if _, err := c.object(name); err != nil {
		return cfg{}, nil, err
	}
	f, err := c.required(name)
	if err != nil {
		return f, nil, err
	}
	items, err := f.array()
	if err != nil {
		return f, nil, err
	}
	if len(items) > max {
		return f, nil, f.fail("%d %s, the XDP %s holds at most %d", len(items), name, what, max)
	}
	return f, items, nil
}

func noArgs(c cfg) (func(*ebpf.Collection) error, error) {
	if _, err := c.object(); err != nil {
		return nil, err
	}
	return func(*ebpf.Collection) error { return nil }, nil
}

// put writes key -> value into the map name of coll.
func put(coll *ebpf.Collection, name string, key, value any) error {
	m := coll.Maps[name]
	if m == nil {
		return fmt.Errorf("object has no map %s", name)
	}
	if err := m.Put(key, value); err != nil {
		return fmt.Errorf("map %s: %w", name, err)
	}
	return nil
}

func parseTunnel(c cfg) (func(*ebpf.Collection) error, error) {
	if _, err := c.object("vlan"); err != nil {
		return nil, err
	}
	f, err := c.required("vlan")
	if err != nil {
		return nil, err
	}
	vid, err := f.integer(0, 4095)
	if err != nil {
		return nil, err
	}
	return func(coll *ebpf.Collection) error { return put(coll, "tunnel_conf", uint32(0), uint32(vid)) }, nil
}

// aclRule is struct acl_rule of xdp/bpf/acl.c.
type aclRule struct {
	SrcAddr, SrcMask, DstAddr, DstMask uint32
	SportLo, SportHi, DportLo, DportHi uint16
	ProtoVal, ProtoMask, Drop          uint32
}

const (
	aclMaxRules = 4096
	aclHasPorts = 0x100
)

func parseProto(c cfg) (uint32, error) {
	if c.isInt() {
		p, err := c.integer(0, 255)
		return uint32(p), err
	}
	if s, ok := c.v.(string); ok {
		switch s {
		case "tcp":
			return 6, nil
		case "udp":
			return 17, nil
		case "icmp":
			return 1, nil
		}
		return 0, c.fail("'%s' is not tcp, udp, icmp or a protocol number", s)
	}
	return 0, c.fail("expected \"tcp\", \"udp\", \"icmp\" or a protocol number 0-255")
}

func parseACL(c cfg) (func(*ebpf.Collection) error, error) {
	_, items, err := onlyList(c, "rules", aclMaxRules, "ACL")
	if err != nil {
		return nil, err
	}
	rules := make([]aclRule, len(items))
	for i, r := range items {
		if _, err := r.object("src_ip", "dst_ip", "src_port", "dst_port", "proto", "drop"); err != nil {
			return nil, err
		}
		rule := aclRule{SportHi: 65535, DportHi: 65535}
		for _, ip := range []struct {
			name       string
			addr, mask *uint32
		}{{"src_ip", &rule.SrcAddr, &rule.SrcMask}, {"dst_ip", &rule.DstAddr, &rule.DstMask}} {
			if v, ok := r.field(ip.name); ok {
				p, err := v.cidr()
				if err != nil {
					return nil, err
				}
				*ip.addr, *ip.mask = p.addr, p.mask()
			}
		}
		ports := false
		for _, pr := range []struct {
			name   string
			lo, hi *uint16
		}{{"src_port", &rule.SportLo, &rule.SportHi}, {"dst_port", &rule.DportLo, &rule.DportHi}} {
			if v, ok := r.field(pr.name); ok {
				if *pr.lo, *pr.hi, err = v.ports(); err != nil {
					return nil, err
				}
				ports = true
			}
		}
		if ports {
			rule.ProtoVal, rule.ProtoMask = aclHasPorts, aclHasPorts
		}
		if v, ok := r.field("proto"); ok {
			p, err := parseProto(v)
			if err != nil {
				return nil, err
			}
			if ports && p != 6 && p != 17 {
				return nil, v.fail("port fields need proto tcp or udp, got %d", p)
			}
			rule.ProtoVal |= p
			rule.ProtoMask |= 0xff
		}
		if v, ok := r.field("drop"); ok {
			d, err := v.boolean()
			if err != nil {
				return nil, err
			}
			if d {
				rule.Drop = 1
			}
		}
		rules[i] = rule
	}
	return func(coll *ebpf.Collection) error {
		for i, r := range rules {
			if err := put(coll, "acl_rules", uint32(i), r); err != nil {
				return err
			}
		}
		return put(coll, "acl_conf", uint32(0), uint32(len(rules)))
	}, nil
}

// fwdKey and fwdRoute are struct fwd_key and fwd_route of xdp/bpf/ipv4fwd.c.
type fwdKey struct {
	Prefixlen uint32
	Addr      [4]byte
}

type fwdRoute struct {
	MAC     [6]byte
	Pad     uint16
	Counter uint32
}

const (
	fwdMaxRoutes = 16384
	fwdMaxPorts  = 1024
)

func parseIPv4Fwd(c cfg) (func(*ebpf.Collection) error, error) {
	_, items, err := onlyList(c, "routes", fwdMaxRoutes, "IPv4Fwd")
	if err != nil {
		return nil, err
	}
	keys := make([]fwdKey, len(items))
	routes := make([]fwdRoute, len(items))
	seen := map[fwdKey]string{}
	portIndex := map[uint16]uint32{}
	for i, r := range items {
		if _, err := r.object("prefix", "dst_mac", "port"); err != nil {
			return nil, err
		}
		pf, err := r.required("prefix")
		if err != nil {
			return nil, err
		}
		p, err := pf.cidr()
		if err != nil {
			return nil, err
		}
		mf, err := r.required("dst_mac")
		if err != nil {
			return nil, err
		}
		mac, err := mf.mac()
		if err != nil {
			return nil, err
		}
		portf, err := r.required("port")
		if err != nil {
			return nil, err
		}
		port, err := portf.integer(0, 65535)
		if err != nil {
			return nil, err
		}
		k := fwdKey{Prefixlen: p.len}
		binary.BigEndian.PutUint32(k.Addr[:], p.addr)
		if prev, dup := seen[k]; dup {
			s, _ := pf.str()
			return nil, pf.fail("'%s' is already routed by %s", s, prev)
		}
		seen[k] = r.path
		idx, ok := portIndex[uint16(port)]
		if !ok {
			idx = uint32(len(portIndex))
			portIndex[uint16(port)] = idx
		}
		if idx >= fwdMaxPorts {
			return nil, portf.fail("more than %d distinct ports", fwdMaxPorts)
		}
		keys[i], routes[i] = k, fwdRoute{MAC: mac, Counter: idx}
	}
	return func(coll *ebpf.Collection) error {
		for i := range routes {
			if err := put(coll, "fwd_routes", uint32(i), routes[i]); err != nil {
				return err
			}
		}
		for i, k := range keys {
			if err := put(coll, "fwd_lpm", k, uint32(i)); err != nil {
				return err
			}
		}
		return deleteOthers(coll.Maps["fwd_lpm"], seen)
	}, nil
}

// deleteOthers removes the prefixes of a previous configuration that keep is without.
func deleteOthers(m *ebpf.Map, keep map[fwdKey]string) error {
	var stale []fwdKey
	var k fwdKey
	var v uint32
	it := m.Iterate()
	for it.Next(&k, &v) {
		if _, ok := keep[k]; !ok {
			stale = append(stale, k)
		}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("map fwd_lpm: %w", err)
	}
	for _, k := range stale {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("map fwd_lpm: %w", err)
		}
	}
	return nil
}

const lbMaxBackends = 1024

func parseLB(c cfg) (func(*ebpf.Collection) error, error) {
	f, items, err := onlyList(c, "backends", lbMaxBackends, "LB")
	if err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, f.fail("needs at least one backend")
	}
	backends := make([]uint32, len(items))
	for i, b := range items {
		if backends[i], err = b.ipv4(); err != nil {
			return nil, err
		}
	}
	return func(coll *ebpf.Collection) error {
		for i, b := range backends {
			if err := put(coll, "lb_backends", uint32(i), b); err != nil {
				return err
			}
		}
		return put(coll, "lb_conf", uint32(0), uint32(len(backends)))
	}, nil
}

// hexBytes is n bytes written as 2n hex digits (keel::Config::Hex).
func (c cfg) hexBytes(n int) ([]byte, error) {
	s, err := c.str()
	if err != nil {
		return nil, err
	}
	if len(s) != 2*n {
		return nil, c.fail("expected %d hex digits, got %d", 2*n, len(s))
	}
	out := make([]byte, n)
	for i := 0; i < 2*n; i++ {
		ch := s[i]
		var v byte
		switch {
		case ch >= '0' && ch <= '9':
			v = ch - '0'
		case ch >= 'a' && ch <= 'f':
			v = ch - 'a' + 10
		case ch >= 'A' && ch <= 'F':
			v = ch - 'A' + 10
		default:
			return nil, c.fail("'%c' is not a hex digit", ch)
		}
		out[i/2] = out[i/2]<<4 | v
	}
	return out, nil
}

// chachaConf is struct chacha_conf of xdp/bpf/chacha.c: the key and nonce as little-endian
// words (RFC 8439 §2.3's state).
type chachaConf struct {
	Key   [8]uint32
	Nonce [3]uint32
}

func parseChaCha(c cfg) (func(*ebpf.Collection) error, error) {
	if _, err := c.object("key", "nonce"); err != nil {
		return nil, err
	}
	var conf chachaConf
	for _, f := range []struct {
		name  string
		words []uint32
	}{{"key", conf.Key[:]}, {"nonce", conf.Nonce[:]}} {
		v, err := c.required(f.name)
		if err != nil {
			return nil, err
		}
		b, err := v.hexBytes(4 * len(f.words))
		if err != nil {
			return nil, err
		}
		for i := range f.words {
			f.words[i] = binary.LittleEndian.Uint32(b[4*i:])
		}
	}
	return func(coll *ebpf.Collection) error { return put(coll, "chacha_conf", uint32(0), conf) }, nil
}
