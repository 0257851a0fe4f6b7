# SPDX-License-Identifier: Apache-2.0
"""What keel-ingress costs while flows are set up: napping beside its port, or sleeping on it.

keel-ingress on a veth into a network namespace of this bench's own (DPDK net_af_packet),
with tests/test_ingress.py's in-process gRPC fakes for the gateway and keel-torctl (they
answer at once, so what is measured is the ingress). The bench plays the ToR: it opens
--rate new UDP flows a second for --seconds, --packets packets per flow --gap-ms apart, as
bench/flowgen.py does, and takes what the ingress sends back. Side by side in one run,
alternating --rounds times:

  napping   keel-ingress --port-wake off: with flows in its table the packet loop naps
            25-200 us between polls of its port (the behaviour before issue 34's last change)
  sleeping  the default (--port-wake on): the loop sleeps on the port's own socket, and a
            frame ends the sleep (nf-runtime/include/keel/port_wake.h)

Per round: the ingress' CPU (/proc utime+stime) over the row as a share of a core and per
new flow; its hold latency (first packet -> released, p50/p99 from its histogram); and the
time from the send to the frame coming back (kernel timestamps) of the packets after each
flow's first (the ingress forwards them as they come: what a nap adds shows here), p50/p99.
The fakes and the sender run in this process, on the same core, in both modes.

    python bench/ingress_wake.py --out bench/results/ingress_wake.json
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import netns  # noqa: E402
import test_ingress as ti  # noqa: E402
from flow_setup import cpu_seconds  # noqa: E402
from flow_setup import quantile as hist_quantile  # noqa: E402

MODES = {"napping": "off", "sleeping": "on"}


def quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(int(q * len(xs)), len(xs) - 1)] if xs else 0.0


def one_round(start, wire, mode: str, base_port: int, a) -> dict:
    ing = start("--port-wake", MODES[mode], "--retire-ms", "60000")
    flows = int(a.rate * a.seconds)
    # (send time, flow, seq) in the order they go out: flow f starts at f / rate
    plan = sorted((f / a.rate + s * a.gap_ms / 1000, f, s) for f in range(flows) for s in range(a.packets))
    sent_at = {}
    wire.take()
    c0 = cpu_seconds(ing.proc.pid)
    t0 = time.time()
    for at, f, s in plan:
        wait = t0 + at - time.time()
        if wait > 0:
            time.sleep(wait)
        key = (base_port + f, s)
        sent_at[key] = time.time()
        wire.sock.send(ti.frame(base_port + f, 5001, s))
    want = flows * a.packets
    done = wire.wait_for(lambda: len(wire.got) >= want, timeout=10)
    wall = time.time() - t0
    cpu = cpu_seconds(ing.proc.pid) - c0
    m = ing.metrics()
    got = wire.take()
    later = []
    for fr, ts in got:
        sport, _, seq = ti.flow_of(fr)
        if seq > 0 and (sport, seq) in sent_at:
            later.append((ts - sent_at[(sport, seq)]) * 1e6)
    ing.stop()
    return {"mode": mode, "new_flows": flows, "packets_sent": want, "packets_back": len(got),
            "lost": 0 if done else want - len(got), "seconds": round(wall, 3),
            "ingress_cpu_pct": round(cpu / wall * 100, 2),
            "ingress_cpu_us_per_flow": round(cpu / flows * 1e6, 1),
            "hold_p50_ms": round(hist_quantile(0.5, {}, m, "keel_ingress_hold_latency_seconds"), 3),
            "hold_p99_ms": round(hist_quantile(0.99, {}, m, "keel_ingress_hold_latency_seconds"), 3),
            "later_packet_us_p50": round(quantile(later, 0.5), 1),
            "later_packet_us_p99": round(quantile(later, 0.99), 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "ingress_wake.json"))
    ap.add_argument("--rate", type=float, default=200, help="new flows a second")
    ap.add_argument("--seconds", type=float, default=5, help="per round")
    ap.add_argument("--packets", type=int, default=4, help="per flow")
    ap.add_argument("--gap-ms", type=float, default=2, help="between a flow's packets")
    ap.add_argument("--rounds", type=int, default=2, help="of each mode, alternating")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("ingress_wake: needs root (a network namespace and veths)")
    if not (ti.BIN / "keel-ingress").exists():
        sys.exit(f"ingress_wake: {ti.BIN / 'keel-ingress'} is missing: run make build")
    gw, tor = ti.FakeGateway(), ti.FakeTorctl()
    gw_server = ti.Server(ti.cgrpc.add_ControlServicer_to_server, gw)
    tor_server = ti.Server(ti.tgrpc.add_TorControlServicer_to_server, tor)
    rows = []
    try:
        with netns.veth_into_netns("keel") as (ns, host, peer), tempfile.TemporaryDirectory() as tmp:
            wire = ti.Wire(ns, peer)
            try:
                def start(*extra):
                    return ti.Ingress(Path(tmp), host, gw_server.addr, tor_server.addr, *extra)
                port = 20000
                for r in range(a.rounds):
                    for mode in MODES:
                        row = one_round(start, wire, mode, port, a)
                        port += int(a.rate * a.seconds)
                        print(json.dumps(row), file=sys.stderr)
                        rows.append(row)
            finally:
                wire.close()
    finally:
        gw_server.stop()
        tor_server.stop()

    def mean(mode, field):
        return statistics.mean(r[field] for r in rows if r["mode"] == mode)

    summary = {mode: {f: round(mean(mode, f), 2) for f in ("ingress_cpu_pct", "ingress_cpu_us_per_flow", "hold_p50_ms",
                                                           "hold_p99_ms", "later_packet_us_p50", "later_packet_us_p99")}
               for mode in MODES}
    summary["cpu_ratio_sleeping_to_napping"] = round(summary["sleeping"]["ingress_cpu_pct"] /
                                                     summary["napping"]["ingress_cpu_pct"], 3)
    result = {"rows": rows, "summary": summary, "new_flows_per_s": a.rate, "packets_per_flow": a.packets,
              "gap_ms": a.gap_ms,
              "what": "keel-ingress with in-process fake gateway/torctl; napping = --port-wake off, sleeping = on"}
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0 if all(r["lost"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
