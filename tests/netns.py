# SPDX-License-Identifier: Apache-2.0
"""Test hosts: a veth pair from this namespace into a network namespace of the test's own."""
import os
import subprocess
from contextlib import contextmanager


def _sh(*args, check=True):
    return subprocess.run(args, capture_output=True, text=True, check=check, timeout=30)


@contextmanager
def veth_into_netns(prefix: str = "keel"):
    """A veth pair <prefix>h<pid> here and <prefix>n<pid> inside netns <prefix><pid>, both
    up, IPv6 off and TX checksum offload off (else Open vSwitch's userspace datapath drops
    UDP/TCP); yields (netns, host side, netns side) and deletes both afterwards."""
    tag = str(os.getpid() % 100000)
    ns, host, peer = f"{prefix}{tag}", f"{prefix}h{tag}", f"{prefix}n{tag}"
    _sh("ip", "netns", "add", ns)
    try:
        _sh("ip", "link", "add", host, "type", "veth", "peer", "name", peer)
        _sh("ip", "link", "set", peer, "netns", ns)
        for pre, dev in (([], host), (["ip", "netns", "exec", ns], peer)):
            _sh(*pre, "sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1")
            _sh(*pre, "ethtool", "-K", dev, "tx", "off", check=False)
            _sh(*pre, "ip", "link", "set", dev, "up")
        yield ns, host, peer
    finally:
        _sh("ip", "link", "del", host, check=False)
        _sh("ip", "netns", "del", ns, check=False)
