// SPDX-License-Identifier: Apache-2.0

package vf

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	podresources "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DefaultPodResourcesSocket is where the kubelet serves its PodResources API.
const DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// PodPlugger is a Provider whose VF the kubelet chooses (a device plugin hands it to the
// Pod), so plugging it needs to know the Pod and container of position 0, not only its pid.
type PodPlugger interface {
	PlugPod(ctx context.Context, instance string, vlan uint32, pid int, pod, container string) error
}

// DevicePlugin is SR-IOV under Kubernetes with an SR-IOV device plugin: position 0's
// container requests one Resource (e.g. intel.com/sriov_netdevice) and the kubelet, not
// the agent, picks which VF of the PF it gets. The agent asks the kubelet which one
// (PodResources Get over Socket: the device ids are the VFs' PCI addresses), tags it with
// the instance's VLAN on the PF, and moves its netdev into position 0's netns as vf0 when it
// is still in the node's (a VF bound to vfio-pci has none; DPDK opens it by PCI address).
// The kubelet's answer is what counts: nothing the NF's process could write (its
// environment, its files) chooses which VF gets which tenant's VLAN.
type DevicePlugin struct {
	SRIOV
	Resource  string
	Namespace string // the NF Pods' namespace
	Socket    string // the kubelet's pod-resources socket (DefaultPodResourcesSocket)
}

// Plug cannot know the VF from a pid alone.
func (d *DevicePlugin) Plug(_ context.Context, instance string, _ uint32, _ int) error {
	return fmt.Errorf("VF of %s: with the device plugin's %s the kubelet picks the VF: the agent must name position 0's Pod (Kubernetes runtime)", instance, d.Resource)
}

// PlugPod tags the VF the kubelet gave container of pod with vlan and moves its netdev into
// pid's netns as vf0.
func (d *DevicePlugin) PlugPod(ctx context.Context, instance string, vlan uint32, pid int, pod, container string) error {
	namespace := d.Namespace
	if err := CheckVLAN(vlan); err != nil {
		return err
	}
	ids, err := d.devices(ctx, namespace, pod, container)
	if err != nil {
		return fmt.Errorf("VF of %s: %w", instance, err)
	}
	if len(ids) != 1 {
		return fmt.Errorf("VF of %s: the kubelet gave %s/%s container %s %d devices of %s (%v), want 1",
			instance, namespace, pod, container, len(ids), d.Resource, ids)
	}
	_, _, vfs, vlans, err := d.state(ctx)
	if err != nil {
		return err
	}
	var v *SysVF
	for i := range vfs {
		if vfs[i].PCI == ids[0] {
			v = &vfs[i]
		}
	}
	if v == nil {
		return fmt.Errorf("VF of %s: device %s that the kubelet gave is not a VF of PF %s", instance, ids[0], d.PF)
	}
	if old := vlans[v.Index]; old != 0 && old != vlan {
		return fmt.Errorf("VF of %s: VF %d (%s) already carries VLAN %d", instance, v.Index, v.PCI, old)
	}
	return d.plug(ctx, instance, *v, vlan, pid)
}

// devices are the ids of Resource's devices that the kubelet allocated to the container.
func (d *DevicePlugin) devices(ctx context.Context, namespace, pod, container string) ([]string, error) {
	sock := d.Socket
	if sock == "" {
		sock = DefaultPodResourcesSocket
	}
	conn, err := grpc.NewClient("unix:"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := podresources.NewPodResourcesListerClient(conn).Get(ctx,
		&podresources.GetPodResourcesRequest{PodName: pod, PodNamespace: namespace})
	if err != nil {
		return nil, fmt.Errorf("kubelet pod resources (%s) of %s/%s: %w", sock, namespace, pod, err)
	}
	var ids []string
	for _, c := range resp.GetPodResources().GetContainers() {
		if c.GetName() != container {
			continue
		}
		for _, dev := range c.GetDevices() {
			if dev.GetResourceName() == d.Resource {
				ids = append(ids, dev.GetDeviceIds()...)
			}
		}
	}
	return ids, nil
}

// Unplug, List and Capacity are SRIOV's: a VF belongs to an instance by its VLAN.
