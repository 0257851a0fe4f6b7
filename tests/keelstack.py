# SPDX-License-Identifier: Apache-2.0
"""Helpers for tests that run keel's whole local stack (`make up`): commands, faas-cli, the
chains' instances as `faas-cli describe` shows them, and the stack itself as a context
manager that brings it up, logs faas-cli in and takes it down again, checking that nothing
is left behind."""
import contextlib
import fcntl
import importlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from keelenv import BIN, ROOT

FAAS_CLI = os.environ.get("FAAS_CLI") or shutil.which("faas-cli") or str(ROOT.parent / "shared" / "tools" / "faas-cli")
RUN = ROOT / "run"
GATEWAY = "http://127.0.0.1:8080"
CONTROL = "127.0.0.1:50051"
CHAINS = ["chain1", "chain2", "chain3"]
# the traffic source (netns keelsrc) and sink (keelsink) on either side of the ToR
SRC_MAC = "02:6b:65:00:00:01"
SINK_MAC = "02:6b:65:00:00:02"

# Why a stack test cannot run here ("" if it can).
SKIP_REASON = "" if (os.geteuid() == 0 and shutil.which("ovs-vsctl") and shutil.which("dockerd")
                     and (os.cpu_count() or 1) >= 2) else \
    "needs root, Open vSwitch, dockerd (make deps installs them) and a core 1 for coopsched"


def sh(*args, check=True, timeout=120, **kw):
    return subprocess.run(args, capture_output=True, text=True, check=check, timeout=timeout, **kw)


def redis(*args: str, check: bool = True) -> list[str]:
    """redis-cli on the stack's Redis (run/redis.sock) logged in as keel-gateway (make up's ACL:
    the keys keel:*, no admin command; its password through the environment), --raw, its
    output lines. List keys with "--scan", "--pattern", P: keel-gateway may not run KEYS."""
    return sh(*redis_cli(*args), check=check, env=redis_env()).stdout.splitlines()


def redis_cli(*args: str) -> list[str]:
    """The redis-cli command line of redis() (--raw ARGS as keel-gateway, on run/redis.sock)."""
    return ["redis-cli", "--user", "keel-gateway", "-s", str(RUN / "redis.sock"), "--raw", *args]


def redis_env() -> dict:
    """redis-cli's environment for redis(): keel-gateway's password, never on the command line."""
    return dict(os.environ, REDISCLI_AUTH=(RUN / "secrets" / "redis-gateway").read_text().strip())


def ovs(*args, check=True):
    return sh("ovs-vsctl", f"--db=unix:{RUN / 'ovs' / 'db.sock'}", *args, check=check)


def pid_of(name: str) -> int:
    return int((RUN / f"{name}.pid").read_text())


def faas(*args, timeout=120):
    env = {**os.environ, "HOME": str(RUN / "faas-home")}
    return sh(FAAS_CLI, *args, "-g", GATEWAY, check=False, timeout=timeout, env=env, cwd=ROOT)


def restart(name: str) -> None:
    """Stops a part of the stack by its PID and lets make up's script start it again (without
    make's build step, which alone takes seconds: the stopped part would stay down longer)."""
    pid = pid_of(name)
    os.kill(pid, signal.SIGTERM)
    wait_for(f"{name} (pid {pid}) to stop", lambda: not os.path.exists(f"/proc/{pid}"), timeout=15, every=0.1)
    up = sh(str(ROOT / "deploy" / "local" / "up.sh"), "--bin", str(BIN), check=False, timeout=300, cwd=ROOT)
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]


def nf_containers(**labels) -> list[dict]:
    """The agents' NF containers (docker ps -a as JSON), e.g. nf_containers(chain="chain3")."""
    args = ["docker", "ps", "-a", "--format", "{{json .}}", "--filter", "label=com.keel.instance"]
    for k, v in labels.items():
        args += ["--filter", f"label=com.keel.{k}={v}"]
    return [json.loads(l) for l in sh(*args).stdout.splitlines() if l.strip()]


