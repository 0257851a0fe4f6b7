#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The largest packet rate one managed core sustains for Galleon's three
chains (the chains of stack.yml), run as keel runs them, at 1024-byte
packets (Galleon's median) and 80-byte packets:

  chain1  Tunnel(vlan=7) -> IPv4Fwd(198.18.1.0/24)
  chain2  ACL(198.18.2.0/24) -> UrlFilter(example.com/ads) -> Encrypt(AES-128-CBC)
  chain3  ACL(198.18.3.0/24) -> NAT(198.18.100.1, ports 1024-65535)

in two modes (as bench/chain_length.py, whose machinery this reuses):

  single  keel-chain: every NF in one process, run to completion (Metron-like)
  keel    one keel-nf process per NF under keel-coopsched, B bursts per turn
          by Galleon eq. (1)-(3), calibrated as chain_length.py does

plus a reference mode `null`: keel-chain with the one NF macswap, the most
the generator and the memif path deliver to the core at all.

The generator is dpdk-testpmd on the other core in io mode, replaying a
capture of 64 flows made for the chain (net_pcap infinite_rx) into one memif
port per mode: every packet goes to the chain's prefix, so each NF does its
real work and none drops. chain2's are TCP to port 80, each an HTTP request
for http://example.com/... (not blocked; the filter parses it and looks the
host up) that Encrypt then encrypts; chain3's 64 UDP flows each get a NAT
mapping. Only the memif port of the mode that holds the core forwards
(testpmd's `set portlist`), so idle modes' full rings cost the generator
nothing.

Noise discipline as chain_length.py: all modes of a chain and packet size run
at once, take turns on the core in short windows in rotating order, rates
are medians over rounds, the ratio the median of per-round ratios. A mode
that reaches 90 % of the null chain's rate is held back by the generator:
its rate is the generator's, a lower bound on the chain's (`generator_bound`).
(chain_length.py's burst-fill test does not tell here: the replay sends
bursts of 32, so the chain's receive bursts are full either way.)

Writes bench/results/chain_rate.json. Needs root (SCHED_FIFO) and 2 cores.
"""
import argparse
import json
import os
import re
import statistics
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import chain_length as cl
from chain_length import pb
from flowgen import frame, mac_bytes

CHAINS = {
    "chain1": [("tunnel", {"vlan": 7}),
               ("ipv4fwd", {"routes": [{"prefix": "198.18.1.0/24", "dst_mac": "02:00:00:00:01:01", "port": 0}]})],
    "chain2": [("acl", {"rules": [{"dst_ip": "198.18.2.0/24", "drop": False}]}),
               ("urlfilter", {"blocklist": ["example.com/ads"]}),
               ("encrypt", {"key": "000102030405060708090a0b0c0d0e0f", "iv": "0f0e0d0c0b0a09080706050403020100"})],
    "chain3": [("acl", {"rules": [{"dst_ip": "198.18.3.0/24", "drop": False}]}),
               ("nat", {"external_ip": "198.18.100.1", "port_range": [1024, 65535]})],
}
NULL_NFS = [("macswap", {})]
PKT_BYTES = (1024, 80)
FLOWS = 64
MODES = ("single", "keel", "null")
CONNECT_S = 3.0  # a new memif client connects (process start, EAL, handshake)
# coopsched's watchdog for this bench: calibration's B=64 turns of 1024-byte
# packets, fed at the generator's pace, outlast the default 10 ms; the batch
# chosen still keeps to chain_length.py's rule for the default.
YIELD_TIMEOUT_US = 40_000
NEAR_NULL = 0.9  # a chain at 90 % of the null chain's rate is held back by the generator   # chain_length.py's threshold for full receive bursts
SRC_MAC, DST_MAC = mac_bytes("02:00:00:00:00:01"), mac_bytes("02:00:00:00:00:02")


def http_payload(n):
    """n bytes of an HTTP request for a page of example.com that the
    blocklist (example.com/ads) does not block."""
    short = b"GET http://example.com/x\r\n"  # absolute target: fits an 80-byte frame
    head = b"GET /index.html HTTP/1.1\r\nHost: example.com\r\nUser-Agent: keel-bench\r\nAccept: */*\r\n"
    if n < len(head) + 12:
        return (short + b"\n" * n)[:n]
    filler = n - len(head) - len(b"X-Pad: \r\n\r\n")
    return head + b"X-Pad: " + b"a" * filler + b"\r\n\r\n"


def packets(chain, size):
    """One frame of |size| bytes for each of FLOWS flows of |chain|, all to
    the chain's prefix 198.18.K.0/24, from 198.18.0.1, source ports 10000+."""
    k = int(chain[-1])
    tcp = chain == "chain2"
    hdr = 14 + 20 + (20 if tcp else 8)
    out = []
    for i in range(FLOWS):
        payload = http_payload(size - hdr) if tcp else bytes(size - hdr)
        f = frame(SRC_MAC, DST_MAC, bytes([198, 18, 0, 1]), bytes([198, 18, k, 2]), 6 if tcp else 17,
                  10000 + i, 80 if tcp else 9, payload)
        assert len(f) == size
        out.append(f)
    return out


def write_pcap(path, frames):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1))  # Ethernet
        for fr in frames:
            f.write(struct.pack("<IIII", 0, 0, len(fr), len(fr)) + fr)


