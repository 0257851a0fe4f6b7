// SPDX-License-Identifier: Apache-2.0

package vf

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// fakeKubelet serves the PodResources API's Get from a fixed table of pods (unit test:
// the real kubelet's answer is exercised by make test-k8s).
type fakeKubelet struct {
	podresources.UnimplementedPodResourcesListerServer
	pods map[string]*podresources.PodResources // by NAMESPACE/NAME
}

func (k *fakeKubelet) Get(_ context.Context, r *podresources.GetPodResourcesRequest) (*podresources.GetPodResourcesResponse, error) {
	return &podresources.GetPodResourcesResponse{PodResources: k.pods[r.GetPodNamespace()+"/"+r.GetPodName()]}, nil
}

func serveKubelet(t *testing.T, k *fakeKubelet) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	l, err := net.Listen("unix", sock)
	must(t, err)
	s := grpc.NewServer()
	podresources.RegisterPodResourcesListerServer(s, k)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return sock
}

func podWith(name, container, resource string, ids ...string) *podresources.PodResources {
	return &podresources.PodResources{Name: name, Namespace: "openfaas-fn", Containers: []*podresources.ContainerResources{
		{Name: "nf-1"},
		{Name: container, Devices: []*podresources.ContainerDevices{
			{ResourceName: "example.com/other", DeviceIds: []string{"0000:00:01.1"}},
			{ResourceName: resource, DeviceIds: ids},
		}},
	}}
}

func Test_DevicePlugin_tags_the_VF_the_kubelet_gave_position_0(t *testing.T) {
	sys := fakeSysfs(t, "ens1f0", 3, 0)
	const res = "intel.com/sriov_netdevice"
	sock := serveKubelet(t, &fakeKubelet{pods: map[string]*podresources.PodResources{
		"openfaas-fn/keel-c-0": podWith("keel-c-0", "nf-0", res, "0000:00:01.3"),
	}})
	f := &fakeRunner{links: `[{"ifname":"ens1f0","vfinfo_list":[{"vf":0},{"vf":1},{"vf":2}]}]`}
	d := &DevicePlugin{SRIOV: SRIOV{PF: "ens1f0", Sys: sys, Run: f.run}, Resource: res, Namespace: "openfaas-fn", Socket: sock}
	must(t, d.PlugPod(context.Background(), "c/0", 300, 77, "keel-c-0", "nf-0"))
	joined := strings.Join(f.calls, "\n")
	// VF 2 (0000:00:01.3), not the free VF 0 that the agent would have picked itself.
	for _, want := range []string{"ip link set ens1f0 vf 2 vlan 300", "ip link set enp0s1f3 netns 77",
		"nsenter -t 77 -n -- ip link set enp0s1f3 name vf0 up"} {
		if !strings.Contains(joined, want) {
			t.Errorf("missing %q in\n%s", want, joined)
		}
	}
	if strings.Contains(joined, "vf 0 vlan") || strings.Contains(joined, "vf 1 vlan") {
		t.Errorf("another VF was tagged:\n%s", joined)
	}
	var _ PodPlugger = d
	if err := d.Plug(context.Background(), "c/0", 300, 77); err == nil || !strings.Contains(err.Error(), "kubelet picks") {
		t.Errorf("Plug without the Pod: %v", err)
	}
}

func Test_DevicePlugin_refuses_what_the_kubelet_did_not_give(t *testing.T) {
	sys := fakeSysfs(t, "ens1f0", 2, 0)
	const res = "intel.com/sriov_netdevice"
	sock := serveKubelet(t, &fakeKubelet{pods: map[string]*podresources.PodResources{
		"openfaas-fn/none":    podWith("none", "nf-0", res),
		"openfaas-fn/two":     podWith("two", "nf-0", res, "0000:00:01.1", "0000:00:01.2"),
		"openfaas-fn/foreign": podWith("foreign", "nf-0", res, "0000:09:00.1"),
		"openfaas-fn/taken":   podWith("taken", "nf-0", res, "0000:00:01.1"),
	}})
	for pod, want := range map[string]string{
		"none":    "0 devices of intel.com/sriov_netdevice",
		"two":     "2 devices",
		"foreign": "not a VF of PF ens1f0",
		"taken":   "already carries VLAN 100",
		"missing": "0 devices",
	} {
		f := &fakeRunner{links: `[{"ifname":"ens1f0","vfinfo_list":[{"vf":0,"vlan_list":[{"vlan":100}]},{"vf":1}]}]`}
		d := &DevicePlugin{SRIOV: SRIOV{PF: "ens1f0", Sys: sys, Run: f.run}, Resource: res, Namespace: "openfaas-fn", Socket: sock}
		err := d.PlugPod(context.Background(), "c/1", 200, 77, pod, "nf-0")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("pod %s: error %v, want one saying %q", pod, err, want)
		}
		if strings.Contains(strings.Join(f.calls, "\n"), "vlan 200") {
			t.Errorf("pod %s: a VF was tagged: %v", pod, f.calls)
		}
	}
	d := &DevicePlugin{SRIOV: SRIOV{PF: "ens1f0", Sys: sys, Run: (&fakeRunner{}).run}, Resource: res,
		Namespace: "openfaas-fn", Socket: filepath.Join(t.TempDir(), "no.sock")}
	if err := d.PlugPod(context.Background(), "c/1", 200, 77, "x", "nf-0"); err == nil || !strings.Contains(err.Error(), "no.sock") {
		t.Errorf("no kubelet: %v", err)
	}
}
