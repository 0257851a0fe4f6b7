// SPDX-License-Identifier: Apache-2.0

package runtime

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/keel-nfv/keel/internal/dockerlog"
	"github.com/keel-nfv/keel/internal/kubelog"
)

// Pod metadata the Kubernetes backend writes.
const (
	// LabelManagedBy marks the agent's Pods (app.kubernetes.io/managed-by=keel-agent).
	LabelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "keel-agent"
	// AnnotationLabels holds each container's labels exactly as in Docker mode (JSON, by
	// container name): label values may not hold '/' (an instance id does), and a Pod's
	// labels cannot differ by container (the position does).
	AnnotationLabels = "keel.dev/container-labels"
	// BufferVolume is the Pod's chain-buffer volume: an emptyDir on 2 MB huge pages.
	BufferVolume = "pktbuf"
	// StatsVolume is the Pod's emptyDir in memory for its Scratch mount (the NFs'
	// statistics files): hugetlbfs, where the buffer is, takes no write(2).
	StatsVolume  = "stats"
	statsLimit   = 4 << 20
	hugepages2Mi = corev1.ResourceName("hugepages-2Mi")
)

// KubeConfig shapes the Pods of the Kubernetes backend.
type KubeConfig struct {
	Namespace string // where instance Pods live (openfaas-fn)
	Node      string // the agent's node: every Pod is pinned to it by node affinity
	// CPU is an instance's cpu, requested and limited at the Pod's level (spec.resources),
	// not by its containers, so the Pod is Guaranteed. Whole cores (>= 1): a kubelet with
	// the static CPU manager, the topology manager at pod scope and the
	// PodLevelResourceManagers gate gives the Pod these cores exclusively, shared by all
	// its NF containers, which coopsched time-shares on them (an sgroup). A share below
	// one core: no core of its own; the Pod runs in the kubelet's shared pool and
	// coopsched pins its NFs to the core the controller attached it to, which several
	// instances share (as under Docker). Its SCHED_FIFO time is not under the Pod's CFS
	// quota, which only bounds the NFs before coopsched attaches them.
	CPU resource.Quantity
	// MemoryBytes is each NF container's memory request and limit when the chain sets none.
	MemoryBytes int64
	// BufferBytes is the Pod's hugepages-2Mi: the chain buffer's size (a multiple of 2 MiB),
	// at the Pod's level so every container may fault the buffer's pages.
	BufferBytes int64
	// SRIOVResource is the SR-IOV device plugin's resource (e.g. intel.com/sriov_netdevice)
	// position 0 requests one of; "": the agent plugs a veth (the embedded scheme).
	SRIOVResource string
	// ProcRoot is the node's /proc (the agent's Pod runs with hostPID): where a container's
	// host pid is found from its id.
	ProcRoot string
	// StartTimeout bounds how long CreateInstance waits for position 0 to run.
	StartTimeout time.Duration
}

// Kubernetes runs each chain instance as one Pod through client-go: one container per
// server-placed NF, created together, pinned to the agent's node.
type Kubernetes struct {
	cs  kubernetes.Interface
	cfg KubeConfig
}

// NewKubernetes returns the backend for cs; it checks the configuration, not the cluster.
func NewKubernetes(cs kubernetes.Interface, cfg KubeConfig) (*Kubernetes, error) {
	switch {
	case cfg.Namespace == "":
		return nil, errors.New("kubernetes: no namespace")
	case cfg.Node == "":
		return nil, errors.New("kubernetes: no node name")
	case cfg.CPU.MilliValue() <= 0:
		return nil, fmt.Errorf("kubernetes: cpu %s per instance: want whole cores (1) or a share of one (250m)", cfg.CPU.String())
	case cfg.CPU.MilliValue() > 1000 && cfg.CPU.MilliValue()%1000 != 0:
		return nil, fmt.Errorf("kubernetes: cpu %s per instance: above one core, only whole cores (the static CPU manager gives a fraction none of its own)", cfg.CPU.String())
	case cfg.MemoryBytes <= 0:
		return nil, errors.New("kubernetes: no default memory per NF container")
	case cfg.BufferBytes <= 0 || cfg.BufferBytes%(2<<20) != 0:
		return nil, fmt.Errorf("kubernetes: chain buffer of %d bytes is not a positive multiple of 2 MiB", cfg.BufferBytes)
	}
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 2 * time.Minute
	}
	return &Kubernetes{cs: cs, cfg: cfg}, nil
}

var notDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// PodName is the Pod of the instance whose position 0 container is named name0
// (keel-<group>-0): keel-<group> made a DNS label (the Pod's hostname), with a hash of
// the original when that changed it, so two instances never share a name.
func PodName(name0 string) string {
	base := strings.TrimSuffix(name0, "-0")
	n := strings.Trim(notDNS.ReplaceAllString(strings.ToLower(base), "-"), "-")
	if n == base && len(n) <= validation.DNS1123LabelMaxLength {
		return n
	}
	if len(n) > 50 {
		n = n[:50]
	}
	return strings.Trim(n, "-") + "-" + shortHash(base)
}

func shortHash(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:4])
}

var notLabel = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// LabelValue makes v a valid label value: itself when it is one, else a sanitised prefix
// with a hash of v. List matches on it and then on the exact value in AnnotationLabels.
func LabelValue(v string) string {
	if len(validation.IsValidLabelValue(v)) == 0 {
		return v
	}
	s := notLabel.ReplaceAllString(v, "_")
	if len(s) > 50 {
		s = s[:50]
	}
	s = strings.Trim(s, "_.-")
	if s == "" {
		return shortHash(v)
	}
	return s + "_" + shortHash(v)
}

// volumeName names the hostPath volume mounted at target after its file name
// (/run/keel/coopsched.sock: coopsched-sock); the n-th such volume of the Pod.
func volumeName(target string, n int) string {
	v := strings.Trim(notDNS.ReplaceAllString(strings.ToLower(filepath.Base(target)), "-"), "-")
	if v == "" || v == BufferVolume || len(v) > 50 {
		v = "host"
	}
	return v + map[bool]string{true: "", false: "-" + strconv.Itoa(n)}[n == 0 || v != "host"]
}

// containerName is position k's container in the Pod.
func containerName(k int) string { return "nf-" + strconv.Itoa(k) }

// containerID is the runtime id of a Pod's container: POD/CONTAINER.
func containerID(pod, container string) string { return pod + "/" + container }

func splitID(id string) (pod, container string, err error) {
	pod, container, ok := strings.Cut(id, "/")
	if !ok || pod == "" || container == "" {
		return "", "", fmt.Errorf("%q is not a POD/CONTAINER id", id)
	}
	return pod, container, nil
}

