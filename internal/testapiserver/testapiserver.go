// SPDX-License-Identifier: Apache-2.0

// Package testapiserver runs a real etcd and kube-apiserver on loopback ports for keel's
// API-server-level tests: the binaries deploy/kubernetes/testcluster/build.sh builds from
// pinned Go modules into build/k8s/, a token file for the admin and keel's service
// accounts, RBAC on, and the RBAC of deploy/kubernetes/rbac.yaml applied. No kubelet, no
// controllers: a test plays their parts through the admin client where it must.
package testapiserver

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// Cluster is a running etcd + kube-apiserver.
type Cluster struct {
	URL    string
	Root   string // the repository
	tokens map[string]string
}

// Users of the token file: the admin (system:masters) and keel's service accounts as the
// API server would name them (so RoleBindings to the ServiceAccounts apply).
const (
	Admin   = "admin"
	Agent   = "system:serviceaccount:keel:keel-agent"
	Gateway = "system:serviceaccount:keel:keel-gateway"
)

// RepoRoot returns the directory of keel's go.mod above the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(b, []byte("module github.com/keel-nfv/keel\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("keel's go.mod not found above the working directory")
		}
		dir = parent
	}
}

// Bin returns the directory of etcd and kube-apiserver: $KEEL_K8S_BIN, else build/k8s.
func Bin(root string) string {
	if d := os.Getenv("KEEL_K8S_BIN"); d != "" {
		return d
	}
	return filepath.Join(root, "build", "k8s")
}

// Start runs etcd and kube-apiserver for the test, skipping it when the binaries are not
// built, and stops both (SIGTERM, then SIGKILL) and removes their files when it ends.
func Start(t *testing.T) *Cluster {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := Bin(root)
	for _, b := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Skipf("%s is not built (%v): run deploy/kubernetes/testcluster/build.sh (make k8s-bins) to build etcd and kube-apiserver from their pinned modules", b, err)
		}
	}
	dir, err := os.MkdirTemp("", "keel-apiserver-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })

	etcdClient, etcdPeer, secure := freePort(t), freePort(t), freePort(t)
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdClient)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPeer)
	etcdDone := start(t, filepath.Join(dir, "etcd.log"), filepath.Join(bin, "etcd"), "--name", "keel-test",
		"--data-dir", filepath.Join(dir, "etcd"), "--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL, "--initial-cluster", "keel-test="+peerURL,
		"--unsafe-no-fsync", "--log-level", "warn")

	c := &Cluster{URL: fmt.Sprintf("https://127.0.0.1:%d", secure), Root: root, tokens: map[string]string{}}
	var tokens strings.Builder
	for i, u := range []struct{ name, groups string }{
		{Admin, "system:masters"},
		{Agent, "system:serviceaccounts,system:serviceaccounts:keel"},
		{Gateway, "system:serviceaccounts,system:serviceaccounts:keel"},
	} {
		c.tokens[u.name] = randomToken(t)
		fmt.Fprintf(&tokens, "%s,%s,uid-%d,\"%s\"\n", c.tokens[u.name], u.name, i, u.groups)
	}
	write(t, filepath.Join(dir, "tokens.csv"), []byte(tokens.String()))
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	write(t, filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
	apiLog := filepath.Join(dir, "kube-apiserver.log")
	apiDone := start(t, apiLog, filepath.Join(bin, "kube-apiserver"),
		"--etcd-servers", etcdURL, "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
		"--secure-port", fmt.Sprint(secure), "--cert-dir", filepath.Join(dir, "certs"),
		"--token-auth-file", filepath.Join(dir, "tokens.csv"), "--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc", "--service-account-key-file", filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(dir, "sa.key"), "--service-cluster-ip-range", "10.96.0.0/16",
		"--endpoint-reconciler-type", "none", "--allow-privileged", "--v", "1")

	deadline := time.Now().Add(3 * time.Minute)
	for !c.ready() {
		select {
		case <-etcdDone:
			t.Fatalf("etcd exited; its log ends:\n%s", tail(filepath.Join(dir, "etcd.log")))
		case <-apiDone:
			t.Fatalf("kube-apiserver exited; its log ends:\n%s", tail(apiLog))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver not ready after 3 minutes; its log ends:\n%s", tail(apiLog))
		}
		time.Sleep(250 * time.Millisecond)
	}
	return c
}

