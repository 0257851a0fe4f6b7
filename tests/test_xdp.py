# SPDX-License-Identifier: Apache-2.0
"""The XDP network functions against keel-nf's: keel-xdp run (BPF_PROG_TEST_RUN) and keel-chain
must write the same bytes for every NF that runs on the NIC and for chains of several, on
captures of normal, malformed, truncated, VLAN-tagged, IPv4-options, fragmented and
maximum-size frames, and on seeded random frames."""
import json
import os
import random
import subprocess

import pytest
from scapy.all import Dot1Q, Ether, ICMP, IP, IPOption_RR, Raw, TCP, UDP, fragment, rdpcap, wrpcap

from keelenv import BIN, ROOT

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="loading XDP programs needs root (CAP_BPF)")

MACS = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")

ACL = {"rules": [
    {"src_ip": "198.18.0.1/32", "dst_port": 22, "proto": "tcp", "drop": True},
    {"dst_ip": "198.19.0.0/24", "proto": "tcp"},
    {"proto": "udp", "dst_port": "50-60", "src_port": "1000-1010"},
    {"proto": "icmp"},
    {"src_ip": "198.18.2.0/23", "dst_ip": "198.19.128.0/17", "drop": False},
    {"proto": 47},
]}
FWD = {"routes": [
    {"prefix": "198.19.0.0/16", "dst_mac": "02:00:00:00:00:03", "port": 1},
    {"prefix": "198.19.1.0/24", "dst_mac": "02:00:00:00:00:04", "port": 2},
    {"prefix": "198.19.1.128/25", "dst_mac": "02:00:00:00:00:05", "port": 1},
    {"prefix": "10.0.0.0/8", "dst_mac": "02:00:00:00:00:06", "port": 3},
]}
FWD_DEFAULT = {"routes": FWD["routes"] + [{"prefix": "0.0.0.0/0", "dst_mac": "02:00:00:00:00:07", "port": 9}]}
LB = {"backends": ["198.19.9.1", "198.19.9.2", "198.19.9.3"]}
CHACHA = {"key": "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f", "nonce": "000000090000004a00000000"}

# Every NF that runs in XDP, with configurations that exercise its branches.
NFS = {
    "macswap": [{}],
    "tunnel": [{"vlan": 7}, {"vlan": 4095}],
    "detunnel": [{}],
    "acl": [ACL, {"rules": []}],
    "ipv4fwd": [FWD, FWD_DEFAULT],
    "lb": [LB],
    "chacha": [CHACHA],
}

CHAINS = [
    [("acl", ACL), ("tunnel", {"vlan": 9}), ("macswap", {})],
    [("detunnel", {}), ("ipv4fwd", FWD_DEFAULT), ("lb", LB)],
    [("tunnel", {"vlan": 5}), ("acl", ACL), ("detunnel", {})],  # ACL sees double-tagged frames
    [("chacha", CHACHA), ("lb", LB), ("chacha", CHACHA)],  # decrypts what it encrypted, LB between
    [("lb", LB), ("acl", {"rules": [{"dst_ip": "198.19.9.2/32", "drop": True}, {}]}), ("ipv4fwd", FWD_DEFAULT),
     ("tunnel", {"vlan": 100}), ("tunnel", {"vlan": 200}), ("detunnel", {}), ("macswap", {})],
]


def udp(src="198.18.0.1", dst="198.19.0.1", sport=1000, dport=53, payload=b"x" * 20, ttl=64, **ip):
    return Ether(**MACS) / IP(src=src, dst=dst, ttl=ttl, **ip) / UDP(sport=sport, dport=dport) / Raw(payload)


def tcp(src="198.18.0.1", dst="198.19.0.1", sport=1000, dport=80, payload=b"y" * 20, **ip):
    return Ether(**MACS) / IP(src=src, dst=dst, **ip) / TCP(sport=sport, dport=dport, flags="PA") / Raw(payload)