class ReplayGenerator:
    """dpdk-testpmd on GEN_CPU, interactive, in io mode: for each port i a
    net_pcap that replays |pcap| endlessly (testpmd port 2i) paired with a
    memif server (port 2i+1); what the chain sends back is dropped."""

    def __init__(self, tmp, pcap, ports):
        self.socks = [f"{tmp}/gen{i}.sock" for i in range(ports)]
        vdevs = []
        for i, s in enumerate(self.socks):
            vdevs += [f"--vdev=net_pcap{i},rx_pcap={pcap},infinite_rx=1",
                      f"--vdev=net_memif{i},role=server,socket={s},socket-abstract=no"]
        self.log = open(f"{tmp}/gen.log", "w")
        # nice -5 as chain_length.py's generator: ahead of other work on its core.
        self.proc = subprocess.Popen(
            ["nice", "-n", "-5", "stdbuf", "-oL", "taskset", "-c", str(cl.GEN_CPU), "dpdk-testpmd",
             f"--lcores=0@{cl.GEN_CPU},1@{cl.GEN_CPU}", "--no-pci", "--no-huge", "-m", "1024",
             f"--file-prefix=keelgen{os.getpid()}", "--log-level=error", "--no-telemetry"] + vdevs +
            ["--", "-i", "--forward-mode=io", "--no-lsc-interrupt", "--nb-cores=1", "--total-num-mbufs=32768"],
            stdin=subprocess.PIPE, stdout=self.log, stderr=subprocess.STDOUT, text=True)
        self.port = None
        self.offered = {}  # memif port: [packets sent, packets dropped (ring full), seconds forwarded]
        self.started = 0.0
        deadline = time.time() + 15
        while not all(os.path.exists(s) for s in self.socks):
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError("dpdk-testpmd did not start")
            time.sleep(0.05)
        time.sleep(2.0)  # as chain_length.py: a memif client too early never gets packets
        failed = [ln for ln in Path(self.log.name).read_text().splitlines() if "failed" in ln]
        if failed:
            self.stop()
            raise RuntimeError("dpdk-testpmd: " + "; ".join(failed))

    def vdev(self, port):
        return f"net_memif0,role=client,socket={self.socks[port]},socket-abstract=no"

    def forward(self, port):
        """Replays into memif port |port| only."""
        if port != self.port:
            self.pause()
            self.proc.stdin.write(f"set portlist {2 * port},{2 * port + 1}\nstart\n")
            self.proc.stdin.flush()
            self.port, self.started = port, time.monotonic()
            time.sleep(0.03)

    def pause(self):
        """Forwards nothing. A memif client must connect while the
        generator does not forward: one that connects meanwhile never gets a
        packet (here, DPDK 22.11), and the forwarding loop crawls."""
        if self.port is None:
            return
        seen = Path(self.log.name).read_text().count("Accumulated forward statistics")
        self.proc.stdin.write("stop\n")
        self.proc.stdin.flush()
        seconds = time.monotonic() - self.started
        # testpmd prints what the session forwarded; the memif port's TX
        # line says what the chain took and what its full ring refused.
        deadline = time.time() + 3
        while time.time() < deadline:
            text = Path(self.log.name).read_text()
            if text.count("Accumulated forward statistics") > seen:
                block = text.split(f"Forward statistics for port {2 * self.port + 1} ")[-1]
                m = re.search(r"TX-packets: (\d+)\s+TX-dropped: (\d+)", block)
                o = self.offered.setdefault(self.port, [0, 0, 0.0])
                o[0] += int(m.group(1))
                o[1] += int(m.group(2))
                o[2] += seconds
                break
            time.sleep(0.01)
        self.port = None

    def connect(self, start, port):
        """start() (which starts a memif client on |port|) while the
        generator pauses; then forwards to |port|; start()'s result."""
        self.pause()
        result, error = [], []

        def run():
            try:
                result.append(start())
            except BaseException as e:  # noqa: B036 - handed to the caller
                error.append(e)
        t = threading.Thread(target=run)
        t.start()
        time.sleep(CONNECT_S)
        self.forward(port)
        t.join()
        if error:
            raise error[0]
        return result[0]

    def stop(self):
        try:
            self.proc.stdin.write("stop\nquit\n")
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


