# SPDX-License-Identifier: Apache-2.0
"""An NF on a server that tags packets itself keeps its tag on the way out (`make up`, real
stack): `NAT -> Tunnel(vlan=9) -> Limiter` runs all three NFs in the instance (NAT and Limiter
run on servers only, and a switch NF between them would cost a bounce; `NAT -> Tunnel` alone
now has its Tunnel on the switch), so the Tunnel's VLAN 9 is on the packets when they leave
vf0. The instance's VF port carries them inside the instance VLAN (OVS dot1q-tunnel
port); as an access port it dropped every tagged packet, and stack.yml's chain1 lost its VLAN
whenever the placer ran it on a server. keel-trafgen's sink checks VLAN 9 and the NATed
source on every packet.

`NAT -> Tunnel(vlan=9) -> Monitor` puts Monitor on the ToR after the instance: its packets come
back from the worker with the inner VLAN 9 under the instance's VLAN and run the ToR's Monitor
table behind it. That chain once lost 40 % of its packets (flows never opened at the ingress,
whose held packets then overflowed); it must deliver every packet, tag and NAT intact."""
import json
import subprocess

import pytest

from keelenv import BIN
from keelstack import (SKIP_REASON, all_ready, capture, faas, nf_containers, running_stack, setup_counters,
                       redis, setup_delta, sh, udp, wait_for)

pytestmark = pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON or "runs")

STACK = """version: 1.0
provider:
  name: openfaas
  gateway: http://127.0.0.1:8080
functions:
  tunsrv:
    image: keel/chain:latest
    labels:
      com.keel.kind: chain
    annotations:
      com.keel.chain: "NAT(external_ip='198.18.100.6', port_range=[1024, 65535]) -> Tunnel(vlan=9) -> Limiter(rate_bps=1000000000, burst_bytes=10000000)"
      com.keel.filter: "dst net 198.18.6.0/24"
      com.keel.slo: "p99=1ms,t_min=10Mbps"
  tunmon:
    image: keel/chain:latest
    labels:
      com.keel.kind: chain
    annotations:
      com.keel.chain: "NAT(external_ip='198.18.100.7', port_range=[1024, 65535]) -> Tunnel(vlan=9) -> Monitor()"
      com.keel.filter: "dst net 198.18.7.0/24"
      com.keel.slo: "p99=1ms,t_min=10Mbps"
"""

SCENARIO = {"chains": [{
    "name": name, "dst_net": f"198.18.{net}.0/24", "proto": "udp", "dport": 5001, "sizes": [[512, 1]],
    "flow_lifetime_s": 20, "phases": [{"name": "steady", "seconds": 5, "mbps": 1, "new_flows_per_s": 1}],
    "expect": {"vlan": 9, "snat": {"ip": f"198.18.100.{net}", "ports": [1024, 65535]}}}
    for name, net in (("tunsrv", 6), ("tunmon", 7))]}


def test_a_tag_pushed_by_a_server_nf_reaches_the_sink(tmp_path):
    yml, scenario, out = tmp_path / "stack.yml", tmp_path / "scenario.json", tmp_path / "out.json"
    yml.write_text(STACK)
    scenario.write_text(json.dumps(SCENARIO))
    with running_stack():
        r = faas("deploy", "-f", str(yml))
        assert r.returncode == 0, r.stdout + r.stderr
        try:
            insts = wait_for("tunsrv's instance ready", lambda: all_ready("tunsrv"))
            assert insts, "NAT -> Tunnel runs on the worker"
            assert wait_for("tunmon's instance ready", lambda: all_ready("tunmon"))
            placement = faas("describe", "tunmon").stdout
            assert "monitor@switch" in placement and "tunnel@server" in placement, placement
            # Warm-up: the first flow attaches tunsrv/0 and the controller pre-deploys tunsrv/1 for
            # its idle pool; that cold start takes core 0 for ~10 s (see tests/test_tor.py) and
            # must not overlap the measured traffic.
            assert len(capture("p.haslayer(UDP) and p[IP].dst == '198.18.6.250'", udp("198.18.6.250", 3999, n=1))) == 1
            assert len(capture("p.haslayer(UDP) and p[IP].dst == '198.18.7.250'", udp("198.18.7.250", 3999, n=1))) == 1
            for name in ("tunsrv", "tunmon"):
                wait_for(f"{name}'s idle pool topped up", lambda: len(all_ready(name) or {}) >= 2, timeout=120)
            before = setup_counters()
            run = subprocess.run([str(BIN / "keel-trafgen"), "--scenario", str(scenario), "--out", str(out),
                                  "--quiet", "--seed", "9"], capture_output=True, text=True, timeout=60)
            assert run.returncode == 0, run.stderr
            for c in json.loads(out.read_text())["chains"]:
                print(f"{c['name']}: {c['delivered_pkts']} delivered, loss {c['loss']}, "
                      f"{c['transform_errors']} wrong {c['transform_error_examples']}")
                assert c["delivered_pkts"] > 300, c["name"]
                assert c["transform_errors"] == 0, (c["name"], c["transform_error_examples"])
                assert c["loss"] == 0, str({"chain": c["name"], "flows": c["flows"], "open_timeouts": c["open_timeouts"],
                                            "setup": setup_delta(before, setup_counters())})
            # faas-cli logs reads the instance's NF containers through the worker's agent.
            logs = faas("logs", "tunsrv", "--tail=false", "--instance")
            assert logs.returncode == 0, logs.stdout + logs.stderr
            for nf in ("nat", "tunnel", "limiter"):
                assert f"{nf} running under keel-coopsched" in logs.stdout, logs.stdout
        finally:
            for name in ("tunsrv", "tunmon"):
                r = faas("remove", name)
                assert r.returncode == 0, r.stdout + r.stderr
            # The agent tears the instances down, then deletes their NF state: let it finish
            # before make down, or the state outlives the chains in Redis (its AOF keeps it for
            # the next module's stack).
            wait_for("tunsrv's and tunmon's NF containers removed", lambda: nf_containers() == [], timeout=60)
            wait_for("their NF state deleted", lambda: not [
                k for k in redis("--scan", "--pattern", "keel:state:*")
                if ":tunsrv." in k or ":tunmon." in k], timeout=30)
