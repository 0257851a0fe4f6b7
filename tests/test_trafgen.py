# SPDX-License-Identifier: Apache-2.0
"""keel-trafgen against the real local stack: `make up`, `faas-cli deploy` of stack.yml's three
chains, then ten seconds of traffic from the source netns keelsrc through the embedded ToR
(chain 1 on the switch, chains 2 and 3 in containers on coopsched's core), a fifth of chain 2's
flows asking for a blocked URL, a few malformed frames and a group of flows no chain serves.
The sink is the same process, in keelsink; it checks every packet's transformation. A ToR
probe flow (`tor-probe`, which the switch sends from the source straight to the sink) gives the
switch's own share of the latency, to check the server's measured sojourn against."""
import json
import statistics
import subprocess
import sys
import threading

import pytest

from keelenv import BIN, ROOT
from keelstack import SKIP_REASON, all_ready, faas, running_stack, setup_counters, setup_delta, wait_for
from test_dashboard import topology

sys.path.insert(0, str(ROOT / "bench"))
import promtext  # noqa: E402 - bench/promtext.py

pytestmark = pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON or "runs")

TRAFGEN = BIN / "keel-trafgen"
INGRESS_METRICS = "http://127.0.0.1:9103/metrics"
TORCTL_METRICS = "http://127.0.0.1:9102/metrics"
SCENARIO = ROOT / "bench" / "trafgen" / "scenarios" / "three_chains.json"


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    if not TRAFGEN.exists():
        pytest.fail(f"{TRAFGEN} is missing: run make build")
    out = tmp_path_factory.mktemp("trafgen") / "result.json"
    with running_stack():
        r = faas("deploy", "-f", "stack.yml", "--regex", "^chain[123]$")
        assert r.returncode == 0, r.stdout + r.stderr
        for chain in ("chain2", "chain3"):
            wait_for(f"{chain}'s instances ready", lambda: all_ready(chain))
        # until the ingress has the chains from the gateway's Watch, new flows take the no-chain path
        wait_for("the ingress to know the three chains",
                 lambda: promtext.scrape(INGRESS_METRICS).get("keel_ingress_chains") == 3)
        # and torctl the chains' switch programs (a first packet it cannot install is dropped)
        wait_for("torctl synced with the gateway",
                 lambda: promtext.scrape(TORCTL_METRICS).get("keel_torctl_gateway_synced") == 1)
        before = setup_counters()
        sojourn, stop = [], threading.Event()
        sampler = threading.Thread(target=sample_sojourn, args=(sojourn, stop))
        sampler.start()
        try:
            run = subprocess.run([str(TRAFGEN), "--scenario", str(SCENARIO), "--out", str(out), "--quiet"],
                                 capture_output=True, text=True, timeout=120)
            # the agent's last window with the run's packets (keel-agent --sojourn-window 5 s)
            stop.wait(6)
        finally:
            stop.set()
            sampler.join()
        assert run.returncode == 0, run.stderr
        setup = setup_delta(before, setup_counters())
    return {**json.loads(out.read_text()), "setup": setup, "sojourn": sojourn}


def sample_sojourn(samples: list, stop: threading.Event) -> None:
    """The server sojourn windows the gateway shows for chain3 (p50/p99 of its instance over the
    agent's window), each distinct window once, until stop."""
    while not stop.wait(1.0):
        c = next((c for c in topology()["chains"] if c["name"] == "chain3"), {})
        w = (c.get("p50_us", 0), c.get("p99_us", 0))
        if w[0] > 0 and (not samples or samples[-1] != w):
            samples.append(w)


def chain(result: dict, name: str) -> dict:
    return next(c for c in result["chains"] if c["name"] == name)


