// SPDX-License-Identifier: Apache-2.0

package xdp

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// cfg is one value of an NF's JSON configuration with its path for error messages
// ("acl.rules[0].dst_ip"), read with the rules of nf-runtime's keel::Config so that a
// configuration keel-nf accepts is accepted here with the same meaning, and one it refuses is
// refused naming the same field.
type cfg struct {
	path string
	v    any
}

// configError is a bad configuration, naming the field.
type configError struct{ msg string }

func (e *configError) Error() string { return e.msg }

func (c cfg) fail(format string, args ...any) error {
	return &configError{c.path + ": " + fmt.Sprintf(format, args...)}
}

// parseConfig reads the JSON text of an NF's configuration ("" is {}).
func parseConfig(nf, text string) (cfg, error) {
	if strings.TrimSpace(text) == "" {
		text = "{}"
	}
	d := json.NewDecoder(bytes.NewReader([]byte(text)))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return cfg{}, &configError{fmt.Sprintf("%s: bad JSON: %v", nf, err)}
	}
	if d.More() {
		return cfg{}, &configError{nf + ": bad JSON: text after the value"}
	}
	return cfg{nf, v}, nil
}

// object checks that c is an object whose keys are all in allowed.
func (c cfg) object(allowed ...string) (map[string]any, error) {
	m, ok := c.v.(map[string]any)
	if !ok {
		return nil, c.fail("expected an object")
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		known := false
		for _, a := range allowed {
			known = known || a == k
		}
		if !known {
			return nil, cfg{c.path + "." + k, nil}.fail("unknown field")
		}
	}
	return m, nil
}

// field is the member name of object c, and whether it is present.
func (c cfg) field(name string) (cfg, bool) {
	m, _ := c.v.(map[string]any)
	v, ok := m[name]
	return cfg{c.path + "." + name, v}, ok
}

// required is the member name of object c, an error naming it if it is absent.
func (c cfg) required(name string) (cfg, error) {
	f, ok := c.field(name)
	if !ok {
		return f, f.fail("missing")
	}
	return f, nil
}

func (c cfg) array() ([]cfg, error) {
	a, ok := c.v.([]any)
	if !ok {
		return nil, c.fail("expected an array")
	}
	out := make([]cfg, len(a))
	for i, v := range a {
		out[i] = cfg{fmt.Sprintf("%s[%d]", c.path, i), v}
	}
	return out, nil
}

func (c cfg) str() (string, error) {
	s, ok := c.v.(string)
	if !ok {
		return "", c.fail("expected a string")
	}
	return s, nil
}

func (c cfg) boolean() (bool, error) {
	b, ok := c.v.(bool)
	if !ok {
		return false, c.fail("expected true or false")
	}
	return b, nil
}

func (c cfg) isInt() bool {
	n, ok := c.v.(json.Number)
	if !ok {
		return false
	}
	_, err := strconv.ParseInt(string(n), 10, 64)
	return err == nil
}

// integer is an integer in [lo, hi].
func (c cfg) integer(lo, hi int64) (int64, error) {
	n, ok := c.v.(json.Number)
	i, err := strconv.ParseInt(string(n), 10, 64)
	if !ok || err != nil {
		return 0, c.fail("expected an integer")
	}
	if i < lo || i > hi {
		return 0, c.fail("%d is out of range %d..%d", i, lo, hi)
	}
	return i, nil
}

// ipv4 is an address in host byte order (keel::Config::Ipv4).
func (c cfg) ipv4() (uint32, error) {
	s, err := c.str()
	if err != nil {
		return 0, err
	}
	a, perr := netip.ParseAddr(s)
	if perr != nil || !a.Is4() {
		return 0, c.fail("'%s' is not an IPv4 address", s)
	}
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]), nil
}

// prefix is an IPv4 prefix "A.B.C.D[/N]" (no length: /32), its address masked to its length
// (keel::Config::Cidr).
type prefix struct {
	addr uint32 // host byte order
	len  uint32
}

func (p prefix) mask() uint32 {
	if p.len == 0 {
		return 0
	}
	return ^uint32(0) << (32 - p.len)
}

func (c cfg) cidr() (prefix, error) {
	s, err := c.str()
	if err != nil {
		return prefix{}, err
	}
	addr, length, slash := strings.Cut(s, "/")
	p := prefix{len: 32}
	if slash {
		n, err := strconv.ParseUint(length, 10, 8)
		if err != nil || n > 32 || strings.HasPrefix(length, "+") {
			return prefix{}, c.fail("'%s' is not an IPv4 CIDR", s)
		}
		p.len = uint32(n)
	}
	ip, err := cfg{c.path, addr}.ipv4()
	if err != nil {
		return prefix{}, c.fail("'%s' is not an IPv4 CIDR", s)
	}
	p.addr = ip & p.mask()
	return p, nil
}

var macPattern = regexp.MustCompile(`^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$`)

func (c cfg) mac() ([6]byte, error) {
	var out [6]byte
	s, err := c.str()
	if err != nil {
		return out, err
	}
	if !macPattern.MatchString(s) {
		return out, c.fail("'%s' is not a MAC address (aa:bb:cc:dd:ee:ff)", s)
	}
	for i := range out {
		b, _ := strconv.ParseUint(s[3*i:3*i+2], 16, 8)
		out[i] = byte(b)
	}
	return out, nil
}

var portsPattern = regexp.MustCompile(`^([0-9]+)-([0-9]+)$`)

// ports is a port or a range "lo-hi" (keel::Config::Ports).
func (c cfg) ports() (lo, hi uint16, err error) {
	if c.isInt() {
		p, err := c.integer(0, 65535)
		return uint16(p), uint16(p), err
	}
	s, ok := c.v.(string)
	if !ok {
		return 0, 0, c.fail("expected a port number or \"lo-hi\"")
	}
	m := portsPattern.FindStringSubmatch(s)
	if m != nil {
		l, err1 := strconv.ParseUint(m[1], 10, 32)
		h, err2 := strconv.ParseUint(m[2], 10, 32)
		if err1 == nil && err2 == nil && l <= h && h <= 65535 {
			return uint16(l), uint16(h), nil
		}
	}
	return 0, 0, c.fail("'%s' is not a port range lo-hi with lo <= hi <= 65535", s)
}
