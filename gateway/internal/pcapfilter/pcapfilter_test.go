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
