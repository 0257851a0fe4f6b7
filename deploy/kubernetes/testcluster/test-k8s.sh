#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# make test-k8s: keel's Kubernetes backend on a real one-node cluster (cluster.sh), which
# this brings up and always takes down again.
#
# What it proves today:
#   1. the Pod keel-agent makes for a 2-NF chain instance runs on a real kubelet (static CPU
#      manager, pod-scope topology manager, PodLevelResourceManagers), Guaranteed, with
#      both NF containers allowed exactly one and the same exclusive core and the chain
#      buffer on hugetlbfs, while a BestEffort Pod stays off that core
#      (agent/internal/runtime/node_test.go, reading the node's /proc);
#   2. keel's control plane from deploy/kubernetes-testcluster with the images of
#      images.sh: keel-gateway, keel-place, keel-torctl and Redis Running, and the stock
#      faas-cli logged in to keel-gateway through its Service, listing its functions; two
#      keel-gateway replicas, the leader's Pod the Service's: its Pod deleted, the standby
#      takes over and faas-cli answers again through the Service (the time is printed);
#   3. stack.yml's normal function: faas-cli deploy -f stack.yml --filter hello through
#      keel-gateway makes its Deployment and Service, and hello answers through the
#      gateway (/function/hello) and on its own Service, from its Pod.
#
#   4. stack.yml's chains carry packets: with Open vSwitch and the ToR of rack.sh on the
#      node, the node labelled for NFs and the ingress, keel-agent + keel-coopsched and
#      keel-ingress run from their DaemonSets; faas-cli deploy -f stack.yml (all of it)
#      through keel-gateway; chain2's and chain3's instance Pods and their pooled ones reach
#      Running side by side on the node's one core (Guaranteed, 100m of cpu each:
#      KEEL_INSTANCE_CPUS of deploy/kubernetes-testcluster) and their NFs register with
#      coopsched (faas-cli describe: phase ready, attached on core 1); flows from the
#      source reach the sink through the ToR, the ingress and the NF Pods, changed as each
#      chain changes them (chains.py); faas-cli logs shows the NFs' lines; the NFs'
#      statistics reach the agent; faas-cli remove
#      deletes the Pods.
#   5. NF state on Kubernetes: chain3's NAT keeps its mappings in Redis (its instance's own
#      Redis user, reached over the Pod network); its Pod deleted mid-flow, the agent rebuilds
#      it and the same flows, sent last first, keep their NAT ports; removed, the chains'
#      state is deleted.
#   6. whole cores per instance, the base's default (KEEL_INSTANCE_CPUS 1, the agent
#      restarted): chain3's Pod is Guaranteed with one cpu, the kubelet's static CPU manager
#      puts its NF in a cpuset of core 1 alone, and its flows arrive NATed (chains.py).
# It holds /tmp/keel-core1.lock (core 1, coopsched's, as make test's stack tests do) and
# refuses to run beside make up's stack (rack.sh: the ToR's names are the same).
# Usage: deploy/kubernetes/testcluster/test-k8s.sh (as root; binaries from build.sh
# --cluster, keel's from make build; FAAS_CLI, else faas-cli on PATH or ../shared/tools)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
go=${GO:-go}
run=${KEEL_K8S_RUN:-$root/run/k8s}
bin=${KEEL_K8S_BIN:-$root/build/k8s}
cluster="$here/cluster.sh"
faas=${FAAS_CLI:-$(command -v faas-cli || echo "$root/../shared/tools/faas-cli")}
pv=/var/lib/keel-testcluster # the overlay's hostPath volumes (volumes.yaml)
tmp=$(mktemp -d /tmp/keel-test-k8s.XXXXXX)