// Pod returns the Pod of one instance: a container per spec with its memory, Guaranteed
// QoS from pod-level resources (the instance's whole cores, the containers' memory summed,
// the chain buffer's hugepages-2Mi) so its containers share the cores the kubelet pins the
// Pod to, the buffer on a hugepages-2Mi emptyDir, hostPath sockets, node affinity to the
// agent's node, the Docker-mode labels. No container requests cpu: one that did would get
// cores of its own out of the Pod's.
func (k *Kubernetes) Pod(specs []Spec) (*corev1.Pod, error) {
	if len(specs) == 0 {
		return nil, errors.New("an instance without containers")
	}
	name := PodName(specs[0].Name)
	podLabels := map[string]string{LabelManagedBy: managedBy}
	for key, v := range specs[0].Labels {
		podLabels[key] = LabelValue(v)
	}
	perContainer := map[string]map[string]string{}
	var volumes []corev1.Volume
	hostVolumes := map[string]string{} // host path -> volume name
	for _, s := range specs {
		for key, v := range s.Labels {
			if specs[0].Labels[key] != v {
				delete(podLabels, key) // differs by container (the position): annotation only
			}
		}
	}
	containers := make([]corev1.Container, 0, len(specs))
	scratch := false
	milli, podMem := k.cfg.CPU.MilliValue(), int64(0)
	for pos, s := range specs {
		cname := containerName(pos)
		perContainer[cname] = s.Labels
		mem := s.MemoryBytes
		if mem <= 0 {
			mem = k.cfg.MemoryBytes
		}
		podMem += mem
		if c := cpuMilli(s.CPUs, k.cfg.WholeCores()); c > milli {
			milli = c
		}
		res := corev1.ResourceList{corev1.ResourceMemory: *resource.NewQuantity(mem, resource.BinarySI)}
		if pos == 0 && k.cfg.SRIOVResource != "" {
			res[corev1.ResourceName(k.cfg.SRIOVResource)] = *resource.NewQuantity(1, resource.DecimalSI)
		}
		c := corev1.Container{
			Name:            cname,
			Image:           s.Image,
			Args:            s.Args,
			ImagePullPolicy: corev1.PullIfNotPresent,
			Resources:       corev1.ResourceRequirements{Requests: res, Limits: res.DeepCopy()},
		}
		no := false
		sc := &corev1.SecurityContext{Privileged: &no, AllowPrivilegeEscalation: &no}
		if len(s.CapAdd) > 0 {
			sc.Capabilities = &corev1.Capabilities{}
			for _, c := range s.CapAdd {
				sc.Capabilities.Add = append(sc.Capabilities.Add, corev1.Capability(c))
			}
		}
		c.SecurityContext = sc
		for _, m := range s.Mounts {
			vol := BufferVolume
			if m.Scratch {
				c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: StatsVolume, MountPath: m.Target})
				scratch = true
				continue
			}
			if !m.Instance {
				v, ok := hostVolumes[m.Source]
				if !ok {
					v = volumeName(m.Target, len(hostVolumes))
					hostVolumes[m.Source] = v
					kind := corev1.HostPathSocket
					if m.Dir {
						kind = corev1.HostPathDirectory
					}
					volumes = append(volumes, corev1.Volume{Name: v, VolumeSource: corev1.VolumeSource{
						HostPath: &corev1.HostPathVolumeSource{Path: m.Source, Type: &kind}}})
				}
				vol = v
			}
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: vol, MountPath: m.Target, ReadOnly: m.ReadOnly})
		}
		containers = append(containers, c)
	}
	volumes = append([]corev1.Volume{{Name: BufferVolume, VolumeSource: corev1.VolumeSource{
		EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumHugePagesPrefix + "2Mi"}}}}, volumes...)
	if scratch {
		limit := resource.NewQuantity(statsLimit, resource.BinarySI)
		volumes = append(volumes, corev1.Volume{Name: StatsVolume, VolumeSource: corev1.VolumeSource{
			EmptyDir: &corev1.EmptyDirVolumeSource{Medium: corev1.StorageMediumMemory, SizeLimit: limit}}})
	}
	ann, err := json.Marshal(perContainer)
	if err != nil {
		return nil, err
	}
	grace := int64(5)
	podRes := corev1.ResourceList{
		corev1.ResourceCPU:    *resource.NewMilliQuantity(milli, resource.DecimalSI),
		corev1.ResourceMemory: *resource.NewQuantity(podMem, resource.BinarySI),
		hugepages2Mi:          *resource.NewQuantity(k.cfg.BufferBytes, resource.BinarySI),
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.cfg.Namespace, Labels: podLabels,
			Annotations: map[string]string{AnnotationLabels: string(ann)}},
		Spec: corev1.PodSpec{
			Resources:                     &corev1.ResourceRequirements{Requests: podRes, Limits: podRes.DeepCopy()},
			Containers:                    containers,
			Volumes:                       volumes,
			RestartPolicy:                 corev1.RestartPolicyNever, // the agent rebuilds, as under Docker
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  new(bool),
			EnableServiceLinks:            new(bool),
			Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
					NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
						Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{k.cfg.Node}}}}}}}},
		},
	}, nil
}

// cpuMilli is a chain's cpu limit in millicores for a Pod of whole cores (rounded up to
// a core) or of a share: rounded up to a millicore and kept below one core, since a Pod of
// whole cores would take its core from the shared pool that the instances side by side on
// coopsched's core run in.
func cpuMilli(cpus float64, whole bool) int64 {
	m := int64(math.Ceil(cpus * 1000))
	if whole {
		return (m + 999) / 1000 * 1000
	}
	return min(m, 999)
}

