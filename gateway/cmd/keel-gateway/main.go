// SPDX-License-Identifier: Apache-2.0

// keel-gateway is keel's OpenFaaS provider: normal functions, packet functions and NF chains
// from the stock faas-cli, plus the Control gRPC API for keel-ingress and keel-agent.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/keel-nfv/keel/gateway/internal/chain"
	"github.com/keel-nfv/keel/gateway/internal/containers"
	"github.com/keel-nfv/keel/gateway/internal/control"
	"github.com/keel-nfv/keel/gateway/internal/controller"
	"github.com/keel-nfv/keel/gateway/internal/costs"
	"github.com/keel-nfv/keel/gateway/internal/credentials"
	"github.com/keel-nfv/keel/gateway/internal/events"
	"github.com/keel-nfv/keel/gateway/internal/fnscale"
	"github.com/keel-nfv/keel/gateway/internal/handlers"
	"github.com/keel-nfv/keel/gateway/internal/kube"
	"github.com/keel-nfv/keel/gateway/internal/leader"
	"github.com/keel-nfv/keel/gateway/internal/metrics"
	"github.com/keel-nfv/keel/gateway/internal/nfcatalog"
	"github.com/keel-nfv/keel/gateway/internal/policy"
	"github.com/keel-nfv/keel/gateway/internal/provider"
	"github.com/keel-nfv/keel/gateway/internal/secrets"
	"github.com/keel-nfv/keel/gateway/internal/store"
	"github.com/keel-nfv/keel/gateway/internal/ui"
	"github.com/keel-nfv/keel/gateway/internal/upstream"
	"github.com/keel-nfv/keel/internal/controltoken"
	"github.com/keel-nfv/keel/internal/redisauth"
	pb "github.com/keel-nfv/keel/proto/keel/v1"
	"github.com/openfaas/faas-provider/auth"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

