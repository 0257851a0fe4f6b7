// SPDX-License-Identifier: Apache-2.0

// Package kube runs normal HTTP functions on Kubernetes the way faas-netes does: one
// Deployment and one ClusterIP Service per function in the functions' namespace, labelled
// faas_function=NAME, so stock faas-cli (and kubectl users) see what faas-netes would make.
package kube

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/distribution/reference"
	"github.com/keel-nfv/keel/internal/dockerlog"
	"github.com/keel-nfv/keel/internal/kubelog"
	"github.com/openfaas/faas-provider/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	appslisters "k8s.io/client-go/listers/apps/v1"
	"k8s.io/client-go/tools/cache"
)

// faas-netes' names, and the label that tells keel's functions from others in the namespace.
const (
	LabelFunction  = "faas_function"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	managedBy      = "keel-gateway"
	watchdogPort   = 8080
	secretsDir     = "/var/openfaas/secrets"
	// AnnotationSpec is a hash of what the replicas run, to tell an update from a restart.
	AnnotationSpec = "com.keel.spec"
)

// Kubernetes manages normal functions as Deployments + Services in one namespace.
type Kubernetes struct {
	// Namespace holds the functions (openfaas-fn).
	Namespace string
	// ClusterDomain is the cluster's DNS suffix for Service addresses (cluster.local).
	ClusterDomain string
	// SecretPath is the gateway's file of a secret (faas-cli secret create): Apply copies it
	// into a Secret of the same name, mounted at /var/openfaas/secrets/NAME; nil: none.
	SecretPath func(name string) (string, error)

	cs       kubernetes.Interface
	lister   appslisters.DeploymentLister
	informer cache.SharedIndexInformer
	mu       sync.Mutex // serialises Apply and Remove of one gateway
}

// New returns the backend for cs; Start must run before Running answers.
func New(cs kubernetes.Interface, namespace string) *Kubernetes {
	f := informers.NewSharedInformerFactoryWithOptions(cs, 10*time.Minute, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = LabelManagedBy + "=" + managedBy }))
	inf := f.Apps().V1().Deployments()
	return &Kubernetes{Namespace: namespace, ClusterDomain: "cluster.local", cs: cs,
		lister: inf.Lister(), informer: inf.Informer()}
}

// Start follows the functions' Deployments until ctx ends and waits for the first list.
// It first lists them once itself: the informer retries a refused list forever, so a
// namespace the gateway may not use (RBAC) or an unreachable API server would otherwise
// hang the gateway's start without a word.
func (k *Kubernetes) Start(ctx context.Context) error {
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err := k.cs.AppsV1().Deployments(k.Namespace).List(lctx, metav1.ListOptions{Limit: 1,
		LabelSelector: LabelManagedBy + "=" + managedBy})
	cancel()
	if err != nil {
		return fmt.Errorf("kubernetes: list the Deployments of %s: %w", k.Namespace, err)
	}
	go k.informer.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), k.informer.HasSynced) {
		return fmt.Errorf("kubernetes: the Deployments of %s did not sync", k.Namespace)
	}
	return nil
}

// CheckImage refuses an image reference that is not one; whether it can be pulled is the
// kubelet's to find out, as under faas-netes.
func (k *Kubernetes) CheckImage(_ context.Context, image string) error {
	if _, err := reference.ParseNormalizedNamed(image); err != nil {
		return fmt.Errorf("image %q: %w", image, err)
	}
	return nil
}

func selectorOf(name string) map[string]string { return map[string]string{LabelFunction: name} }

