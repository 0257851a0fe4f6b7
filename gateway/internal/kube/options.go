// SPDX-License-Identifier: Apache-2.0

package kube

import (
	"context"
	"flag"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Options are keel-gateway's flags that select where normal functions run.
type Options struct {
	Backend, Kubeconfig, Namespace, ClusterDomain string
}

// Register adds --backend, --kubeconfig, --namespace and --cluster-domain to fs.
func (o *Options) Register(fs *flag.FlagSet) {
	fs.StringVar(&o.Backend, "backend", "docker", "where normal functions run: docker (--docker, one container per replica) or\n"+
		"kubernetes (a Deployment and a Service per function in --namespace, as faas-netes makes them)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "with --backend kubernetes: kubeconfig `FILE` (empty: the Pod's service account)")
	fs.StringVar(&o.Namespace, "namespace", "openfaas-fn", "the one `NAMESPACE` of functions keel serves (faas-cli --namespace; others are refused with 400);\n"+
		"with --backend kubernetes also where their Deployments and Services go")
	fs.StringVar(&o.ClusterDomain, "cluster-domain", "cluster.local", "with --backend kubernetes: the cluster's DNS `DOMAIN` (Service addresses)")
}

// Client is a client of the API server of --kubeconfig, else of the Pod's service account.
func (o *Options) Client() (kubernetes.Interface, error) {
	var cfg *rest.Config
	var err error
	if o.Kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig: %w", err)
	}
	return cs, nil
}

// Open returns the Kubernetes backend, following its Deployments until ctx ends, when
// --backend kubernetes; nil for docker.
func (o *Options) Open(ctx context.Context, secretPath func(string) (string, error)) (*Kubernetes, error) {
	switch o.Backend {
	case "docker":
		return nil, nil
	case "kubernetes":
	default:
		return nil, fmt.Errorf("--backend %q is not docker or kubernetes", o.Backend)
	}
	cs, err := o.Client()
	if err != nil {
		return nil, err
	}
	k := New(cs, o.Namespace)
	k.ClusterDomain, k.SecretPath = o.ClusterDomain, secretPath
	if err := k.Start(ctx); err != nil {
		return nil, err
	}
	return k, nil
}
