#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A real one-node Kubernetes cluster for make test-k8s; see usage below.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
bin=${KEEL_K8S_BIN:-$root/build/k8s}
run=${KEEL_K8S_RUN:-$root/run/k8s}  # configs, keys, kubeconfigs, sockets, pids, logs
var=/var/lib/keel-k8s                # etcd, containerd, kubelet, CNI state
node=keel-k8s                        # the node's name
bridge=keelk8s0
node_ip=198.19.0.1                   # the bridge's address: every component listens here
pod_cidr=198.19.0.0/24
svc_cidr=198.19.128.0/24
api_svc_ip=198.19.128.1
cgroot=keel-k8s                      # the kubelet's cgroupRoot under each hierarchy
chain=KEEL-K8S                       # our filter chain, jumped to from FORWARD
hugepages=${KEEL_K8S_HUGEPAGES:-64}  # 2 MiB pages the node offers
pause_image=keel.local/pause:1
coredns_image=keel.local/coredns:1.14.7
dns_ip=198.19.128.10
sock=$run/containerd.sock
components="etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy"

usage() {
  cat <<EOF
Usage: deploy/kubernetes/testcluster/cluster.sh up|down|status [--purge]

A one-node Kubernetes cluster on this machine, for keel's Kubernetes backend tests
(make test-k8s): etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubelet
and kube-proxy (iptables mode) built by build.sh --cluster into $bin,
its own containerd (Debian's, with runc and the CNI plugins of containernetworking-plugins),
a pause image built here with gcc -static, and CoreDNS (build.sh --cluster) as the cluster
DNS at $dns_ip, answering for cluster.local only (no registry is needed or used).

  up      start it, wait until node $node is Ready, print how to use kubectl
  down    stop everything up started and remove what it made (keeps the logs;
          --purge removes them too)
  status  say which components run

The node has the static CPU manager with core 0 reserved (core 1 is the one Pods can
get exclusively), the topology manager at pod scope and the PodLevelResources and
PodLevelResourceManagers feature gates, so a Guaranteed Pod with pod-level resources gets
one exclusive core that all its containers share. It offers $hugepages 2 MiB huge pages
(KEEL_K8S_HUGEPAGES; up raises vm.nr_hugepages to that if lower, down restores it).

Where things live (nothing in the system's default paths of Docker, containerd or the
kubelet, so it runs beside the embedded stack's Docker; one such cluster per machine):
  run directory  $run: configs, keys, kubeconfigs, containerd's socket,
                 pids, logs (log/)
  state          $var: etcd, containerd's root and state, the kubelet's root
                 (with the CPU manager's state file cpu_manager_state), CNI IPAM, Pod logs
  cgroups        /sys/fs/cgroup/*/$cgroot (the kubelet's cgroupRoot)
Network: bridge $bridge with $node_ip (every component listens there only), Pods in
$pod_cidr, Services in $svc_cidr; Pods have a route to 198.18.0.0/15 only
and chain $chain in iptables' FORWARD lets them talk to each other and nothing else.
Also made and removed: kube-proxy's and the kubelet's KUBE-* rules (those outside
kube-proxy --cleanup only when none were there before up), /var/log/containers and
/var/lib/cni when up made them, symlinks in /var/log/containers, CNI
result caches /var/lib/cni/results/keel-k8s-*, and (if absent) the hugetlb cgroup
hierarchy; containerd's shims put their sockets in /run/containerd/s/ (hashed with our
socket's path, so they never collide with the system containerd's).

After up:  export KUBECONFIG=$run/admin.kubeconfig; $bin/kubectl get nodes
Environment: KEEL_K8S_BIN (binaries), KEEL_K8S_RUN (the run directory), KEEL_K8S_HUGEPAGES.
EOF
}

say() { printf 'cluster.sh: %s\n' "$*"; }
die() { say "$*" >&2; exit 1; }
kubectl() { "$bin/kubectl" --kubeconfig "$run/admin.kubeconfig" "$@"; }

pid_of() { # NAME: its pid if the process up started still runs
  local f="$run/pid/$1" p
  [ -f "$f" ] || return 1
  p=$(cat "$f")
  [ -d "/proc/$p" ] && [ "$(cat "/proc/$p/stat" 2>/dev/null | cut -d' ' -f3)" != Z ] || return 1
  echo "$p"
}

start() { # NAME BINARY ARGS...: run it in its own session, log and pid under $run
  local name=$1; shift
  setsid "$@" </dev/null >"$run/log/$name.log" 2>&1 &
  echo $! >"$run/pid/$name"
}

stop() { # NAME: SIGTERM, then SIGKILL after 15 s, by the pid up recorded
  local p i
  p=$(pid_of "$1") || { rm -f "$run/pid/$1"; return 0; }
  kill -TERM "$p" 2>/dev/null || true
  for i in $(seq 150); do
    [ -d "/proc/$p" ] || break
    sleep 0.1
  done
  if [ -d "/proc/$p" ]; then
    say "$1 (pid $p) ignored SIGTERM for 15 s: SIGKILL"
    kill -KILL "$p" 2>/dev/null || true
  fi
  rm -f "$run/pid/$1"
}

wait_for() { # SECONDS WHAT COMMAND...: poll until COMMAND succeeds while every component started runs
  local secs=$1 what=$2 t c; shift 2
  for t in $(seq $((secs * 4))); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    for c in $components; do
      [ ! -f "$run/pid/$c" ] || pid_of "$c" >/dev/null ||
        die "$c exited while waiting for $what; the end of $run/log/$c.log:
$(tail -5 "$run/log/$c.log")"
    done
    sleep 0.25
  done
  die "$what not ready after $secs s (logs in $run/log/)"
}

need() {
  [ "$(id -u)" = 0 ] || die "must run as root (it starts containerd and the kubelet)"
  local b
  for b in etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl coredns; do
    [ -x "$bin/$b" ] || die "$bin/$b is not built: run make k8s-cluster-bins (build.sh --cluster)"
  done
  for b in containerd ctr runc gcc openssl iptables ip; do
    command -v "$b" >/dev/null || die "$b is not installed (Debian: containerd, runc, gcc, openssl, iptables, iproute2)"
  done
  for b in bridge host-local loopback; do
    [ -x /usr/lib/cni/$b ] || die "/usr/lib/cni/$b is missing: apt-get install containernetworking-plugins"
  done
}

pki() { # a CA, the API server's and the kubelet's serving certs, the API server's client cert for kubelets
  local d=$run/pki
  mkdir -p "$d"
  openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj /CN=keel-k8s-ca \
    -keyout "$d/ca.key" -out "$d/ca.crt" 2>/dev/null
  cert() { # NAME SUBJECT EXTENSIONS
    printf '%s\n' "$3" >"$d/$1.ext"
    openssl req -newkey rsa:2048 -nodes -subj "$2" -keyout "$d/$1.key" -out "$d/$1.csr" 2>/dev/null
    openssl x509 -req -in "$d/$1.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial -days 30 \
      -extfile "$d/$1.ext" -out "$d/$1.crt" 2>/dev/null
  }
  cert apiserver /CN=kube-apiserver "subjectAltName=IP:$node_ip,IP:$api_svc_ip,IP:127.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local
extendedKeyUsage=serverAuth"
  cert kubelet "/CN=system:node:$node/O=system:nodes" "subjectAltName=IP:$node_ip,DNS:$node
extendedKeyUsage=serverAuth"
  cert apiserver-kubelet-client "/CN=kube-apiserver-kubelet-client/O=system:masters" "extendedKeyUsage=clientAuth"
  openssl genrsa -out "$d/sa.key" 2048 2>/dev/null
  openssl rsa -in "$d/sa.key" -pubout -out "$d/sa.pub" 2>/dev/null
}

kubeconfig() { # NAME TOKEN
  cat >"$run/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: keel-k8s
  cluster: {server: "https://$node_ip:6443", certificate-authority: "$run/pki/ca.crt"}
users:
- name: $1
  user: {token: "$2"}
contexts:
- name: keel-k8s
  context: {cluster: keel-k8s, user: $1}
current-context: keel-k8s
EOF
}

tokens() { # static tokens for the components and the admin (token file, RBAC's built-in bindings)
  local line name user groups tok
  : >"$run/tokens.csv"
  for line in "admin admin system:masters" "kubelet system:node:$node system:nodes" \
    "controller-manager system:kube-controller-manager -" "scheduler system:kube-scheduler -" \
    "kube-proxy system:kube-proxy -"; do
    set -- $line
    name=$1 user=$2 groups=$3
    tok=$(openssl rand -hex 24)
    if [ "$groups" = - ]; then
      echo "$tok,$user,$user" >>"$run/tokens.csv"
    else
      echo "$tok,$user,$user,\"$groups\"" >>"$run/tokens.csv"
    fi
    kubeconfig "$name" "$tok"
  done
  chmod 600 "$run/tokens.csv" "$run"/*.kubeconfig
}

one_file_image() { # REF FILE: an image of FILE alone at /, its entry point, imported into containerd
  local ref=$1 file=$2 d name
  name=$(basename "$file")
  d=$run/images/$name.d
  rm -rf "$d" && mkdir -p "$d/rootfs"
  cp "$file" "$d/rootfs/$name"
  python3 "$here/imagetar.py" "$d/rootfs" "$d/image.tar" --ref "$ref" --entrypoint "[\"/$name\"]" >/dev/null
  ctr -a "$sock" -n k8s.io images import --platform linux/amd64 "$d/image.tar" >/dev/null
}

images() { # the sandbox's pause (gcc -static pause.c) and CoreDNS (build.sh --cluster), no registry
  mkdir -p "$run/images"
  gcc -static -O2 -o "$run/images/pause" "$here/pause.c"
  one_file_image "$pause_image" "$run/images/pause"
  one_file_image "$coredns_image" "$bin/coredns"
}

dns() { # CoreDNS as kube-system/coredns behind Service kube-dns at $dns_ip: Services' names only
  kubectl apply -f - >/dev/null <<EOF
apiVersion: v1
kind: ServiceAccount
metadata: {name: coredns, namespace: kube-system}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "system:coredns"}
rules:
- {apiGroups: [""], resources: [endpoints, services, pods, namespaces], verbs: [list, watch]}
- {apiGroups: [discovery.k8s.io], resources: [endpointslices], verbs: [list, watch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "system:coredns"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "system:coredns"}
subjects: [{kind: ServiceAccount, name: coredns, namespace: kube-system}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: coredns, namespace: kube-system}
data:
  Corefile: |
    .:53 {
        errors
        health :8080
        ready :8181
        kubernetes cluster.local in-addr.arpa ip6.arpa {
            pods insecure
        }
        cache 30
    }
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: coredns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  replicas: 1
  selector: {matchLabels: {k8s-app: kube-dns}}
  template:
    metadata: {labels: {k8s-app: kube-dns}}
    spec:
      serviceAccountName: coredns
      dnsPolicy: Default
      containers:
      - name: coredns
        image: $coredns_image
        imagePullPolicy: Never
        args: [-conf, /etc/coredns/Corefile]
        resources: {requests: {memory: 64Mi}, limits: {memory: 128Mi}}
        ports:
        - {name: dns, containerPort: 53, protocol: UDP}
        - {name: dns-tcp, containerPort: 53, protocol: TCP}
        readinessProbe: {httpGet: {path: /ready, port: 8181}, periodSeconds: 2}
        volumeMounts: [{name: config, mountPath: /etc/coredns, readOnly: true}]
      volumes: [{name: config, configMap: {name: coredns}}]
---
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system, labels: {k8s-app: kube-dns}}
spec:
  selector: {k8s-app: kube-dns}
  clusterIP: $dns_ip
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
EOF
}

configs() {
  mkdir -p "$run/cni"
  cat >"$run/cni/10-keel-k8s.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "keel-k8s",
  "plugins": [{
    "type": "bridge", "bridge": "$bridge", "isGateway": true, "ipMasq": false, "hairpinMode": true,
    "ipam": {
      "type": "host-local", "dataDir": "$var/cni/ipam",
      "ranges": [[{"subnet": "$pod_cidr", "rangeStart": "198.19.0.10", "gateway": "$node_ip"}]],
      "routes": [{"dst": "198.18.0.0/15"}]
    }
  }]
}
EOF
  cat >"$run/containerd.toml" <<EOF
version = 2
root = "$var/containerd/root"
state = "$var/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$sock"
[ttrpc]
  address = ""
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$var/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_hugetlb_controller = false
  # Root here lacks CAP_SYS_RESOURCE, so nothing may lower oom_score_adj (runc fails on the
  # kubelet's -998 for sandboxes: "failed to update /proc/self/oom_score_adj: Permission
  # denied"); this keeps every container's at or above containerd's own.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$var/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$run/cni"
    max_conf_num = 1
EOF
  # The kubelet: cgroup v1 (failCgroupV1 false; 1.37 refuses it otherwise), cgroupfs
  # (containerd 1.6 has no RuntimeConfig RPC: the kubelet falls back to this setting), the
  # static CPU manager with core 0 reserved, the topology manager at pod scope (the CPU
  # manager allocates a pod-level "bubble" only through its pod-scope admission), and the
  # pod-level resource gates (PodLevelResourceManagers: beta, default off in 1.37).
  cat >"$run/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: /$cgroot
cpuManagerPolicy: static
reservedSystemCPUs: "0"
topologyManagerPolicy: best-effort
topologyManagerScope: pod
featureGates:
  PodLevelResources: true
  PodLevelResourceManagers: true
containerRuntimeEndpoint: unix://$sock
podLogsDir: $var/pod-logs
address: $node_ip
port: 10250
readOnlyPort: 0
healthzBindAddress: $node_ip
healthzPort: 10248
tlsCertFile: $run/pki/kubelet.crt
tlsPrivateKeyFile: $run/pki/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $run/pki/ca.crt}
authorization:
  mode: Webhook
clusterDomain: cluster.local
clusterDNS: [$dns_ip]
resolvConf: ""
maxPods: 50
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, nodefs.inodesFree: 1%}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
staticPodPath: ""
EOF
  # The kubelet refuses to start on a machine with swap unless told (this VM has none).
  if [ "$(awk 'NR > 1' /proc/swaps | wc -l)" != 0 ]; then
    printf 'failSwapOn: false\nmemorySwap: {swapBehavior: NoSwap}\n' >>"$run/kubelet.yaml"
  fi
  cat >"$run/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $run/kube-proxy.kubeconfig}
mode: iptables
hostnameOverride: $node
bindAddress: $node_ip
clusterCIDR: $pod_cidr
healthzBindAddress: $node_ip:10256
metricsBindAddress: $node_ip:10249
nodePortAddresses: ["$node_ip/32"]
iptables: {localhostNodePorts: false}
conntrack: {maxPerCore: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
}

cgroups_up() { # the kubelet's cgroupRoot in every hierarchy; hugetlb mounted if absent
  local h
  if ! grep -q ' /sys/fs/cgroup/hugetlb ' /proc/mounts && [ -d /sys/fs/cgroup/cpuset ] &&
    awk '$1 == "hugetlb" && $4 == 1 { f = 1 } END { exit !f }' /proc/cgroups; then
    mkdir -p /sys/fs/cgroup/hugetlb
    mount -t cgroup -o hugetlb cgroup /sys/fs/cgroup/hugetlb
    touch "$run/mounted-hugetlb"
  fi
  for h in /sys/fs/cgroup/*/; do
    grep -q " ${h%/} cgroup" /proc/mounts || continue
    mkdir -p "$h$cgroot"
  done
  if [ -f /sys/fs/cgroup/cpuset/cpuset.cpus ]; then
    cat /sys/fs/cgroup/cpuset/cpuset.cpus >/sys/fs/cgroup/cpuset/$cgroot/cpuset.cpus
    cat /sys/fs/cgroup/cpuset/cpuset.mems >/sys/fs/cgroup/cpuset/$cgroot/cpuset.mems
  fi
}

kube_chains() { # the KUBE-* chains kube-proxy and the kubelet make outside kube-proxy's own
  local t tb c
  for t in iptables ip6tables; do
    for tb in filter nat mangle; do
      for c in KUBE-FIREWALL KUBE-IPTABLES-HINT KUBE-KUBELET-CANARY; do
        $t -w -t $tb -n -L $c >/dev/null 2>&1 && echo "$t $tb $c"
      done
    done
  done
  return 0
}

network_up() {
  # kube-proxy --cleanup leaves KUBE-FIREWALL (shared with the kubelet, which also makes
  # KUBE-IPTABLES-HINT and KUBE-KUBELET-CANARY): down removes them only when up found none.
  [ -n "$(kube_chains)" ] || touch "$run/kube-chains-ours"
  ip link show "$bridge" >/dev/null 2>&1 || ip link add "$bridge" type bridge
  ip addr show dev "$bridge" | grep -q " $node_ip/" || ip addr add "$node_ip/24" dev "$bridge"
  ip link set "$bridge" up
  iptables -w -N "$chain" 2>/dev/null || iptables -w -F "$chain"
  iptables -w -A "$chain" -i "$bridge" -o "$bridge" -j ACCEPT
  iptables -w -A "$chain" -i "$bridge" -j DROP
  iptables -w -A "$chain" -o "$bridge" -j DROP
  iptables -w -C FORWARD -j "$chain" 2>/dev/null || iptables -w -I FORWARD 1 -j "$chain"
}

hugepages_up() {
  local now
  now=$(cat /proc/sys/vm/nr_hugepages)
  if [ "$now" -lt "$hugepages" ]; then
    echo "$now" >"$run/nr_hugepages.before"
    echo "$hugepages" >/proc/sys/vm/nr_hugepages
    now=$(cat /proc/sys/vm/nr_hugepages)
    [ "$now" -ge "$hugepages" ] || say "warning: asked for $hugepages huge pages, the kernel gave $now"
  fi
}

api_ready() { kubectl get --raw /readyz >/dev/null 2>&1; }
node_ready() {
  [ "$(kubectl get node "$node" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

owner_is_us() { # the machine has one such cluster: refuse one whose run directory is another
  local o
  o=$(cat "$var/owner" 2>/dev/null) || return 0
  [ "$o" = "$run" ] || die "$var belongs to the cluster of $o: take it down from there (KEEL_K8S_RUN=$o)"
}

running() { local c n=0; for c in $components; do pid_of "$c" >/dev/null && n=$((n + 1)); done; echo $n; }

up() {
  need
  local n t0 t
  n=$(running)
  if [ "$n" = 7 ]; then
    say "already up (every component runs); export KUBECONFIG=$run/admin.kubeconfig"
    return 0
  fi
  owner_is_us
  if [ "$n" != 0 ] || [ -d "$var" ] || ip link show "$bridge" >/dev/null 2>&1; then
    say "a previous cluster is partly there ($n of 7 components run): taking it down first"
    down
  fi
  t0=$(date +%s.%N)
  mkdir -p "$run/log" "$run/pid" "$var"
  echo "$run" >"$var/owner"
  # The kubelet's /var/log/containers and the CNI library's /var/lib/cni are fixed paths:
  # down removes them (when empty) only if they were not there before.
  for d in /var/log/containers /var/lib/cni; do [ -e "$d" ] || echo "$d" >>"$run/made-dirs"; done
  hugepages_up
  cgroups_up
  network_up
  pki
  tokens
  configs

  start etcd "$bin/etcd" --name "$node" --data-dir "$var/etcd" \
    --listen-client-urls "http://$node_ip:2379" --advertise-client-urls "http://$node_ip:2379" \
    --listen-peer-urls "http://$node_ip:2380" --initial-advertise-peer-urls "http://$node_ip:2380" \
    --initial-cluster "$node=http://$node_ip:2380" --unsafe-no-fsync --log-level warn
  start kube-apiserver "$bin/kube-apiserver" --etcd-servers "http://$node_ip:2379" \
    --bind-address "$node_ip" --advertise-address "$node_ip" --secure-port 6443 \
    --tls-cert-file "$run/pki/apiserver.crt" --tls-private-key-file "$run/pki/apiserver.key" \
    --client-ca-file "$run/pki/ca.crt" --token-auth-file "$run/tokens.csv" \
    --authorization-mode Node,RBAC --enable-admission-plugins NodeRestriction \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$run/pki/sa.pub" --service-account-signing-key-file "$run/pki/sa.key" \
    --service-cluster-ip-range "$svc_cidr" \
    --kubelet-client-certificate "$run/pki/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$run/pki/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$run/pki/ca.crt" --kubelet-preferred-address-types InternalIP \
    --allow-privileged --v 1
  start containerd containerd --config "$run/containerd.toml"
  wait_for 120 kube-apiserver api_ready
  t=$(date +%s.%N)
  say "kube-apiserver ready after $(awk "BEGIN { printf \"%.1f\", $t - $t0 }") s"
  start kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$run/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$run/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$run/controller-manager.kubeconfig" \
    --bind-address "$node_ip" --leader-elect=false --use-service-account-credentials \
    --service-account-private-key-file "$run/pki/sa.key" --root-ca-file "$run/pki/ca.crt" \
    --cluster-signing-cert-file "$run/pki/ca.crt" --cluster-signing-key-file "$run/pki/ca.key" \
    --service-cluster-ip-range "$svc_cidr" --v 1
  start kube-scheduler "$bin/kube-scheduler" --kubeconfig "$run/scheduler.kubeconfig" \
    --authentication-kubeconfig "$run/scheduler.kubeconfig" --authorization-kubeconfig "$run/scheduler.kubeconfig" \
    --bind-address "$node_ip" --leader-elect=false --v 1
  wait_for 60 containerd ctr -a "$sock" version
  images
  start kubelet "$bin/kubelet" --config "$run/kubelet.yaml" --kubeconfig "$run/kubelet.kubeconfig" \
    --root-dir "$var/kubelet" --cert-dir "$run/pki" --hostname-override "$node" --node-ip "$node_ip" --v 2
  start kube-proxy "$bin/kube-proxy" --config "$run/kube-proxy.yaml" --v 1
  wait_for 180 "node $node" node_ready
  t=$(date +%s.%N)
  say "node $node Ready after $(awk "BEGIN { printf \"%.1f\", $t - $t0 }") s"
  wait_for 60 "ServiceAccount kube-system/default" kubectl -n kube-system get serviceaccount default
  dns
  wait_for 120 "the cluster DNS (kube-system/coredns)" \
    kubectl -n kube-system wait --for=condition=Available deployment/coredns --timeout=1s
  wait_for 60 "ServiceAccount default" kubectl -n default get serviceaccount default
  t=$(date +%s.%N)
  say "cluster DNS ready after $(awk "BEGIN { printf \"%.1f\", $t - $t0 }") s"
  [ "$(running)" = 7 ] || die "a component exited: $(status)"
  cat <<EOF

  export KUBECONFIG=$run/admin.kubeconfig
  $bin/kubectl get nodes
  logs: $run/log/   stop: deploy/kubernetes/testcluster/cluster.sh down
EOF
}

status() {
  local c p out=""
  for c in $components; do
    if p=$(pid_of "$c"); then out="$out $c:$p"; else out="$out $c:stopped"; fi
  done
  echo "${out# }"
}

drain_pods() { # delete every Pod through the API so the kubelet tears down their networks
  pid_of kube-apiserver >/dev/null && pid_of kubelet >/dev/null && pid_of containerd >/dev/null || return 0
  kubectl delete deployments,replicasets,statefulsets,daemonsets,jobs --all --all-namespaces --cascade=orphan \
    --wait=false >/dev/null 2>&1 || true
  kubectl delete pods --all --all-namespaces --grace-period=1 --wait=false >/dev/null 2>&1 || return 0
  local t
  for t in $(seq 120); do
    [ -z "$(kubectl get pods -A -o name 2>/dev/null)" ] && break
    sleep 0.5
  done
  # Pods are gone from the API once their containers stopped; their sandboxes (and the
  # CNI teardown) follow within seconds.
  for t in $(seq 60); do
    [ -z "$(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null)" ] && break
    sleep 0.5
  done
}

leftover_tasks() { # kill what containerd still runs of this cluster and free the sandboxes' netns
  pid_of containerd >/dev/null || return 0
  local id ns
  for id in $(ctr -a "$sock" -n k8s.io containers ls -q 2>/dev/null); do
    ns=$(ctr -a "$sock" -n k8s.io containers info "$id" 2>/dev/null |
      sed -n 's/.*"path": "\([^"]*\/netns\/cni-[^"]*\)".*/\1/p' | head -1)
    ctr -a "$sock" -n k8s.io tasks kill -s KILL "$id" >/dev/null 2>&1 || true
    ctr -a "$sock" -n k8s.io tasks delete -f "$id" >/dev/null 2>&1 || true
    if [ -n "$ns" ] && [ -e "$ns" ]; then umount "$ns" 2>/dev/null || true; rm -f "$ns"; fi
  done
}

shims() { # pids of containerd shims serving our socket (started by our containerd)
  local p
  for p in /proc/[0-9]*; do
    tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -q -- "-address $sock " && echo "${p#/proc/}"
  done
  return 0
}

down() {
  [ "$(id -u)" = 0 ] || die "must run as root"
  local c p m any=0
  [ -d "$run/pid" ] || [ -d "$var" ] || ip link show "$bridge" >/dev/null 2>&1 || iptables -w -n -L "$chain" >/dev/null 2>&1 || {
    say "nothing to take down"
    return 0
  }
  owner_is_us
  mkdir -p "$run/log"
  drain_pods
  stop kube-proxy
  "$bin/kube-proxy" --cleanup >"$run/log/kube-proxy-cleanup.log" 2>&1 || say "kube-proxy --cleanup failed: see $run/log/kube-proxy-cleanup.log"
  stop kubelet
  leftover_tasks
  for c in kube-scheduler kube-controller-manager kube-apiserver etcd containerd; do stop "$c"; done
  for p in $(shims); do kill -KILL "$p" 2>/dev/null && any=1; done
  [ "$any" = 0 ] || say "killed leftover containerd shims of this cluster"
  # Mounts under our directories (the kubelet's rshared root, Pods' volumes, containerd's
  # rootfs and shm), deepest first.
  for m in $(awk -v a="$var" -v b="$run" 'index($2, a) == 1 || index($2, b) == 1 { print $2 }' /proc/mounts | sort -r); do
    umount "$m" 2>/dev/null || umount -l "$m"
  done
  for p in $(ip -o link show master "$bridge" 2>/dev/null | awk -F': ' '{ print $2 }' | cut -d@ -f1); do
    ip link del "$p" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  if iptables -w -n -L "$chain" >/dev/null 2>&1; then
    while iptables -w -D FORWARD -j "$chain" 2>/dev/null; do :; done
    iptables -w -F "$chain" && iptables -w -X "$chain"
  fi
  if [ -f "$run/kube-chains-ours" ]; then
    kube_chains | while read -r t tb c; do
      while $t -w -t $tb -D INPUT -j $c 2>/dev/null; do :; done
      while $t -w -t $tb -D OUTPUT -j $c 2>/dev/null; do :; done
      $t -w -t $tb -F $c && $t -w -t $tb -X $c
    done
  fi
  rm -f /var/lib/cni/results/keel-k8s-*
  find /var/log/containers -maxdepth 1 -type l -lname "$var/*" -delete 2>/dev/null || true
  if [ -f "$run/made-dirs" ]; then
    while read -r d; do [ ! -d "$d" ] || find "$d" -depth -type d -empty -delete; done <"$run/made-dirs"
  fi
  for c in /sys/fs/cgroup/*/$cgroot; do
    [ -d "$c" ] && find "$c" -depth -type d -exec rmdir {} + 2>/dev/null || true
    [ -d "$c" ] && say "warning: cgroup $c still has tasks: $(find "$c" -name tasks -exec cat {} + | tr '\n' ' ')"
  done
  if [ -f "$run/mounted-hugetlb" ]; then
    umount /sys/fs/cgroup/hugetlb && rmdir /sys/fs/cgroup/hugetlb || say "warning: could not unmount /sys/fs/cgroup/hugetlb"
  fi
  if [ -f "$run/nr_hugepages.before" ]; then
    cat "$run/nr_hugepages.before" >/proc/sys/vm/nr_hugepages
  fi
  rm -rf "$var"
  if [ "${purge:-0}" = 1 ]; then
    rm -rf "$run"
  else
    find "$run" -mindepth 1 -maxdepth 1 ! -name log -exec rm -rf {} +
  fi
  say "down: nothing of the cluster runs or remains$([ "${purge:-0}" = 1 ] || echo " (logs kept in $run/log)")"
}

cmd=${1:-}
purge=0
[ "${2:-}" = --purge ] && purge=1
case "$cmd" in
  up) up ;;
  down) down ;;
  status) status ;;
  -h | --help | help) usage ;;
  *) usage >&2; exit 2 ;;
esac
