// SPDX-License-Identifier: Apache-2.0

package chain

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/openfaas/faas-provider/types"
)

// DefaultTenant names the NF state of chains deployed without a namespace (OpenFaaS's own
// default namespace for functions).
const DefaultTenant = "openfaas-fn"

// ApplyDeployment copies what a worker needs from a chain's deployment onto c: the tenant
// (the function's namespace) and the per-NF-container limits (limits.memory, limits.cpu).
// A limit that does not parse is an *InvalidError naming it.
func (c *Chain) ApplyDeployment(fd *types.FunctionDeployment) error {
	c.Tenant = fd.Namespace
	if c.Tenant == "" {
		c.Tenant = DefaultTenant
	}
	c.MemoryBytes, c.CPUs = 0, 0
	if fd.Limits == nil {
		return nil
	}
	if m := strings.TrimSpace(fd.Limits.Memory); m != "" {
		b, err := ParseMemory(m)
		if err != nil {
			return invalid("limits.memory", "%v", err)
		}
		c.MemoryBytes = b
	}
	if cpu := strings.TrimSpace(fd.Limits.CPU); cpu != "" {
		v, err := ParseCPU(cpu)
		if err != nil {
			return invalid("limits.cpu", "%v", err)
		}
		c.CPUs = v
	}
	return nil
}

// ParseMemory reads a memory size as OpenFaaS users write it for Docker ("128m", "1g") or
// Kubernetes ("128Mi", "1Gi", "500M"); a bare number is bytes. At least 6 MB (Docker's
// minimum for a container).
func ParseMemory(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"k", 1 << 10}, {"K", 1000}, {"m", 1 << 20},
		{"M", 1000 * 1000}, {"g", 1 << 30}, {"G", 1000 * 1000 * 1000}, {"b", 1}, {"", 1}}
	for _, u := range units {
		if !strings.HasSuffix(s, u.suffix) {
			continue
		}
		n, err := strconv.ParseFloat(strings.TrimSuffix(s, u.suffix), 64)
		if err != nil || n <= 0 {
			break
		}
		b := int64(n * float64(u.mult))
		if b < 6<<20 {
			return 0, fmt.Errorf("%q is below the 6 MB a container needs", s)
		}
		return b, nil
	}
	return 0, fmt.Errorf("%q is not a memory size (e.g. 128Mi, 256m, 1G)", s)
}

// ParseCPU reads a CPU limit in cores ("0.5", "2") or millicores ("500m").
func ParseCPU(s string) (float64, error) {
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "m"), 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("%q is not a CPU limit (e.g. 0.5, 2 or 500m)", s)
	}
	if strings.HasSuffix(s, "m") {
		v /= 1000
	}
	return v, nil
}

// OpenFaaS's scaling labels, honoured for chains: the capacity target is flows per instance.
const (
	LabelScaleType   = "com.openfaas.scale.type"
	LabelScaleTarget = "com.openfaas.scale.target"
)

// ScaleTarget reads a chain's flows-per-instance cap from OpenFaaS's scaling labels
// (com.openfaas.scale.type=capacity, com.openfaas.scale.target=N); 0 when not set.
func ScaleTarget(labels map[string]string) (int, error) {
	target, ok := labels[LabelScaleTarget]
	if !ok {
		return 0, nil
	}
	if t := labels[LabelScaleType]; t != "capacity" {
		return 0, invalid("labels."+LabelScaleType, "%q: a chain scales by flows per instance; set %s=capacity with %s", t, LabelScaleType, LabelScaleTarget)
	}
	n, err := strconv.Atoi(strings.TrimSpace(target))
	if err != nil || n < 1 {
		return 0, invalid("labels."+LabelScaleTarget, "%q: expected a positive number of flows per instance", target)
	}
	return n, nil
}
