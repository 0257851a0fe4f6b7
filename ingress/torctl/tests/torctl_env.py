# SPDX-License-Identifier: Apache-2.0
"""Test helpers and fixtures: a private Open vSwitch, a keel bridge with veths into a netns, a fake gateway
(Control: Watch + ListFlows) and keel-torctl itself as a subprocess."""
from __future__ import annotations

import ctypes
import os
import queue
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest

from keel_torctl.pb import control_pb2, control_pb2_grpc, controltoken, torctl_pb2, torctl_pb2_grpc

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(os.environ.get("KEEL_BIN", ROOT / "build" / "bin"))
TAG = str(os.getpid() % 100000)
NETNS = f"keeltor{TAG}"
# role -> (OVS port = host side of the veth, OpenFlow port number, netns side)
PORTS = {"ingress": (f"keelti{TAG}", 1, f"keeltin{TAG}"), "egress": (f"keelte{TAG}", 2, f"keelten{TAG}"),
         "trunk": (f"keeltw{TAG}", 3, f"keeltwn{TAG}"), "source": (f"keelts{TAG}", 4, f"keeltsn{TAG}")}
WORKER = "w1"
# The control-plane token of the fake gateway and of the keel-torctl under test.
TOKEN = "0123456789abcdef0123456789abcdef"


def sh(*args, check=True, timeout=30):
    return subprocess.run(args, capture_output=True, text=True, check=check, timeout=timeout)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _need_ovs():
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces, veths, Open vSwitch)")
    for exe in ("ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ovs-ofctl", "ovsdb-tool"):
        if not shutil.which(exe):
            pytest.skip(f"{exe} is not installed (make deps installs openvswitch-switch)")


class Ovs:
    """A private ovsdb-server + ovs-vswitchd (userspace datapath) in a temp dir."""

    def __init__(self, d: Path):
        self.dir = d
        self.db = f"unix:{d}/db.sock"
        self.env = dict(os.environ, OVS_RUNDIR=str(d), OVS_DBDIR=str(d), OVS_LOGDIR=str(d))
        self.pids: dict[str, int] = {}

    def start(self, which=("ovsdb-server", "ovs-vswitchd")) -> None:
        if "ovsdb-server" in which:
            sh("ovsdb-tool", "create", f"{self.dir}/conf.db", "/usr/share/openvswitch/vswitch.ovsschema")
            self._daemon("ovsdb-server", f"{self.dir}/conf.db", f"--remote=punix:{self.dir}/db.sock")
            self.vsctl("--no-wait", "init")
        if "ovs-vswitchd" in which:
            self._daemon("ovs-vswitchd", self.db)

    def _daemon(self, exe: str, *args: str) -> None:
        pidfile = self.dir / f"{exe}.pid"
        subprocess.run([exe, *args, f"--pidfile={pidfile}", "--no-chdir", "--detach",
                        f"--log-file={self.dir}/{exe}.log"], env=self.env, check=True, timeout=30,
                       capture_output=True)
        self.pids[exe] = int(pidfile.read_text())

    def stop(self, which=("ovs-vswitchd", "ovsdb-server")) -> None:
        for exe in which:
            pid = self.pids.pop(exe, None)
            if pid is None:
                continue
            os.kill(pid, 15)
            for _ in range(100):
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.05)

    def vsctl(self, *args: str) -> str:
        return sh("ovs-vsctl", f"--db={self.db}", "--timeout=10", *args).stdout

    def ofctl(self, *args: str) -> str:
        return subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", *args], env=self.env, capture_output=True,
                              text=True, check=True, timeout=30).stdout


@pytest.fixture(scope="session")
def ovs(tmp_path_factory):
    _need_ovs()
    o = Ovs(tmp_path_factory.mktemp("ovs"))
    o.start()
    # as deploy/local/up.sh: two tags parsed (an instance VLAN over the ingress' in-band mark)
    o.vsctl("set", "Open_vSwitch", ".", "other_config:vlan-limit=2")  # waits until vswitchd applied it
    yield o
    o.stop()


_setns = ctypes.CDLL(None, use_errno=True).setns


@contextmanager
def in_netns(name: str):
    """Run the block in a network namespace (this thread only); sockets made there stay there."""
    with open(f"/var/run/netns/{name}") as target, open("/proc/thread-self/ns/net") as home:
        if _setns(target.fileno(), 0) != 0:
            raise OSError(ctypes.get_errno(), "setns")
        try:
            yield
        finally:
            _setns(home.fileno(), 0)



