// SPDX-License-Identifier: Apache-2.0

package main

import "testing"

func Test_the_agent_advertises_an_address_the_gateway_can_reach(t *testing.T) {
	for _, c := range []struct{ listen, advertise, want string }{
		{"127.0.0.1:9101", "", "127.0.0.1:9101"},
		{"0.0.0.0:9101", "198.19.0.1:9101", "198.19.0.1:9101"},
		{"[::]:9101", "worker-1.example:9101", "worker-1.example:9101"},
	} {
		got, err := advertised(c.listen, c.advertise)
		if err != nil || got != c.want {
			t.Errorf("listen %s advertise %q: %q %v, want %s", c.listen, c.advertise, got, err, c.want)
		}
	}
	// A wildcard reaches nothing from the gateway's Pod: the agent says so at start.
	for _, c := range []struct{ listen, advertise string }{
		{"0.0.0.0:9101", ""}, {":9101", ""}, {"[::]:9101", ""},
		{"0.0.0.0:9101", "0.0.0.0:9101"}, {"127.0.0.1:9101", "nohostport"},
	} {
		if got, err := advertised(c.listen, c.advertise); err == nil {
			t.Errorf("listen %s advertise %q: %q accepted", c.listen, c.advertise, got)
		}
	}
}

func Test_the_NF_socket_defaults_to_keel_coopscheds_own(t *testing.T) {
	for admin, want := range map[string]string{
		"/run/keel/coopsched.sock": "/run/keel/coopsched-nf.sock",
		"/tmp/cs":                  "/tmp/cs-nf",
		"/tmp/.sock":               "/tmp/.sock-nf",
	} {
		if got := nfSocketOf(admin); got != want {
			t.Errorf("%s: %s, want %s", admin, got, want)
		}
	}
}
