# SPDX-License-Identifier: Apache-2.0
"""keel-torctl against a real Open vSwitch: rules, barrier semantics, expiry, restarts."""
import socket
import struct
import time

import grpc
import pytest
from scapy.all import Dot1Q, Ether, IP, Raw, UDP

from torctl_env import PORTS, WORKER
from keel_torctl.pb import control_pb2, torctl_pb2
from keel_torctl.rules import PRIO_FLOW, STEER_TABLE

MACS = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")


def udp(sport, dst="198.19.0.1", ttl=64):
    return Ether(**MACS) / IP(src="198.18.0.1", dst=dst, ttl=ttl) / UDP(sport=sport, dport=53) / Raw(b"k" * 32)


def five(sport, dst="198.19.0.1"):
    return control_pb2.FiveTuple(src_ip="198.18.0.1", dst_ip=dst, src_port=sport, dst_port=53, proto=17)


def install(t, sport, chain="plain", vlan=0, worker="", idle=0, reinject=False, instance=""):
    a = torctl_pb2.FlowAssignment(flow=five(sport), chain=chain, instance=instance, vlan=vlan, worker=worker)
    return t.stub.InstallFlow(torctl_pb2.InstallFlowRequest(assignment=a, idle_timeout_s=idle,
                                                            reinject_only=reinject), timeout=10)


def flows(ovs, br):
    return ovs.ofctl("dump-flows", br)


