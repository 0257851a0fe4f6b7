# SPDX-License-Identifier: Apache-2.0
"""wire.add_bytes packs the same flow-mod bytes os-ken's objects serialize to, for every kind
of rule torctl installs: flow rules of both stages, base, instance and program rules."""
import time

import pytest
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from keel_torctl import ofp as msgs
from keel_torctl.nfs import SwitchNf, compile_program, load_capabilities
from keel_torctl.rules import (FiveTuple, base_rules, flow_rule, instance_inband_rule, instance_move_return_rule,
                               instance_reinject_rule, return_rule)
from keel_torctl.wire import PackedFlowMod, add_bytes


class Datapath:
    ofproto = ofp
    ofproto_parser = parser


PORTS = {"keel-ing": 1, "keel-egress": 2, "keel-tor-local": 3, "keel-tor-w2": 4}
FLOWS = [FiveTuple("198.18.0.1", "198.18.3.1", 1024, 5001, 17),
         FiveTuple("198.18.200.17", "10.1.2.3", 65535, 80, 6),
         FiveTuple("198.18.0.1", "198.19.0.1", 0, 0, 1)]
PROGRAMS = {
    "acl": [SwitchNf("a", "acl", {"rules": [{"dst_ip": "198.19.0.0/24", "proto": "udp", "dst_port": "53-55"},
                                            {"src_ip": "198.18.0.2/32", "drop": True}]}, False)],
    "tunnel": [SwitchNf("t", "tunnel", {"vlan": 100}, False)],
    "monitor": [SwitchNf("m", "monitor", {}, True)],
}


def osken_bytes(rule, xid):
    m = msgs.osken_add(Datapath(), rule)
    m.set_xid(xid)
    m.serialize()
    return bytes(m.buf)


def packed_bytes(rule, xid):
    m = msgs.add(Datapath(), rule)
    assert isinstance(m, PackedFlowMod), rule
    m.set_xid(xid)
    m.serialize()
    return bytes(m.buf)


def rules():
    out = []
    for i, f in enumerate(FLOWS):
        for vlan in (0, 100, 4093):
            for pre in (None, 2):
                for ingress in (None, 1):  # stage 2, stage 1
                    out.append(flow_rule(f, f"chain{i}", vlan, 3, pre, 10 * i, ingress))
    port = PORTS.__getitem__
    out += base_rules(port, "keel-ing", "keel-egress", ["keel-tor-local", "keel-tor-w2"])
    out += [instance_reinject_rule(port, "keel-ing", "keel-tor-local", "chain3", 101, pre) for pre in (None, 2)]
    out.append(instance_inband_rule(port, "keel-ing", "keel-tor-local", "chain3", 101))
    out.append(instance_move_return_rule(port, "keel-tor-local", "keel-ing", "chain3", 101))
    out.append(return_rule(port, "keel-tor-local", "keel-egress", "chain2", 100, 3))
    caps = load_capabilities()
    for name, nfs in PROGRAMS.items():
        out += compile_program(f"c-{name}", [n.name for n in nfs], [n.name for n in nfs], nfs, caps).rules
    return out


@pytest.mark.parametrize("k", range(len(rules())))
def test_packed_flow_mod_is_byte_for_byte_os_kens(k):
    rule = rules()[k]
    if add_bytes(rule) is None:
        pytest.skip(f"os-ken packs this rule itself: {rule.match}")
    assert packed_bytes(rule, 7 + k) == osken_bytes(rule, 7 + k), rule


def test_every_flow_rule_is_packed_without_os_ken():
    for f in FLOWS:
        for ingress in (None, 1):
            assert add_bytes(flow_rule(f, "chain3", 100, 3, 2, 10, ingress)) is not None


def test_a_masked_field_is_left_to_os_ken():
    rule = rules()[0]
    masked = type(rule)(rule.table, rule.priority, (("ipv4_dst", ("198.19.0.0", "255.255.0.0")),),
                        rule.instructions, rule.cookie)
    assert add_bytes(masked) is None
    assert not isinstance(msgs.add(Datapath(), masked), PackedFlowMod)


def test_packing_a_flow_rule_costs_a_fifth_of_os_ken():
    flows = [FiveTuple("198.18.0.1", "198.18.3.1", 1024 + i, 5001, 17) for i in range(500)]
    built = [flow_rule(f, "chain3", 100, 3, 2, 10, None) for f in flows]

    def cost(pack):
        t0 = time.process_time()
        for i, r in enumerate(built):
            pack(r, i)
        return time.process_time() - t0

    osken, packed = cost(osken_bytes), cost(packed_bytes)
    assert packed * 5 < osken, f"packed {packed * 2000:.1f} us/rule, os-ken {osken * 2000:.1f} us/rule"