// Deployment returns the function's Deployment as faas-netes makes it: labels and
// annotations of the request on the Pods, faas_function as selector, env and fprocess,
// secrets as projected Secrets, resources, the watchdog's health probes.
func (k *Kubernetes) Deployment(fd *types.FunctionDeployment, replicas int) (*appsv1.Deployment, error) {
	podLabels := map[string]string{}
	if fd.Labels != nil {
		for key, v := range *fd.Labels {
			podLabels[key] = v
		}
	}
	podLabels[LabelFunction] = fd.Service
	ann := map[string]string{"prometheus.io.scrape": "false"}
	if fd.Annotations != nil {
		for key, v := range *fd.Annotations {
			ann[key] = v
		}
	}
	ann[AnnotationSpec] = specOf(fd)
	env := []corev1.EnvVar{}
	if fd.EnvProcess != "" {
		env = append(env, corev1.EnvVar{Name: "fprocess", Value: fd.EnvProcess})
	}
	keys := make([]string, 0, len(fd.EnvVars))
	for key := range fd.EnvVars {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		env = append(env, corev1.EnvVar{Name: key, Value: fd.EnvVars[key]})
	}
	res, err := resources(fd)
	if err != nil {
		return nil, err
	}
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/_/health",
		Port: intstr.FromInt32(watchdogPort), Scheme: corev1.URISchemeHTTP}},
		InitialDelaySeconds: 2, PeriodSeconds: 2, TimeoutSeconds: 1, FailureThreshold: 3}
	c := corev1.Container{
		Name:            fd.Service,
		Image:           fd.Image,
		Ports:           []corev1.ContainerPort{{Name: "http", ContainerPort: watchdogPort, Protocol: corev1.ProtocolTCP}},
		Env:             env,
		Resources:       res,
		ImagePullPolicy: corev1.PullIfNotPresent,
		LivenessProbe:   probe,
		ReadinessProbe:  probe.DeepCopy(),
		SecurityContext: &corev1.SecurityContext{ReadOnlyRootFilesystem: &fd.ReadOnlyRootFilesystem,
			AllowPrivilegeEscalation: new(bool)},
	}
	var volumes []corev1.Volume
	if fd.ReadOnlyRootFilesystem {
		volumes = append(volumes, corev1.Volume{Name: "temp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "temp", MountPath: "/tmp"})
	}
	if len(fd.Secrets) > 0 {
		names := append([]string(nil), fd.Secrets...)
		sort.Strings(names)
		proj := &corev1.ProjectedVolumeSource{}
		for _, s := range names {
			proj.Sources = append(proj.Sources, corev1.VolumeProjection{Secret: &corev1.SecretProjection{
				LocalObjectReference: corev1.LocalObjectReference{Name: s}}})
		}
		volumes = append(volumes, corev1.Volume{Name: fd.Service + "-projected-secrets", VolumeSource: corev1.VolumeSource{Projected: proj}})
		c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: fd.Service + "-projected-secrets",
			MountPath: secretsDir, ReadOnly: true})
	}
	n := int32(replicas)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: fd.Service, Namespace: k.Namespace, Annotations: ann,
			Labels: map[string]string{LabelFunction: fd.Service, LabelManagedBy: managedBy}},
		Spec: appsv1.DeploymentSpec{
			Replicas: &n,
			Selector: &metav1.LabelSelector{MatchLabels: selectorOf(fd.Service)},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: ptrIntStr(intstr.FromInt32(0)),
					MaxSurge: ptrIntStr(intstr.FromInt32(1))}},
			RevisionHistoryLimit: ptrInt32(10),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Name: fd.Service, Labels: podLabels, Annotations: ann},
				Spec: corev1.PodSpec{Containers: []corev1.Container{c}, Volumes: volumes,
					RestartPolicy: corev1.RestartPolicyAlways, DNSPolicy: corev1.DNSClusterFirst,
					AutomountServiceAccountToken: new(bool), EnableServiceLinks: new(bool)},
			},
		},
	}, nil
}

func ptrIntStr(v intstr.IntOrString) *intstr.IntOrString { return &v }
func ptrInt32(v int32) *int32                            { return &v }

// resources maps the request's limits and requests (faas-cli's limits/requests) to the
// container's; an unparsable quantity is an error naming the field.
func resources(fd *types.FunctionDeployment) (corev1.ResourceRequirements, error) {
	var out corev1.ResourceRequirements
	conv := func(field string, r *types.FunctionResources) (corev1.ResourceList, error) {
		if r == nil || (r.Memory == "" && r.CPU == "") {
			return nil, nil
		}
		l := corev1.ResourceList{}
		for name, v := range map[corev1.ResourceName]string{corev1.ResourceMemory: r.Memory, corev1.ResourceCPU: r.CPU} {
			if v == "" {
				continue
			}
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return nil, fmt.Errorf("%s.%s %q: %w", field, name, v, err)
			}
			l[name] = q
		}
		return l, nil
	}
	var err error
	if out.Limits, err = conv("limits", fd.Limits); err != nil {
		return out, err
	}
	out.Requests, err = conv("requests", fd.Requests)
	return out, err
}

// Service returns the function's ClusterIP Service on the watchdog's port.
func (k *Kubernetes) Service(fd *types.FunctionDeployment) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: fd.Service, Namespace: k.Namespace,
			Labels:      map[string]string{LabelFunction: fd.Service, LabelManagedBy: managedBy},
			Annotations: map[string]string{"prometheus.io.scrape": "false"}},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: selectorOf(fd.Service),
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: watchdogPort,
				TargetPort: intstr.FromInt32(watchdogPort)}},
		},
	}
}

