# SPDX-License-Identifier: Apache-2.0
"""A switch-only chain's reinject rule: keel-ingress tags a new flow's held packets with the
chain's reinject VLAN (the gateway's, keel.v1.Chain.reinject_vlan) and this one rule runs them
through the chain's switch NFs to the egress, so no flow needs a stage-1 rule of its own. It
comes and goes with the chain's program and goes in with a flow's first install. Driven
through the Controller over a switch that records what it is sent, no switch needed."""
import struct
from types import SimpleNamespace

from keel_torctl.controller import Assignment, Controller, Options
from keel_torctl.metrics import Metrics
from keel_torctl.nfs import load_capabilities
from keel_torctl.wire import PackedFlowMod
from keel_torctl.rules import (KIND_CHAIN_REINJECT, PRIO_REINJECT, STEER_TABLE, VLAN_PRESENT, FiveTuple,
                               chain_tag, cookie, metadata, META_MASK)
from test_instance_rules import PORTS, RecordingSwitch

ACL = SimpleNamespace(name="a", nf="acl", config_json='{"rules": [{"dst_ip": "198.19.0.0/24"}]}', after_server=False)
FLOW = FiveTuple("198.18.0.1", "198.19.0.1", 5000, 53, 17)


def controller(has_gateway=False):
    """A torctl; has_gateway: it follows the gateway and, until the Watch's SYNCED, installs a
    chain's program only with a flow of the chain."""
    opts = Options(ingress_port="keel-ing", egress_port="keel-egress", worker_ports={"w1": "keel-tor-w1"},
                   idle_timeout=10, capabilities=load_capabilities(), has_gateway=has_gateway)
    switch = RecordingSwitch()
    return Controller(opts, switch, Metrics()), switch


def cookies(commit):
    """The cookies of a commit's flow-mods, packed by torctl (cookie first in the body) or not."""
    return [struct.unpack_from("!Q", m.body, 0)[0] if isinstance(m, PackedFlowMod) else m.cookie for m in commit]


def key(chain, vlan):
    return (STEER_TABLE, PRIO_REINJECT, cookie(KIND_CHAIN_REINJECT, chain_tag(chain), vlan))


def reinject_rules(ctl, chain):
    return [r for r in ctl._chain_rules(ctl._chains[chain], chain, ctl.switch.port)
            if r.key[2] >> 60 == KIND_CHAIN_REINJECT]


def test_the_rule_untags_the_ingress_packets_of_its_vlan_into_the_chains_switch_nfs_to_the_egress():
    ctl, _ = controller()
    ctl.chain_added("c1", ["a"], [], [ACL], 205)
    prog = ctl._chains["c1"]
    [r] = reinject_rules(ctl, "c1")
    assert dict(r.match) == {"in_port": PORTS["keel-ing"], "vlan_vid": VLAN_PRESENT | 205}
    assert r.instructions == (("apply", (("pop_vlan",),)), ("meta", metadata(chain_tag("c1"), False), META_MASK),
                              ("write", (("output", PORTS["keel-egress"]),)), ("goto", prog.first_pre))
    assert r.key == key("c1", 205)
    assert r.idle_timeout == 0, "it lasts as long as the chain"


def test_only_a_switch_only_chain_with_a_vlan_has_one():
    ctl, _ = controller()
    ctl.chain_added("server", ["nat"], ["nat"], [], 206)  # its flows go to instances
    ctl.chain_added("old", ["a"], [], [ACL], 0)           # stored before chains had one
    assert reinject_rules(ctl, "server") == [] and reinject_rules(ctl, "old") == []


def test_a_flows_first_install_brings_it_and_it_goes_with_the_chain():
    ctl, switch = controller(has_gateway=True)
    ctl.chain_added("c1", ["a"], [], [ACL], 205)
    assert ctl.chain_reinject_in("c1") == 0, "not on the switch yet"
    # The ingress's stage 1 for the chain's first flow: the reinject rule goes in the same
    # commit, behind the same barrier, which is what the ingress waits for before it uses
    # the VLAN for the chain's next flows.
    ctl.install(Assignment(FLOW, "c1", "", 0, ""), 0, True)
    assert key("c1", 205) in ctl._installed
    assert ctl.chain_reinject_in("c1") == 205, "what InstallFlow's answer tells the ingress"
    assert ctl.chain_reinjects() == {"c1": 205}, "what ChainReinjects tells it"
    assert cookie(KIND_CHAIN_REINJECT, chain_tag("c1"), 205) in cookies(switch.commits[-1])
    # A later flow's install does not send it again.
    ctl.install(Assignment(FiveTuple("198.18.0.1", "198.19.0.2", 5001, 53, 17), "c1", "", 0, ""), 0, True)
    assert cookie(KIND_CHAIN_REINJECT, chain_tag("c1"), 205) not in cookies(switch.commits[-1])
    ctl.chain_removed("c1")
    assert key("c1", 205) not in ctl._installed
    assert ctl.chain_reinject_in("c1") == 0


def test_a_redeploy_that_puts_an_nf_on_a_server_takes_it_away():
    ctl, switch = controller()
    ctl.chain_added("c1", ["a"], [], [ACL], 205)
    ctl.synced()
    assert key("c1", 205) in ctl._installed
    ctl.chain_added("c1", ["a", "nat"], ["nat"], [ACL], 205)  # re-placed: NAT on a server
    assert key("c1", 205) not in ctl._installed
    assert reinject_rules(ctl, "c1") == []
