# SPDX-License-Identifier: Apache-2.0
"""The images of the one-node test cluster (issue 20) in a containerd of the test's own, as a
node's kubelet gets them: deploy/kubernetes/testcluster/images.sh writes every image tarball
without dockerd and imports it (`ctr -n k8s.io images import`); each keel image's entry point
starts; keel's control plane runs from the images with the command lines of
deploy/kubernetes-testcluster (Service names made loopback addresses in one network
namespace) and one control-plane token, and a chain deploys through the gateway and the
placer; a library NF runs in keel/nf-base; the same inputs give the same tarball; and every
container of the manifests names an image images.sh made, with every absolute path of its
command line inside that image or under one of its mounts."""
import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from scapy.all import ARP, IP, UDP, Ether, Raw, rdpcap, wrpcap

from keelenv import BIN, ROOT

VENV = Path(os.environ.get("KEEL_VENV", ROOT / ".venv"))
IMAGES_SH = ROOT / "deploy" / "kubernetes" / "testcluster" / "images.sh"
OVERLAY = ROOT / "deploy" / "kubernetes-testcluster"
KEEL_IMAGES = ["gateway", "agent", "coopsched", "placer", "torctl", "ingress", "nf-base"]
ACL_NAT = "ACL(rules=[{'dst_ip':'198.19.9.0/24'}]) -> NAT(external_ip='198.18.100.1', port_range=[1024, 65535])"


def normalized(ref: str) -> str:
    """ref as containerd names it: keel/agent:latest is docker.io/keel/agent:latest."""
    first = ref.split("/")[0]
    if "/" in ref and ("." in first or ":" in first or first == "localhost"):
        return ref
    return "docker.io/" + (ref if "/" in ref else "library/" + ref)


class Ctr:
    """ctr against one containerd socket, namespace k8s.io (the kubelet's)."""

    def __init__(self, sock: Path):
        self.sock = sock

    def __call__(self, *args, check=True, timeout=120, **kw):
        r = subprocess.run(["ctr", "-a", str(self.sock), "-n", "k8s.io", *args], capture_output=True,
                           text=True, timeout=timeout, **kw)
        if check and r.returncode != 0:
            raise AssertionError(f"ctr {' '.join(args)}: exit {r.returncode}\n{r.stdout}{r.stderr}")
        return r

    def pid(self, cid: str) -> int:
        for line in self("task", "ls").stdout.splitlines()[1:]:
            f = line.split()
            if f[0] == cid and f[2] == "RUNNING":
                return int(f[1])
        raise AssertionError(f"task {cid} is not running: {self('task', 'ls').stdout}")

    def stop_all(self):
        for line in self("task", "ls", check=False).stdout.splitlines()[1:]:
            self("task", "kill", "-s", "SIGKILL", line.split()[0], check=False)
        deadline = time.time() + 10
        while time.time() < deadline and "RUNNING" in self("task", "ls", check=False).stdout:
            time.sleep(0.2)
        for cid in self("containers", "ls", "-q", check=False).stdout.split():
            self("task", "rm", "-f", cid, check=False)
            self("containers", "rm", cid, check=False)