// WholeCores says whether an instance's Pod gets cores of its own (CPU of one core or
// more), which the kubelet picks; else it has a share of the kubelet's shared pool.
func (c KubeConfig) WholeCores() bool { return c.CPU.MilliValue() >= 1000 }

func (k *Kubernetes) selector(match map[string]string) string {
	sel := labels.Set{LabelManagedBy: managedBy}
	for key, v := range match {
		sel[key] = LabelValue(v)
	}
	return sel.AsSelector().String()
}

// containerLabels returns the Docker-mode labels of each container of p.
func containerLabels(p *corev1.Pod) map[string]map[string]string {
	var m map[string]map[string]string
	if err := json.Unmarshal([]byte(p.Annotations[AnnotationLabels]), &m); err != nil {
		return nil
	}
	return m
}

func statusOf(p *corev1.Pod, cname string) *corev1.ContainerStatus {
	for i := range p.Status.ContainerStatuses {
		if p.Status.ContainerStatuses[i].Name == cname {
			return &p.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// containersOf lists p's containers that carry every label in match, without pids.
func containersOf(p *corev1.Pod, match map[string]string) []Container {
	all := containerLabels(p)
	var out []Container
	for _, c := range p.Spec.Containers {
		l := all[c.Name]
		ok := true
		for key, v := range match {
			ok = ok && l[key] == v
		}
		if !ok {
			continue
		}
		rc := Container{ID: containerID(p.Name, c.Name), Name: p.Name + "." + c.Name, Labels: l,
			Created: p.CreationTimestamp.Time, State: "created"}
		fill(&rc, p, statusOf(p, c.Name))
		out = append(out, rc)
	}
	return out
}

// fill sets a container's state from its status (nil: not yet reported by the kubelet).
func fill(c *Container, p *corev1.Pod, st *corev1.ContainerStatus) {
	if p.DeletionTimestamp != nil {
		c.State, c.Error = "removing", "its Pod is being deleted"
		return
	}
	if st == nil {
		if p.Status.Phase == corev1.PodFailed {
			c.State, c.Error = "dead", p.Status.Reason+": "+p.Status.Message
		}
		return
	}
	switch {
	case st.State.Running != nil:
		c.Running, c.State = true, "running"
	case st.State.Terminated != nil:
		t := st.State.Terminated
		c.State, c.ExitCode, c.OOMKilled = "exited", int(t.ExitCode), t.Reason == "OOMKilled"
		if t.Reason != "" && t.Reason != "Error" && t.Reason != "Completed" && !c.OOMKilled {
			c.Error = t.Reason
		}
		c.LastLine = lastLine(t.Message)
	case st.State.Waiting != nil && st.State.Waiting.Reason != "" && st.State.Waiting.Reason != "ContainerCreating":
		c.Error = st.State.Waiting.Reason
		if st.State.Waiting.Message != "" {
			c.Error += ": " + st.State.Waiting.Message
		}
	}
}

func lastLine(s string) string {
	last := ""
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			last = l
		}
	}
	return last
}

// List returns the containers of the agent's Pods that carry every label in match.
func (k *Kubernetes) List(ctx context.Context, match map[string]string) ([]Container, error) {
	pods, err := k.cs.CoreV1().Pods(k.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: k.selector(match)})
	if err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	var out []Container
	for i := range pods.Items {
		out = append(out, containersOf(&pods.Items[i], match)...)
	}
	return out, nil
}

// imageMissing are the waiting reasons of a container whose image cannot be had.
var imageMissing = map[string]bool{"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true,
	"InvalidImageName": true}

