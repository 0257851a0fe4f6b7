// SPDX-License-Identifier: Apache-2.0

package chain

import (
	"strings"
	"testing"
)

func Test_ParseSLO_accepts_the_documented_form(t *testing.T) {
	s, err := ParseSLO("p99=100us, t_min=1Gbps,t_max=10Gbps")
	if err != nil {
		t.Fatal(err)
	}
	if s != (SLO{P99us: 100, TMinGbps: 1, TMaxGbps: 10}) {
		t.Fatalf("got %+v", s)
	}
	s, err = ParseSLO("t_min=500Mbps,p99=0.2ms")
	if err != nil || s.TMinGbps != 0.5 || s.P99us != 200 || s.TMaxGbps != 0 {
		t.Fatalf("got %+v, %v", s, err)
	}
	if got := s.binding(); got != "{'t_min': '0.5Gbps', 'd_max': '200us'}" {
		t.Fatalf("binding %s", got)
	}
}

func Test_ParseSLO_names_the_bad_key(t *testing.T) {
	cases := map[string]string{
		"":                        "empty SLO",
		"p95=100us":               `unknown key "p95"`,
		"p99=100":                 `p99 "100": expected a delay`,
		"t_min=1Gbs":              `t_min "1Gbs": expected a rate`,
		"t_min=2Gbps,t_max=1Gbps": "t_max (1 Gbps) is below t_min (2 Gbps)",
		"p99=1us,p99=2us":         "p99 is given twice",
		"p99":                     "expected KEY=VALUE",
	}
	for in, want := range cases {
		_, err := ParseSLO(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", in, err, want)
		}
	}
}