def capture(sink_filter: str, send: str, timeout=10, payload=False) -> list[str]:
    """Sends scapy packets (the expression `send`) from keelsrc and returns a summary line per
    packet the sink receives that passes the Python expression sink_filter (p: the packet);
    with payload, each line ends with the L4 payload in hex."""
    sniff = subprocess.Popen(
        ["ip", "netns", "exec", "keelsink", sys.executable, "-W", "ignore", "-c", f"""
import sys, time
from scapy.all import AsyncSniffer, Dot1Q, IP, UDP, TCP, Ether
sn = AsyncSniffer(iface="keel-sink", store=True, lfilter=lambda p: {sink_filter})
sn.start(); time.sleep(0.5); print("ready", flush=True)
time.sleep({timeout})
sn.stop()
for p in sn.results:
    vlan = p[Dot1Q].vlan if p.haslayer(Dot1Q) else 0
    l4 = p[UDP] if p.haslayer(UDP) else p[TCP]
    fields = [p[Ether].dst, vlan, p[IP].src, p[IP].dst, p[IP].ttl, l4.sport, l4.dport]
    if {payload}:
        fields.append(bytes(l4.payload).hex())
    print(*fields)
"""], stdout=subprocess.PIPE, text=True)
    try:
        assert sniff.stdout.readline().strip() == "ready"
        sh("ip", "netns", "exec", "keelsrc", sys.executable, "-W", "ignore", "-c",
           "from scapy.all import *; "
           f"sendp({send}, iface='keel-src', verbose=False, inter=0.005)")
        out, _ = sniff.communicate(timeout=timeout + 30)
    finally:
        sniff.kill()
    return [l for l in out.splitlines() if l.strip()]


def udp(dst: str, sport: int, n=5, ttl=64) -> str:
    return (f"[Ether(src='{SRC_MAC}', dst='{SINK_MAC}') / IP(src='198.18.0.1', dst='{dst}', ttl={ttl}) / "
            f"UDP(sport={sport}, dport=5001) / Raw(b'keel%02d' % i) for i in range({n})]")


def describe(name: str) -> str:
    r = faas("describe", name)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def instances(name: str) -> dict:
    """The chain's instances as describe shows them: id -> {state, vlan, core, flows, phase}."""
    line = next(l for l in describe(name).splitlines() if "com.keel.instances" in l)
    out = {}
    for m in re.finditer(r"(\S+/\d+) (\w+) worker=\S+ vlan=(\d+) core=(\S+) flows=(\d+) phase=(\w+)", line):
        out[m[1]] = {"state": m[2], "vlan": int(m[3]), "core": m[4], "flows": int(m[5]), "phase": m[6]}
    return out


def wait_for(what: str, fn, timeout=90.0, every=0.5):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(every)
    pytest.fail(f"{what}: not within {timeout:.0f}s (last: {last!r})")


def setup_counters() -> dict[str, float]:
    """The flow-setup path's counters: the ingress's drops by reason and setup counts, and
    torctl's InstallFlow results by stage. Diff two of these (setup_delta) to say where a
    first packet was lost when a test fails."""
    sys.path.insert(0, str(ROOT / "bench"))
    import promtext  # bench/promtext.py
    out = {}
    for url in ("http://127.0.0.1:9103/metrics", "http://127.0.0.1:9102/metrics"):
        try:
            m = promtext.scrape(url)
        except OSError as e:
            out[url] = f"unreachable: {e}"
            continue
        for k, v in m.items():
            if k.startswith(("keel_ingress_drops_total", "keel_ingress_new_flows_total", "keel_ingress_flows_installed",
                             "keel_ingress_stage2", "keel_ingress_flows_released", "keel_torctl_installs_total",
                             "keel_torctl_install_seconds_bucket", "keel_torctl_flow_removed_total")):
                out[k] = v
    return out


def setup_delta(before: dict, after: dict) -> dict:
    """What changed between two setup_counters() (only the counters that moved)."""
    return {k: (v - before.get(k, 0) if isinstance(v, float) else v)
            for k, v in after.items() if not isinstance(v, float) or v != before.get(k, 0)}


def all_ready(name: str):
    insts = instances(name)
    return insts if insts and all(i["phase"] == "ready" for i in insts.values()) else None


@contextlib.contextmanager
def control_stub():
    """(control_pb2, a Control stub on the gateway, with the stack's control-plane token)."""
    sys.path.insert(0, str(ROOT / "build" / "py"))
    try:
        pb = importlib.import_module("keel.v1.control_pb2")
        pb_grpc = importlib.import_module("keel.v1.control_pb2_grpc")
        controltoken = importlib.import_module("keel.v1.controltoken")
        with controltoken.channel(CONTROL, controltoken.read(str(RUN / "secrets" / "control-token"))) as ch:
            yield pb, pb_grpc.ControlStub(ch)
    finally:
        sys.path.remove(str(ROOT / "build" / "py"))