// CreateInstance creates the instance's Pod (all its containers start together) and waits
// until position 0 runs, then calls first with its host pid. A Pod of the same name that
// is being deleted is waited out; one that exists with the same spec is adopted, so a
// restarted agent never makes a second.
func (k *Kubernetes) CreateInstance(ctx context.Context, specs []Spec, first func(Container) error) ([]string, error) {
	pod, err := k.Pod(specs)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(specs))
	for i := range specs {
		ids[i] = containerID(pod.Name, containerName(i))
	}
	ctx, cancel := context.WithTimeout(ctx, k.cfg.StartTimeout)
	defer cancel()
	pods := k.cs.CoreV1().Pods(k.cfg.Namespace)
	for {
		_, err = pods.Create(ctx, pod, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			break
		}
		old, gerr := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(gerr):
			continue
		case gerr != nil:
			return nil, fmt.Errorf("pod %s: %w", pod.Name, gerr)
		case old.DeletionTimestamp == nil && old.Annotations[AnnotationLabels] == pod.Annotations[AnnotationLabels]:
			err = nil // the same instance, same spec: adopt it
		case old.DeletionTimestamp == nil:
			return nil, fmt.Errorf("pod %s exists with another spec", pod.Name)
		default:
			if werr := k.awaitGone(ctx, pod.Name); werr != nil {
				return nil, werr
			}
			continue
		}
		break
	}
	if err != nil {
		return nil, fmt.Errorf("create pod %s: %w", pod.Name, err)
	}
	c, err := k.awaitRunning(ctx, pod.Name, containerName(0), specs[0].Image)
	if err != nil {
		return ids, err
	}
	if first != nil {
		if err := first(c); err != nil {
			return ids, err
		}
	}
	return ids, nil
}

// poll waits for the named Pod to satisfy done, re-reading it on each watch event.
func (k *Kubernetes) poll(ctx context.Context, name string, done func(*corev1.Pod, bool) (bool, error)) error {
	pods := k.cs.CoreV1().Pods(k.cfg.Namespace)
	for {
		p, err := pods.Get(ctx, name, metav1.GetOptions{})
		gone := apierrors.IsNotFound(err)
		if err != nil && !gone {
			return fmt.Errorf("pod %s: %w", name, err)
		}
		if ok, err := done(p, gone); ok || err != nil {
			return err
		}
		w, err := pods.Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name,
			ResourceVersion: p.ResourceVersion})
		if err != nil {
			return fmt.Errorf("watch pod %s: %w", name, err)
		}
		select {
		case <-w.ResultChan():
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
			w.Stop()
			return fmt.Errorf("pod %s: %w", name, ctx.Err())
		}
		w.Stop()
	}
}

func (k *Kubernetes) awaitGone(ctx context.Context, name string) error {
	return k.poll(ctx, name, func(_ *corev1.Pod, gone bool) (bool, error) { return gone, nil })
}

// awaitRunning waits until container cname of Pod name runs and returns it with its pid.
func (k *Kubernetes) awaitRunning(ctx context.Context, name, cname, image string) (Container, error) {
	var out Container
	err := k.poll(ctx, name, func(p *corev1.Pod, gone bool) (bool, error) {
		if gone {
			return false, fmt.Errorf("pod %s was deleted while starting", name)
		}
		c := Container{ID: containerID(name, cname), Name: name + "." + cname, State: "created"}
		st := statusOf(p, cname)
		fill(&c, p, st)
		if st != nil && st.State.Waiting != nil && imageMissing[st.State.Waiting.Reason] {
			return false, fmt.Errorf("NF 0 (%s): %w: %s", image, ErrImageMissing, c.Error)
		}
		if c.State == "exited" || c.State == "dead" {
			return false, fmt.Errorf("NF 0 stopped at once: %s", Why(c))
		}
		if !c.Running {
			return false, nil
		}
		pid, err := k.pidOf(st.ContainerID)
		if err != nil {
			return false, err
		}
		c.Pid = pid
		out = c
		return true, nil
	})
	return out, err
}

