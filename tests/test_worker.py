# SPDX-License-Identifier: Apache-2.0
"""A deployed chain really runs: `make up`, `faas-cli deploy -f stack.yml`, and the worker
agent runs every pooled instance as one container per server-placed NF with its VF on the
NIC bridge; an attached instance of chain 3 (ACL -> NAT) NATs UDP sent into the bridge's
trunk with its VLAN tag; NF containers, the agent and the gateway survive crashes and
restarts; `faas-cli remove` and `make down` leave nothing behind. Real dockerd, Open vSwitch,
keel-coopsched (SCHED_FIFO on core 1), redis-server, placer and gateway, all started by
`make up`."""
import json
import os
import re
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

import netns
from keelenv import ROOT
from keelstack import (CHAINS, GATEWAY, RUN, SKIP_REASON, all_ready, control_stub, coopsched_groups, describe, faas,
                       install_on_tor, instances, nf_containers, ovs, pid_of, redis, running_stack, sh, wait_for)

BRIDGE = "keel-nic-local"
# chain 3's NAT in stack.yml
NAT_IP = "198.18.100.1"

pytestmark = pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON or "runs")


def server_nfs(name: str) -> int:
    line = next(l for l in describe(name).splitlines() if "com.keel.placement" in l)
    return line.count("@server")


@pytest.fixture(scope="module")
def control():
    with control_stub() as c:
        yield c


@pytest.fixture(scope="module")
def stack():
    """make up, log in; make down afterwards, and check it left nothing."""
    with running_stack():
        yield


@pytest.fixture(scope="module")
def deployed(stack):
    t0 = time.time()
    r = faas("deploy", "-f", "stack.yml", "--filter", "chain*")
    assert r.returncode == 0, r.stdout + r.stderr
    for c in CHAINS:
        if server_nfs(c):
            wait_for(f"{c}'s pooled instance ready", lambda c=c: all_ready(c))
    print(f"deploy -> every pooled instance ready: {time.time() - t0:.1f}s")
    return True


@pytest.fixture
def trunk():
    """A netns keelw<pid> whose veth is a trunk port (every VLAN) of the NIC bridge."""
    with netns.veth_into_netns("keelw") as (ns, host, peer):
        ovs("add-port", BRIDGE, host)
        try:
            yield ns, peer
        finally:
            ovs("--if-exists", "del-port", BRIDGE, host, check=False)


def send_and_capture(ns, dev, vlan, sport, n=50, timeout=20):
    """Sends n UDP packets 198.18.0.10:sport -> 198.18.3.5:5001 tagged vlan into the bridge and
    returns what comes back on that VLAN from the NAT's address (scapy packets)."""
    prog = f"""
import sys
from scapy.all import Ether, Dot1Q, IP, UDP, Raw, AsyncSniffer, sendp
import time
# filtered here, not by a kernel BPF filter: the kernel takes the VLAN tag off into
# metadata, where libpcap's "vlan N" filter does not find it on scapy's socket
sn = AsyncSniffer(iface={dev!r}, store=True, lfilter=lambda p: p.haslayer(Dot1Q) and p[Dot1Q].vlan == {vlan}
                  and p.haslayer(UDP) and p[IP].src == {NAT_IP!r})
sn.start(); time.sleep(0.5)
pkts = [Ether(src="02:00:00:00:0a:01", dst="02:00:00:00:0b:01") / Dot1Q(vlan={vlan}) /
        IP(src="198.18.0.10", dst="198.18.3.5") / UDP(sport={sport}, dport=5001) / Raw(b"keel%04d" % i)
        for i in range({n})]
sendp(pkts, iface={dev!r}, verbose=False, inter=0.002)
deadline = time.time() + {timeout}
while time.time() < deadline and len(sn.results or []) < {n}:
    time.sleep(0.1)
sn.stop()
for p in sn.results:
    print(p[IP].src, p[UDP].sport, p[UDP].dport, bytes(p[UDP].payload)[:8].decode())
"""
    r = sh("ip", "netns", "exec", ns, sys.executable, "-W", "ignore", "-c", prog, timeout=timeout + 30)
    return [l.split() for l in r.stdout.splitlines() if l.strip()]


