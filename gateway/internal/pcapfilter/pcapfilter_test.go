// SPDX-License-Identifier: Apache-2.0

package pcapfilter

import (
	"net/netip"
	"strings"
	"testing"
)

func Test_Compile_rejects_syntax_error_with_libpcap_message(t *testing.T) {
	_, err := Compile("dst net 198.18.0.0/15 andd tcp")
	if err == nil || !strings.Contains(err.Error(), "syntax error") {
		t.Fatalf("want a syntax error, got %v", err)
	}
	if _, err := Compile("dst net 198.18.1.0/33"); err == nil {
		t.Fatal("want an error for a /33 mask")
	}
}

func Test_Match_classifies_five_tuples(t *testing.T) {
	f, err := Compile("dst net 198.18.2.0/24 and tcp dst port 80")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		flow Flow
		want bool
	}{
		{Flow{netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.2.7"), 1234, 80, 6}, true},
		{Flow{netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.2.7"), 1234, 81, 6}, false},
		{Flow{netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.2.7"), 1234, 80, 17}, false},
		{Flow{netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.18.3.7"), 1234, 80, 6}, false},
	}
	for _, c := range cases {
		got, err := f.Match(c.flow)
		if err != nil || got != c.want {
			t.Errorf("%+v: got %v, %v; want %v", c.flow, got, err, c.want)
		}
	}
}

func Test_Match_rejects_ipv6(t *testing.T) {
	f, _ := Compile("ip6")
	if _, err := f.Match(Flow{Src: netip.MustParseAddr("::1"), Dst: netip.MustParseAddr("::1"), Proto: 17}); err == nil {
		t.Fatal("want an error for IPv6")
	}
}

func Test_Overlap_finds_a_flow_both_filters_match(t *testing.T) {
	cases := []struct {
		a, b    string
		overlap bool
	}{
		{"dst net 198.18.3.0/24", "dst net 198.18.3.0/24", true},
		{"dst net 198.18.3.0/24", "dst host 198.18.3.77", true},
		{"dst net 198.18.0.0/15", "dst net 198.18.3.0/24 and udp", true},
		{"dst net 198.18.2.0/24 and tcp dst port 80", "dst net 198.18.2.0/24 and tcp dst port 443", false},
		{"dst net 198.18.2.0/24 and tcp dst portrange 1000-2000", "dst net 198.18.2.0/24 and tcp dst port 2000", true},
		{"dst net 198.18.1.0/24", "dst net 198.18.2.0/24", false},
		{"dst net 198.18.1.0/24", "dst net 198.18.1.0/24 and not udp", true},
		{"dst net 198.18.1.0/24 and udp", "dst net 198.18.1.0/24 and tcp", false},
		{"src net 198.18.0.0/24", "dst net 198.18.5.0/24", true},
		{"not dst net 198.18.1.0/24", "dst net 198.18.2.0/24", true},
	}
	for _, c := range cases {
		a, err := Compile(c.a)
		if err != nil {
			t.Fatal(err)
		}
		b, err := Compile(c.b)
		if err != nil {
			t.Fatal(err)
		}
		f, ok := Overlap(a, b)
		if ok != c.overlap {
			t.Errorf("%q / %q: overlap %v (%v), want %v", c.a, c.b, ok, f, c.overlap)
			continue
		}
		if ok { // the witness really matches both
			ma, _ := a.Match(f)
			mb, _ := b.Match(f)
			if !ma || !mb {
				t.Errorf("%q / %q: witness %v does not match both", c.a, c.b, f)
			}
		}
	}
}
