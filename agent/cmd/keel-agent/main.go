// SPDX-License-Identifier: Apache-2.0

// keel-agent runs on every worker: it follows the gateway's chain instances for this
// worker and runs each as NF containers with a VF and a coopsched sgroup.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/keel-nfv/keel/agent/internal/agent"
	"github.com/keel-nfv/keel/agent/internal/runtime"
	"github.com/keel-nfv/keel/agent/internal/vf"
	"github.com/keel-nfv/keel/internal/controltoken"
	"github.com/keel-nfv/keel/internal/redisauth"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const usage = `usage: keel-agent [flags]

keel-agent runs on every worker. It registers the worker with the gateway
(keel.v1.Control RegisterWorker), follows the gateway's desired chain instances
for it (Watch), and makes them run:

  - one Docker container per server-placed NF of an instance, named
    keel-<group>-<position> (group = instance id with '/' as '.'), labelled
    com.keel.{worker,instance,chain,position,of,tenant,vlan,spec}; entry point
    keel-nf; --network none; cpuset = --cores; memory/CPU limits of the chain;
    no restart policy (the agent rebuilds); never privileged;
  - the instance's directory <pktbuf-dir>/<group> (chain buffer, stats-K.json),
    bind-mounted at the same path into that instance's containers only, plus
    coopsched's NF socket (--coopsched-nf) at /run/keel/coopsched.sock and
    redis-server's socket at /run/keel/redis.sock (with --redis-socket). The NF
    socket serves only RegisterThread of the caller's own thread for the instance
    whose directory it sees; the agent's own calls go to coopsched's admin socket
    (--coopsched), which no container gets;
  - with --redis-socket (or --nf-redis, where NFs reach Redis over their own
    network, as on Kubernetes): the instance's own Redis user keel-nf.<group>, allowed
    only the keys keel:state:<tenant>:<group>:* (tenant: the gateway's chain) and
    the commands HSCAN, HSET, HDEL, HGET and PING, made before its containers
    start (ACL SETUSER, then ACL SAVE so it outlives a Redis restart; made again
    when Redis lacks it or the agent restarts). Its login, one line "USER
    PASSWORD" (random password, kept across rebuilds and agent restarts), is
    <secrets-dir>/<group>/redis (mode 0600, directory 0700), that directory
    mounted read-only at /run/secrets/keel in the instance's containers only;
    keel-nf gets --redis-auth-file /run/secrets/keel/redis. The login appears in
    no argument, environment variable, label or log;
  - one VF: position 0's container starts first, the VF (veth vf0, or an SR-IOV
    VF) is moved into its netns, then the other positions start. keel-nf
    announces each position to keel-coopsched; the sgroup forms detached
    (pre-deployed pool, Galleon §5.3);
  - coopsched Attach / Detach / SetBatch as the gateway's instance says.

Level-triggered: each pass reads what runs (container labels, coopsched Status,
OVS ports, pktbuf directories), so a restarted agent re-adopts everything. One
exception for speed: when the gateway attaches a pooled instance (a scale-out,
a flow already on its way to it), the agent attaches it at once against the
last pass's view, and the next pass checks it (keel_agent_attach_delay_seconds). A dead
NF container or a FAILED / CUT_OFF sgroup is reported failed with the reason and
the instance rebuilt in place (same id, VLAN, core; NF state from Redis) after a
backoff of 1 s doubling to 60 s. A removed instance loses its sgroup,
containers, VF, directory, Redis keys keel:state:<tenant>:<group>:*, Redis user
and secrets directory.

Redis login: the agent logs in to --redis as --redis-user with the password in
--redis-password-file (make up: keel-agent, allowed the keys keel:state:* with
SCAN and DEL, and ACL SETUSER, DELUSER, SAVE, USERS and GETUSER for the NFs'
users). It does not start when Redis refuses that login (exit status 2, naming
the user and the file); a Redis that does not answer yet is retried.

SCHED_FIFO in containers (cgroup v1 with RT group scheduling): the kernel
refuses SCHED_FIFO to threads of a cgroup with cpu.rt_runtime_us = 0, Docker's
default. The agent raises /sys/fs/cgroup/cpu/docker/cpu.rt_runtime_us to the
root group's value (950000 if the root is unthrottled) unless it is larger
(dockerd --cpu-rt-runtime does the same), and gives every NF container
--rt-runtime-us (HostConfig.CPURealtimeRuntime). Nothing else: no capability,
no --privileged, for scheduling. Run keel-coopsched with --no-rt-throttle: then the kernel
enforces no RT budget and the value only opens the door; with throttling on,
it is each NF container's SCHED_FIFO time per second.

Position 0's DPDK arguments: --no-pci --no-huge -m 256
--file-prefix=keel-<group>-0 --no-telemetry --log-level=error
--vdev net_af_packet0,iface=vf0 (or net_af_xdp0). A container has no
hugetlbfs, hence --no-huge, and DPDK 22.11 refuses --in-memory with --no-huge,
hence a file prefix of its own. The chain buffer still sits on 2 MB pages (the
pktbuf tmpfs is mounted huge=always; the agent mounts it if nothing is).
Position 0's container gets CAP_NET_ADMIN (DPDK sets vf0 promiscuous and its
MAC; with --network none it reaches only the container's own netns); af_xdp
adds BPF, PERFMON and an unlimited memlock.

Control-plane token: every call to the gateway carries "authorization: Bearer
TOKEN", TOKEN being the content of --control-token-file, the file the first of
keel's servers to start created (the gateway, keel-place or keel-torctl; a copy
on every worker, mode 0600). The gateway refuses an agent without it or with
another token (UNAUTHENTICATED); the agent logs that as an error and keeps
trying, leaving its running instances alone. Without a readable token file the
agent does not start (exit status 2).

--runtime kubernetes: the same instances as Pods in --namespace through the API
server (--kubeconfig, or the Pod's service account): one Pod per instance,
named keel-<group> (made a DNS name), one container nf-K per NF with the
chain's memory (else --k8s-nf-memory) as request and limit and no cpu of its
own; the Pod Guaranteed by pod-level resources: --k8s-instance-cpus of cpu,
the containers' memory summed and --k8s-buffer of hugepages-2Mi. Whole cores
(1, 2, ...): a kubelet with the static CPU manager, topologyManagerScope pod and
the PodLevelResourceManagers gate pins the whole Pod to cores of its own, which
all its NFs share under coopsched. A share below one core (e.g. 100m): the Pod
runs in the kubelet's shared pool, and coopsched pins its NFs to the core the
controller attached the instance to, beside other instances, as under Docker
(the node's coopsched cores must then be in that pool: no exclusive Pod on
them). The chain buffer is on an emptyDir of medium HugePages-2Mi shared by the
Pod's containers only, the NFs' statistics files on an emptyDir in memory at
/run/keel/stats; coopsched's socket (and redis', with --redis-socket) comes
through hostPath, as does <secrets-dir>/<group> (the NFs' Redis login; use
--nf-redis there, Redis being on another node); required
node affinity to --node; restartPolicy Never; the labels above (values made
label-safe) with the exact values per container in the annotation
keel.dev/container-labels; position 0 also requests one
--sriov-resource from the SR-IOV device plugin when set (with --vf sriov
--sriov-pf PF: the agent asks the kubelet's PodResources API at
--pod-resources-socket which VF it gave, tags that VF with the instance's VLAN
and moves its netdev in as vf0), else the agent moves a veth in as under
Docker (it finds position 0's host pid in --proc, so its Pod needs hostPID). It reads the NFs' statistics files inside position 0's
root (--proc/PID/root), where the Pod's stats emptyDir is. The agent mounts no pktbuf
tmpfs and sets no cgroup cpu.rt_runtime_us then: the emptyDir holds the buffer,
the kubelet the cgroups.

Metrics at http://LISTEN/metrics (keel_agent_*), health at /healthz, the NF
containers' logs of a chain at /logs?chain=NAME (what faas-cli logs CHAIN shows; the
call must carry the control-plane token, "Authorization: Bearer TOKEN", as keel-gateway's do).

flags:
`