made_pv=0
[ -e "$pv" ] || made_pv=1
exec 9>/tmp/keel-core1.lock
flock -w 600 9 || { echo "test-k8s: core 1 stays taken (/tmp/keel-core1.lock: another keel stack or test)"; exit 1; }
cleanup() {
  [ -z "${keepalive:-}" ] || kill "$keepalive" 2>/dev/null || true
  "$cluster" down
  "$here/rack.sh" down
  [ "$made_pv" = 0 ] || rm -rf "$pv"
  rm -rf "$tmp"
}
trap cleanup EXIT
kubectl() { "$bin/kubectl" --kubeconfig "$run/admin.kubeconfig" "$@"; }
step() { printf '\ntest-k8s: %s\n' "$*"; }
# What the cluster's chains and their Pods said, for a failure after step 4 started them.
diagnose() {
  [ -n "${gw:-}" ] || return 0
  for c in chain2 chain3; do HOME=$tmp "$faas" describe "$c" -g "$gw" 2>/dev/null | grep com.keel.instances || true; done
  kubectl -n keel-nf get pods -o wide 2>/dev/null || true
  local p
  for p in $(kubectl -n keel-nf get pods -o name 2>/dev/null); do
    echo "--- logs of $p"; kubectl -n keel-nf logs "$p" --all-containers --tail=30 2>/dev/null || true
  done
  for p in keel-agent keel-ingress; do
    echo "--- logs of $p"; kubectl -n keel logs "daemonset/$p" --all-containers --tail=40 2>/dev/null || true
  done
  # Where keel-agent's goroutines are (SIGQUIT: Go prints them and exits; the DaemonSet's
  # container restarts): the agent this cluster runs, found by its command line.
  local pid
  for pid in $(grep -l -- '--runtime=kubernetes' /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3); do
    grep -qa keel-agent "/proc/$pid/cmdline" 2>/dev/null || continue
    kill -QUIT "$pid" 2>/dev/null || continue
    sleep 3
    echo "--- keel-agent's goroutines (pid $pid)"
    kubectl -n keel logs daemonset/keel-agent -c keel-agent --previous 2>/dev/null | grep -A12 '^goroutine ' | grep -B3 -A8 'internal/agent' | head -150 || true
  done
}
fail() { echo "test-k8s: $*"; diagnose; exit 1; }
# until SECONDS WHAT COMMAND...: poll COMMAND every half second
until_ok() {
  local n=$(($1 * 2)) what=$2 t
  shift 2
  for t in $(seq "$n"); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  fail "$what: not within $((n / 2)) s"
}

# The lock's descriptor stays here: the daemons started below must not hold core 1's lock.
"$cluster" up 9>&-

step "1. an instance's Pod shares one exclusive core"
(cd "$root" && KEEL_K8S_KUBECONFIG="$run/admin.kubeconfig" "$go" test -count=1 -v \
  -run 'Test_instance_Pod_on_a_real_node_shares_one_exclusive_core' ./agent/internal/runtime/)

step "2. keel's control plane from deploy/kubernetes-testcluster"
"$here/images.sh" --out "$tmp/images" --import "$run/containerd.sock" gateway placer torctl redis hello \
  agent coopsched nf-base ingress
# As the README's "On Kubernetes" says, with the test overlay for deploy/kubernetes.
kubectl apply -f "$root/deploy/kubernetes/namespace.yaml"
kubectl -n keel create secret generic keel-control-token --from-literal=control-token="$(openssl rand -hex 32)"
mkdir -p "$tmp/redis"
"$root/deploy/lib/redis-acl.sh" "$tmp/redis" >"$tmp/redis/users.acl.tmp" && mv "$tmp/redis/users.acl.tmp" "$tmp/redis/users.acl"
kubectl -n keel create secret generic keel-redis --from-file=users.acl="$tmp/redis/users.acl" \
  --from-file=gateway="$tmp/redis/redis-gateway" --from-file=agent="$tmp/redis/redis-agent"
kubectl apply -k "$root/deploy/kubernetes-testcluster" >/dev/null
kubectl -n keel rollout status --timeout=180s deployment/keel-gateway
kubectl -n keel rollout status --timeout=180s deployment/keel-place
kubectl -n keel rollout status --timeout=180s deployment/keel-torctl
kubectl -n keel rollout status --timeout=180s statefulset/redis
gw="http://$(kubectl -n keel get service keel-gateway -o 'jsonpath={.spec.clusterIP}'):8080"
# The Service answers once its EndpointSlice is made and kube-proxy has synced (until
# then it rejects: connection refused).
for t in $(seq 60); do
  if HOME=$tmp "$faas" login -g "$gw" -u admin --password-stdin <"$pv/gateway-secrets/basic-auth-password" \
    >"$tmp/login.log" 2>&1; then
    break
  fi
  [ "$t" != 60 ] || { cat "$tmp/login.log"; exit 1; }
  sleep 0.5
