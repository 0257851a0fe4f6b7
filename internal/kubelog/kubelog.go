// SPDX-License-Identifier: Apache-2.0

// Package kubelog reads containers' logs through the Kubernetes API server's pods/log as
// timestamped lines, for `faas-cli logs` on Kubernetes: the gateway reads normal functions'
// Pods, keel-agent its NF containers. The lines are dockerlog's, merged the same way.
package kubelog

import (
	"context"

	"github.com/keel-nfv/keel/internal/dockerlog"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Target is one container of one Pod to read, and the name to report.
type Target struct{ Pod, Container, Name string }

// Read streams the lines of every target on one channel, closed when all are read (or, with
// Follow, when ctx ends). A container that cannot be read is skipped, as under Docker.
func Read(ctx context.Context, cs kubernetes.Interface, namespace string, targets []Target,
	o dockerlog.Options) <-chan dockerlog.Line {
	var streams []dockerlog.Stream
	for _, t := range targets {
		opts := &corev1.PodLogOptions{Container: t.Container, Timestamps: true, Follow: o.Follow}
		if o.Since != nil {
			opts.SinceTime = &metav1.Time{Time: *o.Since}
		}
		if o.Tail > 0 {
			n := int64(o.Tail)
			opts.TailLines = &n
		}
		rc, err := cs.CoreV1().Pods(namespace).GetLogs(t.Pod, opts).Stream(ctx)
		if err != nil {
			continue
		}
		streams = append(streams, dockerlog.Stream{Name: t.Name, R: rc})
	}
	return dockerlog.Merge(ctx, streams)
}
