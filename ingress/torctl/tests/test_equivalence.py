# SPDX-License-Identifier: Apache-2.0
"""Packet equivalence: a switch NF as torctl's OpenFlow rules on Open vSwitch and the same NF
in keel-chain turn the same packets into the same bytes (TTL, checksums and VLAN tags too)."""
import json
import os
import subprocess
import time

import grpc
import pytest
from scapy.all import ARP, Dot1Q, Ether, IP, TCP, UDP, Raw, rdpcap, wrpcap

from torctl_env import BIN
from keel_torctl.pb import control_pb2, torctl_pb2

MACS = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")


def ip(src="198.18.0.1", dst="198.19.0.1", ttl=64):
    return IP(src=src, dst=dst, ttl=ttl)


def udp(sport, dport=53, **kw):
    return Ether(**MACS) / ip(**kw) / UDP(sport=sport, dport=dport) / Raw(b"u" * 24)


def tcp(sport, dport=80, **kw):
    return Ether(**MACS) / ip(**kw) / TCP(sport=sport, dport=dport, flags="PA") / Raw(b"t" * 24)


def tagged(pkt, vlan, prio=0):
    return Ether(src=pkt.src, dst=pkt.dst) / Dot1Q(vlan=vlan, prio=prio) / pkt.payload


ARP_REQUEST = Ether(src=MACS["src"], dst="ff:ff:ff:ff:ff:ff") / ARP(psrc="198.18.0.1", pdst="198.19.0.1")

CASES = {
    "acl": ({"rules": [{"dst_ip": "198.19.0.0/24", "proto": "udp", "dst_port": "53-55"},
                       {"src_ip": "198.18.0.2/32", "drop": True},
                       {"proto": "tcp", "src_port": 2000, "drop": True},
                       {"dst_port": 80}]},
            [udp(1, dport=53), udp(2, dport=55), udp(3, dport=56), udp(4, dport=53, dst="198.19.1.1"),
             udp(5, dport=80, src="198.18.0.2"), tcp(6, dport=80), tcp(2000, dport=80), udp(7, dport=80),
             tcp(8, dport=81), ARP_REQUEST]),
    "tunnel": ({"vlan": 100}, [udp(1), tcp(2), tagged(udp(3), 5, prio=3)]),
    "detunnel": ({}, [udp(1), tagged(udp(2), 300), tagged(tcp(3), 301, prio=6)]),
    "ipv4fwd": ({"routes": [{"prefix": "198.19.0.0/16", "dst_mac": "02:00:00:00:00:aa", "port": 1},
                            {"prefix": "198.19.1.0/24", "dst_mac": "02:00:00:00:00:bb", "port": 2}]},
                [udp(1, dst="198.19.0.5"), udp(2, dst="198.19.1.5"), udp(3, dst="198.20.0.1"),
                 udp(4, dst="198.19.0.6", ttl=1), udp(5, dst="198.19.0.7", ttl=2), tcp(6, dst="198.19.1.9", ttl=0),
                 ARP_REQUEST]),
    "monitor": ({}, [udp(1), tcp(2), tagged(udp(3), 9)]),
}


def keel_chain(tmp_path, nf, config, pkts):
    """keel-chain running one NF over a capture; returns the output frames' bytes."""
    exe = BIN / "keel-chain"
    if not exe.exists():
        pytest.fail(f"{exe} is missing: run make build")
    src, dst = tmp_path / f"{nf}-in.pcap", tmp_path / f"{nf}-out.pcap"
    wrpcap(str(src), pkts)
    args = [str(exe), "--nf", f"{nf}={json.dumps(config)}", "--exit-when-idle", "150", "--",
            "--no-pci", "--no-huge", "-m", "512", "--log-level=error", "--no-telemetry",
            f"--file-prefix=keeltorctl{os.getpid()}{nf}", "--vdev", f"net_pcap0,rx_pcap={src},tx_pcap={dst}"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return [bytes(x) for x in rdpcap(str(dst))] if dst.stat().st_size > 24 else []


def own_flows(pkt, case):
    """A copy of pkt whose 5-tuple no other case uses (each case's chain owns its flows)."""
    pkt = pkt.copy()
    for l4 in (TCP, UDP):
        if l4 in pkt:
            pkt[l4].sport += 10000 * case
    return pkt


def install_all(torctl, chain, pkts):
    """A switch-only flow rule for every IPv4 packet's 5-tuple (retrying until torctl has seen
    the chain in the gateway's Watch)."""
    for p in pkts:
        if IP not in p:
            continue
        l4 = p[TCP] if TCP in p else p[UDP]
        flow = control_pb2.FiveTuple(src_ip=p[IP].src, dst_ip=p[IP].dst, src_port=l4.sport,
                                     dst_port=l4.dport, proto=p[IP].proto)
        req = torctl_pb2.InstallFlowRequest(assignment=torctl_pb2.FlowAssignment(flow=flow, chain=chain),
                                            idle_timeout_s=30)
        deadline = time.time() + 10
        while True:
            try:
                torctl.stub.InstallFlow(req, timeout=10)
                break
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.FAILED_PRECONDITION or time.time() > deadline:
                    raise


@pytest.mark.parametrize("nf", sorted(CASES))
def test_switch_nf_output_equals_keel_chain_output(nf, torctl, bridge, gateway, tmp_path):
    config, pkts = CASES[nf][0], [own_flows(p, sorted(CASES).index(nf)) for p in CASES[nf][1]]
    chain = f"eq-{nf}"
    gateway.add_chain(chain, [control_pb2.SwitchNf(name=nf, nf=nf, config_json=json.dumps(config))])
    try:
        install_all(torctl, chain, pkts)
        net = bridge[1]
        net.drain()
        net.send(pkts)
        switch_out = [bytes(p) for p in net.recv("egress")]
        expected = keel_chain(tmp_path, nf, config, pkts)
        assert expected, "keel-chain passed no packet: the case tests nothing"
        assert sorted(switch_out) == sorted(expected)
    finally:
        gateway.remove_chain(chain)
