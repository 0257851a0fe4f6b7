// SPDX-License-Identifier: Apache-2.0

package xdp

import (
	"fmt"
	"strings"
)

// ParseChain reads "NAME[=JSON] -> NAME[=JSON] ...": keel-chain's --nf NAME=JSON items
// joined by "->" in chain order. An arrow inside a JSON string does not split.
func ParseChain(expr string) ([]Spec, error) {
	var parts []string
	depth, inString, escaped, start := 0, false, false, 0
	for i := 0; i < len(expr); i++ {
		ch := expr[i]
		switch {
		case inString:
			if escaped {
				escaped = false
			} else if ch == '\\' {
				escaped = true
			} else if ch == '"' {
				inString = false
			}
		case ch == '"':
			inString = true
		case ch == '{' || ch == '[':
			depth++
		case ch == '}' || ch == ']':
			depth--
		case ch == '-' && depth == 0 && i+1 < len(expr) && expr[i+1] == '>':
			parts = append(parts, expr[start:i])
			start = i + 2
			i++
		}
	}
	parts = append(parts, expr[start:])
	specs := make([]Spec, 0, len(parts))
	for i, p := range parts {
		name, config, _ := strings.Cut(strings.TrimSpace(p), "=")
		name = strings.TrimSpace(name)
		if name == "" {
			return nil, fmt.Errorf("chain item #%d is empty (expected NAME or NAME=JSON)", i+1)
		}
		if _, ok := kinds[name]; !ok {
			return nil, fmt.Errorf("chain item #%d: %s does not run in XDP (these do: %s)", i+1, name, strings.Join(Names(), ", "))
		}
		specs = append(specs, Spec{NF: name, Config: strings.TrimSpace(config)})
	}
	return specs, nil
}
