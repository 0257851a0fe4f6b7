#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Builds the real etcd and kube-apiserver that keel's API-server-level tests run
# (internal/testapiserver) from pinned Go modules, into build/k8s/, only when missing or
# built from other versions. kube-apiserver: k8s.io/kubernetes v1.37.2 with its staging
# modules replaced by their v0.37.2 releases (apiserver/go.mod), ~7 min on 2 idle cores,
# ~18 min with the machine busy; etcd: go.etcd.io/etcd/server/v3 v3.6.16 (etcd/go.mod),
# ~30 s to 2 min. Each is its own module so keel's go.mod never pulls them.
# With --cluster (or KEEL_K8S_CLUSTER=1) it also builds what the one-node cluster of
# cluster.sh (make test-k8s) runs, from the same apiserver/go.mod: kube-controller-manager,
# kube-scheduler, kubelet, kube-proxy and kubectl (minutes each on 2 cores), and CoreDNS
# v1.14.7 for its cluster DNS (coredns/go.mod).
# Usage: deploy/kubernetes/testcluster/build.sh [--cluster] [OUT_DIR]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
cluster=${KEEL_K8S_CLUSTER:-0}
if [ "${1:-}" = --cluster ]; then cluster=1; shift; fi
out=${1:-$root/build/k8s}
go=${GO:-go}
mkdir -p "$out"
# Kubernetes binaries report the version they are built from (kubectl version, the node's
# kubeletVersion), as the release's own builds do.
k8s=$(awk '$1 == "k8s.io/kubernetes" { print $2 }' "$here/apiserver/go.mod")
minor=${k8s#v1.}
minor=${minor%%.*}
k8sflags="-X k8s.io/component-base/version.gitVersion=$k8s -X k8s.io/component-base/version.gitMajor=1"
k8sflags="$k8sflags -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
k8sflags="$k8sflags -X k8s.io/client-go/pkg/version.gitVersion=$k8s -X k8s.io/client-go/pkg/version.gitMajor=1"
k8sflags="$k8sflags -X k8s.io/client-go/pkg/version.gitMinor=$minor"
build() { # NAME MODULE_DIR PACKAGE [LDFLAGS]
  stamp="$out/$1.stamp"
  want=$( (cat "$here/$2/go.mod" "$here/$2/go.sum"; [ -z "${4:-}" ] || echo "$4") | sha256sum | cut -c1-16)
  if [ -x "$out/$1" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    echo "$out/$1: up to date"
    return
  fi
  echo "building $out/$1 from $2/go.mod (takes minutes; log in $out/$1.build.log)"
  start=$(date +%s)
  (cd "$here/$2" && nice -n 19 "$go" build -trimpath -ldflags="-s -w ${4:-}" -o "$out/$1.tmp" "$3") >"$out/$1.build.log" 2>&1 ||
    { tail -20 "$out/$1.build.log"; exit 1; }
  mv "$out/$1.tmp" "$out/$1"
  echo "$want" >"$stamp"
  echo "$out/$1: built in $(( $(date +%s) - start )) s"
}
build etcd etcd .
build kube-apiserver apiserver k8s.io/kubernetes/cmd/kube-apiserver "$k8sflags"
[ "$cluster" = 1 ] || exit 0
for cmd in kube-controller-manager kube-scheduler kubelet kube-proxy kubectl; do
  build "$cmd" apiserver "k8s.io/kubernetes/cmd/$cmd" "$k8sflags"
done
# The cluster DNS, static: cluster.sh makes it a one-file image.
(CGO_ENABLED=0 && export CGO_ENABLED && build coredns coredns github.com/coredns/coredns)
