# SPDX-License-Identifier: Apache-2.0
"""Live flow moves (issue 37) with every part real: `make up` with flow moves on
(KEEL_FLOW_MOVES=1: keel-gateway --flow-moves), a chain with a NAT in a container whose
instances take four flows each (com.openfaas.scale.target=4), and eight long UDP flows from
the source netns to the sink netns: the first four fill moving/0, the others attach moving/1.
Under that steady traffic the gateway is asked to empty moving/0 (POST /system/keel/moves):
keel-ingress holds each flow's new packets, has its ToR rule removed, carries its NAT mapping
from moving/0 to moving/1 in band (EXPORT_STATE / IMPORT_STATE frames through every
position), installs the flow's rule to moving/1 and sends what it held there in order.

What a user would notice, checked at the sink: no packet lost, none reordered or duplicated,
and every flow kept the one NAT mapping it started with (the state moved with it: a fresh
mapping at moving/1 would show the flow from another port). The gateway answers that every
flow moved, moving/0 carries no flow afterwards and gives its core back while the flows still
run."""
import base64
import json
import os
import subprocess
import sys
import time
import urllib.request

import pytest

from keelenv import ROOT
from keelstack import GATEWAY, RUN, SKIP_REASON, chain_stack, instances, one_chain_stack, wait_for

sys.path.insert(0, str(ROOT / "bench"))
import promtext  # noqa: E402 - bench/promtext.py

pytestmark = pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON or "runs")

FLOWGEN = ROOT / "bench" / "flowgen.py"
INGRESS_METRICS = "http://127.0.0.1:9103/metrics"
CHAIN = "moving"
NET = "198.18.7.0/24"
PER_INSTANCE = 4
GAP_MS = 10  # a packet of each flow every 10 ms
SECONDS = 24  # each flow's length
SRC, DST = f"{CHAIN}/0", f"{CHAIN}/1"

STACK = chain_stack(CHAIN, "NAT(external_ip='198.18.100.7', port_range=[1024, 65535])", NET, "p99=1ms,t_min=10Mbps",
                    {"com.openfaas.scale.type": "capacity", "com.openfaas.scale.target": str(PER_INSTANCE)})


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    before = os.environ.get("KEEL_FLOW_MOVES")
    os.environ["KEEL_FLOW_MOVES"] = "1"  # deploy/local/up.sh: keel-gateway --flow-moves
    try:
        with one_chain_stack(tmp_path_factory.mktemp("migration") / "stack.yml", STACK, CHAIN):
            yield
    finally:
        if before is None:
            os.environ.pop("KEEL_FLOW_MOVES", None)
        else:
            os.environ["KEEL_FLOW_MOVES"] = before


def send(first_flow: int, flows: int, seconds: float) -> subprocess.Popen:
    """flows UDP flows to the chain's prefix, opened within a few ms, a packet every GAP_MS."""
    return subprocess.Popen(["ip", "netns", "exec", "keelsrc", sys.executable, str(FLOWGEN), "send",
                             "--rate", "500", "--duration", str(flows / 500), "--packets",
                             str(int(seconds * 1000 / GAP_MS)), "--gap-ms", str(GAP_MS), "--proto", "udp",
                             "--dst-net", NET, "--first-flow", str(first_flow)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def move(src: str, dst: str) -> dict:
    """POST /system/keel/moves: every flow of src to dst; the gateway's report."""
    password = (RUN / "secrets" / "basic-auth-password").read_text().strip()
    req = urllib.request.Request(GATEWAY + "/system/keel/moves", method="POST",
                                 data=json.dumps({"from": src, "to": dst, "batch": 100, "limit": 0}).encode())
    req.add_header("Authorization", "Basic " + base64.b64encode(f"admin:{password}".encode()).decode())
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def test_an_instance_is_emptied_under_traffic_without_loss_reordering_or_a_new_nat_mapping(stack):
    assert set(instances(CHAIN)) == {SRC}
    sink = subprocess.Popen(["ip", "netns", "exec", "keelsink", sys.executable, str(FLOWGEN), "recv",
                             "--duration", str(SECONDS + 10), "--quiet", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    senders = []
    try:
        assert sink.stderr.readline().strip() == "ready"
        t0 = time.monotonic()
        senders.append(send(700000, PER_INSTANCE, SECONDS))
        # moving/0 takes the first four and the controller pre-deploys moving/1 into the pool
        wait_for(f"{SRC} attached with {PER_INSTANCE} flows and {DST} ready",
                 lambda: (lambda i: i.get(SRC, {}).get("flows") == PER_INSTANCE
                          and i.get(DST, {}).get("phase") == "ready")(instances(CHAIN)), timeout=60)
        # the next four find moving/0 full and attach moving/1; they end with the first ones
        senders.append(send(700000 + PER_INSTANCE, PER_INSTANCE, SECONDS - (time.monotonic() - t0)))
        wait_for(f"{DST} attached with {PER_INSTANCE} flows",
                 lambda: (lambda i: i.get(DST, {}).get("state") == "attached"
                          and i[DST]["flows"] == PER_INSTANCE)(instances(CHAIN)), timeout=30)
        time.sleep(2)  # every rule in, the traffic steady through both instances
        before = promtext.scrape(INGRESS_METRICS)

        rep = move(SRC, DST)
        moved_at = time.monotonic()
        print(f"moved {rep['moved']} of {rep['flows']} flows in", [b["ms"] for b in rep["batches"]], "ms; pauses (us):",
              [r["pause_us"] for b in rep["batches"] for r in b.get("results") or []])
        assert (rep["flows"], rep["moved"]) == (PER_INSTANCE, PER_INSTANCE), rep
        results = [r for b in rep["batches"] for r in b.get("results") or []]
        assert len(results) == PER_INSTANCE and all(r["moved"] for r in results), rep
        assert all(0 < r["pause_us"] < 1e6 for r in results), rep  # each flow held well under a second
        insts = instances(CHAIN)
        assert insts[SRC]["flows"] == 0 and insts[DST]["flows"] == 2 * PER_INSTANCE, insts
        after = promtext.scrape(INGRESS_METRICS)
        moved = 'keel_ingress_flow_moves_total{result="moved"}'
        assert after[moved] - before.get(moved, 0) == PER_INSTANCE
        assert sum(v for k, v in after.items() if k.startswith("keel_ingress_flow_moves_total")
                   and 'result="moved"' not in k) == 0, after
        # Emptied, moving/0 gives its core back while the flows still run.
        wait_for(f"{SRC} detached", lambda: instances(CHAIN).get(SRC, {}).get("state") != "attached", timeout=15)
        assert time.monotonic() - t0 < SECONDS - 2, "the flows ended before the core was given back"
        assert time.monotonic() - moved_at < 15

        sent = [json.loads(p.communicate(timeout=SECONDS + 60)[0]) for p in senders]
        got = json.loads(sink.communicate(timeout=SECONDS + 60)[0])
    finally:
        for p in [*senders, sink]:
            if p.poll() is None:
                p.kill()
                p.wait()
    packets = sum(s["packets"] for s in sent)
    summary = {k: v for k, v in got.items() if k not in ("per_flow",)}
    print(f"sent {packets} packets, sink:", summary)
    assert got["flows"] == 2 * PER_INSTANCE, summary
    assert got["packets"] == packets and got["duplicates"] == 0, (packets, summary)
    assert got["reordered"] == 0, summary
    assert got["remapped"] == {}, summary  # each flow kept its NAT mapping through the move
