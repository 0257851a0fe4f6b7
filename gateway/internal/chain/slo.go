// SPDX-License-Identifier: Apache-2.0

package chain

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// SLO is a chain's service-level objective: a p99 latency bound and a throughput range.
type SLO struct {
	P99us    float64 `json:"p99_us"`     // 0: no latency bound
	TMinGbps float64 `json:"t_min_gbps"` // guaranteed rate
	TMaxGbps float64 `json:"t_max_gbps"` // 0: unbounded
}

var (
	rateRe = regexp.MustCompile(`^([0-9]*\.?[0-9]+)([kKmMgGtT]?)bps$`)
	timeRe = regexp.MustCompile(`^([0-9]*\.?[0-9]+)(ns|us|µs|ms|s)$`)
)

var rateScale = map[string]float64{"": 1e-9, "k": 1e-6, "m": 1e-3, "g": 1, "t": 1e3}
var timeScale = map[string]float64{"ns": 1e-3, "us": 1, "µs": 1, "ms": 1e3, "s": 1e6}

// ParseSLO parses `p99=100us,t_min=1Gbps,t_max=10Gbps` (any subset, t_min defaults to 0);
// the error names the key and what is wrong with it.
func ParseSLO(text string) (SLO, error) {
	var s SLO
	seen := map[string]bool{}
	if strings.TrimSpace(text) == "" {
		return s, fmt.Errorf("empty SLO (expected e.g. p99=100us,t_min=1Gbps,t_max=10Gbps)")
	}
	for _, item := range strings.Split(text, ",") {
		key, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if !ok || key == "" || val == "" {
			return s, fmt.Errorf("%q: expected KEY=VALUE (keys p99, t_min, t_max)", strings.TrimSpace(item))
		}
		if seen[key] {
			return s, fmt.Errorf("%s is given twice", key)
		}
		seen[key] = true
		switch key {
		case "p99":
			m := timeRe.FindStringSubmatch(val)
			if m == nil {
				return s, fmt.Errorf("p99 %q: expected a delay like 100us", val)
			}
			v, _ := strconv.ParseFloat(m[1], 64)
			if v <= 0 {
				return s, fmt.Errorf("p99 %q: must be positive", val)
			}
			s.P99us = v * timeScale[m[2]]
		case "t_min", "t_max":
			m := rateRe.FindStringSubmatch(val)
			if m == nil {
				return s, fmt.Errorf("%s %q: expected a rate like 1Gbps", key, val)
			}
			v, _ := strconv.ParseFloat(m[1], 64)
			v *= rateScale[strings.ToLower(m[2])]
			if key == "t_min" {
				s.TMinGbps = v
			} else {
				if v <= 0 {
					return s, fmt.Errorf("t_max %q: must be positive", val)
				}
				s.TMaxGbps = v
			}
		default:
			return s, fmt.Errorf("unknown key %q (expected p99, t_min, t_max)", key)
		}
	}
	if s.TMaxGbps > 0 && s.TMaxGbps < s.TMinGbps {
		return s, fmt.Errorf("t_max (%g Gbps) is below t_min (%g Gbps)", s.TMaxGbps, s.TMinGbps)
	}
	return s, nil
}

// binding renders the SLO as the chain language's binding dict.
func (s SLO) binding() string {
	parts := []string{fmt.Sprintf("'t_min': '%sGbps'", num(s.TMinGbps))}
	if s.TMaxGbps > 0 && !math.IsInf(s.TMaxGbps, 1) {
		parts = append(parts, fmt.Sprintf("'t_max': '%sGbps'", num(s.TMaxGbps)))
	}
	if s.P99us > 0 {
		parts = append(parts, fmt.Sprintf("'d_max': '%sus'", num(s.P99us)))
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

func num(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// TMinText renders t_min for a message: 1Gbps, 10Mbps, 0bps.
func (s SLO) TMinText() string {
	for _, u := range []struct {
		unit  string
		scale float64
	}{{"Tbps", 1e3}, {"Gbps", 1}, {"Mbps", 1e-3}, {"kbps", 1e-6}} {
		if s.TMinGbps >= u.scale {
			return strconv.FormatFloat(s.TMinGbps/u.scale, 'g', 6, 64) + u.unit
		}
	}
	return num(s.TMinGbps*1e9) + "bps"
}
