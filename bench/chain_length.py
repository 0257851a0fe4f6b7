#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Galleon Fig. 3 side by side: chains of 1..5 `bpf` NFs (200 pcap filters
each) on one managed core, fed 80-byte packets over memif by dpdk-testpmd on
the other core, in three modes:

  single  keel-chain: every NF in one process, no isolation
  keel    one keel-nf process per NF under keel-coopsched, a copy at NF 1
          only, batch B chosen by Galleon eq. (1)-(3) with T_ctx calibrated
          from runs at B=1 and B=32 (the yield plus the cache refill after it)
  copy    one process per NF under keel-coopsched, a copy in and out of
          private memory at every hop (EdgeOS/NFVnice-style isolation)

Writes bench/results/chain_length.json. Needs root (SCHED_FIFO) and 2 cores.
"""
import argparse
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "build" / "bin"
sys.path.insert(0, str(ROOT / "build" / "py"))
from keel.v1 import coopsched_pb2 as pb  # noqa: E402
from keel.v1 import coopsched_pb2_grpc as pb_grpc  # noqa: E402

CORE = 1            # the managed core: chains only
GEN_CPU = 0         # the generator and everything else
PACKET_BYTES = 80
BPF = {"filters": [f"udp port {2000 + i}" for i in range(200)], "action": "drop"}
MAX_BATCH = 64      # bursts the chain buffer holds (member.cc)
YIELD_TIMEOUT_US = 50_000


def adaptive_batch(n_nfs, handoff_cycles, nf_cycles, burst, p, tsc_hz):
    """Galleon eq. (1)-(3): the smallest B with R(B) >= p * R_hat, where
    R(B) = f / (sum T_i + N * T_ctx * f / (B * b)) and R_hat = f / sum T_i.
    Solved for B: B >= N * C / (b * sum T_i * (1/p - 1)), C = T_ctx * f."""
    if n_nfs == 1:
        return 1  # a one-NF chain does not hand off (§4.4)
    need = n_nfs * handoff_cycles / (burst * sum(nf_cycles) * (1 / p - 1))
    # A turn must stay well inside coopsched's yield timeout (its watchdog).
    fits = YIELD_TIMEOUT_US * 1e-6 / 4 * tsc_hz / (burst * max(nf_cycles))
    return max(1, min(MAX_BATCH, math.ceil(need), int(fits)))


def predicted_mpps(tsc_hz, n_nfs, handoff_cycles, nf_cycles, burst, batch):
    """Galleon eq. (1) in Mpps."""
    per_pkt = sum(nf_cycles) + n_nfs * handoff_cycles / (batch * burst)
    return tsc_hz / per_pkt / 1e6


class Generator:
    """dpdk-testpmd in txonly mode on GEN_CPU, memif server at |sock|."""

    def __init__(self, sock, tag):
        self.sock = sock
        if os.path.exists(sock):
            os.unlink(sock)
        self.proc = subprocess.Popen(
            ["taskset", "-c", str(GEN_CPU), "dpdk-testpmd", f"--lcores=0@{GEN_CPU},1@{GEN_CPU}",
             "--no-pci", "--no-huge", "-m", "1024", f"--file-prefix=keelgen{os.getpid()}{tag}", "--log-level=error",
             "--no-telemetry", f"--vdev=net_memif0,role=server,socket={sock},socket-abstract=no", "--",
             "--forward-mode=txonly", f"--txpkts={PACKET_BYTES}", "--auto-start", "--no-lsc-interrupt",
             "--total-num-mbufs=16384"],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 15
        while not os.path.exists(sock) and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(2.0)  # testpmd starts forwarding after it listens; a client too early never gets packets

    def vdev(self):
        return f"net_memif0,role=client,socket={self.sock},socket-abstract=no"

    def stop(self):
        self.proc.stdin.close()  # testpmd exits on end of input
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def eal(tag, vdev):
    return ["--", f"-l{CORE}", "--no-pci", "--no-huge", "-m", "512", f"--file-prefix=keelb{os.getpid()}{tag}",
            "--log-level=error", "--no-telemetry", f"--vdev={vdev}"]


def run_single(tmp, n, seconds, tag):
    gen = Generator(f"{tmp}/gen{tag}.sock", tag)
    stats = Path(tmp) / f"single{tag}.json"
    args = ["taskset", "-c", str(CORE), str(BIN / "keel-chain")]
    for _ in range(n):
        args += ["--nf", "bpf=" + json.dumps(BPF)]
    proc = subprocess.Popen(args + ["--stats", str(stats)] + eal(tag, gen.vdev()),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 20
        a = {}
        while not a or a["nfs"][-1]["packets_out"] == 0:  # memif up, packets flowing
            if time.time() > deadline:
                raise RuntimeError("keel-chain processed nothing")
            time.sleep(0.5)
            a = json.loads(stats.read_text()) if stats.exists() else {}
        time.sleep(seconds)
        b = json.loads(stats.read_text())
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
        gen.stop()
    done = b["nfs"][-1]["packets_out"] - a["nfs"][-1]["packets_out"]
    mpps = done / (b["seconds"] - a["seconds"]) / 1e6
    return mpps, [nf["cycles_per_packet"] for nf in b["nfs"]]


def run_members(tmp, stub, n, seconds, tag, batch, copy_each_hop):
    gen = Generator(f"{tmp}/gen{tag}.sock", tag)
    gid, pktbuf = f"bench{tag}", f"{tmp}/pktbuf{tag}"
    procs = []
    try:
        for k in range(n):
            args = [str(BIN / "keel-nf"), "--nf", "bpf=" + json.dumps(BPF), "--chain-id", gid,
                    "--position", str(k), "--of", str(n), "--pktbuf", pktbuf, "--coopsched", stub.target]
            if copy_each_hop:
                args.append("--copy-each-hop")
            if k == 0:
                args += eal(tag, gen.vdev())
            procs.append(subprocess.Popen(["taskset", "-c", str(GEN_CPU)] + args,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
            if k == 0:
                deadline = time.time() + 15
                while not os.path.exists(pktbuf) and time.time() < deadline:
                    time.sleep(0.02)
        deadline = time.time() + 15
        while not any(g.group_id == gid for g in stub.Status(pb.StatusRequest()).groups):
            if time.time() > deadline:
                raise RuntimeError(f"{gid} never registered")
            time.sleep(0.02)
        stub.SetBatch(pb.SetBatchRequest(group_id=gid, batch=batch))
        stub.Attach(pb.AttachRequest(group_id=gid, core=CORE))

        def packets():
            g = next(g for g in stub.Status(pb.StatusRequest()).groups if g.group_id == gid)
            return g.packets, time.monotonic()
        deadline = time.time() + 20
        while packets()[0] == 0:  # memif up, packets flowing
            if time.time() > deadline:
                raise RuntimeError(f"{gid} processed nothing")
            time.sleep(0.1)
        time.sleep(0.5)
        p0, t0 = packets()
        time.sleep(seconds)
        p1, t1 = packets()
        stub.Unregister(pb.UnregisterRequest(group_id=gid))
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        gen.stop()
    return (p1 - p0) / (t1 - t0) / 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "chain_length.json"))
    ap.add_argument("--max-length", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0, help="measuring time per point")
    ap.add_argument("--p", type=float, default=0.95, help="target share of the single-thread rate (eq. 3)")
    args = ap.parse_args()
    if os.geteuid() != 0 or os.cpu_count() < 2:
        sys.exit("chain_length: needs root (SCHED_FIFO) and two cores")
    with tempfile.TemporaryDirectory(prefix="keel-bench-") as tmp:
        sock = f"{tmp}/coopsched.sock"
        # Turns at B = 32 of a 12 000-cycle NF take ~7 ms: give the watchdog room.
        cs = subprocess.Popen([str(BIN / "keel-coopsched"), "--cores", str(CORE), "--listen", f"unix:{sock}",
                               "--yield-timeout-us", str(YIELD_TIMEOUT_US)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while not os.path.exists(sock):
                time.sleep(0.05)
            channel = grpc.insecure_channel(f"unix:{sock}")
            stub = pb_grpc.CoopschedStub(channel)
            stub.target = f"unix:{sock}"
            status = stub.Status(pb.StatusRequest())
            hz, handoff = status.tsc_hz, status.handoff_cycles
            rows, sweep = [], []
            for n in range(1, args.max_length + 1):
                single, cycles = run_single(tmp, n, args.seconds, f"s{n}")
                effective = handoff
                if n > 1:
                    # T_ctx as the chain sees it: a yield also costs the caches
                    # the next NF refills. Eq. (1) at B=1 and B=32 gives it.
                    r1 = run_members(tmp, stub, n, args.seconds, f"p1{n}", 1, False)
                    r32 = run_members(tmp, stub, n, args.seconds, f"p32{n}", 32, False)
                    if r1 > 0 and r32 > 0:
                        effective = max(handoff, hz * (1 / r1 - 1 / r32) / 1e6 * 32 / (n * (1 - 1 / 32)))
                batch = adaptive_batch(n, effective, cycles, 32, args.p, hz)
                keel = run_members(tmp, stub, n, args.seconds, f"k{n}", batch, False)
                copy = run_members(tmp, stub, n, args.seconds, f"c{n}", batch, True)
                row = {"length": n, "single_mpps": round(single, 3), "keel_mpps": round(keel, 3),
                       "copy_mpps": round(copy, 3), "keel_batch": batch,
                       "nf_cycles_per_pkt": round(sum(cycles) / n, 1),
                       "keel_over_single": round(keel / single, 3), "keel_over_copy": round(keel / copy, 3),
                       "effective_handoff_cycles": round(effective),
                       "handoff_cycles_per_pkt": round(n * effective / (batch * 32), 1) if n > 1 else 0}
                print(json.dumps(row), flush=True)
                rows.append(row)
                if n == 3:
                    for b in (1, 2, 4, 8, 16, 32):
                        m = run_members(tmp, stub, n, args.seconds, f"b{b}", b, False)
                        sweep.append({"length": n, "batch": b, "measured_mpps": round(m, 3),
                                      "predicted_mpps": round(predicted_mpps(hz, n, handoff, cycles, 32, b), 3)})
                        print(json.dumps(sweep[-1]), flush=True)
            channel.close()
        finally:
            cs.terminate()
            cs.wait(timeout=10)
    out = {"packet_bytes": PACKET_BYTES, "tsc_hz": hz, "handoff_cycles": handoff, "p": args.p,
           "test_nf": "bpf with 200 filters 'udp port N' (none match the generator's packets)",
           "rows": rows, "batch_sweep": sweep,
           "targets": {"keel_ge_0.95_single_all_lengths": all(r["keel_over_single"] >= 0.95 for r in rows),
                       "keel_ge_1.5_copy_at_5": any(r["length"] == 5 and r["keel_over_copy"] >= 1.5 for r in rows)}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