// pidOf finds the host pid of a running container (CRI id "containerd://HEX") under
// ProcRoot: the lowest pid whose cgroup path names the id.
func (k *Kubernetes) pidOf(criID string) (int, error) {
	_, hexID, ok := strings.Cut(criID, "://")
	if !ok || len(hexID) < 12 {
		return 0, fmt.Errorf("container id %q: not RUNTIME://ID", criID)
	}
	ents, err := os.ReadDir(k.cfg.ProcRoot)
	if err != nil {
		return 0, fmt.Errorf("find the pid of %s: %w", criID, err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		if cgroupNames(filepath.Join(k.cfg.ProcRoot, e.Name(), "cgroup"), hexID) {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		return 0, fmt.Errorf("no process of container %s under %s (does the agent's Pod have hostPID?)", criID, k.cfg.ProcRoot)
	}
	sort.Ints(pids)
	return pids[0], nil
}

func cgroupNames(file, id string) bool {
	f, err := os.Open(file)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.Contains(sc.Text(), id) {
			return true
		}
	}
	return false
}

// Inspect returns one container of a Pod, with its host pid while it runs.
func (k *Kubernetes) Inspect(ctx context.Context, id string) (Container, error) {
	pod, cname, err := splitID(id)
	if err != nil {
		return Container{}, err
	}
	p, err := k.cs.CoreV1().Pods(k.cfg.Namespace).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return Container{}, fmt.Errorf("inspect %s: %w", id, err)
	}
	for _, c := range containersOf(p, nil) {
		if c.ID != id {
			continue
		}
		if c.Running {
			if c.Pid, err = k.pidOf(statusOf(p, cname).ContainerID); err != nil {
				return c, err
			}
		}
		return c, nil
	}
	return Container{}, fmt.Errorf("inspect %s: pod %s has no container %s", id, pod, cname)
}

// Remove deletes the container's Pod (a Pod's containers go together); a Pod that is
// gone is no error.
func (k *Kubernetes) Remove(ctx context.Context, id string) error {
	pod, _, err := splitID(id)
	if err != nil {
		return err
	}
	err = k.cs.CoreV1().Pods(k.cfg.Namespace).Delete(ctx, pod, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pod %s: %w", pod, err)
	}
	return nil
}

// Events streams a change of each matching container whenever its Pod changes: die when
// it stopped, destroy when the Pod went, update otherwise.
func (k *Kubernetes) Events(ctx context.Context, match map[string]string) (<-chan Event, <-chan error) {
	out := make(chan Event)
	errOut := make(chan error, 1)
	w, err := k.cs.CoreV1().Pods(k.cfg.Namespace).Watch(ctx, metav1.ListOptions{LabelSelector: k.selector(match)})
	if err != nil {
		errOut <- fmt.Errorf("watch pods: %w", err)
		close(out)
		return out, errOut
	}
	go func() {
		defer close(out)
		defer w.Stop()
		for {
			select {
			case ev, ok := <-w.ResultChan():
				if !ok {
					errOut <- errors.New("pod watch closed")
					return
				}
				if ev.Type == watch.Error {
					errOut <- fmt.Errorf("pod watch: %v", apierrors.FromObject(ev.Object))
					return
				}
				p, ok := ev.Object.(*corev1.Pod)
				if !ok {
					continue
				}
				for _, c := range containersOf(p, match) {
					action := "update"
					switch {
					case ev.Type == watch.Deleted:
						action = "destroy"
					case c.State == "exited" || c.State == "dead":
						action = "die"
					case c.Running:
						action = "start"
					}
					select {
					case out <- Event{ID: c.ID, Action: action, Labels: c.Labels}:
					case <-ctx.Done():
						return
					}
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, errOut
}

// Logs streams the lines of the containers that carry every label in match through the
// API server's pods/log (faas-cli logs of a chain). A container that cannot be read is
// skipped, as under Docker.
func (k *Kubernetes) Logs(ctx context.Context, match map[string]string, o dockerlog.Options) (<-chan dockerlog.Line, error) {
	list, err := k.List(ctx, match)
	if err != nil {
		return nil, err
	}
	targets := make([]kubelog.Target, 0, len(list))
	for _, c := range list {
		pod, cname, _ := splitID(c.ID)
		targets = append(targets, kubelog.Target{Pod: pod, Container: cname, Name: c.Name})
	}
	return kubelog.Read(ctx, k.cs, k.cfg.Namespace, targets, o), nil
}
