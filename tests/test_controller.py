# SPDX-License-Identifier: Apache-2.0
"""The controller live, with every part real (`make up`): a chain deployed with faas-cli whose
instances take one flow each (OpenFaaS's capacity target, com.openfaas.scale.target=1). The
first flow attaches the pooled instance and the controller pre-deploys the next one; a second
flow finds the first instance at its limit and attaches the pre-deployed one, which shares the
worker's only managed core; when the flows' ToR rules expire, both instances are detached and
the idle pool is trimmed back to --pool-max. No packet of either flow is lost on the way.

The rate threshold from the chain's latency profile is the same code path (policy.Assign and
policy.Overload); this machine cannot push one core to its threshold through veths, so the
rate path is covered by the policy's unit tests and keel-sim."""
import json
import subprocess
import sys

import pytest

from keelenv import ROOT
from keelstack import SKIP_REASON, chain_stack, gateway_log, instances, one_chain_stack, wait_for

pytestmark = pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON or "runs")

FLOWGEN = ROOT / "bench" / "flowgen.py"
CHAIN = "scaled"
NET = "198.18.4.0/24"


STACK = chain_stack(CHAIN, "NAT(external_ip='198.18.100.4', port_range=[1024, 65535])", NET, "p99=200us,t_min=10Mbps",
                    {"com.openfaas.scale.type": "capacity", "com.openfaas.scale.target": "1"})


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with one_chain_stack(tmp_path_factory.mktemp("controller") / "stack.yml", STACK, CHAIN):
        yield


class Sink:
    """flowgen's sink in keelsink, counting what arrives per flow."""

    def __init__(self, seconds: float):
        self.p = subprocess.Popen(["ip", "netns", "exec", "keelsink", sys.executable, str(FLOWGEN), "recv",
                                   "--duration", str(seconds), "--quiet", "3"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.p.stderr.readline().strip() == "ready"

    def result(self, timeout: float) -> dict:
        out, _ = self.p.communicate(timeout=timeout)
        return json.loads(out)

    def kill(self):
        self.p.kill()


def send(first_flow: int, packets: int, gap_ms: float):
    """One UDP flow of `packets` packets, gap_ms apart, to the chain's prefix."""
    return subprocess.Popen(["ip", "netns", "exec", "keelsrc", sys.executable, str(FLOWGEN), "send",
                             "--rate", "1", "--duration", "1", "--packets", str(packets), "--gap-ms", str(gap_ms),
                             "--proto", "udp", "--dst-net", NET, "--first-flow", str(first_flow)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_flow_over_the_instance_limit_attaches_the_pooled_instance_and_expiry_detaches_both(stack):
    assert set(instances(CHAIN)) == {f"{CHAIN}/0"}
    sink = Sink(seconds=25)
    try:
        a = send(first_flow=1, packets=100, gap_ms=50)  # 5 s long
        # the first flow attaches scaled/0 and the controller refills the pool with scaled/1
        wait_for("scaled/0 attached and scaled/1 pre-deployed and ready",
                 lambda: (lambda i: i.get(f"{CHAIN}/0", {}).get("state") == "attached"
                          and i.get(f"{CHAIN}/1", {}).get("phase") == "ready")(instances(CHAIN)), timeout=30)
        b = send(first_flow=2, packets=40, gap_ms=25)  # scaled/0 holds its one flow: scaled/1 takes this one
        for p in (a, b):
            out, err = p.communicate(timeout=30)
            assert p.returncode == 0, err
        insts = instances(CHAIN)  # the flows are live for torctl's idle timeout (10 s)
        assert insts[f"{CHAIN}/0"]["state"] == "attached" and insts[f"{CHAIN}/1"]["state"] == "attached", insts
        assert insts[f"{CHAIN}/0"]["core"] == insts[f"{CHAIN}/1"]["core"] == "1"  # packed on the one managed core
        assert insts[f"{CHAIN}/0"]["flows"] == insts[f"{CHAIN}/1"]["flows"] == 1
        got = sink.result(timeout=60)
    finally:
        sink.kill()
    assert got["per_flow"] == {"1": 100, "2": 40}, got  # no packet lost across the second attach
    log = gateway_log()
    assert f"scale-out: chain {CHAIN} instance {CHAIN}/1 attached on worker local core 1" in log
    # torctl's idle timeout (10 s) ends both flows; a second later their cores are given back,
    # and the idle pool (scaled/0, /1 and the /2 pre-deployed after /1 attached) is trimmed to 2
    wait_for("both instances detached and the pool trimmed",
             lambda: (lambda i: set(i) == {f"{CHAIN}/0", f"{CHAIN}/1"} and all(x["state"] == "pooled" for x in i.values()))(
                 instances(CHAIN)), timeout=40, every=1)
    log = gateway_log()
    for iid in (f"{CHAIN}/0", f"{CHAIN}/1"):
        assert f"scale-in: chain {CHAIN} instance {iid} detached from worker local, core given back" in log
    assert f"scale-in: chain {CHAIN} idle instance {CHAIN}/2 removed (idle pool above 2)" in log
