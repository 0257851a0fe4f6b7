// SPDX-License-Identifier: Apache-2.0

package testapiserver

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"gopkg.in/yaml.v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

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
	cfg := c.Config(Admin)
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := restmapper.GetAPIGroupResources(dc)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, f := range kz.Resources {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for {
			var u unstructured.Unstructured
			if err := dec.Decode(&u.Object); err != nil {
				break
			}
			if len(u.Object) == 0 {
				continue
			}
			gvk := u.GroupVersionKind()
			m, err := mapper.RESTMapping(schema.GroupKind{Group: gvk.Group, Kind: gvk.Kind}, gvk.Version)
			if err != nil {
				t.Errorf("%s: %s %s: %v", f, gvk, u.GetName(), err)
				continue
			}
			var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
			if ns := u.GetNamespace(); ns != "" {
				ri = dyn.Resource(m.Resource).Namespace(ns)
			}
			_, err = ri.Create(context.Background(), &u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				t.Errorf("%s: %s %s: %v", f, gvk.Kind, u.GetName(), err)
			}
			kinds[gvk.Kind]++
		}
	}
	for _, k := range []string{"Namespace", "Role", "Deployment", "StatefulSet", "DaemonSet", "Service", "ConfigMap"} {
		if kinds[k] == 0 {
			t.Errorf("no %s in the manifests (%v)", k, kinds)
		}
	}
}
