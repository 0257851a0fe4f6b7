# SPDX-License-Identifier: Apache-2.0
"""A chain deployed with faas-cli runs its NIC-placed NFs in XDP (make up's worker NIC is an
eBPF SmartNIC): on this rack the ToR cannot run LB, so the placer's refinement (UNO) puts it on
the SmartNIC and NAT stays on the server. The packets arrive at the sink load-balanced and
NATed, the instance's server part is NAT alone, its VF carries keel's XDP program, and an
agent restart during a running flow loses none of its packets."""
import json
import re
import threading
import time
import urllib.request

import pytest

from keelstack import (SKIP_REASON, all_ready, capture, faas, nf_containers, restart, running_stack, sh, udp,
                       wait_for)

pytestmark = pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON)

NET, NAT_IP = "198.18.4.0/24", "198.18.100.4"
BACKENDS = ("198.18.4.100", "198.18.4.101")
STACK = f"""version: 1.0
provider:
  name: openfaas
  gateway: http://127.0.0.1:8080
functions:
  xdpchain:
    image: keel/chain:latest
    labels:
      com.keel.kind: chain
    annotations:
      com.keel.chain: "LB(backends=['{BACKENDS[0]}', '{BACKENDS[1]}']) -> NAT(external_ip='{NAT_IP}', port_range=[1024, 65535])"
      com.keel.filter: "dst net {NET}"
      com.keel.slo: "t_min=1Gbps,t_max=10Gbps"
"""


@pytest.fixture(scope="module")
def xdpchain(tmp_path_factory):
    yml = tmp_path_factory.mktemp("xdp") / "xdp.yml"
    yml.write_text(STACK)
    with running_stack():
        r = faas("deploy", "-f", str(yml))
        assert r.returncode == 0, r.stdout + r.stderr
        try:
            wait_for("xdpchain's pooled instances ready", lambda: all_ready("xdpchain"), timeout=120)
            yield
        finally:
            rm = faas("remove", "-f", str(yml))
            assert rm.returncode == 0, rm.stdout + rm.stderr
            wait_for("xdpchain's containers removed", lambda: nf_containers(chain="xdpchain") == [], timeout=60)


def vf0_links() -> list[str]:
    """`ip -d link show vf0` in each of xdpchain's instances (its position 0's netns)."""
    out = []
    for c in nf_containers(chain="xdpchain"):
        info = json.loads(sh("docker", "inspect", c["ID"]).stdout)[0]
        if info["Config"]["Labels"].get("com.keel.position") == "0" and info["State"]["Running"]:
            out.append(sh("nsenter", "-t", str(info["State"]["Pid"]), "-n", "ip", "-d", "link", "show", "vf0").stdout)
    return out


def test_the_placement_runs_lb_in_xdp_and_nat_on_the_server(xdpchain):
    desc = faas("describe", "xdpchain").stdout
    assert re.search(r"lb@smartnic\S*:local", desc), desc
    # the instances' server part is one NF (NAT): LB runs on the NIC, not in a container
    labels = [dict(kv.split("=", 1) for kv in c["Labels"].split(",")) for c in nf_containers(chain="xdpchain")]
    assert labels and {(l["com.keel.position"], l["com.keel.of"]) for l in labels} == {("0", "1")}, labels
    links = vf0_links()
    assert links and all(re.search(r"prog/xdp id \d+", l) for l in links), links


def test_packets_arrive_load_balanced_by_the_nic_and_nated_by_the_server(xdpchain):
    lines = capture(f"p.haslayer(UDP) and p[IP].src == '{NAT_IP}'",
                    "[Ether(src=SRC, dst=DST) / IP(src='198.18.0.1', dst='198.18.4.7') / UDP(sport=7000 + i, dport=5001)"
                    " / Raw(b'xdp%02d' % i) for i in range(20)]".replace("SRC", "'02:6b:65:00:00:01'")
                    .replace("DST", "'02:6b:65:00:00:02'"), timeout=6)
    assert len(lines) == 20, lines
    dsts = {l.split()[3] for l in lines}
    assert dsts <= set(BACKENDS) and len(dsts) == 2, dsts  # 20 flows over both backends
    # The agent's metrics: LB on the NIC passed them (keel's XDP counters), and NAT on the
    # server received exactly what LB passed, instance by instance (keel-nf's own counters,
    # read every second).
    def counts():
        text = urllib.request.urlopen("http://127.0.0.1:9101/metrics", timeout=5).read().decode()
        lb, nat = {}, {}
        for line in text.splitlines():
            inst = re.search(r'instance="([^"]+)"', line)
            if line.startswith("keel_agent_nic_nf_packets_out_total{") and 'nf="lb"' in line:
                lb[inst[1]] = float(line.rsplit(" ", 1)[1])
            if line.startswith("keel_agent_nf_packets_in_total{") and 'nf="nat"' in line:
                nat[inst[1]] = float(line.rsplit(" ", 1)[1])
        return lb, nat

    def equal():
        lb, nat = counts()
        busy = {i: n for i, n in lb.items() if n > 0}  # the instances the flows went to
        return (busy, nat) if sum(busy.values()) >= 20 and all(nat.get(i) == n for i, n in busy.items()) else None

    lb, nat = wait_for("NAT's packets in equal LB's packets out, per instance", equal, timeout=20)
    print(f"LB out (NIC) {lb}, NAT in (server) {nat}")


def test_an_agent_restart_loses_no_packet_of_a_running_flow(xdpchain):
    # One flow of 600 packets over ~3 s; the agent stops and starts again meanwhile. The XDP
    # program stays attached through its pinned link, and the restarted agent swaps its own
    # programs in over the same pinned maps (the flow keeps its backend).
    result = {}

    def run():
        result["lines"] = capture(f"p.haslayer(UDP) and p[IP].src == '{NAT_IP}' and p[UDP].dport == 5001",
                                  udp("198.18.4.9", 7777, n=600), timeout=15)

    t = threading.Thread(target=run)
    t.start()
    time.sleep(1.5)
    restart("keel-agent")
    t.join(timeout=120)
    lines = result.get("lines", [])
    assert len(lines) == 600, f"{600 - len(lines)} of 600 packets lost"
    assert len({l.split()[3] for l in lines}) == 1, "the flow changed backend"
    assert all(re.search(r"prog/xdp id \d+", l) for l in vf0_links())