func main() {
	os.Exit(run())
}

func run() int {
	// make up pins keel-agent to the shared core 0, where Go gives it one P. The agent forks
	// ovs-vsctl and ip, and a thread in vfork keeps its P until the child has exec'd: with
	// one P every other goroutine, an attach's coopsched call among them, waits for that on a
	// busy core. A second P lets them run meanwhile (scale-out first packet p50 12.9 vs
	// 18.1 ms with four CPU-bound loops on core 0). GOMAXPROCS in the environment wins.
	if os.Getenv("GOMAXPROCS") == "" && goruntime.GOMAXPROCS(0) < 2 {
		goruntime.GOMAXPROCS(2)
	}
	fs := flag.NewFlagSet("keel-agent", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	var (
		gateway     = fs.String("gateway", "127.0.0.1:50051", "the gateway's keel.v1.Control gRPC address `HOST:PORT`")
		tokenFile   = fs.String("control-token-file", controltoken.DefaultFile, "`FILE` holding the control-plane token (see above)")
		worker      = fs.String("worker", "local", "this worker's `NAME`: the placer topology's server name (local for make up)")
		dockerHost  = fs.String("docker", "unix:///var/run/docker.sock", "the Docker engine `URL`")
		rtKind      = fs.String("runtime", "docker", "where NF containers run: docker (--docker) or kubernetes (one Pod per instance, see above)")
		kubeconfig  = fs.String("kubeconfig", "", "with --runtime kubernetes: kubeconfig `FILE` (empty: the Pod's service account)")
		namespace   = fs.String("namespace", "keel-nf", "with --runtime kubernetes: the `NAMESPACE` of instance Pods (deploy/kubernetes/namespace.yaml: keel-nf, apart from normal functions)")
		node        = fs.String("node", os.Getenv("NODE_NAME"), "with --runtime kubernetes: this worker's node `NAME` (default $NODE_NAME, else --worker)")
		k8sCPUs     = fs.String("k8s-instance-cpus", "1", "with --runtime kubernetes: an instance Pod's cpu `QUANTITY`, shared by its NF containers: whole cores (1, 2) are the Pod's own (static CPU manager); a share below one core (250m) puts instances side by side on coopsched's cores")
		k8sMemory   = fs.String("k8s-nf-memory", "256Mi", "with --runtime kubernetes: an NF container's memory `QUANTITY` when the chain sets none")
		k8sBuffer   = fs.String("k8s-buffer", "10Mi", "with --runtime kubernetes: hugepages-2Mi `QUANTITY` of the chain buffer (the Pod requests it; keel-nf's buffer is 2048 descriptors and 4096 slots of 2176 bytes, half of them for the port's RX and TX rings, on 2 MiB pages: 10Mi; 6Mi with keel-nf --rx-copy)")
		sriovRes    = fs.String("sriov-resource", "", "with --runtime kubernetes: SR-IOV device plugin `RESOURCE` position 0 requests (empty: a veth from --vf)")
		podResSock  = fs.String("pod-resources-socket", vf.DefaultPodResourcesSocket, "with --sriov-resource: the kubelet's PodResources `SOCKET`")
		procRoot    = fs.String("proc", "/proc", "with --runtime kubernetes: the node's /proc `DIR` (hostPID), to find position 0's pid and read the NFs' statistics inside its root")
		coopsched   = fs.String("coopsched", "unix:/run/keel/coopsched.sock", "keel-coopsched's admin socket `unix:PATH` (its --listen), which the agent calls")
		coopschedNF = fs.String("coopsched-nf", "", "keel-coopsched's NF socket `unix:PATH` (its --nf-listen), mounted into NF containers (default: --coopsched's path with -nf before .sock, unix:/run/keel/coopsched-nf.sock)")
		coresFlag   = fs.String("cores", "1", "the cores coopsched manages, a comma `LIST`: NF containers' cpuset, told to the gateway")
		ovsdb       = fs.String("ovsdb", "", "Open vSwitch database `unix:PATH` (default: OVS's own, /var/run/openvswitch/db.sock)")
		bridge      = fs.String("bridge", "", "the worker's NIC bridge `NAME` (default keel-nic-<worker>; a worker name over 6 bytes is hashed: keel-nic-hXXXXX)")
		vfKind      = fs.String("vf", "ovsveth", "where VFs come from: ovsveth (OVS bridge + veth pairs) or sriov (--sriov-pf's VFs)")
		sriovPF     = fs.String("sriov-pf", "", "with --vf sriov: the physical function's `NETDEV`")
		pktbufDir   = fs.String("pktbuf-dir", "/run/keel/pktbuf", "tmpfs (huge=always) holding one `DIR`ectory per instance: chain buffer, NF stats files")
		redisSocket = fs.String("redis-socket", "", "redis-server's unix socket `PATH`, bind-mounted into NF containers for their state (empty, and no --nf-redis: NFs keep no state in Redis)")
		nfRedis     = fs.String("nf-redis", "", "Redis `HOST:PORT` the NFs reach over their Pod network for their state, instead of --redis-socket (--runtime kubernetes: Redis runs on another node, e.g. redis.keel.svc:6379); their logins as with --redis-socket")
		redisAddr   = fs.String("redis", "127.0.0.1:6379", "the agent's own Redis `ADDR` (HOST:PORT or unix:PATH), to make the NFs' Redis users and delete a removed instance's NF state (empty: never; needs --redis-socket empty)")
		secretsDir  = fs.String("secrets-dir", "/run/keel/secrets", "with --redis-socket: host `DIR` of one directory per instance holding its NFs' Redis login (see above; empty: NFs log in as Redis' default user)")
		vfDriver    = fs.String("vf-driver", "af_packet", "DPDK driver position 0 opens vf0 with: af_packet, or af_xdp (adds BPF, PERFMON and memlock to position 0's container)")
		listen      = fs.String("listen", "127.0.0.1:9101", "`HOST:PORT` of /metrics, /healthz and /logs")
		advertise   = fs.String("advertise", "", "`HOST:PORT` at which keel-gateway reaches --listen (faas-cli logs of a chain); default --listen, which then must name a host (not 0.0.0.0)")
		statsEvery  = fs.Duration("stats-interval", time.Second, "how often NFs write their stats files and the agent reads them")
		heartbeat   = fs.Duration("heartbeat", 10*time.Second, "an instance's stats go to the gateway at least this often (else on significant change)")
		sojournWin  = fs.Duration("sojourn-window", 5*time.Second, "the window over which an instance's server sojourn p50/p99/p99.9 are reported (each window's packets only; at least --stats-interval)")
		rtRuntime   = fs.Int64("rt-runtime-us", 10000, "cgroup v1 cpu.rt_runtime_us of each NF container (see SCHED_FIFO above)")
		regTimeout  = fs.Duration("register-timeout", 30*time.Second, "an instance whose NFs have not formed their sgroup after this is failed and rebuilt")
		waitIface   = fs.Duration("wait-iface", 30*time.Second, "how long position 0 waits for vf0 to appear (keel-nf --wait-iface)")
		resync      = fs.Duration("resync", 5*time.Second, "a full reconcile pass at least this often (events trigger passes in between)")
		passWaits   = fs.Bool("pass-waits-for-attach", true, "a reconcile pass waits for attaches on the gateway's event under way before it reads Docker and the VFs (forking ovs-vsctl and ip), so that a scale-out's coopsched call does not wait behind them on a busy core; false: for comparison (bench/scale_out.py)")
		onEvent     = fs.Bool("attach-on-event", true, "attach a pooled instance the gateway attached (a scale-out) as soon as its event arrives, against the last pass's view; false: wait for the pass the event triggers (for comparison, bench/scale_out.py)")
	)
	var redisLogin redisauth.Flags
	redisLogin.Register(fs, "keel-agent")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	bad := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "keel-agent: "+format+"\n", a...)
		return 2
	}
	if fs.NArg() > 0 {
		return bad("unexpected argument %q", fs.Arg(0))
	}
	cores, err := parseCores(*coresFlag)
	if err != nil {
		return bad("--cores: %v", err)
	}
	csPath, ok := strings.CutPrefix(*coopsched, "unix:")
	if !ok || csPath == "" {
		return bad("--coopsched %q is not unix:PATH", *coopsched)
	}
	if *coopschedNF == "" {
		*coopschedNF = "unix:" + nfSocketOf(csPath)
	}
	csNFPath, ok := strings.CutPrefix(*coopschedNF, "unix:")
	if !ok || csNFPath == "" || csNFPath == csPath {
		return bad("--coopsched-nf %q is not unix:PATH other than --coopsched's", *coopschedNF)
	}
	if *vfDriver != "af_packet" && *vfDriver != "af_xdp" {
		return bad("--vf-driver %q is not af_packet or af_xdp", *vfDriver)
	}
	if *statsEvery < 10*time.Millisecond || *heartbeat < *statsEvery {
		return bad("--stats-interval must be >= 10ms and --heartbeat at least as long")
	}
	if *sojournWin < *statsEvery {
		return bad("--sojourn-window %v is shorter than --stats-interval %v", *sojournWin, *statsEvery)
	}
	login, err := redisLogin.Login()
	if err != nil {
		return bad("%v", err)
	}
	if *redisSocket != "" && *nfRedis != "" {
		return bad("--redis-socket and --nf-redis both say where NFs keep their state: give one")
	}
	if *nfRedis != "" {
		if _, _, err := net.SplitHostPort(*nfRedis); err != nil || strings.HasPrefix(*nfRedis, "unix:") {
			return bad("--nf-redis %q is not HOST:PORT (a socket goes with --redis-socket)", *nfRedis)
		}
	}
	if (*redisSocket != "" || *nfRedis != "") && *secretsDir != "" && *redisAddr == "" {
		return bad("--redis-socket or --nf-redis with --secrets-dir needs --redis: the agent makes each instance's Redis user there")
	}
	token, err := controltoken.Read(*tokenFile)
	if err != nil {
		return bad("--control-token-file: %v (keel's servers create it at their first start; copy it to this worker)", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	if *sriovRes != "" && *vfKind != "sriov" {
		return bad("--sriov-resource %s: the Pods get a VF from the device plugin, so the agent needs --vf sriov --sriov-pf PF to tag it (not --vf %s)", *sriovRes, *vfKind)
	}
	var provider vf.Provider
	switch *vfKind {
	case "ovsveth":
		o := vf.NewOVSVeth(*ovsdb, *bridge, *worker)
		provider = o
	case "sriov":
		if *sriovPF == "" {
			return bad("--vf sriov needs --sriov-pf")
		}
		provider = &vf.SRIOV{PF: *sriovPF, Sys: "/sys", Run: vf.Exec}
		if *rtKind == "kubernetes" && *sriovRes != "" {
			provider = &vf.DevicePlugin{SRIOV: vf.SRIOV{PF: *sriovPF, Sys: "/sys", Run: vf.Exec},
				Resource: *sriovRes, Namespace: *namespace, Socket: *podResSock}
		}
	default:
		return bad("--vf %q is not ovsveth or sriov", *vfKind)
	}

	if *rtKind != "docker" && *rtKind != "kubernetes" {
		return bad("--runtime %q is not docker or kubernetes", *rtKind)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var (
		rt       runtime.Runtime
		logs     agent.LogSource
		statsDir string // the NFs' stats files: in the instance directory (Docker)
		podCores bool   // the kubelet picks an instance's cores (whole cores per Pod)
	)
	if *rtKind == "kubernetes" {
		statsDir = agent.PodStatsDir
		if *node == "" {
			*node = *worker
		}
		mem, err := resource.ParseQuantity(*k8sMemory)
		if err != nil {
			return bad("--k8s-nf-memory: %v", err)
		}
		cpu, err := resource.ParseQuantity(*k8sCPUs)
		if err != nil {
			return bad("--k8s-instance-cpus: %v", err)
		}
		buf, err := resource.ParseQuantity(*k8sBuffer)
		if err != nil {
			return bad("--k8s-buffer: %v", err)
		}
		restCfg, err := kubeREST(*kubeconfig)
		if err != nil {
			return bad("--kubeconfig: %v", err)
		}
		cs, err := kubernetes.NewForConfig(restCfg)
		if err != nil {
			return bad("--kubeconfig: %v", err)
		}
		kcfg := runtime.KubeConfig{Namespace: *namespace, Node: *node, CPU: cpu,
			MemoryBytes: mem.Value(), BufferBytes: buf.Value(), SRIOVResource: *sriovRes, ProcRoot: *procRoot,
			StartTimeout: *regTimeout}
		k, err := runtime.NewKubernetes(cs, kcfg)
		if err != nil {
			return bad("%v", err)
		}
		podCores = kcfg.WholeCores()
		rt, logs = k, k
	} else {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		docker, err := runtime.NewDocker(dctx, *dockerHost)
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "keel-agent: %v\n", err)
			return 1
		}
		rt, logs = docker, docker
		rtOn, err := agent.EnsureRT("/sys/fs/cgroup/cpu", *rtRuntime)
		if err != nil {
			return bad("SCHED_FIFO for NF containers: %v", err)
		}
		if !rtOn {
			*rtRuntime = 0
		}
		if mounted, err := agent.EnsurePktbufDir(*pktbufDir); err != nil {
			return bad("--pktbuf-dir: %v", err)
		} else if mounted {
			log.Info("mounted the pktbuf tmpfs", "dir", *pktbufDir, "options", "huge=always,mode=0700")
		}
	}
	gw, err := grpc.NewClient(*gateway, grpc.WithTransportCredentials(insecure.NewCredentials()), controltoken.WithToken(token))
	if err != nil {
		return bad("--gateway: %v", err)
	}
	defer gw.Close()
	cs, err := grpc.NewClient(*coopsched, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return bad("--coopsched: %v", err)
	}
	defer cs.Close()
	var rdb *redis.Client
	if *redisAddr != "" {
		rdb = redis.NewClient(redisauth.Options(*redisAddr, login))
		defer rdb.Close()
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := redisauth.Ping(pctx, rdb, *redisAddr, login)
		cancel()
		if err != nil && redisauth.Refused(err) {
			return bad("%v", err)
		}
		if err != nil {
			log.Warn("redis does not answer yet; retried when needed", "err", err)
		}
	}

	addr, err := advertised(*listen, *advertise)
	if err != nil {
		return bad("%v", err)
	}
	cfg := agent.Config{
		SpecConfig: agent.SpecConfig{Worker: *worker, PktbufDir: *pktbufDir, CoopschedNFSocket: csNFPath,
			RedisSocket: *redisSocket, NFRedisAddr: *nfRedis, SecretsDir: *secretsDir, Cpuset: joinCores(cores), VFDriver: *vfDriver,
			StatsIntervalMs: int(statsEvery.Milliseconds()), RTRuntimeUs: *rtRuntime,
			WaitIfaceMs: int(waitIface.Milliseconds()), StatsDir: statsDir},
		Address: addr, Cores: cores, Heartbeat: *heartbeat, StatsInterval: *statsEvery, SojournWindow: *sojournWin, Resync: *resync,
		RegisterTimeout: *regTimeout, ReadyResetAfter: time.Minute, MaxParallel: 2,
		ProcRoot: *procRoot, PodCores: podCores, AttachOnEvent: *onEvent, PassWaitsForAttach: *passWaits,
	}
	a := agent.New(cfg, agent.Deps{Runtime: rt, VF: provider, Coopsched: pb.NewCoopschedClient(cs),
		Control: pb.NewControlClient(gw), Redis: rdb, Log: log})

	reg := prometheus.NewRegistry()
	reg.MustRegister(agent.NewMetrics(a))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	// A chain's NF logs are tenants' data: only keel-gateway (holding the control-plane
	// token) reads them. /metrics and /healthz stay open, for Prometheus and probes.
	mux.Handle("/logs", controltoken.RequireHTTP(token, agent.LogsHandler(*worker, logs)))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		hctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := a.Healthy(hctx); err != nil {
			http.Error(w, "coopsched: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return bad("--listen: %v", err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	log.Info("keel-agent", "worker", *worker, "runtime", *rtKind, "gateway", *gateway, "cores", joinCores(cores), "vf", *vfKind,
		"vf_driver", *vfDriver, "listen", *listen, "rt_runtime_us", *rtRuntime)
	if err := a.Run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "keel-agent: %v\n", err)
		return 1
	}
	return 0
}

