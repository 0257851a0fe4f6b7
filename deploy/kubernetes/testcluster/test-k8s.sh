#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# make test-k8s: keel's Kubernetes backend on a real one-node cluster (cluster.sh), which
# this brings up and always takes down again.
#
# What it proves today: the Pod keel-agent makes for a 2-NF chain instance runs on a real
# kubelet (static CPU manager, pod-scope topology manager, PodLevelResourceManagers),
# Guaranteed, with both NF containers allowed exactly one and the same exclusive core and
# the chain buffer on hugetlbfs, while a BestEffort Pod stays off that core
# (agent/internal/runtime/node_test.go, reading the node's /proc).
#
# Not tested here yet (issue 20), each a step to add below once it exists:
#   - keel's images (keel/gateway, keel/agent, keel/coopsched, keel/placer, keel/torctl,
#     keel/ingress, redis, keel/hello) imported into the cluster's containerd
#   - the Secret keel-control-token, kubectl apply -k of deploy/kubernetes with the test
#     cluster's changes (local images, no cpu requests: the node's allocatable CPU is the one
#     core an instance takes), the keel Pods Running
#   - faas-cli deploy -f stack.yml through keel-gateway's Service; hello answering through
#     its Service
#   - keel-agent Running (with KEEL_VF=ovsveth it needs Open vSwitch on the node, and its
#     NIC bridge keel-nic-<worker> must fit 15 bytes: keel-nic-keel-k8s does not), the NF
#     Pods Running and carrying packets
# Usage: deploy/kubernetes/testcluster/test-k8s.sh (as root; binaries from build.sh --cluster)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
go=${GO:-go}
run=${KEEL_K8S_RUN:-$root/run/k8s}
cluster="$here/cluster.sh"

trap '"$cluster" down' EXIT
"$cluster" up
(cd "$root" && KEEL_K8S_KUBECONFIG="$run/admin.kubeconfig" "$go" test -count=1 -v \
  -run 'Test_instance_Pod_on_a_real_node_shares_one_exclusive_core' ./agent/internal/runtime/)