def install_on_tor(flow, assigned, idle_timeout_s: int = 3600) -> None:
    """Installs the ToR rule of flow (a FiveTuple) that AssignFlow gave assigned, as keel-ingress
    does next: without it the gateway's flow reconciliation (every 10 s) releases a flow the
    switch does not hold. A test that plays the ingress and keeps the flow for its whole run
    gives the rule a long idle timeout."""
    sys.path.insert(0, str(ROOT / "build" / "py"))
    try:
        tpb = importlib.import_module("keel.v1.torctl_pb2")
        tgrpc = importlib.import_module("keel.v1.torctl_pb2_grpc")
        controltoken = importlib.import_module("keel.v1.controltoken")
        a = tpb.FlowAssignment(chain=assigned.chain)
        for f in ("src_ip", "dst_ip", "src_port", "dst_port", "proto"):
            setattr(a.flow, f, getattr(flow, f))
        if assigned.HasField("instance"):
            a.instance, a.vlan, a.worker = assigned.instance.id, assigned.instance.vlan, assigned.instance.worker
        with controltoken.channel("127.0.0.1:50070", controltoken.read(str(RUN / "secrets" / "control-token"))) as ch:
            tgrpc.TorControlStub(ch).InstallFlow(tpb.InstallFlowRequest(assignment=a, idle_timeout_s=idle_timeout_s),
                                                 timeout=10)
    finally:
        sys.path.remove(str(ROOT / "build" / "py"))


def tor_record() -> set[tuple]:
    """The stage-2 rules keel-torctl holds on the ToR by its record (ListFlows, as the gateway's
    flow reconciliation reads it), as (src_ip, dst_ip, src_port, dst_port, proto)."""
    sys.path.insert(0, str(ROOT / "build" / "py"))
    try:
        tpb = importlib.import_module("keel.v1.torctl_pb2")
        tgrpc = importlib.import_module("keel.v1.torctl_pb2_grpc")
        controltoken = importlib.import_module("keel.v1.controltoken")
        with controltoken.channel("127.0.0.1:50070", controltoken.read(str(RUN / "secrets" / "control-token"))) as ch:
            flows = tgrpc.TorControlStub(ch).ListFlows(tpb.ListTorFlowsRequest(), timeout=10).flows
        return {(f.assignment.flow.src_ip, f.assignment.flow.dst_ip, f.assignment.flow.src_port,
                 f.assignment.flow.dst_port, f.assignment.flow.proto) for f in flows if not f.reinject_only}
    finally:
        sys.path.remove(str(ROOT / "build" / "py"))


def coopsched_groups() -> list[str]:
    """The sgroups keel-coopsched holds (its gRPC Status), by id."""
    sys.path.insert(0, str(ROOT / "build" / "py"))
    try:
        import grpc
        cpb = importlib.import_module("keel.v1.coopsched_pb2")
        cgrpc = importlib.import_module("keel.v1.coopsched_pb2_grpc")
        with grpc.insecure_channel("unix:/run/keel/coopsched.sock") as ch:
            st = cgrpc.CoopschedStub(ch).Status(cpb.StatusRequest(), timeout=10)
        return [g.group_id for g in st.groups]
    finally:
        sys.path.remove(str(ROOT / "build" / "py"))


def remove_all_functions():
    """Removes what earlier tests left deployed (Redis keeps it across make down/up), so a test
    module starts from an empty deployment: no other chain's instances, cores or flows."""
    r = faas("list", "-q")
    assert r.returncode == 0, r.stdout + r.stderr
    for name in r.stdout.split():
        rm = faas("remove", name)
        assert rm.returncode == 0, rm.stdout + rm.stderr
    wait_for("an empty deployment", lambda: not faas("list", "-q").stdout.split(), timeout=30)


# What make down must leave no trace of: links and network namespaces the stack makes.
STACK_LINK = re.compile(r"^\d+: (keel(vf|-nic|-up|-tor|-tsrc|-tsink|-ting|-ing)\S*)", re.M)
STACK_NETNS = ("keelsrc", "keelsink")


def stack_links() -> list[str]:
    return [m.group(1) for m in STACK_LINK.finditer(sh("ip", "-o", "link", "show").stdout)]


def keel_netns() -> list[str]:
    """keel* network namespaces ("keelsrc (id: 0)" lines of ip netns list)."""
    return [line.split()[0] for line in sh("ip", "netns", "list").stdout.splitlines()
            if line.startswith("keel")]


def other_stack() -> str:
    """What another worktree's stack listens on (Redis, the gateway), "" if nothing: a stack
    that make up in this tree would collide with."""
    if (RUN / "redis.pid").exists():
        return ""
    return sh("ss", "-Hltnp", "( sport = :6379 or sport = :8080 )", check=False).stdout.strip()


