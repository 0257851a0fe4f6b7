# SPDX-License-Identifier: Apache-2.0
"""FlowRemoved reaches the gateway although it was not watching when the switch expired the
flow (it was restarting) or fell behind: torctl keeps the removals no watcher took and hands
them to the next watcher first. Driven through the Controller with the switch's messages, no
switch needed."""
from types import SimpleNamespace

from os_ken.ofproto import ofproto_v1_3_parser as parser

from keel_torctl.controller import Controller, Options
from keel_torctl.metrics import Metrics
from keel_torctl.rules import KIND_FLOW, FiveTuple, chain_tag, cookie


class NoSwitch:
    dp = None

    def ports(self):
        return {}


def controller():
    opts = Options(ingress_port="keel-ing", egress_port="keel-egress", worker_ports={}, idle_timeout=10,
                   capabilities={}, has_gateway=False)
    return Controller(opts, NoSwitch(), Metrics())


def expiry(sport: int, reason: int = 0):
    """The switch's OFPT_FLOW_REMOVED of flow sport's stage-2 rule (chain3, VLAN 100)."""
    flow = FiveTuple("198.18.0.1", "198.18.3.1", sport, 5001, 17)
    return SimpleNamespace(reason=reason, cookie=cookie(KIND_FLOW, chain_tag("chain3"), 100),
                           match=parser.OFPMatch(**dict(flow.match())), packet_count=4, byte_count=400,
                           duration_sec=10, duration_nsec=0)


def drain(q):
    out = []
    while not q.empty():
        out.append(q.get_nowait()[0].flow.src_port)
    return out


def test_removals_while_no_one_watches_go_to_the_next_watcher_first():
    ctl = controller()
    for sport in (1, 2, 3):
        ctl.flow_removed(expiry(sport))
    ctl.flow_removed(expiry(9, reason=2))  # a delete, not an expiry: not reported
    q = ctl.subscribe()
    ctl.flow_removed(expiry(4))
    assert drain(q) == [1, 2, 3, 4]
    # a second watcher does not get them again
    assert drain(ctl.subscribe()) == []


def test_removals_a_watcher_did_not_send_before_it_ended_go_to_the_next():
    ctl = controller()
    q = ctl.subscribe()
    for sport in (1, 2, 3):
        ctl.flow_removed(expiry(sport))
    q.get_nowait()  # sent on the stream before it broke
    ctl.unsubscribe(q)
    ctl.flow_removed(expiry(4))
    assert drain(ctl.subscribe()) == [2, 3, 4]


def test_a_watcher_too_far_behind_is_ended_and_its_removals_kept():
    ctl = controller()
    ctl.WATCH_QUEUE = 2
    q = ctl.subscribe()
    for sport in range(1, 6):
        ctl.flow_removed(expiry(sport))
    assert not ctl.subscribed(q)
    assert drain(ctl.subscribe()) == [1, 2, 3, 4, 5]


def test_the_backlog_is_bounded_and_counts_what_it_dropped():
    ctl = controller()
    ctl.MAX_UNSENT = 3
    for sport in range(1, 6):
        ctl.flow_removed(expiry(sport))
    assert drain(ctl.subscribe()) == [3, 4, 5]
    assert ctl.metrics.registry.get_sample_value("keel_torctl_flow_removed_dropped_total") == 2


# RecordFlows: rules keel-ingress wrote to the switch itself -----------------------------------

def direct(sport: int):
    """What keel-ingress reports of flow sport's rule, written from chain3/VLAN 100's template."""
    from keel_torctl.controller import Assignment
    flow = FiveTuple("198.18.0.1", "198.18.3.1", sport, 5001, 17)
    return Assignment(flow, "chain3", "chain3-100", 100, "local"), cookie(KIND_FLOW, chain_tag("chain3"), 100), 10


def test_recorded_flows_are_in_the_record_until_they_expire():
    ctl = controller()
    assert ctl.record([direct(1), direct(2)]) == 2
    assert ctl.record([direct(2)]) == 0  # idempotent
    assert sorted(f.assignment.flow.src_port for f in ctl.list_known()) == [1, 2]
    assert ctl.flow_count() == 2
    q = ctl.subscribe()
    ctl.flow_removed(expiry(1))
    assert drain(q) == [1]
    assert [f.assignment.flow.src_port for f in ctl.list_known()] == [2]


def test_a_report_that_comes_after_the_expiry_does_not_bring_the_flow_back():
    # the gateway's reconciliation trusts the record: a rule noted after its expiry would
    # keep its flow, and its instance's core, for good
    ctl = controller()
    ctl.flow_removed(expiry(1))
    assert ctl.record([direct(1), direct(2)]) == 1
    assert [f.assignment.flow.src_port for f in ctl.list_known()] == [2]
