// SPDX-License-Identifier: Apache-2.0

package chain

import (
	"strings"
	"testing"

	"github.com/openfaas/faas-provider/types"
)

func Test_ParseMemory_reads_docker_and_kubernetes_sizes(t *testing.T) {
	for in, want := range map[string]int64{"128m": 128 << 20, "128Mi": 128 << 20, "1Gi": 1 << 30, "500M": 500e6, "8388608": 8 << 20} {
		got, err := ParseMemory(in)
		if err != nil || got != want {
			t.Errorf("ParseMemory(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"lots", "-1m", "1k", "12Q"} {
		if _, err := ParseMemory(in); err == nil {
			t.Errorf("ParseMemory(%q) accepted", in)
		}
	}
}

func Test_ApplyDeployment_names_the_bad_limit(t *testing.T) {
	c := &Chain{}
	err := c.ApplyDeployment(&types.FunctionDeployment{Limits: &types.FunctionResources{Memory: "lots"}})
	if err == nil || !strings.HasPrefix(err.Error(), "limits.memory: ") {
		t.Fatalf("got %v", err)
	}
	if err := c.ApplyDeployment(&types.FunctionDeployment{Namespace: "t1", Limits: &types.FunctionResources{Memory: "64Mi", CPU: "500m"}}); err != nil {
		t.Fatal(err)
	}
	if c.Tenant != "t1" || c.MemoryBytes != 64<<20 || c.CPUs != 0.5 {
		t.Fatalf("got %+v", c)
	}
}