done
echo "test-k8s: faas-cli logged in after $t tries"
HOME=$tmp "$faas" list -g "$gw"
echo "test-k8s: keel-gateway answers faas-cli at $gw through its Service"
# The README's login: a port-forward to the gateway's Service and its password read with
# kubectl exec (on port 18080 here, so as not to meet a local stack's 8080).
kubectl -n keel port-forward svc/keel-gateway 18080:8080 >"$tmp/port-forward.log" 2>&1 &
pf=$!
readme_login() {
  kubectl -n keel exec deploy/keel-gateway -- cat /var/lib/keel/secrets/basic-auth-password |
    HOME=$tmp/readme "$faas" login -g http://127.0.0.1:18080 -u admin --password-stdin
}
mkdir -p "$tmp/readme"
until_ok 30 "the README's faas-cli login through kubectl port-forward" readme_login
HOME=$tmp/readme "$faas" list -g http://127.0.0.1:18080 >/dev/null
kill "$pf"
echo "test-k8s: the README's login (port-forward, password by kubectl exec) works"

# Two keel-gateway replicas: the leader's Pod is the Service's; the other waits. Killing the
# leader's Pod hands the Service to the standby (the Lease runs out, or is given up).
leader=$(kubectl -n keel get pods -l keel.dev/gateway-role=leader -o 'jsonpath={.items[*].metadata.name}')
[ "$(wc -w <<<"$leader")" = 1 ] || { echo "test-k8s: want one keel-gateway leader Pod, got '$leader'"; exit 1; }
t0=$(date +%s%N)
kubectl -n keel delete pod "$leader" --grace-period=0 --force >/dev/null 2>&1
for t in $(seq 120); do
  new=$(kubectl -n keel get pods -l keel.dev/gateway-role=leader -o 'jsonpath={.items[*].metadata.name}')
  if [ -n "$new" ] && [ "$new" != "$leader" ] && HOME=$tmp "$faas" list -g "$gw" >/dev/null 2>&1; then
    break
  fi
  [ "$t" != 120 ] || { echo "test-k8s: no keel-gateway took over within 30 s of $leader's death"; exit 1; }
  sleep 0.25
done
echo "test-k8s: keel-gateway failed over from $leader to $new in $(( ($(date +%s%N) - t0) / 1000000 )) ms (faas-cli list answers again)"

step "3. stack.yml's hello through keel-gateway and its Service"
(cd "$root" && HOME=$tmp "$faas" deploy -f stack.yml --filter hello -g "$gw")
kubectl -n openfaas-fn rollout status --timeout=180s deployment/hello
answer=
for t in $(seq 60); do
  answer=$(curl -sf --max-time 5 -d ping "$gw/function/hello") && break
  [ "$t" != 60 ] || { echo "test-k8s: hello never answered through the gateway"; exit 1; }
  sleep 0.5
done
pod=$(kubectl -n openfaas-fn get pods -l faas_function=hello -o 'jsonpath={.items[0].metadata.name}')
[ "$answer" = "hello from $pod: ping" ] || { echo "test-k8s: the gateway's hello said '$answer', want its Pod $pod"; exit 1; }
svc="http://$(kubectl -n openfaas-fn get service hello -o 'jsonpath={.spec.clusterIP}'):8080"
direct=$(curl -sf --max-time 5 -d pong "$svc/")
[ "$direct" = "hello from $pod: pong" ] || { echo "test-k8s: hello's Service said '$direct'"; exit 1; }
HOME=$tmp "$faas" remove hello -g "$gw"
echo "test-k8s: hello answers through keel-gateway and on its Service $svc"