def test_every_chain_delivers_everything_transformed_as_its_nfs_require(result):
    summary = {c["name"]: {k: v for k, v in c.items() if k in ("offered_pkts", "delivered_pkts", "loss",
                                                                  "open_timeouts", "transform_errors",
                                                                  "transform_error_examples")}
               for c in result["chains"]}
    # on failure: where the packets went (ingress drop reasons, torctl install results)
    summary = str({**summary, "setup": result["setup"]})  # a str: pytest shortens a dict's repr
    for c in result["chains"]:
        assert c["delivered_pkts"] > 0 and c["flows"] > 0, summary
        assert c["loss"] == 0 and c["flows_with_loss"] == 0, summary
        assert c["transform_errors"] == 0, summary
        assert c["duplicates"] == 0, summary
        # each delivered packet's payload was compared byte for byte with what was sent
        assert c["payload_bytes_compared"] > 0, summary


def test_chain2_decrypts_to_what_was_sent_and_never_delivers_a_blocked_url(result):
    c2 = chain(result, "chain2")
    assert c2["blocked_sent"] > 0 and c2["blocked_delivered"] == 0, c2
    # 512-byte frames: 458 bytes of plaintext payload compared per packet, after decryption
    assert c2["payload_bytes_compared"] == 458 * c2["delivered_pkts"], c2


def test_chain3_keeps_each_flows_nat_mapping(result):
    assert chain(result, "chain3")["nat_changes"] == 0


def test_malformed_frames_were_sent_and_none_came_back(result):
    assert result["malformed_sent"] >= 10 and result["malformed_delivered"] == 0


def test_latencies_and_the_timeline_are_reported(result):
    for c in result["chains"]:
        assert 0 < c["p50_us"] <= c["p99_us"] <= c["max_us"], c
        assert c["setup_p50_us"] > 0, c
        # the slowest first packets, slowest first, say which flow and when it was sent
        worst = c["setup_worst"]
        assert 0 < len(worst) <= 5 and [w["ms"] for w in worst] == sorted((w["ms"] for w in worst), reverse=True), c
        assert worst[0]["ms"] * 1000 >= c["setup_p50_us"] / 2 and 0 <= worst[0]["sent_s"] <= result["traffic_s"], c
    assert result["rx_poll_max_us"] == 20 and result["tsc_hz"] > 0
    # the sink slept on its ports and frames woke it (--rx-wake on, the default)
    assert result["rx_wake"] and result["rx_wake_ups"] > 0
    assert {t["chain"] for t in result["timeline"]} == {"chain1", "chain2", "chain3", "nochain", "tor-probe"}
    assert result["port_stats"]["tx"]["opackets"] >= sum(c["offered_pkts"] for c in result["chains"])


def test_chain3s_measured_server_sojourn_fits_in_its_end_to_end_latency_less_the_tor(result):
    """Issue 32 (b): position 0's sojourn histogram against keel-trafgen's end to end. chain3's
    packets cross the ToR twice (source -> worker, worker -> sink) and the server once; the probe
    crosses the ToR once. So, at the median, the server's sojourn S, the chain's end to end E and
    the probe's T hold S <= E - T (the server cannot take more than is left after one crossing),
    and what is left beyond S, E - T - S, is the second crossing and the veths: at most 3T + 500 µs
    on this loaded software ToR (a stated bound, not a tight one). A histogram off by a unit
    (cycles read as ns, a window never reset) or empty fails one of them."""
    e, t = chain(result, "chain3"), chain(result, "tor-probe")
    assert t["loss"] == 0 and t["delivered_pkts"] >= 100, t
    assert result["sojourn"], "the gateway showed no server sojourn window for chain3 during the run"
    s50 = statistics.median(w[0] for w in result["sojourn"])
    s99 = max(w[1] for w in result["sojourn"])
    figures = dict(server_p50_us=s50, server_p99_us=s99, e2e_p50_us=e["p50_us"], e2e_p99_us=e["p99_us"],
                   tor_p50_us=t["p50_us"], tor_p99_us=t["p99_us"], windows=result["sojourn"])
    print(figures)
    assert 0.5 <= s50 <= e["p50_us"] - t["p50_us"], figures
    assert e["p50_us"] - t["p50_us"] - s50 <= 3 * t["p50_us"] + 500, figures
    assert s99 <= e["max_us"], figures