def wait_for(pred, timeout=10.0, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module", autouse=True)
def chains(gateway, torctl):
    """A chain without switch NFs ("plain") and one with a Monitor after the server NFs."""
    from keel_torctl.pb import control_pb2 as c
    gateway.add_chain("plain", [], members=["nat"], nfs=["nat"])
    gateway.add_chain("mon", [c.SwitchNf(name="m", nf="monitor", config_json="{}", after_server=True)],
                      members=["nat"], nfs=["nat", "m"])
    gateway.add_instance("mon/0", "mon", 42)
    wait_for(lambda: "vlan_vid=0x102a/0x1fff" in flows(torctl.ovs, torctl.br) or
             "dl_vlan=42" in flows(torctl.ovs, torctl.br), what="mon's return rule")


def test_base_rules_steer_table_miss_to_the_ingress_and_trunk_returns_to_the_egress(torctl, bridge):
    dump = flows(torctl.ovs, bridge[0])
    ing, eg, trunk = (PORTS[r][0] for r in ("ingress", "egress", "trunk"))
    assert f"priority=0 actions=output:{ing}" in dump or "priority=0 actions=output:1" in dump
    assert "priority=2,in_port=" in dump and "dl_vlan=4094" in dump and "priority=1,in_port=" in dump
    assert "priority=120,vlan_tci=0x1000/0x1000" in dump or "priority=120,in_port=" in dump
    net = bridge[1]
    net.drain()
    net.send([udp(1)])
    assert [p[UDP].sport for p in net.recv("ingress")] == [1]  # unknown flow: to keel-ingress
    # the ingress's normal path comes back tagged 4094 and leaves by the egress untagged; an
    # untagged packet from the ingress that no stage-1 rule matches is dropped
    tagged = Ether(**MACS) / Dot1Q(vlan=4094) / IP(src="198.18.0.1", dst="198.19.0.1") / UDP(sport=2, dport=53)
    net.socks["ingress"].send(tagged)
    net.socks["ingress"].send(udp(3))
    got = net.recv("egress")
    assert [(p.haslayer(Dot1Q), p[UDP].sport) for p in got] == [(False, 2)]


def test_the_tor_probe_crosses_the_switch_to_the_egress_and_nothing_else_does(torctl, bridge):
    """The ToR probe (rules.py PRIO_PROBE): UDP to 198.19.255.0/30 port 7 goes from the source
    straight to the egress, never to the ingress or a worker; the same flow to another port, or
    port 7 on another address, is an ordinary new flow (to the ingress)."""
    net = bridge[1]
    net.drain()
    probe = lambda sport, dst="198.19.255.1", dport=7: (Ether(**MACS) / IP(src="198.18.0.1", dst=dst) /
                                                         UDP(sport=sport, dport=dport) / Raw(b"p" * 32))
    net.send([probe(40001), probe(40002, dst="198.19.255.2")])
    assert [p[UDP].sport for p in net.recv("egress")] == [40001, 40002]
    net.send([probe(40003, dport=8), probe(40004, dst="198.19.255.5")])
    assert [p[UDP].sport for p in net.recv("ingress")] == [40003, 40004]
    assert net.recv("egress", 0.1) == [] and net.recv("trunk", 0.1) == []


def test_install_returns_after_the_barrier_so_the_next_packet_takes_the_rule(torctl, bridge):
    net = bridge[1]
    net.drain()
    for sport in range(1000, 1010):
        install(torctl, sport, vlan=7, worker=WORKER)
        net.send([udp(sport)])
    got = net.recv("trunk")
    assert [(p[Dot1Q].vlan, p[UDP].sport) for p in got] == [(7, s) for s in range(1000, 1010)]
    assert net.recv("ingress", 0.1) == []
    dump = flows(torctl.ovs, bridge[0])
    assert "udp,nw_src=198.18.0.1,nw_dst=198.19.0.1,tp_src=1000,tp_dst=53" in dump
    assert "push_vlan:0x8100,set_field:4103->vlan_vid,output:" in dump


def test_install_flows_puts_a_batch_behind_one_barrier_and_fails_only_the_bad_flow(torctl, bridge):
    def req(sport, chain="plain"):
        a = torctl_pb2.FlowAssignment(flow=five(sport), chain=chain, vlan=7, worker=WORKER)
        return torctl_pb2.InstallFlowRequest(assignment=a)

    batches_before = torctl.metric("keel_torctl_batch_requests_count")
    resp = torctl.stub.InstallFlows(torctl_pb2.InstallFlowsRequest(
        flows=[req(1100), req(1101), req(1102, chain="nosuch"), req(1103)]), timeout=10)
    assert [(r.error == "", r.code) for r in resp.results] == \
        [(True, ""), (True, ""), (False, "FAILED_PRECONDITION"), (True, "")]
    assert "nosuch" in resp.results[2].error
    assert torctl.metric("keel_torctl_batch_requests_count") == batches_before + 1  # one commit, one barrier
    net = bridge[1]
    net.drain()
    net.send([udp(s) for s in (1100, 1101, 1102, 1103)])
    assert sorted(p[UDP].sport for p in net.recv("trunk")) == [1100, 1101, 1103]
    assert [p[UDP].sport for p in net.recv("ingress", 0.2)] == [1102]


def test_a_rule_written_from_the_template_through_another_connection_is_recorded_and_its_expiry_reported(
        torctl, bridge):
    """keel-ingress --tor-openflow writes a flow's rule itself, through the bridge's management
    socket, from the template InstallFlows returned with an earlier flow of the same instance,
    and reports it (RecordFlows). Here ovs-ofctl writes it the same way: the expiry of a rule
    torctl did not write still reaches torctl and its watchers, and the record lists it
    meanwhile (the gateway reconciles its flows against that record)."""
    a = torctl_pb2.FlowAssignment(flow=five(3300), chain="plain", instance="x/0", vlan=9, worker=WORKER)
    r = torctl.stub.InstallFlows(torctl_pb2.InstallFlowsRequest(
        flows=[torctl_pb2.InstallFlowRequest(assignment=a, idle_timeout_s=60)]), timeout=10).results[0]
    t = r.template
    assert r.error == "" and t.datapath_id == torctl.stub.Status(torctl_pb2.TorStatusRequest(), timeout=10).datapath_id
    assert (t.cookie, t.idle_timeout_s, t.flags, t.priority, t.table_id) == (r.cookie, 60, 1, PRIO_FLOW, STEER_TABLE)
    trunk = PORTS["trunk"][1]
    assert struct.pack("!HHIH6x", 0, 16, trunk, 0) in t.instructions  # OFPAT_OUTPUT to the worker's port
    one = torctl_pb2.InstallFlowRequest(assignment=a, reinject_only=True)
    assert not torctl.stub.InstallFlows(torctl_pb2.InstallFlowsRequest(flows=[one]), timeout=10).results[0] \
        .HasField("template")  # a stage-1 rule has none

    stream = torctl.stub.WatchFlowRemoved(torctl_pb2.WatchFlowRemovedRequest(watcher="test"), timeout=15)
    time.sleep(0.3)
    torctl.ovs.ofctl("add-flow", bridge[0],
                     f"cookie={t.cookie:#x},table={t.table_id},priority={t.priority},idle_timeout=2,send_flow_rem,"
                     f"udp,nw_src=198.18.0.1,nw_dst=198.19.0.1,tp_src=3301,tp_dst=53,"
                     f"actions=push_vlan:0x8100,set_field:{4096 + 9}->vlan_vid,output:{trunk}")
    b = torctl_pb2.FlowAssignment(flow=five(3301), chain="plain", instance="x/0", vlan=9, worker=WORKER)
    got = torctl.stub.RecordFlows(torctl_pb2.RecordFlowsRequest(
        flows=[torctl_pb2.InstalledFlow(assignment=b, idle_timeout_s=2, cookie=t.cookie)]), timeout=10)
    assert got.recorded == 1

    def recorded():
        listed = torctl.stub.ListFlows(torctl_pb2.ListTorFlowsRequest(), timeout=10).flows
        return {f.assignment.flow.src_port for f in listed}
    assert {3300, 3301} <= recorded()
    ev = next(iter(stream))
    stream.cancel()
    assert (ev.reason, ev.assignment.flow.src_port, ev.assignment.vlan, ev.assignment.chain) == \
        ("idle_timeout", 3301, 9, "plain")
    assert 3301 not in recorded() and 3300 in recorded()
    torctl.stub.RemoveFlow(torctl_pb2.RemoveFlowRequest(flow=five(3300)), timeout=10)


def test_stage1_matches_only_reinjected_packets(torctl, bridge):
    net = bridge[1]
    install(torctl, 2000, vlan=8, worker=WORKER, reinject=True)
    net.drain()
    net.send([udp(2000)])  # from the source port: not re-injected, still goes to the ingress
    assert [p[UDP].sport for p in net.recv("ingress")] == [2000]
    dump = flows(torctl.ovs, bridge[0])
    assert "priority=110,udp,in_port=" in dump and "tp_src=2000" in dump


def test_packets_the_ingress_tags_with_an_instance_vlan_reach_its_worker_without_a_flow_rule(torctl, bridge):
    """The first packets of a flow with an instance need no per-flow rule: the ingress tags them
    with the instance's VLAN and the instance's reinject rule (from the Watch) steers them."""
    net = bridge[1]
    net.drain()
    tagged = [Ether(**MACS) / Dot1Q(vlan=42) / IP(src="198.18.0.1", dst="198.19.0.1") / UDP(sport=s, dport=53)
              / Raw(b"i" * 16) for s in (2100, 2101, 2102)]
    for p in tagged:
        net.socks["ingress"].send(p)
    got = net.recv("trunk")
    assert [(p[Dot1Q].vlan, p[UDP].sport) for p in got] == [(42, 2100), (42, 2101), (42, 2102)]
    dump = flows(torctl.ovs, bridge[0])
    assert "tp_src=2100" not in dump  # no per-flow rule was needed
    assert [x for x in dump.splitlines() if "priority=110" in x and "dl_vlan=42" in x], dump
    # a VLAN no instance has is not steered anywhere (the ingress's other chatter is dropped)
    net.socks["ingress"].send(Ether(**MACS) / Dot1Q(vlan=43) / IP(src="198.18.0.1", dst="198.19.0.1")
                              / UDP(sport=2103, dport=53))
    assert net.recv("trunk", 0.3) == [] and net.recv("egress", 0.1) == []


def test_an_instance_reinject_rule_goes_with_its_instance(torctl, gateway, bridge):
    gateway.add_instance("mon/1", "mon", 44)
    wait_for(lambda: any("priority=110" in x and "dl_vlan=44" in x for x in flows(torctl.ovs, bridge[0]).splitlines()),
             what="mon/1's reinject rule")
    gateway.remove_instance("mon/1")
    wait_for(lambda: "dl_vlan=44" not in flows(torctl.ovs, bridge[0]), what="mon/1's rules removed")


MARK = 4093  # keel-ingress' in-band mark (nf-runtime/include/keel/inband.h)


def test_marked_packets_run_the_switch_acl_behind_the_mark_and_in_band_frames_go_straight_to_and_from_the_instance(
        torctl, gateway, bridge):
    from keel_torctl.pb import control_pb2 as c
    acl = c.SwitchNf(name="a", nf="acl", config_json='{"rules": [{"dst_ip": "198.19.0.0/24"}]}')
    gateway.add_chain("acl", [acl], members=["nat"], nfs=["a", "nat"])
    gateway.add_instance("acl/0", "acl", 46)
    wait_for(lambda: any("priority=111" in x and "dl_vlan=46" in x for x in flows(torctl.ovs, bridge[0]).splitlines()),
             what="acl/0's in-band rule")
    net = bridge[1]
    net.drain()
    # The ingress' packets for the instance: its VLAN over the mark. The ACL passes 198.19.0.0/24
    # and drops the rest; the mark comes through under the instance VLAN.
    for sport, dst in ((4000, "198.19.0.1"), (4001, "198.19.1.1")):
        net.socks["ingress"].send(Ether(**MACS) / Dot1Q(vlan=46) / Dot1Q(vlan=MARK) / IP(src="198.18.0.1", dst=dst)
                                  / UDP(sport=sport, dport=53) / Raw(b"m" * 20))
    # A handover marker (not IPv4: the ACL would drop it) goes out as it came.
    marker = Ether(**MACS) / Dot1Q(vlan=46) / Dot1Q(vlan=MARK, type=0x88B5) / Raw(bytes([1, 1, 0, 28]) + bytes(40))
    net.socks["ingress"].send(marker)
    got = net.recv("trunk")
    assert len(got) == 2, [p.summary() for p in got]
    data, mk = got
    assert (data[Dot1Q].vlan, data[Dot1Q].payload[Dot1Q].vlan, data[UDP].sport) == (46, MARK, 4000)
    assert (mk[Dot1Q].vlan, mk[Dot1Q].payload[Dot1Q].vlan, mk[Dot1Q].payload[Dot1Q].type) == (46, MARK, 0x88B5)
    assert bytes(mk[Dot1Q].payload[Dot1Q].payload)[:4] == bytes([1, 1, 0, 28])
    # A flow move's frame the instance ran through its chain comes back from the worker (its
    # VLAN over the mark, 0x88B5): straight to the ingress as it came, not out of the egress.
    wait_for(lambda: any("priority=135" in x and "dl_vlan=46" in x for x in flows(torctl.ovs, bridge[0]).splitlines()),
             what="acl/0's move return rule")
    body = b"KM" + bytes([1, 1, 0, 0, 0, 0]) + bytes(26)  # flow_move.h's header: an export, status ok
    back = Ether(**MACS) / Dot1Q(vlan=46) / Dot1Q(vlan=MARK, type=0x88B5) / Raw(bytes([1, 2, 0, 38]) + body)
    net.drain()
    net.socks["trunk"].send(back)
    got = net.recv("ingress")
    assert len(got) == 1, [p.summary() for p in got]
    assert (got[0][Dot1Q].vlan, got[0][Dot1Q].payload[Dot1Q].vlan, got[0][Dot1Q].payload[Dot1Q].type) == \
        (46, MARK, 0x88B5)
    assert bytes(got[0][Dot1Q].payload[Dot1Q].payload)[:38] == bytes([1, 2, 0, 38]) + body
    assert net.recv("egress", 0.1) == []
    # The instance's ordinary return traffic still leaves by the egress.
    net.socks["trunk"].send(Ether(**MACS) / Dot1Q(vlan=46) / IP(src="198.19.0.1", dst="198.18.0.1")
                            / UDP(sport=53, dport=4000) / Raw(b"r" * 20))
    assert len(net.recv("egress")) == 1 and net.recv("ingress", 0.1) == []
    gateway.remove_instance("acl/0")
    wait_for(lambda: "dl_vlan=46" not in flows(torctl.ovs, bridge[0]), what="acl/0's rules removed")
    gateway.remove_chain("acl")


def test_return_traffic_runs_the_after_server_monitor_then_leaves_untagged(torctl, bridge):
    net = bridge[1]
    net.drain()
    pkt = Ether(**MACS) / Dot1Q(vlan=42) / IP(src="198.19.0.1", dst="198.18.0.1") / UDP(sport=53, dport=9) / Raw(b"r" * 20)
    net.socks["trunk"].send(pkt)
    got = net.recv("egress")
    assert len(got) == 1 and Dot1Q not in got[0] and got[0][UDP].dport == 9
    dump = flows(torctl.ovs, bridge[0])
    assert "table=3" in dump and "n_packets=1" in [x for x in dump.splitlines() if "table=3" in x][0]


def test_flow_removed_is_streamed_on_idle_timeout(torctl, bridge):
    stream = torctl.stub.WatchFlowRemoved(torctl_pb2.WatchFlowRemovedRequest(watcher="test"), timeout=15)
    time.sleep(0.3)
    install(torctl, 3000, vlan=9, worker=WORKER, idle=1, instance="x/0")
    ev = next(iter(stream))
    stream.cancel()
    assert ev.reason == "idle_timeout"
    assert (ev.assignment.flow.src_port, ev.assignment.vlan, ev.assignment.worker) == (3000, 9, WORKER)
    assert "tp_src=3000" not in flows(torctl.ovs, bridge[0])


def test_flows_removed_streams_expiries_in_batches(torctl, bridge):
    stream = torctl.stub.WatchFlowsRemoved(torctl_pb2.WatchFlowRemovedRequest(watcher="test"), timeout=20)
    time.sleep(0.3)
    for sport in range(3100, 3110):
        install(torctl, sport, vlan=9, worker=WORKER, idle=1, instance="x/0")
    got = []
    for batch in stream:
        # (an earlier test's flow that expired while no one watched comes first: not this test's)
        got += [(ev.assignment.flow.src_port, ev.reason) for ev in batch.removed
                if 3100 <= ev.assignment.flow.src_port < 3110]
        if len(got) >= 10:
            break
    stream.cancel()
    assert sorted(got) == [(s, "idle_timeout") for s in range(3100, 3110)]


def test_list_flows_by_record_is_what_the_switch_holds_through_expiries(torctl, bridge):
    """ListFlows from torctl's record (the cheap listing the gateway reconciles with every 10 s)
    names the same stage-2 rules as the switch's own table, also after some expire."""
    def stage2(read_back):
        listed = torctl.stub.ListFlows(torctl_pb2.ListTorFlowsRequest(read_back=read_back), timeout=10).flows
        return {(f.assignment.flow.src_port, f.assignment.vlan, f.assignment.chain, f.cookie)
                for f in listed if not f.reinject_only and 3200 <= f.assignment.flow.src_port < 3300}

    for sport in range(3200, 3210):
        install(torctl, sport, vlan=9, worker=WORKER, idle=1 if sport % 2 else 60, instance="x/0")
    install(torctl, 3250, reinject=True, idle=60)  # stage 1: not in either listing's stage 2
    def keys():
        """The record's flows as keys_only packs them (the gateway's reconciliation reads these)."""
        r = torctl.stub.ListFlows(torctl_pb2.ListTorFlowsRequest(keys_only=True), timeout=10)
        assert not r.flows and len(r.packed_flows) % 13 == 0
        flows = {struct.unpack("!4s4sHHB", r.packed_flows[i:i + 13]) for i in range(0, len(r.packed_flows), 13)}
        return {(socket.inet_ntoa(src), socket.inet_ntoa(dst), sport, dport, proto)
                for src, dst, sport, dport, proto in flows if 3200 <= sport < 3300}

    def tuples(read_back):
        listed = torctl.stub.ListFlows(torctl_pb2.ListTorFlowsRequest(read_back=read_back), timeout=10).flows
        return {(f.assignment.flow.src_ip, f.assignment.flow.dst_ip, f.assignment.flow.src_port,
                 f.assignment.flow.dst_port, f.assignment.flow.proto)
                for f in listed if not f.reinject_only and 3200 <= f.assignment.flow.src_port < 3300}

    assert stage2(False) == stage2(True)
    assert {f[0] for f in stage2(False)} == set(range(3200, 3210))
    assert keys() == tuples(True) and len(keys()) == 10
    wait_for(lambda: {f[0] for f in stage2(True)} == set(range(3200, 3210, 2)), timeout=15,
             what="the idle flows' expiry")
    wait_for(lambda: stage2(False) == stage2(True), timeout=5, what="the record to follow the expiries")
    assert keys() == tuples(True) and len(keys()) == 5
    with pytest.raises(grpc.RpcError) as e:
        torctl.stub.ListFlows(torctl_pb2.ListTorFlowsRequest(keys_only=True, read_back=True), timeout=10)
    assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "keys_only" in e.value.details()


def test_install_fails_fast_for_unknown_chain_and_missing_worker_port(torctl):
    with pytest.raises(grpc.RpcError) as e:
        install(torctl, 4000, chain="nope")
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "unknown" in e.value.details()
    with pytest.raises(grpc.RpcError) as e:
        install(torctl, 4001, vlan=5, worker="w9")
    assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "keel-tor-w9" in e.value.details()


def test_torctl_restart_keeps_forwarding_and_rebuilds_its_state(torctl, bridge):
    net = bridge[1]
    install(torctl, 5000, vlan=11, worker=WORKER, idle=60)
    torctl.stop()
    net.drain()
    net.send([udp(5000)])
    assert [(p[Dot1Q].vlan, p[UDP].sport) for p in net.recv("trunk")] == [(11, 5000)]
    torctl.start()
    listed = torctl.stub.ListFlows(torctl_pb2.ListTorFlowsRequest(read_back=True), timeout=10).flows
    mine = [f for f in listed if f.assignment.flow.src_port == 5000]
    assert len(mine) == 1
    assert (mine[0].assignment.vlan, mine[0].assignment.worker, mine[0].assignment.chain) == (11, WORKER, "plain")
    assert mine[0].packets == 1 and mine[0].idle_timeout_s == 60
    assert torctl.stub.Status(torctl_pb2.TorStatusRequest(), timeout=5).flows >= 1


def test_switch_that_lost_its_flows_gets_them_back_from_the_gateway(torctl, bridge, gateway):
    ovs, br = torctl.ovs, bridge[0]
    gateway.flows = [control_pb2.FlowRecord(flow=five(6000), chain="plain", vlan=12, worker=WORKER)]
    ovs.vsctl("del-controller", br)
    ovs.ofctl("del-flows", br)
    ovs.vsctl("set-controller", br, f"tcp:127.0.0.1:{torctl.ofp_port}")
    wait_for(lambda: "tp_src=6000" in flows(ovs, br), what="the gateway's flow re-installed")
    dump = flows(ovs, br)
    assert "priority=0 actions=output:" in dump and "table=3" in dump
    status = torctl.stub.Status(torctl_pb2.TorStatusRequest(), timeout=5)
    assert status.reconnects >= 1 and status.connected
    gateway.flows = []


def test_removing_a_chain_removes_its_program_and_flows(torctl, bridge, gateway):
    install(torctl, 7000, chain="mon", vlan=42, worker=WORKER, idle=60, instance="mon/0")
    assert "tp_src=7000" in flows(torctl.ovs, bridge[0])
    gateway.remove_chain("mon")
    wait_for(lambda: "tp_src=7000" not in flows(torctl.ovs, bridge[0]) and
             "table=3" not in flows(torctl.ovs, bridge[0]), what="mon's rules removed")