step "4. stack.yml's chains carry packets through the ToR, keel-ingress and the NF Pods"
"$here/rack.sh" up 9>&-
# The agent's VF scheme needs OVS on the node (rack.sh); both DaemonSets start once labelled.
kubectl label node keel-k8s keel.dev/nf=true keel.dev/ingress=true
kubectl -n keel rollout status --timeout=180s daemonset/keel-agent
kubectl -n keel rollout status --timeout=180s daemonset/keel-ingress
# The node's trunk to the ToR: keel-tor-ID, ID the node name's vf.WorkerPortID (keel-k8s is
# longer than 6 bytes: h and 5 hex digits of its SHA-256).
trunk=keel-tor-h$(printf %s keel-k8s | sha256sum | cut -c1-5)
until_ok 60 "keel-agent's trunk $trunk" ip link show "$trunk"
"$here/rack.sh" trunk "$trunk"
"$here/rack.sh" controller "tcp:$(kubectl -n keel get service keel-torctl -o 'jsonpath={.spec.clusterIP}'):6653"
torctl_pod=$(kubectl -n keel get pods -l app.kubernetes.io/name=keel-torctl -o 'jsonpath={.items[0].status.podIP}')
torctl_connected() { curl -sf --max-time 2 "http://$torctl_pod:9102/metrics" | grep -Eqx 'keel_torctl_switch_connected 1(\.0)?'; }
until_ok 60 "keel-torctl connected to the ToR" torctl_connected
# All of stack.yml: the three chains, the packet function ttlguard (a record: no chain names
# it, and no Pod is made for a packet function) and hello again.
(cd "$root" && HOME=$tmp "$faas" deploy -f stack.yml -g "$gw")
listed=$(HOME=$tmp "$faas" list -g "$gw" | awk 'NR > 1 {print $1}' | sort | tr '\n' ' ')
[ "$listed" = "chain1 chain2 chain3 hello ttlguard " ] || fail "faas-cli list after deploying stack.yml: $listed"
ready() { HOME=$tmp "$faas" describe "$1" -g "$gw" | grep -q 'phase=ready'; }
until_ok 180 "chain2 ready" ready chain2
until_ok 180 "chain3 ready" ready chain3
venv=$root/.venv/bin/python
"$venv" "$here/chains.py" --flows 4 --packets 10 || fail "stack.yml's flows"
# The flows' instances ran attached on coopsched's core 1 (the core the controller chose).
for c in chain2 chain3; do
  line=$(HOME=$tmp "$faas" describe "$c" -g "$gw" | grep com.keel.instances)
  echo "test-k8s: $c: $line"
  grep -Eq "$c/[0-9]+ attached worker=keel-k8s vlan=[0-9]+ core=1 flows=" <<<"$line" ||
    fail "$c has no instance attached on core 1"
done
# faas-cli logs of a chain: the agent reads its NF containers' logs through pods/log.
logs=$(HOME=$tmp "$faas" logs chain3 --tail=false --instance -g "$gw" 2>&1) || fail "faas-cli logs chain3 failed: $logs"
grep -q "nat running under keel-coopsched" <<<"$logs" || fail "faas-cli logs chain3 lacks its NF's start: $logs"
echo "test-k8s: faas-cli logs chain3: $(grep -c 'running under keel-coopsched' <<<"$logs") NF start lines"
# The NFs' statistics files, on the Pod's stats emptyDir, reach the agent (its metrics).
agent_ip=$(kubectl get node keel-k8s -o 'jsonpath={.status.addresses[?(@.type=="InternalIP")].address}')
chain3_rx() { # packets chain3's instances received, as keel-agent reports them
  curl -sf --max-time 2 "http://$agent_ip:9101/metrics" |
    awk '/^keel_agent_instance_rx_packets_total\{/ && /chain="chain3"/ {n += $NF} END {print n + 0}'
}
chain3_counted() { [ "$(chain3_rx)" -ge 40 ]; }
until_ok 30 "chain3's NF statistics in keel-agent's metrics" chain3_counted
# The operator's view (the dashboard's JSON): the node with its managed core, the chains.
topo=$(curl -sf --max-time 5 -u "admin:$(cat "$pv/gateway-secrets/basic-auth-password")" "$gw/system/keel/topology")
"$venv" -c '
import json, sys
t = json.loads(sys.argv[1])
w = [w for w in t["workers"] if w["name"] == "keel-k8s"]
assert w and [c["id"] for c in w[0]["cores"]] == [1], t["workers"]
assert {"chain1", "chain2", "chain3"} <= {c["name"] for c in t["chains"]}, [c["name"] for c in t["chains"]]
print("test-k8s: /system/keel/topology: worker keel-k8s with core 1, chains", sorted(c["name"] for c in t["chains"]))
' "$topo" || fail "the topology JSON: $topo"
# With each chain's first instance attached, the controller pools one more: four Pods.
four_running() { [ "$(kubectl -n keel-nf get pods -l com.keel.chain --field-selector status.phase=Running -o name | wc -l)" -ge 4 ]; }
until_ok 180 "four instance Pods Running (chain2's and chain3's, and a pooled one each)" four_running
two_ready() { [ "$(HOME=$tmp "$faas" describe "$1" -g "$gw" | grep -o 'phase=ready' | wc -l)" -ge 2 ]; }
until_ok 120 "chain2's two instances ready (NFs registered with coopsched)" two_ready chain2
until_ok 120 "chain3's two instances ready (NFs registered with coopsched)" two_ready chain3
kubectl -n keel-nf get pods -o wide
# Side by side on the node's one core: each instance's Pod Guaranteed with 100m of cpu
# (KEEL_INSTANCE_CPUS), stack.yml's two server chains and their pooled instances.
shape=$(kubectl -n keel-nf get pods -l com.keel.chain \
  -o 'jsonpath={range .items[*]}{.status.qosClass}/{.spec.resources.limits.cpu}{"\n"}{end}' | sort | uniq -c)