class Net:
    """The test's netns with the far ends of the bridge's veths, and packet I/O on them."""

    def __init__(self):
        self.socks: dict[str, object] = {}

    def open(self) -> None:
        from scapy.all import conf
        with in_netns(NETNS):
            for role, (_, _, peer) in PORTS.items():
                self.socks[role] = conf.L2socket(iface=peer)

    def send(self, pkts) -> None:
        for p in pkts:
            self.socks["source"].send(p)

    def drain(self) -> None:
        for role in PORTS:
            self.recv(role, 0.0)

    def recv(self, role: str, wait: float = 0.5) -> list:
        """Packets the switch sent out of a port until `wait` s pass without one (IPv4 and
        VLAN frames only: the kernel's own chatter is left out)."""
        s, out = self.socks[role], []
        while select.select([s], [], [], wait)[0]:
            p = s.recv()
            if p is not None and p.type in (0x0800, 0x8100, 0x88B5):
                out.append(p)
        return out

    def close(self) -> None:
        for s in self.socks.values():
            s.close()


@pytest.fixture(scope="session")
def bridge(ovs):
    """keeltor<pid>: datapath_type=netdev, OpenFlow 1.3, fail-mode secure, no controller yet;
    yields (bridge name, Net)."""
    br = f"keeltor{TAG}"
    sh("ip", "netns", "add", NETNS)
    net = Net()
    try:
        ovs.vsctl("add-br", br, "--", "set", "bridge", br, "datapath_type=netdev", "protocols=OpenFlow13",
                  "fail-mode=secure", "other-config:disable-in-band=true")
        for role, (host, ofport, peer) in PORTS.items():
            sh("ip", "link", "add", host, "type", "veth", "peer", "name", peer)
            sh("ip", "link", "set", peer, "netns", NETNS)
            for pre, dev in (([], host), (["ip", "netns", "exec", NETNS], peer)):
                sh(*pre, "sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1")
                sh(*pre, "ethtool", "-K", dev, "tx", "off", check=False)
                sh(*pre, "ip", "link", "set", dev, "up")
            ovs.vsctl("add-port", br, host, "--", "set", "interface", host, f"ofport_request={ofport}")
        net.open()
        yield br, net
    finally:
        net.close()
        ovs.vsctl("--if-exists", "del-br", br)
        for host, _, _ in PORTS.values():
            sh("ip", "link", "del", host, check=False)
        sh("ip", "netns", "del", NETNS, check=False)


class FakeGateway(control_pb2_grpc.ControlServicer):
    """The gateway's Control as torctl uses it: Watch (snapshot, SYNCED, then changes) and ListFlows."""

    def __init__(self):
        self.chains: dict[str, object] = {}
        self.instances: dict[str, object] = {}
        self.flows: list = []
        self.watchers: list[queue.Queue] = []

    def add_chain(self, name, switch_nfs, members=(), nfs=None):
        c = control_pb2.Chain(name=name, nfs=nfs or [s.name for s in switch_nfs],
                              members=[control_pb2.ChainMember(name=m, nf=m) for m in members],
                              switch_nfs=switch_nfs)
        self.chains[name] = c
        self._emit(control_pb2.WatchEvent(kind=control_pb2.WatchEvent.CHAIN_ADDED, chain=c))

    def remove_chain(self, name):
        c = self.chains.pop(name)
        self._emit(control_pb2.WatchEvent(kind=control_pb2.WatchEvent.CHAIN_REMOVED, chain=c))

    def add_instance(self, iid, chain, vlan, worker=WORKER):
        i = control_pb2.ChainInstance(id=iid, chain=chain, vlan=vlan, worker=worker, state="attached")
        self.instances[iid] = i
        self._emit(control_pb2.WatchEvent(kind=control_pb2.WatchEvent.INSTANCE_CHANGED, instance=i))

    def remove_instance(self, iid):
        i = self.instances.pop(iid)
        self._emit(control_pb2.WatchEvent(kind=control_pb2.WatchEvent.INSTANCE_REMOVED, instance=i))

    def _emit(self, ev):
        for q in list(self.watchers):
            q.put(ev)

    def Watch(self, request, context):
        q: queue.Queue = queue.Queue()
        self.watchers.append(q)
        try:
            for c in list(self.chains.values()):
                yield control_pb2.WatchEvent(kind=control_pb2.WatchEvent.CHAIN_ADDED, chain=c)
            for i in list(self.instances.values()):
                yield control_pb2.WatchEvent(kind=control_pb2.WatchEvent.INSTANCE_CHANGED, instance=i)
            yield control_pb2.WatchEvent(kind=control_pb2.WatchEvent.SYNCED)
            while context.is_active():
                try:
                    yield q.get(timeout=0.2)
                except queue.Empty:
                    pass
        finally:
            self.watchers.remove(q)

    def ListFlows(self, request, context):
        return control_pb2.ListFlowsResponse(flows=self.flows)