def normal():
    return [udp(), udp(dport=55, sport=1005), tcp(), tcp(dport=22), tcp(dst="198.19.1.200"),
            Ether(**MACS) / IP(src="198.18.0.1", dst="198.19.0.1") / UDP(sport=9, dport=9, chksum=0) / Raw(b"c" * 33),
            udp(payload=b""), tcp(payload=b"z"),
            Ether(**MACS) / IP(src="198.18.0.1", dst="198.19.0.9") / ICMP(),
            Ether(**MACS) / IP(src="198.18.3.3", dst="198.19.200.1", proto=47) / Raw(b"g" * 30),
            udp(dst="10.1.2.3", ttl=2), udp(ttl=1), udp(ttl=0), udp(dst="203.0.113.9"),
            Ether(**MACS, type=0x86dd) / Raw(b"\x60" + b"\x00" * 60),  # IPv6: not IPv4
            Ether(**MACS, type=0x0806) / Raw(b"\x00" * 28)]


def malformed():
    ip = bytes(IP(src="198.18.0.1", dst="198.19.0.1") / UDP() / Raw(b"q" * 8))
    return [Ether(**MACS, type=0x0800) / Raw(ip[:12]),                          # IPv4 header cut
            Ether(**MACS) / IP(src="198.18.0.1", dst="198.19.0.1", len=400) / UDP() / Raw(b"z"),
            Ether(**MACS) / IP(src="198.18.0.1", dst="198.19.0.1", proto=17) / Raw(b"abc"),
            Ether(**MACS) / IP(src="198.18.0.1", dst="198.19.0.1", proto=6) / Raw(b"t" * 10),
            Ether(**MACS) / IP(src="198.18.0.1", dst="198.19.0.1", ihl=4) / Raw(b"w" * 30),
            Ether(**MACS) / IP(src="198.18.0.1", dst="198.19.0.1", version=6) / Raw(b"w" * 30),
            Ether(**MACS) / IP(src="198.18.0.1", dst="198.19.0.1", len=10) / Raw(b"w" * 30),
            Ether(**MACS) / IP(src="198.18.0.1", dst="198.19.0.1") / TCP(dataofs=3) / Raw(b"d" * 8),
            Ether(**MACS) / IP(src="198.18.0.1", dst="198.19.0.1") / TCP(dataofs=15) / Raw(b"d" * 8),
            Ether(**MACS) / Dot1Q(vlan=3, type=0x0800) / Raw(b"\x45\x00")]


def truncated():
    good = bytes(udp())
    return [Raw(good[:n]) for n in (1, 6, 13, 14, 15, 17, 18, 30, 33, 41, len(good) - 1)] + \
           [Raw(bytes(Ether(**MACS) / Dot1Q(vlan=5))[:16])]


def vlan():
    return [Ether(**MACS) / Dot1Q(vlan=7) / IP(src="198.18.0.1", dst="198.19.0.1") / UDP(sport=1001, dport=53) / Raw(b"v" * 10),
            Ether(**MACS) / Dot1Q(vlan=8) / Dot1Q(vlan=9) / IP(src="198.18.0.1", dst="198.19.0.1") / UDP() / Raw(b"w"),
            Ether(**MACS) / Dot1Q(vlan=10) / IP(src="198.18.2.7", dst="198.19.130.1") / TCP(dport=22) / Raw(b"s" * 5),
            Ether(**MACS) / Dot1Q(vlan=11, type=0x86dd) / Raw(b"\x60" + b"\x00" * 50)]


def ip_options():
    opts = [IPOption_RR(routers=["198.18.9.9"] * 2)]
    return [udp(options=opts), tcp(options=opts, dport=22), udp(options=opts, dport=55, sport=1003, dst="198.19.1.130"),
            Ether(**MACS) / IP(src="198.18.0.1", dst="198.19.0.1", options=[IPOption_RR(routers=["1.2.3.4"] * 9)])
            / TCP(sport=5, dport=80) / Raw(b"o" * 9)]


