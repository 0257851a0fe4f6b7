# SPDX-License-Identifier: Apache-2.0
"""Fixtures for the gateway tests: a private dockerd, redis-server, the placer service and
keel-gateway, each started by the test and stopped by its PID; the placer and the gateway share
a control-plane token of the test's own."""
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from keelenv import BIN, ROOT

FAAS_CLI = os.environ.get("FAAS_CLI") or shutil.which("faas-cli") or str(ROOT.parent / "shared" / "tools" / "faas-cli")
BRIDGE = "keel-dk0"
BRIDGE_CIDR = "198.19.254.1/24"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, what: str, timeout: float = 15.0) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    pytest.fail(f"{what} did not listen on {port} within {timeout}s")


def stop(proc: subprocess.Popen, timeout: float = 20.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@pytest.fixture(scope="module")
def redis_addr(tmp_path_factory):
    exe = shutil.which("redis-server")
    if not exe:
        pytest.skip("redis-server is not installed (make deps installs it)")
    port = free_port()
    d = tmp_path_factory.mktemp("redis")
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(d)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, proc, "redis-server", 5)
    yield f"127.0.0.1:{port}"
    stop(proc)


@pytest.fixture(scope="module")
def control_token(tmp_path_factory) -> Path:
    """The control-plane token file of the module's placer and gateway (keel-place makes it)."""
    return tmp_path_factory.mktemp("secrets") / "control-token"


@pytest.fixture(scope="module")
def placer_addr(tmp_path_factory, control_token):
    exe = ROOT / ".venv" / "bin" / "keel-place"
    if not exe.exists():
        pytest.fail(f"{exe} is missing: run make build")
    port = free_port()
    log = open(tmp_path_factory.mktemp("placer") / "placer.log", "w")
    proc = subprocess.Popen([str(exe), "serve", "--listen", f"127.0.0.1:{port}", "--control-token-file", str(control_token)],
                            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "KEEL_NF_PROFILE": "none"})
    wait_port(port, proc, "keel-place serve", 30)
    yield f"127.0.0.1:{port}"
    stop(proc)
    log.close()


class Docker:
    """A dockerd of the test's own: own data/exec root, socket and bridge (keel-dk0)."""

    def __init__(self, host: str):
        self.host = host

    def cli(self, *args, check=True, timeout=120) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", "-H", self.host, *args], capture_output=True, text=True,
                              check=check, timeout=timeout)

    def containers(self) -> list[str]:
        out = self.cli("ps", "-a", "--filter", "label=com.keel.function", "--format", "{{.ID}} {{.Names}} {{.State}}").stdout
        return sorted(out.strip().split("\n")) if out.strip() else []


@pytest.fixture(scope="module")
def docker_engine():
    if os.environ.get("KEEL_DOCKER_HOST"):
        yield Docker(os.environ["KEEL_DOCKER_HOST"])
        return
    exe = shutil.which("dockerd")
    if not exe or os.geteuid() != 0:
        pytest.skip("dockerd (Debian docker.io) and root are needed")
    base = Path(tempfile.mkdtemp(prefix="keeld", dir="/var/tmp"))
    sock = base / "docker.sock"
    subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)
    subprocess.run(["ip", "link", "add", BRIDGE, "type", "bridge"], check=True)
    subprocess.run(["ip", "addr", "add", BRIDGE_CIDR, "dev", BRIDGE], check=True)
    subprocess.run(["ip", "link", "set", BRIDGE, "up"], check=True)
    log = open(base / "dockerd.log", "w")
    proc = subprocess.Popen([exe, "--data-root", str(base / "data"), "--exec-root", str(base / "exec"),
                             "--pidfile", str(base / "dockerd.pid"), "-H", f"unix://{sock}", "--bridge", BRIDGE,
                             "--iptables=false", "--ip6tables=false", "--ip-masq=false",
                             "--containerd-namespace", "keeltest", "--containerd-plugins-namespace", "keeltest-plugins"],
                            stdout=log, stderr=subprocess.STDOUT)
    docker = Docker(f"unix://{sock}")
    deadline = time.time() + 30
    while docker.cli("version", check=False).returncode != 0:
        if proc.poll() is not None or time.time() > deadline:
            stop(proc)
            pytest.fail("dockerd did not start: " + (base / "dockerd.log").read_text()[-2000:])
        time.sleep(0.2)
    yield docker
    stop(proc, timeout=30)
    log.close()
    subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)
    shutil.rmtree(base, ignore_errors=True)


class Gateway:
    """keel-gateway on free loopback ports, restartable; faas-cli runs with its own HOME."""

    def __init__(self, workdir: Path, redis: str, placer: str, docker: str, token_file: Path):
        self.workdir = workdir
        self.token_file = token_file
        self.port, self.grpc_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.grpc = f"127.0.0.1:{self.grpc_port}"
        self.secrets = workdir / "secrets"
        self.args = [str(BIN / "keel-gateway"), "--listen", f"127.0.0.1:{self.port}",
                     "--grpc-listen", self.grpc, "--redis", redis, "--placer", placer,
                     "--secrets", str(self.secrets), "--topology", str(ROOT / "deploy" / "local" / "topology.yaml"),
                     "--docker", docker, "--control-token-file", str(token_file)]
        self.env = {**os.environ, "HOME": str(workdir / "home")}
        (workdir / "home").mkdir(exist_ok=True)
        self.proc = None
        self.log = workdir / "gateway.log"

    def start(self) -> None:
        self.proc = subprocess.Popen(self.args, stdout=open(self.log, "a"), stderr=subprocess.STDOUT, cwd=self.workdir)
        wait_port(self.port, self.proc, "keel-gateway")

    def stop(self) -> None:
        stop(self.proc)

    def password(self) -> str:
        return (self.secrets / "basic-auth-password").read_text().strip()

    def token(self) -> str:
        return self.token_file.read_text().strip()

    def faas(self, *args, stdin=None, timeout=60) -> subprocess.CompletedProcess:
        return subprocess.run([FAAS_CLI, *args, "-g", self.url], input=stdin, capture_output=True, text=True,
                              env=self.env, cwd=ROOT, timeout=timeout)


@pytest.fixture(scope="module")
def gateway(request, tmp_path_factory, redis_addr, placer_addr, docker_engine, control_token):
    """keel-gateway with its defaults; a test module's GATEWAY_ARGS (a list) adds flags."""
    binary = BIN / "keel-gateway"
    if not binary.exists():
        pytest.fail(f"{binary} is missing: run make build")
    if not Path(FAAS_CLI).exists():
        pytest.skip("faas-cli is not installed")
    gw = Gateway(tmp_path_factory.mktemp("gateway"), redis_addr, placer_addr, docker_engine.host, control_token)
    gw.args += list(getattr(request.module, "GATEWAY_ARGS", []))
    gw.start()
    yield gw
    gw.stop()