// specOf identifies what the replicas run (image, fprocess, env, secrets).
func specOf(fd *types.FunctionDeployment) string {
	keys := make([]string, 0, len(fd.EnvVars))
	for key := range fd.EnvVars {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	s := fd.Image + "|" + fd.EnvProcess
	for _, key := range keys {
		s += "|" + key + "=" + fd.EnvVars[key]
	}
	secrets := append([]string(nil), fd.Secrets...)
	sort.Strings(secrets)
	for _, name := range secrets {
		s += "|secret=" + name
	}
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return strconv.FormatUint(h, 16)
}

// Apply makes the function's Deployment (at replicas) and Service exist as fd says:
// created when missing, updated in place otherwise (a scale changes only the replicas).
func (k *Kubernetes) Apply(ctx context.Context, fd *types.FunctionDeployment, replicas int) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if err := k.syncSecrets(ctx, fd.Secrets); err != nil {
		return err
	}
	want, err := k.Deployment(fd, replicas)
	if err != nil {
		return fmt.Errorf("deploy %s: %w", fd.Service, err)
	}
	deps := k.cs.AppsV1().Deployments(k.Namespace)
	old, err := deps.Get(ctx, fd.Service, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if _, err := deps.Create(ctx, want, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create deployment %s: %w", fd.Service, err)
		}
	case err != nil:
		return fmt.Errorf("deployment %s: %w", fd.Service, err)
	case old.Labels[LabelManagedBy] != managedBy:
		return fmt.Errorf("deployment %s exists and is not keel-gateway's", fd.Service)
	default:
		old.Spec, old.Annotations, old.Labels = want.Spec, want.Annotations, want.Labels
		if _, err := deps.Update(ctx, old, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("update deployment %s: %w", fd.Service, err)
		}
	}
	svc := k.Service(fd)
	svcs := k.cs.CoreV1().Services(k.Namespace)
	if _, err := svcs.Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create service %s: %w", fd.Service, err)
	}
	return nil
}

// syncSecrets copies each named gateway secret into a Secret of the namespace.
func (k *Kubernetes) syncSecrets(ctx context.Context, names []string) error {
	if len(names) == 0 {
		return nil
	}
	if k.SecretPath == nil {
		return fmt.Errorf("secrets %v: the gateway keeps no secrets", names)
	}
	for _, name := range names {
		path, err := k.SecretPath(name)
		if err != nil {
			return fmt.Errorf("secret %s: %w", name, err)
		}
		val, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("secret %s: %w", name, err)
		}
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: k.Namespace,
			Labels: map[string]string{LabelManagedBy: managedBy}}, Data: map[string][]byte{name: val}}
		secrets := k.cs.CoreV1().Secrets(k.Namespace)
		if _, err := secrets.Create(ctx, s, metav1.CreateOptions{}); apierrors.IsAlreadyExists(err) {
			_, err = secrets.Update(ctx, s, metav1.UpdateOptions{})
			if err != nil {
				return fmt.Errorf("update secret %s: %w", name, err)
			}
		} else if err != nil {
			return fmt.Errorf("create secret %s: %w", name, err)
		}
	}
	return nil
}

// Remove deletes the function's Deployment (its Pods after it) and Service; what is gone
// already is no error.
func (k *Kubernetes) Remove(ctx context.Context, name string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	bg := metav1.DeletePropagationBackground
	if err := k.cs.AppsV1().Deployments(k.Namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete deployment %s: %w", name, err)
	}
	if err := k.cs.CoreV1().Services(k.Namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete service %s: %w", name, err)
	}
	return nil
}

// Running returns the function's available replicas as the Deployment's status says.
func (k *Kubernetes) Running(name string) int {
	d, err := k.lister.Deployments(k.Namespace).Get(name)
	if err != nil {
		return 0
	}
	return int(d.Status.AvailableReplicas)
}

// Resolve returns the function's Service address (kube-proxy spreads the calls over the
// replicas), or an error when no replica is available.
func (k *Kubernetes) Resolve(name string) (url.URL, error) {
	if k.Running(name) == 0 {
		return url.URL{}, fmt.Errorf("%s: no replica is available", name)
	}
	return url.URL{Scheme: "http", Host: fmt.Sprintf("%s.%s.svc.%s:%d", name, k.Namespace, k.ClusterDomain, watchdogPort)}, nil
}

// Orchestration is what /system/info says runs normal functions.
func (k *Kubernetes) Orchestration() string { return "kubernetes" }

// Await returns once the function's Deployment has an available replica (its readiness
// probe passed), checking the informer's copy every 100 ms, or ctx's error.
func (k *Kubernetes) Await(ctx context.Context, name string) error {
	for k.Running(name) == 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}

// Orphans returns the functions that have a keel-gateway Deployment but are not in known.
func (k *Kubernetes) Orphans(ctx context.Context, known map[string]bool) ([]string, error) {
	list, err := k.cs.AppsV1().Deployments(k.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set{LabelManagedBy: managedBy}.String()})
	if err != nil {
		return nil, fmt.Errorf("list deployments: %w", err)
	}
	var out []string
	for _, d := range list.Items {
		if name := d.Labels[LabelFunction]; name != "" && !known[name] {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Logs streams the lines of the function's Pods through the API server's pods/log.
func (k *Kubernetes) Logs(ctx context.Context, name string, o dockerlog.Options) (<-chan dockerlog.Line, error) {
	pods, err := k.cs.CoreV1().Pods(k.Namespace).List(ctx, metav1.ListOptions{LabelSelector: labels.Set(selectorOf(name)).String()})
	if err != nil {
		return nil, fmt.Errorf("list pods of %s: %w", name, err)
	}
	targets := make([]kubelog.Target, 0, len(pods.Items))
	for _, p := range pods.Items {
		targets = append(targets, kubelog.Target{Pod: p.Name, Container: name, Name: p.Name})
	}
	return kubelog.Read(ctx, k.cs, k.Namespace, targets, o), nil
}