echo "test-k8s: instance Pods (count qos/cpu): $(echo $shape)"
[ "$(echo $shape | awk '{print $2}')" = Guaranteed/100m ] && [ "$(echo "$shape" | wc -l)" = 1 ] &&
  [ "$(echo $shape | awk '{print $1}')" -ge 4 ] || fail "instance Pods are not all Guaranteed with 100m of cpu: $shape"
echo "test-k8s: stack.yml's chains carried packets on the cluster"

step "5. NF state outlives an instance's Pod: chain3's NAT mappings after its Pod is deleted mid-flow"
# chain3's NAT keeps its mappings in Redis (keel:state:<tenant>:<group>:*) as its instance's
# own Redis user. Four new flows, then chain3/0's Pod deleted while the flows go on (a packet
# each per second, lost until the instance is back, keeping their ToR rules to chain3/0);
# the agent rebuilds the Pod as the same instance, whose NAT reads the mappings back. The
# flows then come again last first: a NAT with empty tables hands its ports out in the
# other order.
"$venv" "$here/chains.py" --chains chain3 --flows 4 --packets 10 --sport 22000 --nat-map "$tmp/nat.json" || fail "chain3's flows before its Pod is deleted"
pod=$(kubectl -n keel-nf get pods -o name | sed -n 's|^pod/\(keel-chain3-0-.*\)|\1|p')
[ -n "$pod" ] || fail "no Pod of chain3/0"
uid=$(kubectl -n keel-nf get pod "$pod" -o 'jsonpath={.metadata.uid}')
ip netns exec keelsrc "$venv" -W ignore -c "
import time
from scapy.all import Ether, IP, UDP, Raw, sendp
pkts = [Ether(src='02:6b:65:00:00:01', dst='02:6b:65:00:00:02')/IP(src='198.18.0.1', dst=f'198.18.3.{10 + f}')/
        UDP(sport=22000 + f, dport=5001)/Raw(b'keel-k8s-keep') for f in range(4)]
for _ in range(180):
    sendp(pkts, iface='keel-src', verbose=False)
    time.sleep(1)
