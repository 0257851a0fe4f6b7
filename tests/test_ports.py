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
from scapy.all import Ether, IP, UDP, Raw, rdpcap, wrpcap

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