// kubeREST is the API server's client configuration: the kubeconfig file, or the Pod's
// service account when file is empty.
func kubeREST(file string) (*rest.Config, error) {
	if file == "" {
		return rest.InClusterConfig()
	}
	return clientcmd.BuildConfigFromFlags("", file)
}

func parseCores(s string) ([]int32, error) {
	var out []int32
	seen := map[int32]bool{}
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not a core number", f)
		}
		if !seen[int32(n)] {
			seen[int32(n)] = true
			out = append(out, int32(n))
		}
	}
	return out, nil
}

func joinCores(c []int32) string {
	s := make([]string, len(c))
	for i, n := range c {
		s[i] = strconv.Itoa(int(n))
	}
	return strings.Join(s, ",")
}

// advertised is the address the agent registers for keel-gateway to reach its HTTP
// server: --advertise, else --listen when that names a host. A wildcard listen address
// (0.0.0.0, ::) reaches nothing from another host or Pod.
func advertised(listen, advertise string) (string, error) {
	if advertise != "" {
		host, port, err := net.SplitHostPort(advertise)
		if err != nil || host == "" || port == "" {
			return "", fmt.Errorf("--advertise %q is not HOST:PORT", advertise)
		}
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			return "", fmt.Errorf("--advertise %q: %s is no address to reach", advertise, host)
		}
		return advertise, nil
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return "", fmt.Errorf("--listen %q is not HOST:PORT", listen)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return "", fmt.Errorf("--listen %q listens on every address: say with --advertise HOST:PORT where keel-gateway reaches it", listen)
	}
	return listen, nil
}

// nfSocketOf is keel-coopsched's default NF socket beside its admin socket, as keel-coopsched
// derives it: /run/keel/coopsched.sock gives /run/keel/coopsched-nf.sock; a path without
// .sock gets -nf appended.
func nfSocketOf(admin string) string {
	if base, ok := strings.CutSuffix(admin, ".sock"); ok && base != "" && !strings.HasSuffix(base, "/") {
		return base + "-nf.sock"
	}
	return admin + "-nf"
}