type options struct {
	listen, grpcListen, redis, placer, torctl, secrets, topology, docker, algo, keelNF, cpuset string
	controlToken                                                                               string
	noAuth                                                                                     bool
	pool, poolMax                                                                              int
	scalePeriod, sample, history                                                               time.Duration
	nfCosts, chainCosts, profiles                                                              string
	packetBytes                                                                                int
	coreGHz                                                                                    float64
	kube                                                                                       kube.Options
	leader                                                                                     leader.Options
	redisLogin                                                                                 redisauth.Flags
	upstream, upstreamUser, upstreamPasswordFile                                               string
	loadWindow, downWindow, wakeTimeout, callTimeout                                           time.Duration
	rpsTarget                                                                                  float64
	networkBudget                                                                              time.Duration
	flowMoves                                                                                  bool
	flowMoveTimeout                                                                            time.Duration
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("keel-gateway", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: keel-gateway [flags]\n\n"+
			"keel's OpenFaaS provider: deploy normal functions, packet functions (label com.keel.kind=nf)\n"+
			"and NF chains (label com.keel.kind=chain, annotations com.keel.chain, com.keel.filter,\n"+
			"com.keel.slo) with faas-cli; serves keel.v1.Control for keel-ingress and keel-agent.\n\n"+
			"NF arguments: at start the gateway reads the library's NF catalogue from --keel-nf\n"+
			"(keel-nf --list --json: names and argument schemas). A chain's NF arguments become each\n"+
			"NF's keel-nf configuration, checked by the schema (names, types, ranges, required ones)\n"+
			"and by the NF's Init: `keel-nf --check` for library NFs, and for a tenant's packet\n"+
			"function `docker run --rm --network none IMAGE --check --nf ...` (schema only without\n"+
			"--docker). A packet function's schema is read from its image when it is deployed\n"+
			"(IMAGE --list --json); without a container engine from its annotation com.keel.nf, a\n"+
			"catalogue entry {\"name\": NF, \"args\": [...]}, else it takes no arguments. Its label\n"+
			"com.keel.cycles gives the placer its cost (server cycles per packet, default 500).\n\n"+
			"Control-plane token: every gRPC call between the gateway, keel-agent, keel-ingress,\n"+
			"keel-place and keel-torctl carries \"authorization: Bearer TOKEN\"; keel.v1.Control refuses\n"+
			"a call without it (UNAUTHENTICATED), and the gateway sends it to the placer and keel-torctl.\n"+
			"TOKEN is the content of --control-token-file, created at first start (random, mode 0600)\n"+
			"if it does not exist; give the same file to every other component.\n\n"+
			"Redis login: the gateway logs in to --redis as the ACL user --redis-user with the password in\n"+
			"--redis-password-file (make up: keel-gateway, allowed the keys keel:* and no admin command;\n"+
			"NF containers get users of their own, made by keel-agent). It does not start when Redis\n"+
			"refuses the login, and says so naming the user and the file, never the password.\n\n"+
			"Joining a cluster that already runs OpenFaaS: with --upstream-provider URL (faas-netes, or\n"+
			"any faas-provider) keel keeps only packet functions and chains. faas-cli deploy of a normal\n"+
			"function, and its describe, scale, remove, logs and secrets go to URL, authenticated as\n"+
			"--upstream-user with --upstream-password-file; its invocations (/function/NAME) go there as\n"+
			"they came, without those credentials; faas-cli list shows both sides. A name that keel and\n"+
			"the upstream both hold is refused (409), naming both, and an upstream that does not answer\n"+
			"gives 502 naming URL. keel's own store must then hold no normal function (the gateway\n"+
			"refuses to start, naming them).\n\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "OpenFaaS REST API address (HOST:PORT)")
	fs.StringVar(&o.grpcListen, "grpc-listen", "127.0.0.1:50051", "keel.v1.Control gRPC address")
	fs.StringVar(&o.redis, "redis", "127.0.0.1:6379", "Redis address (HOST:PORT, or unix:PATH for its Unix socket: cheaper per round trip) that keeps functions, chains and placements; "+
		"the gateway caches what it writes there, so nothing else may write its keel:* keys (NF state, keel:state:*, aside)")
	o.redisLogin.Register(fs, "keel-gateway")
	fs.StringVar(&o.placer, "placer", "127.0.0.1:50062", "keel-place serve address (keel.v1.Placer)")
	fs.StringVar(&o.torctl, "torctl", "", "keel-torctl address (keel.v1.TorControl): flows whose ToR rules expire are released\n"+
		"(their instance's flow count drops); \"\" = no ToR")
	fs.StringVar(&o.secrets, "secrets", "/var/lib/keel/secrets", "directory of basic-auth-user and basic-auth-password (created on first start)\n"+
		"and, in functions/, the secrets of faas-cli secret create")
	fs.StringVar(&o.controlToken, "control-token-file", "", "the control-plane token (see above), created if missing\n"+
		"(default: control-token in --secrets)")
	fs.StringVar(&o.topology, "topology", "deploy/local/topology.yaml", "rack topology YAML for the placer (switch, workers, cores, NICs); with a SmartNIC or numa_nodes > 1 the gateway also asks the placer to refine (SmartChain/UNO, Octans) and faas-cli describe shows it")
	fs.StringVar(&o.docker, "docker", "unix:///var/run/docker.sock", "Docker engine that runs normal functions")
	o.kube.Register(fs)
	o.leader.Register(fs)
	fs.StringVar(&o.upstream, "upstream-provider", "", "`URL` of an existing faas-provider (e.g. faas-netes, http://gateway.openfaas:8080) that\n"+
		"runs normal functions instead of keel (see above); \"\" = keel runs them itself (--backend)")
	fs.StringVar(&o.upstreamUser, "upstream-user", "admin", "with --upstream-provider: the basic-auth `USER` of the upstream")
	fs.StringVar(&o.upstreamPasswordFile, "upstream-password-file", "", "with --upstream-provider: `FILE` holding the upstream's basic-auth password\n"+
		"(faas-netes' basic-auth-password secret); \"\" = the upstream asks for none")
	fs.StringVar(&o.algo, "placement", "heuristic", "placer algorithm (heuristic, optimal, ...)")
	fs.StringVar(&o.keelNF, "keel-nf", defaultKeelNF(), "keel-nf binary: the NF catalogue (--list --json) and NF configuration checks (--check)")
	fs.IntVar(&o.pool, "pool", 1, "idle (pre-deployed, detached) instances each chain keeps ready, so that a new\n"+
		"instance never waits for a cold start (Galleon Listing 1's scale-out threshold)")
	fs.IntVar(&o.poolMax, "pool-max", 2, "idle instances a chain keeps at most; detached ones beyond are removed (scale-in threshold)")
	fs.DurationVar(&o.scalePeriod, "scale-period", time.Second, "how often the controller reclaims idle cores, resizes pools, packs cores, sets batches and\n"+
		"scales normal functions (com.openfaas.scale.* labels: README, \"Normal functions, as OpenFaaS runs them\")")
	fs.DurationVar(&o.sample, "ui-sample", 2*time.Second, "how often the operator view (/ui/, /system/keel/topology) samples each chain's rate, cores and p99")
	fs.DurationVar(&o.history, "ui-history", 10*time.Minute, "how much of each chain's samples the operator view keeps (in memory)")
	fs.StringVar(&o.nfCosts, "nf-costs", "bench/results/nf_profile.json", "measured cycles per packet of each NF (make bench writes it; built-in figures if absent)")
	fs.StringVar(&o.chainCosts, "chain-costs", "bench/results/chain_length.json", "measured I/O and handoff cycles of chains under coopsched (built-in figures if absent)")
	fs.StringVar(&o.profiles, "profiles", "", "directory of measured latency profiles, profile_<chain>.json; a chain without one\n"+
		"(or with one taken for other NFs or another clock) is profiled by the queueing model")
	fs.DurationVar(&o.networkBudget, "network-budget", 10*time.Microsecond, "the share of every chain's p99 SLO that the ToR hops and links take (the embedded rack:\n"+
		"twice the topology's link_latency_us); the rest is the server budget: an instance whose measured server\n"+
		"sojourn p99 is over it counts as overloaded, and the chain's threshold follows (README, \"Latency\")")
	fs.BoolVar(&o.flowMoves, "flow-moves", false, "move live flows between instances of a chain with their NF state: the controller\n"+
		"empties an instance that carries few flows and gives its core back without waiting for them to end,\n"+
		"and sheds an overloaded instance's flows; POST /system/keel/moves {\"from\": \"CHAIN/N\", \"to\": \"CHAIN/M\"}\n"+
		"moves an instance's flows by hand. Needs a keel-ingress that carries out moves (it holds each flow's\n"+
		"packets, and the NF state travels in band); only chains whose NFs all keep their state per flow move")
	fs.DurationVar(&o.flowMoveTimeout, "flow-move-timeout", control.DefaultMoveTimeout, "with --flow-moves: how long a move waits for the ingress's report; an ingress that does not\n"+
		"report in time gets no move for a minute (its flows stay where they are)")
	fs.IntVar(&o.packetBytes, "packet-bytes", 1024, "packet size the controller sizes chains for (Galleon's median)")
	fs.Float64Var(&o.coreGHz, "core-ghz", 0, "clock of the workers' managed cores (0: the clock --chain-costs was measured at)")
	fs.StringVar(&o.cpuset, "function-cpuset", "", "CPUs normal functions' containers may use (e.g. 0 or 0-3); give the cores\n"+
		"coopsched does not manage, so an application never takes a chain's core (\"\" = any CPU)")
	fs.BoolVar(&o.noAuth, "no-auth", false, "serve the REST API without basic auth")
	fs.DurationVar(&o.loadWindow, "scale-load-window", controller.DefaultLoadWindow, "normal functions: the window their load (calls per second, calls in flight, CPU) is averaged over")
	fs.DurationVar(&o.downWindow, "scale-down-window", controller.DefaultDownWindow, "normal functions: how long fewer replicas must be asked for before a function is scaled\n"+
		"down to them (scale-up is immediate; a faas-cli scale or deploy also holds this long)")
	fs.Float64Var(&o.rpsTarget, "scale-rps-target", fnscale.OpenFaaS().Target[fnscale.RPS], "normal functions: calls per second per replica when com.openfaas.scale.type=rps (the default\n"+
		"type) and no com.openfaas.scale.target is set (OpenFaaS CE's alert threshold; OpenFaaS Pro uses 50)")
	fs.DurationVar(&o.callTimeout, "call-timeout", provider.DefaultCallTimeout, "bound of one change of the deployment (deploy, scale, remove, an autoscale), placer and\n"+
		"container engine calls included: the provider's lock is never held longer; a change past it fails")
	fs.DurationVar(&o.wakeTimeout, "wake-timeout", provider.DefaultWakeTimeout, "how long a call of a function scaled to zero waits for its first replica before 503")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.pool < 0 || o.poolMax < o.pool {
		return nil, fmt.Errorf("--pool must be >= 0 and --pool-max >= --pool (got %d, %d)", o.pool, o.poolMax)
	}
	if o.packetBytes < 64 || o.packetBytes > 9216 {
		return nil, fmt.Errorf("--packet-bytes must be within 64..9216 (got %d)", o.packetBytes)
	}
	if o.coreGHz < 0 {
		return nil, fmt.Errorf("--core-ghz must be >= 0")
	}
	if o.networkBudget < 0 {
		return nil, fmt.Errorf("--network-budget must be >= 0 (got %v)", o.networkBudget)
	}
	if o.scalePeriod <= 0 {
		return nil, fmt.Errorf("--scale-period must be positive")
	}
	if o.flowMoveTimeout <= 0 {
		return nil, fmt.Errorf("--flow-move-timeout must be positive (got %v)", o.flowMoveTimeout)
	}
	if o.upstream != "" && o.kube.Backend != "docker" {
		return nil, fmt.Errorf("--upstream-provider runs normal functions at the upstream: leave out --backend %s", o.kube.Backend)
	}
	if o.upstream == "" && o.upstreamPasswordFile != "" {
		return nil, fmt.Errorf("--upstream-password-file without --upstream-provider")
	}
	if o.callTimeout <= 0 {
		return nil, fmt.Errorf("--call-timeout must be positive")
	}
	if o.loadWindow < 2*o.scalePeriod || o.downWindow < 0 || o.wakeTimeout <= 0 || !(o.rpsTarget > 0) {
		return nil, fmt.Errorf("--scale-load-window must cover two --scale-period (%v), --scale-down-window be >= 0, --wake-timeout and --scale-rps-target positive (got %v, %v, %v, %v)",
			o.scalePeriod, o.loadWindow, o.downWindow, o.wakeTimeout, o.rpsTarget)
	}
	if o.sample <= 0 || o.history < o.sample {
		return nil, fmt.Errorf("--ui-sample must be positive and --ui-history at least one sample (got %v, %v)", o.sample, o.history)
	}
	if err := o.leader.Check(); err != nil {
		return nil, err
	}
	return o, nil
}

// grpcServer is the server of keel.v1.Control: calls without the control-plane token are
// refused, AssignFlow is timed and counted.
func grpcServer(token string, m *metrics.Metrics) *grpc.Server {
	return grpc.NewServer(grpc.ChainUnaryInterceptor(controltoken.UnaryServerInterceptor(token), m.AssignFlowInterceptor),
		grpc.StreamInterceptor(controltoken.StreamServerInterceptor(token)))
}

// defaultKeelNF is the keel-nf beside this binary (both are in build/bin).
func defaultKeelNF() string {
	exe, err := os.Executable()
	if err != nil {
		return "keel-nf"
	}
	return filepath.Join(filepath.Dir(exe), "keel-nf")
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "keel-gateway:", err)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "keel-gateway:", err)
		os.Exit(1)
	}
}