def settle_removals(timeout: float = 60) -> None:
    """Waits until the agent has finished what a test's last `faas-cli remove` started: no NF
    state left in Redis for a chain that is no longer deployed. make down right after a
    remove stops the agent mid-teardown, and the next module would find its keys (Redis
    keeps them across make down/up). Best effort: a broken stack still goes down."""
    def orphans() -> list[str]:
        # keel:state:<tenant>:<chain>.<N>:... of a chain faas-cli no longer lists (the
        # gateway keeps a removed chain's instance records until the agent tore them down).
        deployed = set(faas("list", "-q").stdout.split())
        return [k for k in redis("--scan", "--pattern", "keel:state:*", check=False) if k.split(":")[3].rpartition(".")[0] not in deployed]

    try:
        wait_for("the agent to delete removed instances' NF state", lambda: not orphans(), timeout=timeout)
    except (pytest.fail.Exception, Exception) as e:  # noqa: BLE001 - the stack still has to go down
        print(f"settle_removals: {e}")


@contextlib.contextmanager
def running_stack():
    """make up and faas-cli login; make down afterwards, checking it left nothing. Holds the
    core-1 lock (other tests use coopsched's core) throughout."""
    lock = open("/tmp/keel-core1.lock", "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    other = other_stack()
    if other:
        # make down after a failed make up would remove that stack's NF containers too
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()
        pytest.fail(f"another keel stack runs here (not from {RUN}): {other}")
    # What was here before make up (a test's own netns left by an interrupted run, say) is not
    # this stack's to remove.
    links_before, netns_before = set(stack_links()), set(keel_netns())
    try:
        t0 = time.time()
        up = sh("make", "-s", "up", check=False, timeout=900, cwd=ROOT)
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        print(f"make up took {time.time() - t0:.1f}s")
        password = (RUN / "secrets" / "basic-auth-password").read_text().strip()
        env = {**os.environ, "HOME": str(RUN / "faas-home")}
        r = subprocess.run([FAAS_CLI, "login", "-g", GATEWAY, "-u", "admin", "--password-stdin"], input=password,
                           capture_output=True, text=True, env=env, timeout=30)
        assert r.returncode == 0, r.stdout + r.stderr
        remove_all_functions()
        yield
    finally:
        settle_removals()
        down = sh("make", "-s", "down", check=False, timeout=300, cwd=ROOT)
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()
    assert down.returncode == 0, down.stdout[-3000:] + down.stderr[-3000:]
    assert not [p for p in RUN.glob("*.pid")], "make down left PID files"
    left = [n for n in stack_links() if n not in links_before]
    assert not left, f"make down left links {left}"
    left = [n for n in keel_netns() if n in STACK_NETNS or n not in netns_before]
    assert not left, f"make down left network namespaces {left}"


def gateway_log() -> str:
    """keel-gateway's log so far (every controller decision is a line of it)."""
    return (RUN / "keel-gateway.log").read_text(errors="replace")


def chain_stack(chain: str, spec: str, net: str, slo: str, labels: dict[str, str] | None = None) -> str:
    """A faas-cli stack.yml of one chain: spec in the chain language, serving dst net `net`."""
    extra = "".join(f"      {k}: {json.dumps(v)}\n" for k, v in (labels or {}).items())
    return (f"version: 1.0\nprovider:\n  name: openfaas\n  gateway: {GATEWAY}\nfunctions:\n  {chain}:\n"
            f"    image: keel/chain:latest\n    labels:\n      com.keel.kind: chain\n{extra}"
            f"    annotations:\n      com.keel.chain: {json.dumps(spec)}\n      com.keel.filter: \"dst net {net}\"\n"
            f"      com.keel.slo: \"{slo}\"\n")


@contextlib.contextmanager
def one_chain_stack(yml, stack_text: str, chain: str):
    """The running stack with the one chain of stack_text deployed from the file yml and its
    pooled instance ready; the chain is removed again (its cores and VLANs go back for the
    other stack tests) before the stack goes down."""
    yml.write_text(stack_text)
    with running_stack():
        r = faas("deploy", "-f", str(yml))
        assert r.returncode == 0, r.stdout + r.stderr
        wait_for(f"{chain}'s pooled instance ready", lambda: all_ready(chain))
        try:
            yield
        finally:
            r = faas("remove", chain)
            assert r.returncode == 0, r.stdout + r.stderr