def fragments():
    big = IP(src="198.18.0.1", dst="198.19.0.1", id=77) / UDP(sport=1000, dport=55) / Raw(b"f" * 300)
    frags = [Ether(**MACS) / f for f in fragment(big, fragsize=96)]
    tfr = [Ether(**MACS) / f for f in fragment(IP(src="198.18.0.5", dst="198.19.0.7", id=5) / TCP(dport=22) / Raw(b"t" * 200), fragsize=64)]
    tiny_first = Ether(**MACS) / IP(src="198.18.0.1", dst="198.19.0.1", flags="MF", proto=17) / Raw(b"ab")
    return frags + tfr + [tiny_first]


def max_size():
    return [udp(payload=b"m" * (1514 - 42)), tcp(payload=b"n" * (1514 - 54), dport=22),
            Ether(**MACS) / Dot1Q(vlan=4) / IP(src="198.18.0.1", dst="198.19.0.1") / UDP() / Raw(b"k" * (1518 - 46)),
            udp(payload=b"m" * (2048 - 42))]


CAPTURES = {"normal": normal, "malformed": malformed, "truncated": truncated, "vlan": vlan,
            "ip_options": ip_options, "fragments": fragments, "max_size": max_size}


@pytest.fixture
def keel_xdp(tmp_path):
    """run(nfs, packets) runs keel-xdp run over packets and returns (returncode, stderr, frames)."""
    binary = BIN / "keel-xdp"
    if not binary.exists():
        pytest.fail(f"{binary} is missing: run make build")
    runs = iter(range(10 ** 6))

    def run(nfs, packets, *extra):
        n = next(runs)
        src, dst = tmp_path / f"xin{n}.pcap", tmp_path / f"xout{n}.pcap"
        wrpcap(str(src), packets)
        expr = " -> ".join(name if cfg is None else f"{name}={json.dumps(cfg)}" for name, cfg in nfs)
        p = subprocess.run([str(binary), "run", "--chain", expr, "--in", str(src), "--out", str(dst), *extra],
                           capture_output=True, text=True, timeout=60)
        frames = [bytes(f) for f in rdpcap(str(dst))] if p.returncode == 0 and dst.stat().st_size > 24 else []
        return p.returncode, p.stderr, frames

    return run


def same_bytes(keel_chain, keel_xdp, nfs, packets):
    want = keel_chain(nfs, packets)
    assert want.returncode == 0, want.stderr
    rc, err, got = keel_xdp(nfs, packets)
    assert rc == 0, err
    assert got == [bytes(p) for p in want.out], f"chain {nfs}: keel-xdp and keel-chain differ\n{err}"
    return got


@pytest.mark.parametrize("capture", sorted(CAPTURES))
@pytest.mark.parametrize("nf", sorted(NFS))
def test_each_nf_writes_keel_nfs_bytes(keel_chain, keel_xdp, nf, capture):
    for cfg in NFS[nf]:
        same_bytes(keel_chain, keel_xdp, [(nf, cfg)], CAPTURES[capture]())


@pytest.mark.parametrize("chain", range(len(CHAINS)))
def test_chains_of_several_write_keel_nfs_bytes(keel_chain, keel_xdp, chain):
    packets = [p for make in CAPTURES.values() for p in make()]
    got = same_bytes(keel_chain, keel_xdp, CHAINS[chain], packets)
    assert got, "the chain passed nothing: the comparison would prove little"