func run(o *options) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.leader.Enabled {
		// Nothing is written (secrets, the store) and nothing served before this replica leads.
		cs, err := o.kube.Client()
		if err != nil {
			return fmt.Errorf("--leader-elect: %w", err)
		}
		// A standby answers only /healthz (its Pod is ready, for rollouts; the Service sends
		// it nothing: it selects the leader's Pod).
		standby := &http.Server{Addr: o.listen, ReadHeaderTimeout: 10 * time.Second,
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/healthz" {
					http.Error(w, "keel-gateway standby: another replica leads", http.StatusServiceUnavailable)
					return
				}
				fmt.Fprintln(w, "standby")
			})}
		go standby.ListenAndServe() //nolint:errcheck // closed below
		ctx, err = leader.Lead(ctx, cs, o.leader, log.Printf)
		standby.Close() //nolint:errcheck
		if err != nil {
			return err
		}
	}

	topology, err := os.ReadFile(o.topology)
	if err != nil {
		return fmt.Errorf("--topology: %w", err)
	}
	var up *upstream.Provider
	if o.upstream != "" {
		if up, err = upstream.New(o.upstream, o.upstreamUser, o.upstreamPasswordFile); err != nil {
			return err
		}
	}
	var creds *auth.BasicAuthCredentials
	if !o.noAuth {
		var created bool
		creds, created, err = credentials.Ensure(o.secrets)
		if err != nil {
			return err
		}
		abs, _ := filepath.Abs(o.secrets)
		if created {
			log.Printf("generated basic-auth credentials in %s (user %s)", abs, creds.User)
		} else {
			log.Printf("basic-auth credentials from %s", abs)
		}
		log.Printf("log in with: cat %s | faas-cli login -g http://%s -u %s --password-stdin",
			filepath.Join(abs, "basic-auth-password"), o.listen, creds.User)
	}

	tokenFile := o.controlToken
	if tokenFile == "" {
		tokenFile = filepath.Join(o.secrets, "control-token")
	}
	token, created, err := controltoken.Ensure(tokenFile)
	if err != nil {
		return fmt.Errorf("--control-token-file: %w", err)
	}
	if created {
		log.Printf("generated the control-plane token in %s: give this file to keel-agent, keel-ingress, keel-place and keel-torctl (--control-token-file)", tokenFile)
	} else {
		log.Printf("control-plane token from %s", tokenFile)
	}

	login, err := o.redisLogin.Login()
	if err != nil {
		return err
	}
	st, err := store.New(ctx, o.redis, login)
	if err != nil {
		return err
	}
	defer st.Close()
	if n, err := st.DeleteOrphanState(ctx); err != nil {
		log.Printf("NF state of removed chains: %v (kept)", err)
	} else if n > 0 {
		log.Printf("deleted %d keys of NF state (keel:state:*) of chains no longer deployed", n)
	}
	// The store's cache follows every write of this gateway; the recheck catches Redis
	// changing under it (a FLUSHALL, another writer) within a second.
	go st.RecheckEvery(ctx, time.Second, log.Printf)
	conn, err := grpc.NewClient(o.placer, grpc.WithTransportCredentials(insecure.NewCredentials()), controltoken.WithToken(token))
	if err != nil {
		return fmt.Errorf("--placer %s: %w", o.placer, err)
	}
	defer conn.Close()

	library, err := nfcatalog.List(ctx, o.keelNF)
	if err != nil {
		return fmt.Errorf("--keel-nf: %w", err)
	}
	m := metrics.New()
	hub := events.NewHub()
	functionSecrets := filepath.Join(o.secrets, "functions") // faas-cli secret create
	v := &chain.Validator{Placer: pb.NewPlacerClient(conn), Topology: string(topology), Algo: o.algo,
		Catalog: library, Check: &nfcatalog.Local{KeelNF: o.keelNF, SecretsDir: functionSecrets}}
	scaling := fnscale.OpenFaaS()
	scaling.Target[fnscale.RPS] = o.rpsTarget
	p := &provider.Provider{Store: st, Metrics: m, Hub: hub, PoolSize: o.pool, Validator: v, Library: library,
		Secrets: &secrets.Store{Dir: functionSecrets}, RackCores: chain.ServerCores(string(topology)),
		Namespace: o.kube.Namespace, Scaling: &scaling, WakeTimeout: o.wakeTimeout, CallTimeout: o.callTimeout,
		ControlToken: token}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	docker, err := containers.NewDocker(dctx, o.docker)
	cancel()
	if err != nil {
		lost := "packet functions' arguments are not read from their images"
		if up == nil && o.kube.Backend == "docker" {
			lost = "normal functions are refused and " + lost
		}
		log.Printf("warning: %v: %s until the gateway restarts with a reachable --docker", err, lost)
	} else {
		docker.Cpuset, docker.SecretPath = o.cpuset, p.Secrets.Path
		p.Images, v.Runner = docker, docker
		if up == nil && o.kube.Backend == "docker" {
			p.Runtime = docker
			go docker.Follow(ctx, time.Second, log.Printf)
		}
	}
	if k, err := o.kube.Open(ctx, p.Secrets.Path); err != nil {
		return err
	} else if k != nil {
		p.Runtime = k
	}
	if up != nil {
		if err := checkUpstreamMode(ctx, st, up); err != nil {
			return err
		}
	}
	if err := p.Adopt(ctx); err != nil {
		return err
	}

	httpLn, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	grpcLn, err := net.Listen("tcp", o.grpcListen)
	if err != nil {
		return fmt.Errorf("--grpc-listen: %w", err)
	}
	gs := grpcServer(token, m)
	pol := policy.Keel()
	pol.PoolLow, pol.PoolHigh = o.pool, o.poolMax
	table, err := costs.Load(o.nfCosts, o.chainCosts)
	if err != nil {
		return fmt.Errorf("--nf-costs/--chain-costs: %w", err)
	}
	freq := o.coreGHz * 1e9
	if freq == 0 {
		freq = table.TscHz
	}
	// One model of a chain's cost and latency: the provider refuses at deploy an SLO the
	// controller could not meet, the controller sizes thresholds and batches by it.
	// The provider builds a chain's model at deploy, the controller uses it from then on: one
	// cache behind both, so each model (about 0.5 s of core 0) is built once.
	modeler := &costs.Cache{Modeler: &costs.Modeler{Costs: table, Policy: pol, ProfileDir: o.profiles,
		PacketBytes: o.packetBytes, FreqHz: freq}}
	p.Models = modeler
	ctl := &controller.Controller{Store: st, Pool: p, Hub: hub, Policy: pol, Modeler: modeler, Logf: log.Printf,
		OnDecision: func(d policy.Decision) { m.Decision(string(d.Kind), string(d.Reason)) },
		OnFlowMove: func(chain string, r policy.Reason, results []controller.MoveResult) {
			for _, x := range results {
				m.FlowMove(chain, string(r), x.Moved, x.Why, x.Pause)
			}
		},
		SLO: controller.NewSLOLoop(float64(o.networkBudget) / float64(time.Microsecond))}
	p.ServerBudget = ctl.SLO.ServerBudget
	fsc := &controller.FunctionScaler{Provider: p, Calls: m.Calls, LoadWindow: o.loadWindow, DownWindow: o.downWindow,
		OnDecision: ctl.Record, Logf: log.Printf}
	ctl.Functions, p.OnReplicas = fsc, fsc.Heard
	// Reports of moves are applied even with --flow-moves off: one sent before a restart
	// without it still moves its flows' assignments.
	moves := control.NewMover(st, hub)
	moves.Timeout, moves.Logf = o.flowMoveTimeout, log.Printf
	if o.flowMoves {
		ctl.Mover = moves
		log.Printf("controller: flow moves on (a move waits %s for the ingress's report)", o.flowMoveTimeout)
	}
	cs := &control.Server{Store: st, Controller: ctl, Hub: hub, Secrets: p.Secrets, Moves: moves}
	log.Printf("controller: NF costs from %s; chains sized for %d-byte packets on %.2f GHz cores; idle pool %d..%d per chain",
		table.Source, o.packetBytes, freq/1e9, o.pool, o.poolMax)
	pb.RegisterControlServer(gs, cs)
	go ctl.Run(ctx, o.scalePeriod)
	if o.torctl != "" {
		tc, err := grpc.NewClient(o.torctl, grpc.WithTransportCredentials(insecure.NewCredentials()), controltoken.WithToken(token))
		if err != nil {
			return fmt.Errorf("--torctl %s: %w", o.torctl, err)
		}
		defer tc.Close()
		tor := pb.NewTorControlClient(tc)
		go cs.FollowTor(ctx, tor, log.Printf)
		// Expiries reported while the stream was down are found by listing both sides, once
		// per flow idle timeout of torctl (10 s).
		go ctl.SyncFlows(ctx, tor, 10*time.Second, log.Printf)
	}
	view := &ui.View{Source: ui.StoreSource{Store: st}, Decisions: ctl.Decisions, History: &ui.History{Keep: int(o.history / o.sample)},
		ServerBudget: ctl.SLO.ServerBudget,
		OnSample: func(t ui.Topology) {
			m.SetRack(t.Totals.Chains, t.Totals.Attached, t.Totals.Pooled, t.Totals.Flows)
		}}
	go view.Run(ctx, o.sample)
	// Deadlines of the REST API's connections: headers (at most 1 MiB) in 10 s, an idle
	// keep-alive connection closed after 2 min. No whole-request deadline: net/http cancels
	// a request's context when its ReadTimeout passes, which would cut faas-cli logs
	// --follow (bounded by LogsTimeout instead); a function call is bounded by the proxy's
	// one-minute timeout, a change of the deployment by the provider's CallTimeout.
	router := handlers.NewRouter(ctx, p, m, view, creds, up, fsc)
	handlers.AddMoves(router, ctl, creds)
	hs := &http.Server{Handler: router, ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 1 << 20}

	errc := make(chan error, 2)
	go func() { errc <- hs.Serve(httpLn) }()
	go func() { errc <- gs.Serve(grpcLn) }()
	log.Printf("keel-gateway: REST on %s (auth %v), keel.v1.Control on %s, redis %s, placer %s",
		httpLn.Addr(), creds != nil, grpcLn.Addr(), o.redis, o.placer)

	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	gs.Stop()
	if errors.Is(context.Cause(ctx), leader.ErrLost) {
		return context.Cause(ctx) // exit: Kubernetes starts this replica again, as a standby
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// checkUpstreamMode refuses to start with --upstream-provider while keel's store holds
// normal functions (they would hide the upstream's of the same name and run nowhere), and
// logs whether the upstream answers now (it may start later: each call says if it is down).
func checkUpstreamMode(ctx context.Context, st *store.Store, up *upstream.Provider) error {
	all, err := store.List[chain.Function](ctx, st)
	if err != nil {
		return err
	}
	var normal []string
	for _, f := range all {
		if f.Kind == "" {
			normal = append(normal, f.Deployment.Service)
		}
	}
	if len(normal) > 0 {
		return fmt.Errorf("--upstream-provider %s: keel's store (--redis) holds normal functions (%s): remove them with faas-cli "+
			"against this gateway without --upstream-provider first, or deploy them to the upstream", up.URL(), strings.Join(normal, ", "))
	}
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if fns, err := up.List(lctx, nil); err != nil {
		log.Printf("warning: %v: faas-cli calls of normal functions fail until it answers", err)
	} else {
		log.Printf("normal functions at the upstream provider %s (%d now); packet functions and chains here", up.URL(), len(fns))
	}
	return nil
}
