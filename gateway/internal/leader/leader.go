// SPDX-License-Identifier: Apache-2.0

// Package leader lets several keel-gateway replicas run on Kubernetes without two of them
// acting at once. The replicas campaign for a Lease (coordination.k8s.io, client-go's
// leaderelection); the one holding it serves the REST API and keel.v1.Control and runs the
// controller, the others wait without serving (not ready, so the Service sends them
// nothing): a hot standby. When the leader dies the Lease runs out after LeaseDuration and a
// standby takes it at its next try; when the leader stops cleanly (SIGTERM, a rolling
// update) it gives the Lease up and a standby takes it within RetryPeriod. A leader that
// cannot renew within RenewDeadline stops leading, and its process ends (keel-gateway exits;
// Kubernetes starts it again as a standby), so that two leaders never write the store at once.
//
// Which replica leads is on its Pod too: the label keel.dev/gateway-role is "leader" on the
// leader's Pod and "standby" on the others' (each replica sets it on its own Pod, named by
// $POD_NAME), and keel-gateway's Service selects the leader's. A standby's Pod is ready (it
// answers /healthz), so that rollouts proceed, but receives nothing.
//
// Followers do not serve AssignFlow: the store's instance records are read-modify-written
// under the leader's in-process lock (see issue 35, compare-and-set), which a second writer
// would race.
package leader

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Options are keel-gateway's leader-election flags.
type Options struct {
	Enabled                                   bool
	Lease, Namespace, Identity                string
	Pod                                       string // this replica's Pod ($POD_NAME), labelled with its role
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// Defaults: a dead leader is replaced within LeaseDuration + 2.2 RetryPeriod (6.2 s: client-go
// retries every RetryPeriod with a jitter of up to 1.2 of it), plus the API server's round trips.
const (
	DefaultLeaseDuration = 4 * time.Second
	DefaultRenewDeadline = 3 * time.Second
	DefaultRetryPeriod   = 1 * time.Second
)

// Register adds --leader-elect and its settings to fs.
func (o *Options) Register(fs *flag.FlagSet) {
	fs.BoolVar(&o.Enabled, "leader-elect", false, "Kubernetes, several replicas: serve only while holding the Lease --leader-elect-lease\n"+
		"(a standby waits, not ready, and takes over within --leader-elect-lease-duration + --leader-elect-retry\n"+
		"of the leader's death); needs --kubeconfig or the Pod's service account")
	fs.StringVar(&o.Lease, "leader-elect-lease", "keel-gateway", "with --leader-elect: the Lease's `NAME`")
	fs.StringVar(&o.Namespace, "leader-elect-namespace", "", "with --leader-elect: the Lease's `NAMESPACE` (default: $POD_NAMESPACE, else keel)")
	fs.StringVar(&o.Identity, "leader-elect-id", "", "with --leader-elect: this replica's name in the Lease (default: $POD_NAME, else the host name)")
	fs.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", DefaultLeaseDuration, "with --leader-elect: how long a Lease not renewed holds")
	fs.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", DefaultRenewDeadline, "with --leader-elect: how long the leader tries to renew before it stops leading (and exits)")
	fs.DurationVar(&o.RetryPeriod, "leader-elect-retry", DefaultRetryPeriod, "with --leader-elect: how often standbys try to take the Lease and the leader renews it")
}

// Check fills the defaults from the Pod's environment and checks the timing.
func (o *Options) Check() error {
	if !o.Enabled {
		return nil
	}
	if o.Namespace == "" {
		o.Namespace = os.Getenv("POD_NAMESPACE")
	}
	if o.Namespace == "" {
		o.Namespace = "keel"
	}
	o.Pod = os.Getenv("POD_NAME")
	if o.Identity == "" {
		o.Identity = o.Pod
	}
	if o.Identity == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("--leader-elect-id: none given and no host name: %w", err)
		}
		o.Identity = h
	}
	if o.Lease == "" {
		return errors.New("--leader-elect-lease: empty")
	}
	if !(o.RetryPeriod > 0 && o.RenewDeadline > o.RetryPeriod && o.LeaseDuration > o.RenewDeadline) {
		return fmt.Errorf("--leader-elect timing: want lease duration (%v) > renew deadline (%v) > retry (%v) > 0",
			o.LeaseDuration, o.RenewDeadline, o.RetryPeriod)
	}
	return nil
}

// RoleLabel is the Pod label that says which replica leads ("leader" or "standby").
const RoleLabel = "keel.dev/gateway-role"

// setRole labels this replica's Pod (Options.Pod) with role; a no-op outside a Pod.
func setRole(ctx context.Context, cs kubernetes.Interface, o Options, role string) error {
	if o.Pod == "" {
		return nil
	}
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, RoleLabel, role)
	_, err := cs.CoreV1().Pods(o.Namespace).Patch(ctx, o.Pod, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("label the Pod %s/%s %s=%s: %w", o.Namespace, o.Pod, RoleLabel, role, err)
	}
	return nil
}

// ErrLost is why the context Lead returns ends when this replica stopped leading.
var ErrLost = errors.New("stopped leading: the Lease was not renewed in time")

// Lead campaigns for the Lease until this replica holds it (or ctx ends: ctx's error) and
// returns a context that ends, with cause ErrLost, when it stops leading. On ctx's end the
// Lease is given up, so that a standby takes over at once; callers must have stopped acting
// by then.
func Lead(ctx context.Context, cs kubernetes.Interface, o Options, logf func(string, ...any)) (context.Context, error) {
	// A replica restarted after it led keeps its Pod's labels: first of all, it is a standby.
	if err := setRole(ctx, cs, o, "standby"); err != nil {
		return nil, fmt.Errorf("--leader-elect: %w", err)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.Namespace, Name: o.Lease},
		Client:     cs.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: o.Identity},
	}
	leading := make(chan struct{})
	lctx, cancel := context.WithCancelCause(ctx)
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: o.LeaseDuration, RenewDeadline: o.RenewDeadline, RetryPeriod: o.RetryPeriod,
		ReleaseOnCancel: true, Name: o.Lease,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) { close(leading) },
			OnStoppedLeading: func() { cancel(ErrLost) },
			OnNewLeader: func(id string) {
				if id != o.Identity {
					logf("leader election: %s leads (Lease %s/%s); this replica (%s) waits", id, o.Namespace, o.Lease, o.Identity)
				}
			},
		},
	})
	if err != nil {
		cancel(err)
		return nil, fmt.Errorf("--leader-elect: %w", err)
	}
	go le.Run(ctx)
	select {
	case <-leading:
		logf("leader election: this replica (%s) leads (Lease %s/%s)", o.Identity, o.Namespace, o.Lease)
		if err := setRole(lctx, cs, o, "leader"); err != nil {
			cancel(err)
			return nil, fmt.Errorf("--leader-elect: %w", err)
		}
		return lctx, nil
	case <-lctx.Done():
		return nil, context.Cause(lctx)
	}
}
