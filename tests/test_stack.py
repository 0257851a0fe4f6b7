# SPDX-License-Identifier: Apache-2.0
"""make up / make down: the local stack starts in the background and every part answers (its gRPC
servers only to calls with the control-plane token), a second make up is quick and changes
nothing, and make down leaves no process, bridge, veth, netns or mount behind: after a normal run,
after a crash, with stale PID files and when nothing runs. Holds /tmp/keel-core1.lock throughout
(make up starts keel-coopsched on core 1)."""
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from keelenv import BIN, ROOT

RUN = ROOT / "run"
PARTS = ["redis", "ovsdb-server", "ovs-vswitchd", "keel-place", "keel-gateway", "keel-coopsched", "keel-agent"]
PKTBUF = "/run/keel/pktbuf"
OVSDB = f"unix:{RUN}/ovs/db.sock"
# What the agent makes on a worker, imitated: the NIC bridge, one VF veth as an access port,
# its other end in a namespace.
BRIDGE, VETH, PEER, NETNS = "keel-nic-sttest", "keelst0", "keelst1", "keelst-ns"


def running(pid: int) -> bool:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def pid_files() -> dict[str, int]:
    """The stack's PID files whose process runs, as {name: pid}."""
    out = {}
    for f in RUN.glob("*.pid"):
        text = f.read_text().strip()
        if text.isdigit() and running(int(text)):
            out[f.stem] = int(text)
    return out


def docker_answers() -> bool:
    return subprocess.run(["docker", "-H", "unix:///var/run/docker.sock", "version"],
                          capture_output=True).returncode == 0


def why_skip() -> str | None:
    if os.geteuid() != 0:
        return "needs root (mounts, dockerd, SCHED_FIFO)"
    if (os.cpu_count() or 1) < 2:
        return "needs two cores: coopsched manages core 1"
    for prog in ("redis-server", "ovsdb-server", "ovs-vswitchd", "docker"):
        if not shutil.which(prog):
            return f"{prog} is not installed (make deps installs it)"
    if not docker_answers() and not shutil.which("dockerd"):
        return "no Docker engine answers and dockerd is not installed"
    if not (BIN / "keel-agent").exists():
        return f"{BIN / 'keel-agent'} is not built yet (agent/, issue 10): make up needs it"
    return None


pytestmark = pytest.mark.skipif(why_skip() is not None, reason=why_skip() or "")


@pytest.fixture(scope="module", autouse=True)
def core1():
    """The core-1 lock, and a machine without a running stack (the tests would stop it)."""
    if pid_files():
        pytest.skip(f"a keel stack runs already ({', '.join(pid_files())}): make down first")
    with open("/tmp/keel-core1.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(autouse=True)
def clean_stack():
    """Each test starts and ends with no stack running, whatever it did."""
    yield
    if pid_files():
        make("down")


def make(target: str, timeout: float = 600) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    r = subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), target],
                       capture_output=True, text=True, timeout=timeout)
    return r, time.monotonic() - t0


def up() -> float:
    r, took = make("up")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "http://127.0.0.1:8080" in r.stdout
    assert f"{RUN}/secrets/basic-auth-password" in r.stdout
    return took


def redis_ping(family, addr, login: bool = True) -> bytes:
    """PING, logged in as keel-gateway first (make up's ACL) unless not login: the replies."""
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(addr)
        want = b"+PONG\r\n"
        if login:
            password = (RUN / "secrets" / "redis-gateway").read_text().strip()
            s.sendall(f"AUTH keel-gateway {password}\r\n".encode())
            want = b"+OK\r\n" + want
        s.sendall(b"PING\r\n")
        got = b""
        while len(got) < len(want) and b"-" not in got:
            chunk = s.recv(64)
            if not chunk:
                break
            got += chunk
        return got


def http_status(url: str) -> int:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status


def sh(*args, check=True) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, check=check, timeout=30)


def assert_token_required(method: str, port: int) -> None:
    """The gRPC server on 127.0.0.1:port answers method (an empty request) with the stack's
    control-plane token, and refuses it without (UNAUTHENTICATED) or with another token."""
    sys.path.insert(0, str(ROOT / "build" / "py"))
    try:
        import grpc
        from keel.v1 import controltoken
        token = controltoken.read(str(RUN / "secrets" / "control-token"))
        addr = f"127.0.0.1:{port}"
        with controltoken.channel(addr, token) as ch:
            ch.unary_unary(method)(b"", timeout=10)
        for ch in (grpc.insecure_channel(addr), controltoken.channel(addr, "0" * 64)):
            with ch:
                try:
                    ch.unary_unary(method)(b"", timeout=10)
                except grpc.RpcError as e:
                    assert e.code() == grpc.StatusCode.UNAUTHENTICATED, (method, e)
                else:
                    raise AssertionError(f"{method} on {addr} answered a call without the token")
    finally:
        sys.path.remove(str(ROOT / "build" / "py"))


def link_exists(name: str) -> bool:
    return sh("ip", "link", "show", "dev", name, check=False).returncode == 0


def netns_exists(name: str) -> bool:
    return name in sh("ip", "netns", "list").stdout.split()