def test_deploy_runs_one_container_per_server_nf_with_its_vf(deployed):
    for c in CHAINS:
        insts = instances(c)
        n = server_nfs(c)
        if not n:
            assert insts == {}, f"{c} runs on the switch only, yet has instances"
            continue
        for iid, inst in insts.items():
            cs = nf_containers(instance=iid)
            assert len(cs) == n and all(x["State"] == "running" for x in cs), cs
            port = f"keelvf{inst['vlan']}"
            assert port in ovs("list-ports", BRIDGE).stdout.split()
            assert ovs("get", "port", port, "tag").stdout.strip() == str(inst["vlan"])
    d = sh("docker", "inspect", nf_containers(chain="chain3")[0]["ID"]).stdout
    hc = json.loads(d)[0]["HostConfig"]
    assert hc["NetworkMode"] == "none" and not hc["Privileged"] and hc["CpusetCpus"] == "1"


def test_attached_chain3_instance_nats_udp_from_the_trunk(deployed, control, trunk):
    pb, stub = control
    flow = pb.FiveTuple(src_ip="198.18.0.10", dst_ip="198.18.3.5", src_port=4000, dst_port=5001, proto=17)
    a = stub.AssignFlow(pb.AssignFlowRequest(flow=flow, ingress_id="test"))
    assert a.assigned and a.chain == "chain3", a
    install_on_tor(flow, a)  # as the ingress would: the flow, and so the attached instance, stay
    vlan = a.instance.vlan
    wait_for("chain3 attached and ready", lambda: instances("chain3")[a.instance.id]["phase"] == "ready"
             and instances("chain3")[a.instance.id]["state"] == "attached")
    ns, dev = trunk
    got = send_and_capture(ns, dev, vlan, sport=4000)
    assert len(got) == 50, got
    assert {g[0] for g in got} == {NAT_IP} and len({g[1] for g in got}) == 1  # one NAT mapping for the flow
    assert sorted(g[3] for g in got) == [f"keel{i:04d}" for i in range(50)]

    def packets_reported():
        with urllib.request.urlopen(GATEWAY + "/metrics", timeout=5) as r:
            m = re.search(r'^keel_chain_packets_total\{chain="chain3"\} (\S+)', r.read().decode(), re.M)
        return m and float(m[1]) >= 50
    wait_for("chain3's packets in the gateway's metrics", packets_reported, timeout=30)


def test_killed_nf_container_is_replaced_and_the_nat_mapping_survives(deployed, control, trunk):
    pb, stub = control
    iid = next(i for i, x in instances("chain3").items() if x["state"] == "attached")
    vlan = instances("chain3")[iid]["vlan"]
    ns, dev = trunk
    before = send_and_capture(ns, dev, vlan, sport=4100, n=10)
    assert len(before) == 10
    time.sleep(1.5)  # the NAT table reaches Redis (the runtime mirrors it periodically)
    cs = nf_containers(instance=iid)
    nat = max(cs, key=lambda c: int(re.search(r"com\.keel\.position=(\d+)", c["Labels"])[1]))  # NAT is chain 3's last NF
    sh("docker", "kill", nat["ID"])
    wait_for("the NAT container replaced", lambda: (lambda now: len(now) == len(cs) and nat["ID"] not in {c["ID"] for c in now}
                                                    and all(c["State"] == "running" for c in now))(nf_containers(instance=iid)))
    wait_for("chain3 ready again", lambda: instances("chain3")[iid]["phase"] == "ready")
    after = send_and_capture(ns, dev, vlan, sport=4100, n=10)
    assert len(after) == 10
    assert {g[1] for g in after} == {before[0][1]}, "the flow's NAT port changed: its state did not survive"


def test_agent_restart_adopts_everything_without_restarting_it(deployed):
    ids = sorted(c["ID"] for c in nf_containers())
    ports = sorted(ovs("list-ports", BRIDGE).stdout.split())
    old = pid_of("keel-agent")
    os.kill(old, 9)
    up = sh("make", "-s", "up", check=False, timeout=300, cwd=ROOT)
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
    assert pid_of("keel-agent") != old
    time.sleep(3)
    for c in CHAINS:
        if server_nfs(c):
            wait_for(f"{c} ready after the agent restart", lambda c=c: all_ready(c))
    assert sorted(c["ID"] for c in nf_containers()) == ids
    assert sorted(ovs("list-ports", BRIDGE).stdout.split()) == ports


