// SPDX-License-Identifier: Apache-2.0

package leader

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/keel-nfv/keel/internal/testapiserver"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// A replica run as a separate process (this test binary again), so that it can die by
// SIGKILL, renewing nothing and giving nothing up: it prints "leading" once it leads.
func TestMain(m *testing.M) {
	if cfg := os.Getenv("KEEL_LEADER_REPLICA"); cfg != "" {
		os.Exit(replica(cfg))
	}
	os.Exit(m.Run())
}

func replica(kubeconfig string) int {
	cs, err := kubernetesFrom(kubeconfig)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, err := Lead(context.Background(), cs, options("killed"), func(string, ...any) {})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("leading")
	<-ctx.Done()
	return 0
}

func options(id string) Options {
	return Options{Enabled: true, Lease: "keel-gateway", Namespace: "keel", Identity: id,
		LeaseDuration: DefaultLeaseDuration, RenewDeadline: DefaultRenewDeadline, RetryPeriod: DefaultRetryPeriod}
}

// leadIn runs Lead for id (in Pod pod, "" for none) in the background: the channel gets its
// context once it leads.
func leadIn(ctx context.Context, t *testing.T, cs kubernetes.Interface, id, pod string) <-chan context.Context {
	ch := make(chan context.Context, 1)
	o := options(id)
	o.Pod = pod
	go func() {
		lctx, err := Lead(ctx, cs, o, t.Logf)
		if err == nil {
			ch <- lctx
		}
	}()
	return ch
}

// Replicas of keel-gateway on a real kube-apiserver, as its service account
// (deploy/kubernetes/rbac.yaml): one leads at a time; a leader killed with SIGKILL is
// replaced within the lease duration plus one retry (5 s by default), one that stops
// cleanly within a retry; a standby never leads while the leader renews.
func Test_one_replica_leads_and_a_standby_takes_over_within_the_bound(t *testing.T) {
	c := testapiserver.Start(t)
	c.ApplyRBAC(t)
	kubeconfig := c.Kubeconfig(t, t.TempDir(), testapiserver.Gateway)
	cs := c.Client(t, testapiserver.Gateway)

	// The first replica, a process of its own, leads.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "KEEL_LEADER_REPLICA="+kubeconfig)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill() //nolint:errcheck
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "leading" {
		t.Fatalf("the first replica did not lead: %q %v", lines.Text(), lines.Err())
	}

	// A standby waits while the leader renews; its Pod says so (the Service selects the
	// leader's Pod by that label). The Pod is a record only: this cluster runs no kubelet.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	admin := c.Client(t, testapiserver.Admin)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "standby", Namespace: "keel",
		Labels: map[string]string{RoleLabel: "leader"}}, // as a replica restarted after it led
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "gw", Image: "keel/gateway"}}}}
	if _, err := admin.CoreV1().Pods("keel").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	role := func() string {
		p, err := admin.CoreV1().Pods("keel").Get(ctx, "standby", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p.Labels[RoleLabel]
	}
	standby := leadIn(ctx, t, cs, "standby", "standby")
	select {
	case <-standby:
		t.Fatal("the standby leads beside a live leader")
	case <-time.After(2 * DefaultLeaseDuration):
	}
	if r := role(); r != "standby" {
		t.Fatalf("the waiting replica's Pod is labelled %s=%q, want standby", RoleLabel, r)
	}

	// SIGKILL: the leader renews nothing and gives nothing up; the standby takes over once the
	// Lease runs out.
	killed := time.Now()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait() //nolint:errcheck
	// The Lease runs out, then the standby's next try: every RetryPeriod with client-go's jitter
	// of up to 1.2 of it; + the API server's round trips on a machine that make test loads.
	bound := DefaultLeaseDuration + DefaultRetryPeriod*22/10 + 3*time.Second
	var leading context.Context
	select {
	case leading = <-standby:
		t.Logf("failover after SIGKILL of the leader: %v (bound %v)", time.Since(killed).Round(time.Millisecond), bound)
	case <-time.After(bound):
		t.Fatalf("no failover within %v of the leader's SIGKILL", bound)
	}
	lease, err := cs.CoordinationV1().Leases("keel").Get(context.Background(), "keel-gateway", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "standby" {
		t.Fatalf("the Lease's holder: %v %v", lease, err)
	}
	if r := role(); r != "leader" {
		t.Fatalf("the new leader's Pod is labelled %s=%q, want leader", RoleLabel, r)
	}

	// A clean stop gives the Lease up: the next standby leads within a retry.
	third := leadIn(context.Background(), t, cs, "third", "")
	time.Sleep(DefaultRetryPeriod)
	stopped := time.Now()
	cancel()
	<-leading.Done()
	if !errors.Is(context.Cause(leading), context.Canceled) {
		t.Fatalf("the stopped leader's context ended with %v", context.Cause(leading))
	}
	select {
	case <-third:
		t.Logf("handover after a clean stop: %v", time.Since(stopped).Round(time.Millisecond))
	case <-time.After(DefaultRetryPeriod + 2*time.Second):
		t.Fatal("no handover within a retry of the leader's clean stop")
	}
}

func Test_Check_fills_the_Pods_names_and_refuses_bad_timing(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "keel-ha")
	t.Setenv("POD_NAME", "keel-gateway-abc")
	o := options("")
	o.Namespace = ""
	if err := o.Check(); err != nil || o.Namespace != "keel-ha" || o.Identity != "keel-gateway-abc" {
		t.Fatalf("Check: %v, namespace %q, identity %q", err, o.Namespace, o.Identity)
	}
	o.RenewDeadline = o.LeaseDuration
	if err := o.Check(); err == nil || !strings.Contains(err.Error(), "lease duration") {
		t.Fatalf("renew deadline = lease duration accepted: %v", err)
	}
}

func kubernetesFrom(kubeconfig string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}
