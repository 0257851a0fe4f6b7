# SPDX-License-Identifier: Apache-2.0
"""keel-torctl's CPU per InstallFlows call and per flow, by batch size (root).

keel-torctl on a private Open vSwitch, as bench_install.py starts it. One caller makes
paced calls (--rate calls a second, one at a time, so every call is its own batch on the
switch) of InstallFlows carrying 1, 4, 16 and 64 new UDP flows, and reads torctl's CPU
time (/proc utime + stime) over each row. Beside them, the same pacing of Status calls
(no switch work: gRPC's own cost in torctl's process) answers how much of a call is
gRPC's Python server. A row: calls, flows per call, CPU µs per call and per flow, call
latency p50/p99. Last, FlowRemoved: what torctl spends per flow that expires on the switch
and is reported to a watcher (the gateway's WatchFlowsRemoved). Writes
bench/results/torctl_cpu.json.

What it shows: the cost is per call far more than per flow, so the control path's CPU per
new flow depends on how many flows the ingress packs into each InstallFlows call.
"""
import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "tests"))

from torctl_env import WORKER, Torctl, bench_torctl  # noqa: E402
import grpc  # noqa: E402
from keel_torctl.pb import control_pb2, torctl_pb2  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / CLK_TCK


def paced(torctl: Torctl, calls: int, rate: float, make_call) -> tuple[float, list[float]]:
    """Makes `calls` calls one at a time at `rate` a second; (torctl CPU s, latencies s)."""
    lat = []
    c0, t0 = cpu_s(torctl.proc.pid), time.monotonic()
    for i in range(calls):
        s = time.monotonic()
        make_call(i)
        lat.append(time.monotonic() - s)
        wait = t0 + (i + 1) / rate - time.monotonic()
        if wait > 0:
            time.sleep(wait)
    return cpu_s(torctl.proc.pid) - c0, sorted(lat)


def row(kind: str, calls: int, per_call: int, cpu: float, lat: list[float]) -> dict:
    return {"call": kind, "calls": calls, "flows_per_call": per_call,
            "cpu_us_per_call": round(cpu / calls * 1e6, 1),
            "cpu_us_per_flow": round(cpu / calls / per_call * 1e6, 1) if per_call else None,
            "call_ms_p50": round(lat[len(lat) // 2] * 1e3, 3), "call_ms_p99": round(lat[int(len(lat) * 0.99)] * 1e3, 3)}


def run(torctl: Torctl, calls: int, rate: float) -> list[dict]:
    rows = []
    cpu, lat = paced(torctl, calls, rate, lambda i: torctl.stub.Status(torctl_pb2.TorStatusRequest(), timeout=10))
    rows.append(row("Status", calls, 0, cpu, lat))
    base = 0
    for per_call in (1, 4, 16, 64):
        n = calls if per_call < 64 else calls // 4

        def install(i: int, per_call=per_call, base=base) -> None:
            req = torctl_pb2.InstallFlowsRequest()
            for j in range(per_call):
                k = base + i * per_call + j
                flow = control_pb2.FiveTuple(src_ip="198.18.0.1", dst_ip=f"198.19.{k // 65536}.{k // 256 % 256}",
                                             src_port=k % 65536, dst_port=53, proto=17)
                r = req.flows.add()
                r.assignment.CopyFrom(torctl_pb2.FlowAssignment(flow=flow, chain="bench", vlan=7, worker=WORKER))
                r.idle_timeout_s = 60
            resp = torctl.stub.InstallFlows(req, timeout=10)
            bad = [r.error for r in resp.results if r.error]
            if bad:
                sys.exit(f"bench_cpu: InstallFlows refused {len(bad)} flows: {bad[0]}")

        cpu, lat = paced(torctl, n, rate, install)
        rows.append(row("InstallFlows", n, per_call, cpu, lat))
        base += n * per_call
    rows.append(removals(torctl, base, calls))
    return rows


def removals(torctl: Torctl, base: int, flows: int) -> dict:
    """What torctl spends per expired flow: `flows` flows installed (64 a call) with a 1 s idle
    timeout expire on the switch, and a watcher takes their FlowRemoved events as the gateway
    does (WatchFlowsRemoved); torctl's CPU from the last install to the last removal, less its
    idle CPU over that time (measured just before), per flow."""
    c0, t0 = cpu_s(torctl.proc.pid), time.monotonic()
    time.sleep(2)
    idle_per_s = (cpu_s(torctl.proc.pid) - c0) / (time.monotonic() - t0)
    got = []
    done = threading.Event()
    stream = torctl.stub.WatchFlowsRemoved(torctl_pb2.WatchFlowRemovedRequest(watcher="bench"))

    def watch() -> None:
        try:
            for batch in stream:
                got.extend(batch.removed)
                if len(got) >= flows:
                    done.set()
                    return
        except grpc.RpcError:
            pass

    threading.Thread(target=watch, daemon=True).start()
    for first in range(0, flows, 64):
        req = torctl_pb2.InstallFlowsRequest()
        for k in range(base + first, base + min(first + 64, flows)):
            flow = control_pb2.FiveTuple(src_ip="198.18.0.1", dst_ip=f"198.19.{k // 65536}.{k // 256 % 256}",
                                         src_port=k % 65536, dst_port=53, proto=17)
            r = req.flows.add()
            r.assignment.CopyFrom(torctl_pb2.FlowAssignment(flow=flow, chain="bench", vlan=7, worker=WORKER))
            r.idle_timeout_s = 1
        torctl.stub.InstallFlows(req, timeout=10)
    c0, t0 = cpu_s(torctl.proc.pid), time.monotonic()
    ok = done.wait(30)
    stream.cancel()
    wall = time.monotonic() - t0
    cpu = cpu_s(torctl.proc.pid) - c0 - idle_per_s * wall
    if not ok:
        sys.exit(f"bench_cpu: {len(got)} of {flows} FlowRemoved events within 30 s")
    return {"call": "FlowRemoved", "flows": flows, "seconds": round(wall, 3),
            "idle_cpu_pct": round(idle_per_s * 100, 2),
            "cpu_us_per_flow": round(cpu / flows * 1e6, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=1000, help="calls per row (a quarter for 64 flows a call)")
    ap.add_argument("--rate", type=float, default=250, help="calls a second")
    ap.add_argument("--out", default=str(HERE.parents[1] / "bench" / "results" / "torctl_cpu.json"))
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_cpu: needs root (a private Open vSwitch)")
    with bench_torctl("keeltorcpu") as torctl:
        rows = run(torctl, args.calls, args.rate)
    result = {"rows": rows, "calls_per_s": args.rate,
              "what": "keel-torctl CPU (utime+stime) per paced call, one call at a time; Status: gRPC alone"}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