def test_gateway_restart_leaves_the_instances_running(deployed):
    ids = sorted(c["ID"] for c in nf_containers())
    os.kill(pid_of("keel-gateway"), 15)
    time.sleep(1)
    up = sh("make", "-s", "up", check=False, timeout=300, cwd=ROOT)
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
    time.sleep(3)
    for c in CHAINS:
        if server_nfs(c):
            wait_for(f"{c} ready after the gateway restart", lambda c=c: all_ready(c))
    assert sorted(c["ID"] for c in nf_containers()) == ids


def test_cpu_bound_normal_function_never_runs_on_the_chains_core(deployed, control, trunk):
    if sh("docker", "image", "inspect", "keel/hello:latest", check=False).returncode != 0:
        sh("make", "-s", "images", timeout=600, cwd=ROOT)
    r = faas("deploy", "-f", "stack.yml", "--filter", "hello")
    assert r.returncode == 0, r.stdout + r.stderr
    wait_for("hello answers", lambda: faas("invoke", "hello", timeout=30).returncode == 0, timeout=60)
    busy = threading.Thread(target=lambda: urllib.request.urlopen(
        urllib.request.Request(GATEWAY + "/function/hello?spin=6000", data=b"x"), timeout=20).read())
    busy.start()
    try:
        time.sleep(0.5)
        pid = int(sh("docker", "inspect", "-f", "{{.State.Pid}}", "keel-fn-hello-0").stdout)
        allowed = Path(f"/proc/{pid}/status").read_text()
        assert re.search(r"^Cpus_allowed_list:\s+0$", allowed, re.M), allowed
        iid = next(i for i, x in instances("chain3").items() if x["state"] == "attached")
        ns, dev = trunk
        got = send_and_capture(ns, dev, instances("chain3")[iid]["vlan"], sport=4200, n=50)
        assert len(got) == 50
    finally:
        busy.join(timeout=30)
    assert faas("remove", "hello").returncode == 0



def test_an_image_that_disappears_fails_the_instance_with_its_reason_and_backs_off(deployed):
    # A second tag keeps the image while keel/nf-base:latest is gone: `docker rmi -f` of its
    # only tag deletes an image no running container uses, and then nothing could put it back.
    keep = "keel/nf-base:keel-test-keep"
    sh("docker", "tag", "keel/nf-base:latest", keep)
    iid = next(iter(instances("chain3")))
    sh("docker", "rmi", "keel/nf-base:latest")
    try:
        sh("docker", "kill", nf_containers(instance=iid)[0]["ID"])
        wait_for("chain3 reported failed", lambda: instances("chain3")[iid]["phase"] == "failed", timeout=30)
        # first the NF's exit, then the rebuild's reason
        wait_for("the missing image named", lambda: "keel/nf-base:latest: image not found" in describe("chain3"), timeout=30)
        log = (RUN / "keel-agent.log").read_text()
        t0 = time.time()
        time.sleep(6)
        tries = (RUN / "keel-agent.log").read_text()[len(log):].count('msg="instance failed" instance=' + iid)
        assert tries <= 2, f"{tries} rebuilds in {time.time() - t0:.0f}s: a crash loop, not a backoff"
    finally:
        sh("docker", "tag", keep, "keel/nf-base:latest")
        sh("docker", "rmi", keep)
    wait_for("chain3 rebuilt once the image is back", lambda: instances("chain3")[iid]["phase"] == "ready", timeout=90)

def test_remove_leaves_no_container_port_group_or_key(deployed):
    r = faas("remove", "-f", "stack.yml", "--filter", "chain*")
    assert r.returncode == 0, r.stdout + r.stderr
    wait_for("every NF container removed", lambda: nf_containers() == [], timeout=60)
    wait_for("every VF port removed", lambda: not [p for p in ovs("list-ports", BRIDGE).stdout.split()
                                                   if p.startswith("keelvf")], timeout=30)
    assert not re.search(r"^\d+: keelvf", sh("ip", "-o", "link", "show").stdout, re.M)
    keys = redis("--scan", "--pattern", "keel:*")
    assert not [k for k in keys if k.startswith(("keel:instances:", "keel:status:", "keel:instflows:", "keel:state:"))], keys
    assert coopsched_groups() == []