def random_frame(rng):
    """A frame built from a valid one by random choices and mutations: headers kept, cut,
    tagged, flipped; fields (ihl, total length, fragment bits, ports, TTL) drawn."""
    kind = rng.choice(["udp", "tcp", "icmp", "other", "raw"])
    if kind == "raw":
        return Raw(bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 120))))
    ip = dict(src=f"198.{rng.choice([18, 19])}.{rng.randint(0, 3)}.{rng.randint(0, 255)}",
              dst=rng.choice(["198.19.0.1", "198.19.1.200", "198.19.1.129", "10.9.9.9", "198.19.9.2",
                              f"198.19.{rng.randint(0, 255)}.{rng.randint(0, 255)}", "203.0.113.1"]),
              ttl=rng.choice([0, 1, 2, 64, 255]), id=rng.getrandbits(16),
              flags=rng.choice([0, 0, 0, 1, 2]), frag=rng.choice([0, 0, 0, 1, 100]))
    if rng.random() < 0.2:
        ip["options"] = [IPOption_RR(routers=["198.18.9.9"] * rng.randint(1, 9))]
    payload = Raw(bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 1, 7, 20, 200, 1400]))))
    sport, dport = rng.choice([22, 53, 55, 80, 1000, 1005, 65535]), rng.choice([22, 50, 53, 60, 80, 0])
    if kind == "udp":
        l4 = UDP(sport=sport, dport=dport) / payload
    elif kind == "tcp":
        l4 = TCP(sport=sport, dport=dport, dataofs=rng.choice([None, None, 5, 4, 15])) / payload
    elif kind == "icmp":
        l4 = ICMP() / payload
    else:
        ip["proto"] = rng.choice([47, 132, 0])
        l4 = payload
    layers = IP(**ip) / l4
    for _ in range(rng.choice([0, 0, 0, 1, 2])):
        layers = Dot1Q(vlan=rng.randint(0, 4095)) / layers
    data = bytearray(bytes(Ether(**MACS) / layers))
    for _ in range(rng.choice([0, 0, 1, 3])):  # flip header bytes (Ethernet type, IPv4, L4)
        i = rng.randrange(min(len(data), 60))
        data[i] ^= 1 << rng.randrange(8)
    if rng.random() < 0.15:
        data = data[:rng.randint(1, len(data))]
    return Raw(bytes(data))


@pytest.mark.parametrize("seed", range(6))
def test_random_frames_through_random_chains_match_keel_nf(keel_chain, keel_xdp, seed):
    # Seeded and bounded: 6 chains of 1-4 NFs, 250 frames each.
    rng = random.Random(seed)
    choices = [(nf, cfg) for nf, cfgs in NFS.items() for cfg in cfgs]
    nfs = [rng.choice(choices) for _ in range(rng.randint(1, 4))]
    frames = [random_frame(rng) for _ in range(250)]
    same_bytes(keel_chain, keel_xdp, nfs, frames)


def test_runs_report_drops_by_reason(keel_xdp):
    packets = normal() + malformed() + [Raw(b"\x02\x00\x00")]
    rc, err, got = keel_xdp([("ipv4fwd", FWD)], packets)
    assert rc == 0, err
    assert f"{len(packets)} frames in, {len(got)} passed, {len(packets) - len(got)} dropped" in err
    assert "rx:" in err and "bad_ipv4" in err and "truncated_eth: 1" in err
    assert "#1 ipv4fwd:" in err and "ttl_drops: 2" in err and "no_route_drops" in err


def test_bad_configuration_is_refused_naming_the_field(keel_xdp):
    rc, err, _ = keel_xdp([("acl", {"rules": [{"dst_ip": "198.18.0.0/40"}]})], [udp()])
    assert rc == 2 and "acl.rules[0].dst_ip: '198.18.0.0/40' is not an IPv4 CIDR" in err
    rc, err, _ = keel_xdp([("macswap", {}), ("nat", {})], [udp()])
    assert rc == 2 and "#2: nat does not run in XDP" in err
    rc, err, _ = keel_xdp([("tunnel", {"vlan": 4096})], [udp()])
    assert rc == 2 and "tunnel.vlan" in err


def test_a_chain_wholly_on_the_nic_ends_in_xdp_tx(keel_xdp):
    rc, err, got = keel_xdp([("macswap", {})], [udp()], "--exit", "tx")
    assert rc == 0, err
    assert got == [bytes(udp())[6:12] + bytes(udp())[:6] + bytes(udp())[12:]]
    assert "(XDP_PASS 0, XDP_TX 1)" in err