def imitate_agent() -> None:
    """A NIC bridge in the stack's OVS with one VF: a veth access port, VLAN 7, whose other
    end is in a netns."""
    sh("ovs-vsctl", f"--db={OVSDB}", "--timeout=10", "add-br", BRIDGE, "--", "set", "bridge", BRIDGE,
       "datapath_type=netdev")
    sh("ip", "netns", "add", NETNS)
    sh("ip", "link", "add", VETH, "type", "veth", "peer", "name", PEER, "netns", NETNS)
    sh("ip", "link", "set", VETH, "up")
    sh("ovs-vsctl", f"--db={OVSDB}", "--timeout=10", "add-port", BRIDGE, VETH, "tag=7")
    deadline = time.time() + 10
    while not link_exists(BRIDGE) and time.time() < deadline:
        time.sleep(0.1)
    assert link_exists(BRIDGE) and link_exists(VETH) and netns_exists(NETNS)


def assert_down(pids: dict[str, int], pktbuf_before: bool) -> None:
    for name, pid in pids.items():
        assert not running(pid), f"{name} (pid {pid}) still runs after make down"
    assert not list(RUN.glob("*.pid")), "PID files left behind"
    assert not link_exists(BRIDGE) and not link_exists(VETH), "the bridge or its veth is left"
    assert not netns_exists(NETNS), "the VF's netns is left"
    mounted = sh("mountpoint", "-q", PKTBUF, check=False).returncode == 0
    assert mounted == pktbuf_before, "make down left the chain-buffer mount it made" if mounted else \
        "make down unmounted a chain-buffer tmpfs it did not mount"


def test_make_up_twice_then_make_down_leaves_nothing():
    pktbuf_before = sh("mountpoint", "-q", PKTBUF, check=False).returncode == 0
    dockerd_before = docker_answers()
    took = up()
    pids = pid_files()
    assert set(PARTS) <= set(pids), f"missing PID files: {set(PARTS) - set(pids)}"
    assert ("dockerd" in pids) != dockerd_before, "dockerd started although one answered, or not started"

    assert redis_ping(socket.AF_INET, ("127.0.0.1", 6379)) == b"+OK\r\n+PONG\r\n"
    assert redis_ping(socket.AF_UNIX, str(RUN / "redis.sock")) == b"+OK\r\n+PONG\r\n"
    assert redis_ping(socket.AF_INET, ("127.0.0.1", 6379), login=False).startswith(b"-NOAUTH"), \
        "Redis answers a client that did not log in"
    for name in ("redis-gateway", "redis-agent"):
        assert (RUN / "secrets" / name).stat().st_mode & 0o777 == 0o600, name
    assert sh("ovs-vsctl", f"--db={OVSDB}", "--timeout=5", "show").returncode == 0
    socket.create_connection(("127.0.0.1", 50062), timeout=5).close()
    assert http_status("http://127.0.0.1:8080/healthz") == 200
    socket.create_connection(("127.0.0.1", 50051), timeout=5).close()
    assert os.path.exists("/run/keel/coopsched.sock")
    assert http_status("http://127.0.0.1:9101/healthz") == 200
    assert sh("mountpoint", "-q", PKTBUF, check=False).returncode == 0
    assert (RUN / "secrets" / "control-token").stat().st_mode & 0o777 == 0o600
    assert_token_required("/keel.v1.Control/ListFlows", 50051)
    assert_token_required("/keel.v1.Placer/Parse", 50062)
    assert_token_required("/keel.v1.TorControl/Status", 50070)

    again = up()
    assert pid_files() == pids, "a second make up restarted something"
    assert again < max(30.0, took), f"second make up took {again:.1f} s (first {took:.1f} s)"

    imitate_agent()
    r, _ = make("down")
    assert r.returncode == 0, r.stdout + r.stderr
    assert_down(pids, pktbuf_before)
    if not dockerd_before:
        assert not docker_answers()


def test_make_down_after_a_crash():
    pktbuf_before = sh("mountpoint", "-q", PKTBUF, check=False).returncode == 0
    up()
    pids = pid_files()
    imitate_agent()
    for name in ("keel-agent", "ovs-vswitchd", "ovsdb-server", "keel-gateway"):
        os.kill(pids[name], signal.SIGKILL)
    r, _ = make("down")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "stale PID file" in r.stdout
    assert_down(pids, pktbuf_before)


def test_make_down_with_stale_pid_files_and_with_nothing_running():
    RUN.mkdir(exist_ok=True)
    # A recycled PID: a process named like the gateway that started after the PID file was
    # written. And a PID file naming no process at all.
    impostor = subprocess.Popen(["bash", "-c", "exec -a keel-gateway sleep 60"])
    try:
        (RUN / "keel-gateway.pid").write_text(f"{impostor.pid}\n")
        hour_ago = time.time() - 3600
        os.utime(RUN / "keel-gateway.pid", (hour_ago, hour_ago))
        (RUN / "redis.pid").write_text("4194000\n")
        r, _ = make("down")
        assert r.returncode == 0, r.stdout + r.stderr
        assert impostor.poll() is None, "make down killed a process it did not start"
        assert "stale PID file" in r.stdout
        assert not list(RUN.glob("*.pid"))
    finally:
        impostor.kill()
        impostor.wait()
    r, _ = make("down")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "stopped" not in r.stdout and "killed" not in r.stdout