" &
keepalive=$!
kubectl -n keel-nf delete pod "$pod" --wait=false
rebuilt() {
  [ "$(kubectl -n keel-nf get pod "$pod" -o 'jsonpath={.status.phase}/{.metadata.uid}' 2>/dev/null)" != "Running/$uid" ] &&
    [ "$(kubectl -n keel-nf get pod "$pod" -o 'jsonpath={.status.phase}' 2>/dev/null)" = Running ] &&
    HOME=$tmp "$faas" describe chain3 -g "$gw" | grep -Eq "chain3/0 attached [^;]*phase=ready"
}
start=$(date +%s.%N)
until_ok 180 "chain3/0's Pod $pod rebuilt, attached and ready" rebuilt
echo "test-k8s: chain3/0's Pod rebuilt and ready in $(echo "$(date +%s.%N) - $start" | bc) s"
kill "$keepalive"; wait "$keepalive" 2>/dev/null || true
"$venv" "$here/chains.py" --chains chain3 --flows 4 --packets 10 --sport 22000 --nat-map "$tmp/nat.json" --reverse || fail "chain3's flows after its Pod was rebuilt"
echo "test-k8s: chain3's NAT mappings outlived its Pod"
(cd "$root" && HOME=$tmp "$faas" remove -f stack.yml -g "$gw")
no_pods() { [ -z "$(kubectl -n keel-nf get pods -o name)" ]; }
until_ok 120 "stack.yml's Pods deleted" no_pods
no_state() { [ -z "$(kubectl -n keel exec redis-0 -- redis-cli --user keel-gateway --pass "$(cat "$tmp/redis/redis-gateway")" --no-auth-warning --scan --pattern 'keel:state:*')" ]; }
until_ok 60 "the chains' NF state deleted with their instances" no_state

step "6. whole cores per instance (the default): a Pod's own exclusive core carries a chain"
kubectl -n keel patch configmap keel-worker --type merge -p '{"data":{"KEEL_INSTANCE_CPUS":"1"}}'
kubectl -n keel rollout restart daemonset/keel-agent
kubectl -n keel rollout status --timeout=180s daemonset/keel-agent
(cd "$root" && HOME=$tmp "$faas" deploy -f stack.yml --filter chain3 -g "$gw")
until_ok 180 "chain3 ready" ready chain3
pod=$(kubectl -n keel-nf get pods -l com.keel.chain=chain3 --field-selector status.phase=Running \
  -o 'jsonpath={.items[0].metadata.name}')
shape=$(kubectl -n keel-nf get pod "$pod" -o 'jsonpath={.status.qosClass}/{.spec.resources.limits.cpu}')
[ "$shape" = Guaranteed/1 ] || fail "chain3's Pod $pod is $shape, want Guaranteed/1"
# The kubelet's static CPU manager gave the Pod core 1 alone: its NF's cpuset cgroup.
cid=$(kubectl -n keel-nf get pod "$pod" -o 'jsonpath={.status.containerStatuses[0].containerID}')
cid=${cid#containerd://}
nf_pid=$(grep -l "$cid" /proc/[0-9]*/cgroup 2>/dev/null | head -1 | cut -d/ -f3)
[ -n "$nf_pid" ] || fail "no process of $pod's NF container $cid"
cpuset=$(cat "/sys/fs/cgroup/cpuset$(awk -F: '$2 == "cpuset" {print $3}' "/proc/$nf_pid/cgroup")/cpuset.cpus")
[ "$cpuset" = 1 ] || fail "$pod's NF may run on cores $cpuset, want its exclusive core 1"
echo "test-k8s: chain3's Pod $pod is $shape, its NF (pid $nf_pid) in a cpuset of core $cpuset"
"$venv" "$here/chains.py" --chains chain3 --flows 4 --packets 10 --sport 21000 || fail "chain3's flows on a whole core"
line=$(HOME=$tmp "$faas" describe chain3 -g "$gw" | grep com.keel.instances)
echo "test-k8s: chain3: $line"
grep -Eq "chain3/[0-9]+ attached worker=keel-k8s vlan=[0-9]+ core=1 " <<<"$line" || fail "chain3 is not attached on core 1"
# The one core is the Pod's: the pooled instance the controller adds cannot have one here.
kubectl -n keel-nf get pods -o wide
(cd "$root" && HOME=$tmp "$faas" remove -f stack.yml --filter chain3 -g "$gw")
until_ok 120 "chain3's Pods deleted" no_pods
until_ok 60 "chain3's NF state deleted with its instance" no_state
echo "test-k8s: with whole cores, chain3's Pod ran on its own core 1 and carried packets"