@pytest.fixture(scope="session")
def gateway():
    gw = FakeGateway()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8),
                         interceptors=[controltoken.ServerInterceptor(TOKEN)])
    control_pb2_grpc.add_ControlServicer_to_server(gw, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    gw.address = f"127.0.0.1:{port}"
    yield gw
    server.stop(0)


class Torctl:
    """A keel-torctl subprocess on free ports, and a TorControl stub to it."""

    def __init__(self, ovs: Ovs, br: str, gateway_address: str, log: Path):
        self.ovs, self.br, self.log = ovs, br, log
        self.grpc_port, self.ofp_port, self.metrics_port = free_port(), free_port(), free_port()
        self.gateway_address = gateway_address
        self.proc = None
        self.token_file = log.parent / "control-token"
        self.token_file.write_text(TOKEN + "\n")
        self.channel = controltoken.channel(f"127.0.0.1:{self.grpc_port}", TOKEN)
        self.stub = torctl_pb2_grpc.TorControlStub(self.channel)

    def start(self) -> None:
        args = [sys.executable, "-m", "keel_torctl.cli", "--listen", f"127.0.0.1:{self.grpc_port}",
                "--ofp-listen", f"127.0.0.1:{self.ofp_port}", "--gateway", self.gateway_address,
                "--control-token-file", str(self.token_file),
                "--ingress-port", PORTS["ingress"][0], "--egress-port", PORTS["egress"][0],
                "--worker-port", f"{WORKER}={PORTS['trunk'][0]}", "--idle-timeout", "10",
                "--metrics", f"127.0.0.1:{self.metrics_port}",
                # pinned to the test's bridge: another switch is refused (test_switch_pin.py)
                "--datapath-id", self.ovs.vsctl("get", "bridge", self.br, "datapath-id").strip().strip('"')]
        self.proc = subprocess.Popen(args, stdout=open(self.log, "a"), stderr=subprocess.STDOUT)
        self.ovs.vsctl("set-controller", self.br, f"tcp:127.0.0.1:{self.ofp_port}")
        self.wait_connected()

    def wait_connected(self, timeout: float = 15.0) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                if self.stub.Status(torctl_pb2.TorStatusRequest(), timeout=1).connected:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.1)
        raise AssertionError("keel-torctl did not connect to the switch:\n" + self.log.read_text()[-3000:])

    def metric(self, name: str) -> float:
        """One unlabelled series of torctl's /metrics (0 if absent)."""
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()
        for line in text.splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return 0.0

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@pytest.fixture(scope="session")
def torctl(ovs, bridge, gateway, tmp_path_factory):
    """keel-torctl controlling the bridge, following the fake gateway."""
    t = Torctl(ovs, bridge[0], gateway.address, tmp_path_factory.mktemp("torctl") / "torctl.log")
    t.start()
    yield t
    t.stop()
    t.channel.close()


@contextmanager
def bench_torctl(name: str):
    """For the benchmarks: a private Open vSwitch with one bridge `name` (userspace datapath,
    OpenFlow 1.3, the test's ports as internal ports) and keel-torctl controlling it, without
    a gateway; yields the Torctl. Everything is taken down afterwards."""
    import tempfile
    with tempfile.TemporaryDirectory(prefix=name) as d:
        ovs = Ovs(Path(d))
        ovs.start()
        torctl = None
        try:
            ovs.vsctl("add-br", name, "--", "set", "bridge", name, "datapath_type=netdev",
                      "protocols=OpenFlow13", "fail-mode=secure")
            for host, ofport, _ in PORTS.values():
                ovs.vsctl("add-port", name, host, "--", "set", "interface", host, "type=internal",
                          f"ofport_request={ofport}")
            torctl = Torctl(ovs, name, "", Path(d) / "torctl.log")
            torctl.start()
            yield torctl
        finally:
            if torctl:
                torctl.stop()
            ovs.vsctl("--if-exists", "del-br", name)
            ovs.stop()