class Fed:
    """A mode of chain_length.py (Single or Group) whose generator port
    forwards while it holds the core."""

    def __init__(self, mode, gen, port):
        self.mode, self.gen, self.port = mode, gen, port

    def take_core(self):
        self.gen.forward(self.port)
        self.mode.take_core()

    def leave_core(self):
        self.mode.leave_core()
        self.gen.pause()  # its session's counts end with its turn

    def __getattr__(self, name):
        return getattr(self.mode, name)


def run_row(tmp, stub, chain, size, args, hz, handoff):
    nfs = CHAINS[chain]
    n = len(nfs)
    tag = f"{chain[-1]}x{size}"
    pcap = f"{tmp}/{chain}-{size}.pcap"
    write_pcap(pcap, packets(chain, size))
    gen = ReplayGenerator(tmp, pcap, len(MODES))
    runs = {}
    try:
        # keel-chain starts on the core (SCHED_FIFO) and waits for packets;
        # keel-nf registers detached.
        gen.pause()
        runs["keel"] = Fed(cl.Group(tmp, stub, gen, 1, n, f"keel{tag}", False, nfs=nfs), gen, 1)
        time.sleep(CONNECT_S)
        runs["single"] = Fed(gen.connect(lambda: cl.Single(tmp, gen, 0, n, nfs=nfs, tag=tag), 0), gen, 0)
        runs["single"].leave_core()
        runs["null"] = Fed(gen.connect(lambda: cl.Single(tmp, gen, 2, 1, nfs=NULL_NFS, tag=f"null{tag}"), 2),
                           gen, 2)
        runs["null"].leave_core()
        single, keel = runs["single"], runs["keel"]
        batch, cal, cycles, chain_single, effective, copy_cycles = cl.choose_batch(
            single, keel, n, args.seconds, args.p, hz, handoff)
        keel.set_batch(batch)
        gen.pause()
        gen.offered.clear()
        for m in MODES:  # calibration's fills are not the measurement's
            runs[m].fills.clear()
        rates = {m: [] for m in MODES}
        for r in range(args.rounds):
            for m in MODES[r % len(MODES):] + MODES[:r % len(MODES)]:
                rates[m].append(cl.window(runs[m], args.seconds))
        gen.pause()
        offered = {m: gen.offered.get(i, [0, 0, 0.0]) for i, m in enumerate(MODES)}
        refused = {m: round(o[1] / (o[0] + o[1]), 4) if o[0] + o[1] else None for m, o in offered.items()}
        offered_mpps = {m: round((o[0] + o[1]) / o[2] / 1e6, 3) if o[2] else None for m, o in offered.items()}
        ratio = [a / b for a, b in zip(rates["keel"], rates["single"]) if b > 0]
        fill = {m: round(statistics.median(runs[m].fills), 3) for m in MODES}
        single_mpps, keel_mpps = cl.median(rates["single"]), cl.median(rates["keel"])
        null_mpps = cl.median(rates["null"])
        bound = {m: cl.median(rates[m]) >= NEAR_NULL * null_mpps for m in ("single", "keel")}
        row = {"chain": chain, "nfs": [name for name, _ in nfs], "pkt_bytes": size,
               "single_mpps": single_mpps, "keel_mpps": keel_mpps, "batch": batch,
               "single_cycles_per_pkt": round(hz / (single_mpps * 1e6)),
               "keel_cycles_per_pkt": round(hz / (keel_mpps * 1e6)),
               "keel_over_single": cl.median(ratio),
               "keel_over_single_range": [round(min(ratio), 3), round(max(ratio), 3)],
               "generator_bound": any(bound.values()),
               "generator_bound_modes": [m for m, b in bound.items() if b],
               "null_mpps": null_mpps,
               "null_cycles_per_pkt": round(hz / (null_mpps * 1e6)),
               "median_burst_fill": fill,
               "generator_offered_mpps": offered_mpps, "generator_refused_share": refused,
               "nf_cycles_per_pkt": {name: round(c, 1) for (name, _), c in zip(nfs, cycles)},
               "effective_handoff_cycles": round(effective),
               "copy_cycles_per_pkt": round(copy_cycles, 1),
               "calibration_mpps": {str(k): round(v, 3) for k, v in cal.items()},
               "rounds": {m: [round(x, 3) for x in v] for m, v in rates.items()}}
        if row["generator_bound"]:
            print(f"note: {chain} at {size} B: {row['generator_bound_modes']} within {NEAR_NULL} of the null "
                  f"chain ({null_mpps} Mpps): the generator's rate, not the chain's", file=sys.stderr)
        print(json.dumps({k: v for k, v in row.items() if k != "rounds"}), flush=True)
        return row
    finally:
        if "keel" in runs:
            runs["keel"].close()
        for m in ("single", "null"):
            if m in runs:
                cl.stop_procs(runs[m].procs)
        gen.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=str(cl.ROOT / "bench" / "results" / "chain_rate.json"))
    ap.add_argument("--chains", default=",".join(CHAINS), help="chains to run (default chain1,chain2,chain3)")
    ap.add_argument("--sizes", default=",".join(map(str, PKT_BYTES)), help="packet sizes (default 1024,80)")
    ap.add_argument("--seconds", type=float, default=0.3, help="measuring window per mode and round")
    ap.add_argument("--rounds", type=int, default=9, help="rounds of windows per row (median taken)")
    ap.add_argument("--p", type=float, default=0.95,
                    help="p of eq. 3: the share of the chain's rate without handoffs that the handoffs may leave")
    args = ap.parse_args()
    if os.geteuid() != 0 or os.cpu_count() < 2:
        sys.exit("chain_rate: needs root (SCHED_FIFO) and two cores")
    rows = []
    start = time.monotonic()
    default_timeout, cl.YIELD_TIMEOUT_US = cl.YIELD_TIMEOUT_US, YIELD_TIMEOUT_US
    with cl.bench_dir() as tmp, cl.coopsched(tmp) as stub:
        cl.YIELD_TIMEOUT_US = default_timeout  # for choose_batch's cap
        status = stub.Status(pb.StatusRequest())
        hz, handoff = status.tsc_hz, status.handoff_cycles
        for chain in args.chains.split(","):
            for size in (int(s) for s in args.sizes.split(",")):
                rows.append(run_row(tmp, stub, chain, size, args, hz, handoff))
    bound = [f"{r['chain']}@{r['pkt_bytes']}" for r in rows if r["generator_bound"]]
    out = {"method": "max rate of one managed core (core 1) per chain and packet size: dpdk-testpmd on core 0 "
                     "replays 64 flows made for the chain (every NF does its work, none drops) over memif; "
                     "single = keel-chain (all NFs in one process), keel = one keel-nf per NF under "
                     "keel-coopsched at the batch of Galleon eq. (1)-(3), calibrated as chain_length.py; "
                     "null = keel-chain with macswap only (the generator/memif ceiling). All modes of a row "
                     f"run at once and take turns on the core, {args.rounds} rounds of {args.seconds} s windows "
                     "in rotating order, medians; keel_over_single is the median of per-round ratios. "
                     f"generator_bound: single or keel reached {NEAR_NULL} x null_mpps, so the generator (not "
                     "the chain) sets the rate and it is a lower bound on the chain's. generator_offered_mpps: "
                     "what testpmd produced while a mode held the core; generator_refused_share: the part its "
                     "memif ring refused (near 0: the chain took everything offered). median_burst_fill: "
                     "packets per non-empty receive turn over its room (keel: B x 32 a turn); the generator "
                     "sends bursts of 32, so single/null show 1.0 whatever the bottleneck",
           "tsc_hz": hz, "handoff_cycles": handoff, "yield_timeout_us": YIELD_TIMEOUT_US, "p": args.p, "flows": FLOWS,
           "generator_bound": bound, "seconds": round(time.monotonic() - start, 1), "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
