# SPDX-License-Identifier: Apache-2.0
"""keel-chain on a real port: a veth pair into a network namespace of the
test's own, opened with DPDK's net_af_packet."""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from scapy.all import Dot1Q, Ether, IP, UDP, Raw, rdpcap, wrpcap

import netns
from keelenv import BIN

needs_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("tcpdump"),
                                reason="needs root, iproute2 and tcpdump to make a network namespace")


def sh(*args, check=True):
    return subprocess.run(args, capture_output=True, text=True, check=check, timeout=30)


@pytest.fixture
def veth_into_netns():
    """A veth pair: keelh<pid> here, keeln<pid> inside netns keel<pid>;
    both deleted afterwards."""
    with netns.veth_into_netns("keel") as v:
        yield v


@needs_root
def test_af_packet_port_on_a_veth(veth_into_netns, tmp_path):
    ns, host, peer = veth_into_netns
    n = 200
    pkts = [Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") /
            IP(src="198.18.0.1", dst="198.19.0.1") / UDP(sport=1000 + i, dport=5001) / Raw(b"k" * 40)
            for i in range(n)]
    wrpcap(str(tmp_path / "send.pcap"), pkts)
    stats = tmp_path / "stats.json"
    chain = subprocess.Popen(
        [str(BIN / "keel-chain"), "--nf", 'tunnel={"vlan":9}', "--exit-when-idle", "4000",
         "--stats", str(stats), "--", "--no-pci", "--no-huge", "-m", "512", "--log-level=error",
         "--no-telemetry", f"--file-prefix=keeltest{os.getpid()}afp",
         "--vdev", f"net_af_packet0,iface={host}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = tmp_path / "recv.pcap"
    dump = subprocess.Popen(["ip", "netns", "exec", ns, "tcpdump", "-q", "-n", "-U", "-i", peer,
                             "-w", str(out), "-c", str(n), "vlan 9"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)  # keel-chain and tcpdump are up
        sh("ip", "netns", "exec", ns, sys.executable, "-c",
           "from scapy.all import rdpcap, sendp; "
           f"sendp(rdpcap('{tmp_path / 'send.pcap'}'), iface='{peer}', verbose=False)")
        assert chain.wait(timeout=30) == 0, chain.stderr.read()
        dump.wait(timeout=10)
    finally:
        for p in (chain, dump):
            if p.poll() is None:
                p.terminate()
                p.wait(timeout=10)
    got = rdpcap(str(out))
    assert len(got) == n
    assert sorted(p[UDP].sport for p in got) == list(range(1000, 1000 + n))
    assert all(bytes(p[IP]) == bytes(s[IP]) for p, s in zip(sorted(got, key=lambda p: p[UDP].sport), pkts))
    st = json.loads(stats.read_text())
    assert st["port"]["rx_port"] == "net_af_packet0"
    assert st["port"]["rx_packets"] == n and st["port"]["tx_packets"] == n


@needs_root
@pytest.mark.parametrize("rx", ["rx-zero-copy", "rx-copy"])
def test_tagged_frames_keep_their_tag_through_a_chain_of_processes(veth_into_netns, tmp_path, rx):
    # The kernel hands af_packet a VLAN tag beside the frame; the PMD puts it
    # back with rte_vlan_insert, which refuses the chain buffer's mbufs when
    # the port receives straight into it (issue 33): keel-nf puts it back
    # itself, and the frames leave a chain of two processes tagged as they came.
    ns, host, peer = veth_into_netns
    n = 100
    pkts = [Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / Dot1Q(vlan=7) /
            IP(src="198.18.0.1", dst="198.19.0.1") / UDP(sport=2000 + i, dport=5001) / Raw(b"t" * 40)
            for i in range(n)]
    wrpcap(str(tmp_path / "send.pcap"), pkts)
    pktbuf, stats = tmp_path / "pktbuf", tmp_path / "stats0.json"
    extra = ["--rx-copy"] if rx == "rx-copy" else []
    common = ["--chain-id", f"vlan{rx}", "--of", "2", "--pktbuf", str(pktbuf)] + extra
    procs = [subprocess.Popen([str(BIN / "keel-nf"), "--nf", "macswap", "--position", "0", *common,
                               "--stats", str(stats), "--exit-when-idle", "4000", "--", "--no-pci", "--no-huge",
                               "-m", "512", "--log-level=error", "--no-telemetry",
                               f"--file-prefix=keeltest{os.getpid()}vlan", "--vdev", f"net_af_packet0,iface={host}"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
             subprocess.Popen([str(BIN / "keel-nf"), "--nf", "monitor", "--position", "1", *common],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
    out = tmp_path / "recv.pcap"
    # Frames back from the chain have their MACs swapped.
    dump = subprocess.Popen(["ip", "netns", "exec", ns, "tcpdump", "-q", "-n", "-U", "-i", peer,
                             "-w", str(out), "-c", str(n), "ether src 02:00:00:00:00:02"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        sh("ip", "netns", "exec", ns, sys.executable, "-c",
           "from scapy.all import rdpcap, sendp; "
           f"sendp(rdpcap('{tmp_path / 'send.pcap'}'), iface='{peer}', verbose=False)")
        for p in procs:
            assert p.wait(timeout=30) == 0, p.stderr.read()
        dump.wait(timeout=10)
    finally:
        for p in procs + [dump]:
            if p.poll() is None:
                p.terminate()
                p.wait(timeout=10)
    got = sorted(rdpcap(str(out)), key=lambda p: p[UDP].sport)
    assert len(got) == n
    assert all(p[Dot1Q].vlan == 7 and bytes(p[IP]) == bytes(s[IP]) for p, s in zip(got, pkts))
    st = json.loads(stats.read_text())
    assert st["ingress"]["zero_copy"] == (rx == "rx-zero-copy")
    assert st["port"]["rx_malformed"] == 0 and st["port"]["tx_packets"] == n
