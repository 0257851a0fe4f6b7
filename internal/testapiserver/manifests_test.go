// SPDX-License-Identifier: Apache-2.0

package testapiserver

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"gopkg.in/yaml.v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

// dryRunner creates objects with server-side dry run as the cluster's admin.
type dryRunner struct {
	mapper meta.RESTMapper
	dyn    *dynamic.DynamicClient
	kinds  map[string]int
}

// newDryRunner returns a dryRunner for c, mapping kinds to the resources c serves.
func newDryRunner(t *testing.T, c *Cluster) *dryRunner {
	t.Helper()
	cfg := c.Config(Admin)
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := restmapper.GetAPIGroupResources(dc)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &dryRunner{mapper: restmapper.NewDiscoveryRESTMapper(groups), dyn: dyn, kinds: map[string]int{}}
}

// create dry-runs every object of the YAML stream r (named source in errors) and counts its kinds.
func (d *dryRunner) create(t *testing.T, source string, r io.Reader) {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	for {
		var u unstructured.Unstructured
		if err := dec.Decode(&u.Object); err != nil {
			break
		}
		if len(u.Object) == 0 {
			continue
		}
		gvk := u.GroupVersionKind()
		m, err := d.mapper.RESTMapping(schema.GroupKind{Group: gvk.Group, Kind: gvk.Kind}, gvk.Version)
		if err != nil {
			t.Errorf("%s: %s %s: %v", source, gvk, u.GetName(), err)
			continue
		}
		var ri dynamic.ResourceInterface = d.dyn.Resource(m.Resource)
		if ns := u.GetNamespace(); ns != "" {
			ri = d.dyn.Resource(m.Resource).Namespace(ns)
		}
		_, err = ri.Create(context.Background(), &u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Errorf("%s: %s %s: %v", source, gvk.Kind, u.GetName(), err)
		}
		d.kinds[gvk.Kind]++
	}
}

// Test_manifests_pass_the_apiservers_validation creates every object of
// deploy/kubernetes/kustomization.yaml's resources with server-side dry run: the API
// server's own validation and defaulting accept each, and the files name only known kinds.
func Test_manifests_pass_the_apiservers_validation(t *testing.T) {
	c := Start(t)
	c.ApplyRBAC(t)
	dir := filepath.Join(c.Root, "deploy", "kubernetes")
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var kz struct{ Resources []string }
	if err := yaml.Unmarshal(b, &kz); err != nil {
		t.Fatal(err)
	}
	d := newDryRunner(t, c)
	for _, f := range kz.Resources {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		d.create(t, f, bytes.NewReader(b))
	}
	for _, k := range []string{"Namespace", "Role", "Deployment", "StatefulSet", "DaemonSet", "Service", "ConfigMap", "NetworkPolicy"} {
		if d.kinds[k] == 0 {
			t.Errorf("no %s in the manifests (%v)", k, d.kinds)
		}
	}
}

// Test_testcluster_overlay_passes_the_apiservers_validation does the same for
// deploy/kubernetes-testcluster as kubectl renders it (its patches and PersistentVolumes).
func Test_testcluster_overlay_passes_the_apiservers_validation(t *testing.T) {
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Skip("kubectl is not installed: it renders the kustomization")
	}
	c := Start(t)
	c.ApplyRBAC(t)
	out, err := exec.Command(kubectl, "kustomize", filepath.Join(c.Root, "deploy", "kubernetes-testcluster")).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize deploy/kubernetes-testcluster: %v", err)
	}
	d := newDryRunner(t, c)
	d.create(t, "deploy/kubernetes-testcluster", bytes.NewReader(out))
	if d.kinds["PersistentVolume"] != 2 || d.kinds["DaemonSet"] != 2 {
		t.Errorf("kinds %v, want the base's and two PersistentVolumes", d.kinds)
	}
}

