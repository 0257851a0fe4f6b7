# SPDX-License-Identifier: Apache-2.0
"""keel-torctl --datapath-id: only the pinned switch is the ToR. Unit tests of the Switch and
the flag, and a live one: a second Open vSwitch bridge with another datapath ID connects to
the keel-torctl under test and is refused, while the ToR keeps its connection."""
import argparse
import time

import pytest

from keel_torctl.cli import datapath_id
from keel_torctl.metrics import Metrics
from keel_torctl.pb import torctl_pb2
from keel_torctl.switch import Switch
from torctl_env import TAG


class FakeDatapath:
    def __init__(self, dpid: int):
        self.id = dpid
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_a_switch_with_another_datapath_id_is_refused_and_the_tor_keeps_its_connection():
    m = Metrics()
    sw = Switch(m, datapath_ids=frozenset([0x6b65656c]))
    tor, other = FakeDatapath(0x6b65656c), FakeDatapath(0xbad)
    sw.connected(tor)
    assert sw.dp is tor and not tor.closed
    sw.connected(other)
    assert other.closed and sw.dp is tor
    assert m.switch_refused._value.get() == 1
    sw.disconnected(other)  # the refused connection's end changes nothing
    assert sw.dp is tor


def test_without_a_pin_any_switch_is_taken():
    sw = Switch(Metrics())
    dp = FakeDatapath(0x1234)
    sw.connected(dp)
    assert sw.dp is dp and not dp.closed


@pytest.mark.parametrize("text,want", [("000000006b65656c", 0x6b65656c), ("0x6B65656C", 0x6b65656c), ("1", 1)])
def test_datapath_id_takes_ovs_and_0x_forms(text, want):
    assert datapath_id(text) == want


@pytest.mark.parametrize("text", ["", "0x", "keel", "1" * 17, "-1"])
def test_datapath_id_refuses_what_is_not_one(text):
    with pytest.raises(argparse.ArgumentTypeError, match="datapath ID"):
        datapath_id(text)


def test_an_impostor_switch_is_refused_live(torctl, ovs):
    before = torctl.stub.Status(torctl_pb2.TorStatusRequest(), timeout=5)
    assert before.connected
    refused = torctl.metric("keel_torctl_switch_refused_total")
    br = f"keelimp{TAG}"
    ovs.vsctl("add-br", br, "--", "set", "bridge", br, "datapath_type=netdev", "protocols=OpenFlow13",
              "fail-mode=secure", "other-config:disable-in-band=true", "other-config:datapath-id=00000000000000ff")
    try:
        ovs.vsctl("set-controller", br, f"tcp:127.0.0.1:{torctl.ofp_port}")
        deadline = time.time() + 15
        while torctl.metric("keel_torctl_switch_refused_total") <= refused:
            assert time.time() < deadline, "the impostor switch was not refused within 15 s"
            time.sleep(0.2)
        after = torctl.stub.Status(torctl_pb2.TorStatusRequest(), timeout=5)
        assert after.connected and after.datapath_id == before.datapath_id != 0xff
    finally:
        ovs.vsctl("--if-exists", "del-br", br)