// start runs a binary with its output in log and stops it when the test ends: SIGTERM,
// then SIGKILL after 10 s (kube-apiserver may not exit on SIGTERM alone). The channel
// closes when it exits.
func start(t *testing.T, log, bin string, args ...string) <-chan struct{} {
	t.Helper()
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		t.Fatalf("start %s: %v", bin, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		defer f.Close()
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return done
}

func (c *Cluster) ready() bool {
	cl := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: insecureTLS()}}
	req, _ := http.NewRequest(http.MethodGet, c.URL+"/readyz", nil)
	req.Header.Set("Authorization", "Bearer "+c.tokens[Admin])
	resp, err := cl.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK
}

// Config is the client configuration of user (Admin, Agent or Gateway).
func (c *Cluster) Config(user string) *rest.Config {
	return &rest.Config{Host: c.URL, BearerToken: c.tokens[user], TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS: 200, Burst: 400}
}

// Client is a clientset acting as user.
func (c *Cluster) Client(t *testing.T, user string) kubernetes.Interface {
	t.Helper()
	cs, err := kubernetes.NewForConfig(c.Config(user))
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// Kubeconfig writes a kubeconfig file of user into dir and returns its path.
func (c *Cluster) Kubeconfig(t *testing.T, dir, user string) string {
	t.Helper()
	p := filepath.Join(dir, "kubeconfig-"+strings.NewReplacer(":", "-").Replace(user))
	write(t, p, fmt.Appendf(nil, `apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: %q}}]
contexts: [{name: test, context: {cluster: test, user: u}}]
current-context: test
`, c.URL, c.tokens[user]))
	return p
}

// ApplyRBAC creates the namespaces, ServiceAccounts and RBAC objects of deploy/kubernetes's
// rbac.yaml and namespace.yaml as the admin, and the namespaces' default ServiceAccount
// (the controller-manager's job, which this cluster does not run).
func (c *Cluster) ApplyRBAC(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	cs := c.Client(t, Admin)
	for _, f := range []string{"namespace.yaml", "rbac.yaml"} {
		b, err := os.ReadFile(filepath.Join(c.Root, "deploy", "kubernetes", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, obj := range decode(t, b) {
			var err error
			switch o := obj.(type) {
			case *corev1.Namespace:
				_, err = cs.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
				if err == nil {
					_, err = cs.CoreV1().ServiceAccounts(o.Name).Create(ctx,
						&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
				}
			case *corev1.ServiceAccount:
				_, err = cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
			case *rbacv1.Role:
				_, err = cs.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
			case *rbacv1.RoleBinding:
				_, err = cs.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
			case *rbacv1.ClusterRole:
				_, err = cs.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
			case *rbacv1.ClusterRoleBinding:
				_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
			default:
				t.Fatalf("%s: unexpected %T", f, obj)
			}
			if err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatalf("%s: %v", f, err)
			}
		}
	}
}

func decode(t *testing.T, b []byte) []runtime.Object {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var out []runtime.Object
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(bytes.TrimSpace(doc)) == 0 || bytes.Equal(bytes.TrimSpace(doc), []byte("---")) {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(doc, nil, nil)
		if err != nil {
			t.Fatalf("decode %q: %v", doc, err)
		}
		out = append(out, obj)
	}
}

func insecureTLS() *tls.Config { return &tls.Config{InsecureSkipVerify: true} } // a throwaway self-signed apiserver

// FreeAddr is a loopback HOST:PORT nothing listens on now, for a process a test starts.
func FreeAddr(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", freePort(t))
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func randomToken(t *testing.T) string {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
