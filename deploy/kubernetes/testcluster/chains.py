#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Sends a few flows to each of stack.yml's chains through the ToR of rack.sh and checks what
the sink receives: every packet of every flow, changed as each chain changes it.

  chain1  Tunnel(vlan=7) -> IPv4Fwd on the ToR: the packet leaves tagged VLAN 7 with the
          route's MAC 02:00:00:00:01:01
  chain2  ACL -> UrlFilter -> Encrypt in an NF Pod (HTTP to 198.18.2.0/24): the payload
          arrives encrypted, never as sent
  chain3  ACL -> NAT in an NF Pod: the source becomes the NAT's 198.18.100.1

The source is netns keelsrc (keel-src, 198.18.0.1), the sink netns keelsink (keel-sink);
FLOWS flows of PACKETS packets each per chain, 5 ms apart, each flow a new one for the ToR
(its first packets take the ingress, the rest the rule torctl installs). Exits 1, saying
what was missing or wrong, unless everything arrived as it should.

With --nat-map FILE, chain3's NAT mappings (flow -> the source port the sink saw) are
written to FILE, or, when FILE exists, must be the ones it holds: NF state that outlived
a rebuilt instance. --reverse sends the flows last first, so a NAT that starts over with
empty tables hands the ports out in the other order and the check fails.

usage: chains.py [--flows N] [--packets N] [--sport BASE] [--chains chain1,chain3]
                 [--nat-map FILE] [--reverse]
       (as root, scapy installed)
"""
import argparse
import json
import os
import subprocess
import sys

SRC_MAC, SINK_MAC = "02:6b:65:00:00:01", "02:6b:65:00:00:02"
PAYLOAD = b"keel-k8s-%04d"

SNIFF = r"""
import sys, time
from scapy.all import AsyncSniffer, Dot1Q, Ether, IP, TCP, UDP, Raw
sn = AsyncSniffer(iface="keel-sink", store=True,
                  lfilter=lambda p: p.haslayer(IP) and p[IP].dst.startswith("198.18.") and p[IP].dst[7] in "123")
sn.start(); time.sleep(0.5); print("ready", flush=True)
sys.stdin.readline()
time.sleep(float(sys.argv[1]))
sn.stop()
for p in sn.results:
    l4 = p[UDP] if p.haslayer(UDP) else p[TCP] if p.haslayer(TCP) else None
    if l4 is None:
        continue
    print(p[Ether].dst, p[Dot1Q].vlan if p.haslayer(Dot1Q) else 0, p[IP].src, p[IP].dst,
          l4.sport, l4.dport, bytes(p[Raw].load).hex() if p.haslayer(Raw) else "-")
"""


def packets(chains: list, flows: int, n: int, sport: int, reverse: bool = False) -> str:
    """scapy expressions of the chains' flows, a flow's packets one after another."""
    out = []
    for f in (reversed(range(flows)) if reverse else range(flows)):
        for chain, dst, l4 in (("chain1", f"198.18.1.{10 + f}", f"UDP(sport={sport + f}, dport=5001)"),
                               ("chain2", f"198.18.2.{10 + f}", f"TCP(sport={sport + f}, dport=80, flags='PA')"),
                               ("chain3", f"198.18.3.{10 + f}", f"UDP(sport={sport + f}, dport=5001)")):
            if chain not in chains:
                continue
            for i in range(n):
                out.append(f"Ether(src='{SRC_MAC}', dst='{SINK_MAC}')/IP(src='198.18.0.1', dst='{dst}')/{l4}/"
                           f"Raw({PAYLOAD!r} % {i})")
    return "[" + ", ".join(out) + "]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flows", type=int, default=4)
    ap.add_argument("--packets", type=int, default=10)
    ap.add_argument("--sport", type=int, default=20000)
    ap.add_argument("--chains", default="chain1,chain2,chain3", help="which of stack.yml's chains (default: all)")
    ap.add_argument("--nat-map", help="write chain3's NAT mappings to FILE, or check them against it if it exists")
    ap.add_argument("--reverse", action="store_true", help="send the flows last first")
    a = ap.parse_args()
    chains = a.chains.split(",")
    if not chains or not set(chains) <= {"chain1", "chain2", "chain3"}:
        ap.error(f"--chains {a.chains}: name chain1, chain2 or chain3")
    py = sys.executable
    sniff = subprocess.Popen(["ip", "netns", "exec", "keelsink", py, "-W", "ignore", "-c", SNIFF, "2"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        if sniff.stdout.readline().strip() != "ready":
            print("chains.py: the sink's sniffer did not start", file=sys.stderr)
            return 1
        # One flow after another, a flow's packets 5 ms apart.
        subprocess.run(["ip", "netns", "exec", "keelsrc", py, "-W", "ignore", "-c",
                        "from scapy.all import *; "
                        f"sendp({packets(chains, a.flows, a.packets, a.sport, a.reverse)}, iface='keel-src', verbose=False, inter=0.005)"],
                       check=True, timeout=120)
        out, _ = sniff.communicate("go\n", timeout=60)
    finally:
        sniff.kill()
    got = {c: [] for c in chains}
    for line in out.splitlines():
        mac, vlan, src, dst, sport, dport, payload = line.split()
        got.setdefault("chain" + dst.split(".")[2], []).append((mac, int(vlan), src, dst, int(sport), int(dport), payload))
    want = a.flows * a.packets
    bad = []
    for chain, pkts in got.items():
        ok = 0
        for mac, vlan, src, dst, sport, dport, payload in pkts:
            sent = {(PAYLOAD % i).hex() for i in range(a.packets)}
            if chain == "chain1":
                right = vlan == 7 and mac == "02:00:00:00:01:01" and payload in sent
            elif chain == "chain2":
                right = dport == 80 and payload not in sent and payload != "-"
            else:
                right = src == "198.18.100.1" and payload in sent
            ok += right
        print(f"chains.py: {chain}: {len(pkts)} of {want} packets arrived, {ok} changed as the chain changes them")
        if len(pkts) != want or ok != want:
            bad.append(chain)
            per_flow: dict[str, int] = {}
            for p in pkts:
                per_flow[p[3]] = per_flow.get(p[3], 0) + 1
            print(f"chains.py:   packets per flow (by destination): {dict(sorted(per_flow.items()))}")
            for p in pkts[:3]:
                print(f"chains.py:   e.g. dst-mac {p[0]} vlan {p[1]} {p[2]} -> {p[3]} {p[4]}->{p[5]} payload {p[6][:32]}")
    if a.nat_map and "chain3" in chains:
        nat: dict[str, list] = {}  # flow (its destination) -> the NAT's source ports seen
        for _, _, src, dst, sport, _, _ in got.get("chain3", []):
            nat.setdefault(dst, [])
            if sport not in nat[dst]:
                nat[dst].append(sport)
        if any(len(p) != 1 for p in nat.values()):
            print(f"chains.py: chain3's NAT changed a flow's port within the run: {nat}")
            bad.append("chain3 NAT")
        if os.path.exists(a.nat_map):
            with open(a.nat_map) as f:
                before = json.load(f)
            print(f"chains.py: chain3's NAT mappings now {nat}, before {before}")
            if nat != before:
                print("chains.py: chain3's NAT mappings changed: its NF state did not outlive the instance")
                bad.append("chain3 NAT state")
        else:
            with open(a.nat_map, "w") as f:
                json.dump(nat, f)
            print(f"chains.py: chain3's NAT mappings {nat} written to {a.nat_map}")
    if bad:
        print(f"chains.py: FAILED: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