@pytest.fixture(scope="module")
def ctr():
    if os.geteuid() != 0:
        pytest.skip("needs root: a containerd of the test's own runs the images")
    missing = [p for p in ("containerd", "ctr", "runc") if not shutil.which(p)]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (Debian containerd and runc)")
    base = Path(tempfile.mkdtemp(prefix="keelctd", dir="/var/tmp"))
    # ctr run puts each container in the cgroup /k8s.io/ID of every hierarchy (cgroup v1).
    cgroups = [] if Path("/sys/fs/cgroup/cpu/k8s.io").exists() else list(Path("/sys/fs/cgroup").glob("*/"))
    sock = base / "containerd.sock"
    (base / "config.toml").write_text(f"""version = 2
root = "{base}/root"
state = "{base}/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "{base}/opt"
""")
    log = open(base / "containerd.log", "w")
    proc = subprocess.Popen(["containerd", "--config", str(base / "config.toml")], stdout=log,
                            stderr=subprocess.STDOUT)
    c = Ctr(sock)
    deadline = time.time() + 30
    while subprocess.run(["ctr", "-a", str(sock), "version"], capture_output=True).returncode != 0:
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            pytest.fail("containerd did not start: " + (base / "containerd.log").read_text()[-2000:])
        time.sleep(0.2)
    try:
        yield c
    finally:
        c.stop_all()
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        subprocess.run(["umount", "-R", str(base / "root")], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
        for h in cgroups:  # the empty cgroups ctr made, if there were none before
            for d in sorted((h / "k8s.io").glob("**/"), key=lambda p: -len(p.parts)):
                try:
                    d.rmdir()
                except OSError:
                    pass


class Built:
    """The tarballs images.sh wrote: OUT/NAME.tar, and what images.tsv says of each."""

    def __init__(self, out: Path, took: float):
        self.out, self.took = out, took
        rows = [line.split("\t") for line in (out / "images.tsv").read_text().splitlines()[1:]]
        self.ref = {r[4].removesuffix(".tar"): r[0] for r in rows}
        self._files: dict[str, set[str]] = {}

    def config(self, name: str) -> dict:
        with tarfile.open(self.out / f"{name}.tar") as t:
            m = json.load(t.extractfile("manifest.json"))[0]
            return json.load(t.extractfile(m["Config"]))["config"]

    def files(self, name: str) -> set[str]:
        """The absolute paths in the image's layer."""
        if name not in self._files:
            with tarfile.open(self.out / f"{name}.tar") as t:
                m = json.load(t.extractfile("manifest.json"))[0]
                with tarfile.open(fileobj=t.extractfile(m["Layers"][0]), mode="r|") as layer:
                    self._files[name] = {"/" + e.name.removeprefix("./").rstrip("/") for e in layer}
        return self._files[name]


@pytest.fixture(scope="module")
def built(ctr, tmp_path_factory):
    for prog in ("keel-gateway", "keel-nf", "keel-agent", "keel-coopsched", "keel-ingress", "keel-chain"):
        if not (BIN / prog).exists():
            pytest.fail(f"{BIN / prog} is missing: run make build")
    if not (VENV / "bin" / "keel-place").exists():
        pytest.fail(f"{VENV}/bin/keel-place is missing: run make build (or set KEEL_VENV)")
    out = tmp_path_factory.mktemp("images")
    t0 = time.monotonic()
    r = subprocess.run([str(IMAGES_SH), "--bin", str(BIN), "--venv", str(VENV), "--out", str(out),
                        "--import", str(ctr.sock)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    yield Built(out, time.monotonic() - t0)
    shutil.rmtree(out, ignore_errors=True)  # ~0.9 GB of tarballs: later tests need the disk


def test_every_image_is_imported_and_its_entry_point_starts(ctr, built):
    # How long images.sh took is reported, not asserted: timing belongs to benchmarks, and a
    # busy 2-core machine takes 3x the ~35 s of an idle one.
    print(f"images.sh took {built.took:.0f} s")
    assert set(built.ref) == set(KEEL_IMAGES) | {"redis", "hello"}
    listed = ctr("images", "ls", "-q").stdout.split()
    for name, ref in built.ref.items():
        assert normalized(ref) in listed, f"{ref} was not imported: {listed}"
    for name in KEEL_IMAGES:
        entry = built.config(name)["Entrypoint"]
        r = ctr("run", "--rm", normalized(built.ref[name]), f"keel-imgtest-{name}", *entry, "--help", check=False)
        assert r.returncode == 0, f"{name}: {entry} --help: exit {r.returncode}\n{r.stdout}{r.stderr}"
        assert os.path.basename(entry[0]) in r.stdout + r.stderr, f"{name}: {r.stdout[:300]}"


def test_agent_tools_run_in_its_image(ctr, built):
    ref = normalized(built.ref["agent"])
    for argv in (["/usr/sbin/ip", "-j", "link", "show"], ["/usr/bin/ovs-vsctl", "--version"],
                 ["/usr/sbin/ethtool", "--version"], ["/usr/bin/nsenter", "--version"],
                 ["/usr/sbin/sysctl", "-n", "kernel.ostype"]):
        r = ctr("run", "--rm", ref, "keel-imgtest-tool", *argv, check=False)
        assert r.returncode == 0, f"{argv}: {r.stdout}{r.stderr}"


def manifests() -> list[dict]:
    """deploy/kubernetes-testcluster as kubectl renders it."""
    if not shutil.which("kubectl"):
        pytest.skip("kubectl is not installed: it renders the kustomization")
    r = subprocess.run(["kubectl", "kustomize", str(OVERLAY)], capture_output=True, text=True, timeout=60,
                       check=True)
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def containers(docs: list[dict]):
    """(workload, pod spec, container) of every workload."""
    for d in docs:
        if d["kind"] in ("Deployment", "StatefulSet", "DaemonSet"):
            spec = d["spec"]["template"]["spec"]
            for c in spec["containers"]:
                yield d, spec, c


def expand(arg: str, env: dict[str, str]) -> str:
    return re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], arg)


def container_env(docs: list[dict], c: dict, node: str) -> dict[str, str]:
    """The container's environment as the kubelet gives it (configMap envFrom, downward API
    spec.nodeName as node)."""
    maps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
    env = {}
    for src in c.get("envFrom", []):
        env.update(maps[src["configMapRef"]["name"]])
    for e in c.get("env", []):
        env[e["name"]] = e["value"] if "value" in e else node
    return env


def test_manifests_run_what_the_images_hold(built):
    by_ref = {normalized(ref): name for name, ref in built.ref.items()}
    docs = manifests()
    seen = set()
    for d, spec, c in containers(docs):
        where = f"{d['kind']} {d['metadata']['name']}, container {c['name']}"
        name = by_ref.get(normalized(c["image"]))
        assert name, f"{where}: image {c['image']} is none of images.sh's {sorted(by_ref)}"
        seen.add(name)
        assert c.get("imagePullPolicy") == "Never", f"{where}: would pull {c['image']}"
        files = built.files(name)
        cfg = built.config(name)
        argv = c.get("command") or cfg["Entrypoint"]
        assert argv[0] in files, f"{where}: {argv[0]} is not in {c['image']}"
        probe = c.get("readinessProbe", {}).get("exec", {}).get("command")
        if probe:
            path_dirs = [p for kv in cfg["Env"] if kv.startswith("PATH=") for p in kv[5:].split(":")]
            assert any(f"{p}/{probe[0]}" in files for p in path_dirs), f"{where}: probe {probe[0]} not on PATH"
        mounts = [m["mountPath"] for m in c.get("volumeMounts", [])]
        env = container_env(docs, c, "node-1")
        for arg in c.get("args", []):
            arg = expand(arg, env)
            value = arg.split("=", 1)[1] if arg.startswith("--") and "=" in arg else arg
            value = value.removeprefix("unix:")
            if value.startswith("/"):
                assert value in files or any(value == m or value.startswith(m + "/") for m in mounts), \
                    f"{where}: {arg}: {value} is neither in {c['image']} nor under a mount ({mounts})"
    assert seen == {"gateway", "agent", "coopsched", "placer", "torctl", "ingress", "redis"}


def manifest_args(docs: list[dict], workload: str, netns_iface: str) -> list[str]:
    """workload's container command line with keel's Service names made loopback addresses
    (every part shares one network namespace) and the Kubernetes backend and the gateway's leader
    election off (no API server)."""
    for d, _, c in containers(docs):
        if d["metadata"]["name"] == workload:
            env = container_env(docs, c, "kt")
            env["KEEL_INGRESS_IFACE"] = netns_iface
            out = []
            for a in c["args"]:
                a = re.sub(r"[a-z-]+\.keel\.svc:", "127.0.0.1:", expand(a, env))
                if a.startswith(("--backend=", "--namespace=", "--leader-elect")):
                    continue
                out.append(a)
            return out
    raise AssertionError(f"no workload {workload}")


def in_netns(pid: int, code: str, timeout=30) -> str:
    r = subprocess.run(["nsenter", "-t", str(pid), "-n", str(VENV / "bin" / "python"), "-c", code],
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def wait_http(pid: int, url: str, want: str = "", limit=60) -> str:
    code = ("import sys, urllib.request as u\n"
            f"try: print(u.urlopen({url!r}, timeout=2).read().decode())\n"
            "except Exception as e: print('ERR', e)")
    deadline = time.time() + limit
    while True:
        out = in_netns(pid, code)
        if not out.startswith("ERR") and want in out:
            return out
        assert time.time() < deadline, f"{url}: {out[-500:]}"
        time.sleep(0.5)


def test_control_plane_runs_from_the_images(ctr, built, tmp_path):
    docs = manifests()
    token = tmp_path / "token"
    token.mkdir()
    (token / "control-token").write_text(hashlib.sha256(os.urandom(32)).hexdigest() + "\n")
    topo = tmp_path / "topology"
    topo.mkdir()
    cfg = next(d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "keel-topology")
    (topo / "topology.yaml").write_text(cfg["data"]["topology.yaml"])
    secrets, data = tmp_path / "secrets", tmp_path / "data"
    secrets.mkdir()
    data.mkdir()

    def mount(src, dst, ro=True):
        return ["--mount", f"type=bind,src={src},dst={dst},options=rbind:{'ro' if ro else 'rw'}"]

    tok = mount(token, "/run/secrets/keel")
    # The Secret keel-redis as README "On Kubernetes" makes it: Redis' ACL file (no default
    # user) and keel-gateway's password, each where the manifests mount them.
    acl, login = tmp_path / "redis-acl", tmp_path / "redis-login"
    login.mkdir()
    users = subprocess.run([str(ROOT / "deploy" / "lib" / "redis-acl.sh"), str(acl)], capture_output=True, text=True,
                           check=True).stdout
    (acl / "users.acl").write_text(users)
    shutil.copy(acl / "redis-gateway", login / "gateway")
    gateway_pw = (acl / "redis-gateway").read_text().strip()
    redis = built.config("redis")["Entrypoint"]
    ctr("run", "-d", *mount(data, "/data", ro=False), *mount(acl, "/etc/keel/redis"), normalized(built.ref["redis"]),
        "kt-redis", *redis, *manifest_args(docs, "redis", ""))
    pid = ctr.pid("kt-redis")
    deadline = time.time() + 20
    while ctr("task", "exec", "--exec-id", "ping", "kt-redis", "redis-cli", "--user", "keel-gateway", "--pass", gateway_pw,
              "--no-auth-warning", "ping", check=False).stdout.strip() != "PONG":
        assert time.time() < deadline, "redis-cli ping as keel-gateway never answered PONG"
        time.sleep(0.2)
    subprocess.run(["nsenter", "-t", str(pid), "-n", "ip", "link", "add", "keelkt0", "type", "veth", "peer",
                    "name", "keelkt1"], check=True)
    for dev in ("keelkt0", "keelkt1"):
        subprocess.run(["nsenter", "-t", str(pid), "-n", "ip", "link", "set", dev, "up"], check=True)
    ns = ["--with-ns", f"network:/proc/{pid}/ns/net"]

    def start(workload, image, *extra):
        ctr("run", "-d", *ns, *tok, *extra, normalized(built.ref[image]), f"kt-{image}",
            *built.config(image)["Entrypoint"], *manifest_args(docs, workload, "keelkt0"))

    start("keel-place", "placer")
    start("keel-gateway", "gateway", *mount(topo, "/etc/keel"), *mount(secrets, "/var/lib/keel/secrets", ro=False),
          *mount(login, "/run/secrets/keel-redis"))
    wait_http(pid, "http://127.0.0.1:8080/healthz")
    start("keel-torctl", "torctl")
    wait_http(pid, "http://127.0.0.1:9102/metrics", "keel_torctl_gateway_synced 1")
    start("keel-ingress", "ingress", "--cap-add", "CAP_NET_ADMIN", "--cap-add", "CAP_NET_RAW")
    wait_http(pid, "http://127.0.0.1:9103/metrics", "keel_ingress_packets_in_total")

    # A chain's deploy goes through the placer (the gateway's Validator) with the token.
    auth = base64.b64encode(b"admin:" + (secrets / "basic-auth-password").read_bytes().strip()).decode()
    body = json.dumps({"service": "ktchain", "image": "keel/chain:latest", "labels": {"com.keel.kind": "chain"},
                       "annotations": {"com.keel.chain": ACL_NAT, "com.keel.filter": "dst net 198.19.9.0/24",
                                       "com.keel.slo": "p99=100us,t_min=10Mbps"}})
    out = in_netns(pid, "import urllib.request as u, urllib.error as e\n"
                        f"r = u.Request('http://127.0.0.1:8080/system/functions', data={body!r}.encode(), method='POST',"
                        f" headers={{'Authorization': 'Basic {auth}'}})\n"
                        "try: print(u.urlopen(r, timeout=30).status)\n"
                        "except e.HTTPError as x: print(x.code, x.read().decode())")
    assert out.split()[0] in ("200", "202"), out
    out = in_netns(pid, "import urllib.request as u\n"
                        f"r = u.Request('http://127.0.0.1:8080/system/functions', headers={{'Authorization': 'Basic {auth}'}})\n"
                        "print(u.urlopen(r, timeout=30).read().decode())")
    assert "ktchain" in out, out
    ctr.stop_all()


def test_library_nf_runs_in_nf_base(ctr, built, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    pkts = [Ether() / IP(src="198.18.0.1", dst="198.19.0.1", ttl=t) / UDP(sport=1000 + t, dport=5001) /
            Raw(b"\xff" * 16) for t in (1, 5, 9, 10, 11, 64, 255)] + [Ether() / ARP()]
    wrpcap(str(data / "in.pcap"), pkts)
    acl = json.dumps({"rules": [{"dst_ip": "198.19.0.0/16", "proto": "udp"}]})
    r = ctr("run", "--rm", "--mount", f"type=bind,src={data},dst=/data,options=rbind:rw",
            normalized(built.ref["nf-base"]), "keel-imgtest-nf", *built.config("nf-base")["Entrypoint"],
            "--nf", f"acl={acl}", "--chain-id", "img", "--position", "0", "--of", "1", "--exit-when-idle", "300",
            "--stats", "/data/stats.json", "--", "--no-pci", "--no-huge", "-m", "256", "--log-level=error",
            "--no-telemetry", "--vdev", "net_pcap0,rx_pcap=/data/in.pcap,tx_pcap=/data/out.pcap", check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads((data / "stats.json").read_text())["nfs"][0]["nf"] == "acl"
    assert len(rdpcap(str(data / "out.pcap"))) == 7  # the ARP packet matches no rule


def test_the_same_inputs_give_the_same_tarball(built, tmp_path):
    # One image at a time, each tarball hashed and removed before the next is built: the
    # placer's carries a Python venv, and a CI disk need not hold two copies of every image.
    for name in ("coopsched", "placer"):
        r = subprocess.run([str(IMAGES_SH), "--bin", str(BIN), "--venv", str(VENV), "--out", str(tmp_path), name],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        again = tmp_path / f"{name}.tar"
        a, b = (sha256_of(t) for t in (built.out / f"{name}.tar", again))
        again.unlink()
        assert a == b, f"{name}.tar differs between two builds of the same inputs"


def sha256_of(path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
