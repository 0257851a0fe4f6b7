#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""keel demo: the three chains of Galleon's evaluation (§7) run with keel-chain
over generated traffic; prints what every NF did.

Until the gateway and the local stack exist, this is what `make demo` shows.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

warnings.filterwarnings("ignore", message=".*TripleDES.*")  # scapy's ipsec layer, not used here
from scapy.all import Ether, IP, TCP, UDP, Raw, rdpcap, wrpcap

MACS = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
KEY, IV = "000102030405060708090a0b0c0d0e0f", "f0e0d0c0b0a090807060504030201000"

CHAINS = {
    "chain1 Tunnel -> IPv4Fwd": [
        ("tunnel", {"vlan": 7}),
        ("ipv4fwd", {"routes": [{"prefix": "198.19.0.0/16", "dst_mac": "02:00:00:00:aa:01", "port": 0}]}),
    ],
    "chain2 ACL -> UrlFilter -> Encrypt": [
        ("acl", {"rules": [{"dst_ip": "198.19.0.0/16", "proto": "tcp"}]}),
        ("urlfilter", {"blocklist": ["ads.example.com", "www.example.com/tracking"]}),
        ("encrypt", {"key": KEY, "iv": IV}),
    ],
    "chain3 ACL -> NAT": [
        ("acl", {"rules": [{"dst_ip": "198.19.0.0/16"}]}),
        ("nat", {"external_ip": "198.18.255.1", "port_range": [20000, 29999]}),
    ],
}


def traffic(n, seed=7):
    """n packets of 64 flows: web requests (some to blocked URLs), UDP, and
    some traffic outside the chains' 198.19.0.0/16 filter."""
    rnd = random.Random(seed)
    hosts = ["www.example.com/index.html", "ads.example.com/banner", "www.example.com/tracking/1",
             "news.example.org/today"]
    pkts = []
    for i in range(n):
        flow = rnd.randrange(64)
        src, dst = f"198.18.0.{flow + 1}", f"198.19.0.{flow % 8 + 1}"
        if rnd.random() < 0.1:
            dst = "198.20.0.1"
        if flow % 2:
            host, path = hosts[flow % 4].split("/", 1)
            body = f"GET /{path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
            l4 = TCP(sport=10000 + flow, dport=80, flags="PA") / Raw(body + b"." * rnd.randrange(0, 900))
        else:
            l4 = UDP(sport=10000 + flow, dport=5001) / Raw(b"u" * rnd.randrange(18, 1400))
        pkts.append(Ether(**MACS) / IP(src=src, dst=dst) / l4)
    return pkts


def run_chain(binary, nfs, in_pcap, workdir, tag):
    out_pcap, stats = workdir / f"{tag}.out.pcap", workdir / f"{tag}.stats.json"
    args = [str(binary)]
    for name, cfg in nfs:
        args += ["--nf", f"{name}={json.dumps(cfg)}"]
    args += ["--exit-when-idle", "200", "--stats", str(stats), "--",
             "--no-pci", "--no-huge", "-m", "512", "--log-level=error", "--no-telemetry",
             f"--file-prefix=keeldemo{os.getpid()}{tag}",
             "--vdev", f"net_pcap0,rx_pcap={in_pcap},tx_pcap={out_pcap}"]
    subprocess.run(args, check=True, timeout=120)
    return json.loads(stats.read_text()), len(rdpcap(str(out_pcap)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default="build/bin", help="directory holding keel-chain")
    ap.add_argument("--packets", type=int, default=5000, help="packets per chain (default 5000)")
    args = ap.parse_args()
    binary = Path(args.bin) / "keel-chain"
    if not binary.exists():
        sys.exit(f"demo: {binary} is missing; run make build")
    with tempfile.TemporaryDirectory(prefix="keel-demo-") as tmp:
        work = Path(tmp)
        in_pcap = work / "in.pcap"
        wrpcap(str(in_pcap), traffic(args.packets))
        print(f"keel demo: {args.packets} packets of 64 flows through each of Galleon's chains\n")
        for i, (title, nfs) in enumerate(CHAINS.items()):
            stats, written = run_chain(binary, nfs, in_pcap, work, f"c{i}")
            port = stats["port"]
            print(f"{title}: {port['rx_packets']} in, {port['tx_packets']} out "
                  f"({written} in the output capture), {port['rx_malformed']} malformed")
            print(f"  {'nf':<10} {'in':>7} {'out':>7} {'dropped':>8} {'cycles/pkt':>11}")
            for nf in stats["nfs"]:
                print(f"  {nf['nf']:<10} {nf['packets_in']:>7} {nf['packets_out']:>7} "
                      f"{nf['dropped']:>8} {nf['cycles_per_packet']:>11.0f}")
            print()


if __name__ == "__main__":
    main()