// Test_namespaces_and_network_policies_hold_the_trust_boundary reads what the API server
// admitted above and checks its intent (issue 31): each namespace enforces a Pod Security
// level (normal functions at least baseline), chain instances have no Pod network at all,
// and Redis and the placer admit keel-gateway only.
func Test_namespaces_and_network_policies_hold_the_trust_boundary(t *testing.T) {
	c := Start(t)
	c.ApplyRBAC(t) // namespace.yaml, as the API server stored it
	ctx := context.Background()
	cs := c.Client(t, Admin)
	want := map[string]string{"keel": "privileged", "openfaas-fn": "baseline", "keel-nf": "privileged"}
	for ns, level := range want {
		n, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := n.Labels["pod-security.kubernetes.io/enforce"]; got != level {
			t.Errorf("namespace %s enforces Pod Security %q, want %q", ns, got, level)
		}
		if n.Labels["pod-security.kubernetes.io/audit"] == "" {
			t.Errorf("namespace %s audits no Pod Security level", ns)
		}
	}
	b, err := os.ReadFile(filepath.Join(c.Root, "deploy", "kubernetes", "networkpolicy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	type peer struct {
		PodSelector       *metav1.LabelSelector `json:"podSelector"`
		NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector"`
	}
	type policy struct {
		Metadata metav1.ObjectMeta
		Spec     struct {
			PodSelector metav1.LabelSelector    `json:"podSelector"`
			PolicyTypes []string                `json:"policyTypes"`
			Ingress     []struct{ From []peer } `json:"ingress"`
			Egress      []struct {
				To    []peer `json:"to"`
				Ports []struct {
					Port     int    `json:"port"`
					Protocol string `json:"protocol"`
				} `json:"ports"`
			} `json:"egress"`
		}
	}
	byName := map[string]policy{}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var p policy
		if err := dec.Decode(&p); err != nil {
			break
		}
		byName[p.Metadata.Namespace+"/"+p.Metadata.Name] = p
	}
	// Chain instances take nothing and reach only Redis (their NF state, as their own Redis
	// user) and the cluster DNS that names it.
	deny, ok := byName["keel-nf/default-deny"]
	if !ok || len(deny.Spec.PodSelector.MatchLabels) != 0 || len(deny.Spec.PolicyTypes) != 2 ||
		len(deny.Spec.Ingress) != 0 {
		t.Errorf("keel-nf: want a policy that denies every Pod all ingress, have %+v", deny)
	}
	for _, e := range deny.Spec.Egress {
		redis := len(e.To) == 1 && e.To[0].PodSelector != nil && e.To[0].PodSelector.MatchLabels["app.kubernetes.io/name"] == "redis" &&
			e.To[0].NamespaceSelector != nil && e.To[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == "keel" &&
			len(e.Ports) == 1 && e.Ports[0].Port == 6379
		dns := len(e.To) == 1 && e.To[0].PodSelector == nil && e.To[0].NamespaceSelector != nil &&
			e.To[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == "kube-system" && len(e.Ports) > 0
		for _, p := range e.Ports {
			dns = dns && p.Port == 53
		}
		if !redis && !dns {
			t.Errorf("keel-nf: egress %+v is neither to Redis' port nor to the cluster DNS", e)
		}
	}
	if len(deny.Spec.Egress) != 2 {
		t.Errorf("keel-nf: want egress to Redis and DNS only, have %d rules", len(deny.Spec.Egress))
	}
	admits := map[string]func(peer) bool{
		"keel-place": func(f peer) bool {
			return f.PodSelector != nil && f.PodSelector.MatchLabels["app.kubernetes.io/name"] == "keel-gateway"
		},
		"redis": func(f peer) bool {
			return f.PodSelector != nil && f.PodSelector.MatchLabels["app.kubernetes.io/name"] == "keel-gateway" ||
				f.PodSelector == nil && f.NamespaceSelector != nil &&
					f.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == "keel-nf"
		},
	}
	for name, ok := range admits {
		p, found := byName["keel/"+name]
		if !found || p.Spec.PodSelector.MatchLabels["app.kubernetes.io/name"] != name {
			t.Errorf("no NetworkPolicy selects %s", name)
			continue
		}
		for _, r := range p.Spec.Ingress {
			for _, f := range r.From {
				if !ok(f) {
					t.Errorf("%s admits %+v, want keel-gateway (and for Redis the keel-nf Pods) only", name, f)
				}
			}
		}
	}
	if _, ok := byName["openfaas-fn/from-the-gateway-only"]; !ok {
		t.Errorf("normal functions take calls from anywhere: no openfaas-fn/from-the-gateway-only")
	}
}
