# SPDX-License-Identifier: Apache-2.0
"""An instance's own rules come and go with it: the reinject and in-band rules toward it, and
the rule that sends the flow moves' in-band frames it returns (EXPORT_STATE / IMPORT_STATE,
nf-runtime/include/keel/inband.h) back to keel-ingress. Driven through the Controller over a
switch that records what it is sent, no switch needed."""
import struct

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from keel_torctl.controller import Assignment, Controller, Options
from keel_torctl.metrics import Metrics
from keel_torctl.wire import PackedFlowMod
from keel_torctl.rules import (ETH_KEEL_INBAND, KIND_RETURN, PRIO_INBAND, PRIO_MOVE_RETURN, PRIO_PROBE, PRIO_RETURN,
                               PRIO_RETURN_CHAIN, STEER_TABLE, VLAN_PRESENT, FiveTuple, chain_tag, cookie)

PORTS = {"keel-ing": 1, "keel-egress": 2, "keel-tor-w1": 3}


class Datapath:
    ofproto = ofp
    ofproto_parser = parser


class RecordingSwitch:
    """A connected switch that takes every commit."""

    dp = Datapath()

    def __init__(self):
        self.commits = []

    def ports(self):
        return dict(PORTS)

    def port(self, name):
        return PORTS[name]

    def commit(self, build, timeout=None):
        self.commits.append(build(self.dp))


def controller():
    opts = Options(ingress_port="keel-ing", egress_port="keel-egress", worker_ports={"w1": "keel-tor-w1"},
                   idle_timeout=10, capabilities={}, has_gateway=False)
    switch = RecordingSwitch()
    return Controller(opts, switch, Metrics()), switch


def priority(m):
    """A flow-mod's priority, packed by torctl (cookie, mask, table, command, timeouts first) or not."""
    return struct.unpack_from("!H", m.body, 22)[0] if isinstance(m, PackedFlowMod) else m.priority


def move_return_key(chain, vlan):
    return (STEER_TABLE, PRIO_MOVE_RETURN, cookie(KIND_RETURN, chain_tag(chain), vlan))


def test_the_move_return_rule_sends_the_instances_in_band_frames_to_the_ingress_above_its_return_rules():
    ctl, _ = controller()
    ctl.chain_added("c", ["nat"], ["nat"], [])
    prog = ctl._chains["c"]
    rules = ctl._instance_rules(prog, "c", 42, "w1")
    back = [r for r in rules if r.priority == PRIO_MOVE_RETURN]
    assert len(back) == 1, rules
    r = back[0]
    assert dict(r.match) == {"in_port": PORTS["keel-tor-w1"], "vlan_vid": VLAN_PRESENT | 42,
                             "eth_type": ETH_KEEL_INBAND}
    assert r.instructions == (("apply", (("output", PORTS["keel-ing"]),)),), "as it came: VLAN and mark kept"
    assert PRIO_RETURN < PRIO_RETURN_CHAIN < r.priority < PRIO_PROBE
    assert r.key == move_return_key("c", 42)
    # the frames the ingress sends it go the other way, at their own priority
    inband = [x for x in rules if x.priority == PRIO_INBAND]
    assert len(inband) == 1 and dict(inband[0].match)["in_port"] == PORTS["keel-ing"]


def test_the_move_return_rule_is_installed_and_removed_with_its_instance():
    ctl, switch = controller()
    ctl.chain_added("c", ["nat"], ["nat"], [])
    ctl.instance_changed("c/0", "c", 42, "w1")
    ctl.instance_changed("c/1", "c", 43, "w1")
    assert move_return_key("c", 42) in ctl._installed
    assert move_return_key("c", 43) in ctl._installed
    ctl.instance_removed("c/0")
    assert move_return_key("c", 42) not in ctl._installed
    assert move_return_key("c", 43) in ctl._installed, "the other instance keeps its own"
    deleted = [m.cookie for m in switch.commits[-1]]
    assert cookie(KIND_RETURN, chain_tag("c"), 42) in deleted
    ctl.chain_removed("c")
    assert move_return_key("c", 43) not in ctl._installed


def test_a_flows_install_brings_its_instances_move_return_rule_if_missing():
    ctl, switch = controller()
    ctl.chain_added("c", ["nat"], ["nat"], [])
    flow = FiveTuple("198.18.0.1", "198.19.0.1", 5000, 53, 17)
    ctl.install(Assignment(flow, "c", "c/0", 44, "w1"), 0, False)
    assert move_return_key("c", 44) in ctl._installed
    sent = sorted(priority(m) for m in switch.commits[-1])
    assert sent == [100, 110, PRIO_INBAND, PRIO_MOVE_RETURN], "the flow's rule, reinject, in-band, move return"
