"""OneSwitch (UNO §3.3.1): Table 1's two translations, and a property test: for random
virtual rule sets, port maps and packets, the virtual switch and the translated host +
SmartNIC pipeline emit the same packets on the same ports."""

from __future__ import annotations

import json
import random

import pytest

from keel_placer import oneswitch as osw
from keel_placer.cli import main
from keel_placer.oneswitch import TABLE0, TABLE_X, PortMap, Rule

# UNO Fig. 6: V1 -> P1 and V2 -> P4 on the hypervisor, V3 -> P6 and V4 -> P5 on the sNIC
# (Fig. 6(a)) / V4 -> P5 (Fig. 6(b)); the link is P2 (hypervisor) <-> P3 (sNIC).
PM = PortMap({"V1": ("host", "P1"), "V2": ("host", "P4"), "V3": ("snic", "P6"), "V4": ("snic", "P5")},
             {"host": "P2", "snic": "P3"})


def rule(prio, match, *actions) -> Rule:
    return Rule(prio, tuple(sorted(match.items())), tuple(actions))


def test_table1_rule1_multi_ingress_push_pop():
    tr = osw.translate([rule(1, {"in_port": "V1"}, ("output", "V3"))], PM)
    assert [(r.table, r.match, r.actions) for r in tr.rules["host"]] == [
        (TABLE0, {"in_port": "P1"}, [("push_flow_id", 100), ("output", "P2")])]
    assert [(r.table, r.match, r.actions) for r in tr.rules["snic"]] == [
        (TABLE0, {"in_port": "P3", "flow_id": 100}, [("pop_flow_id",), ("output", "P6")])]


def test_fig6a_two_rules_into_the_same_link_stay_apart():
    # V1 -> V3 and V2 -> V4 both cross P2 -> P3: without flow-ids P3 would have two
    # conflicting actions; with them each packet reaches its own port.
    rules = [rule(1, {"in_port": "V1"}, ("output", "V3")), rule(1, {"in_port": "V2"}, ("output", "V4"))]
    tr = osw.translate(rules, PM)
    assert osw.simulate_physical(tr, PM, "V1", {"ipv4_src": "a"}) == [("V3", {"ipv4_src": "a"})]
    assert osw.simulate_physical(tr, PM, "V2", {"ipv4_src": "a"}) == [("V4", {"ipv4_src": "a"})]


def test_table1_rule2_multi_egress_uses_table_x():
    r = rule(5, {"in_port": "V1", "ipv4_src": "10.0.0.1"},
             ("set", "ipv4_src", "1.1.1.1"), ("output", "V2"), ("output", "V4"))
    tr = osw.translate([r], PM)
    host = [(x.table, x.match, x.actions) for x in tr.rules["host"]]
    assert host == [
        (TABLE0, {"in_port": "P1", "ipv4_src": "10.0.0.1"},
         [("push_flow_id", 100), ("output", "P2"), ("goto", TABLE_X)]),
        (TABLE_X, {"in_port": "P1", "ipv4_src": "10.0.0.1"},
         [("pop_flow_id",), ("set", "ipv4_src", "1.1.1.1"), ("output", "P4")])]
    snic = [(x.table, x.match, x.actions) for x in tr.rules["snic"]]
    assert snic == [(TABLE0, {"in_port": "P3", "flow_id": 100, "ipv4_src": "10.0.0.1"},
                     [("pop_flow_id",), ("set", "ipv4_src", "1.1.1.1"), ("output", "P5")])]
    pkt = {"ipv4_src": "10.0.0.1", "ipv4_dst": "10.0.0.9"}
    want = [("V2", {"ipv4_src": "1.1.1.1", "ipv4_dst": "10.0.0.9"}),
            ("V4", {"ipv4_src": "1.1.1.1", "ipv4_dst": "10.0.0.9"})]
    assert sorted(osw.simulate_virtual([r], "V1", pkt), key=str) == want
    assert sorted(osw.simulate_physical(tr, PM, "V1", pkt), key=str) == want


VALUES = {"ipv4_src": ["10.0.0.1", "10.0.0.2", "1.1.1.1"], "ipv4_dst": ["10.0.1.1", "10.0.1.2"],
          "tp_dst": [80, 443], "vlan": [7, 8]}


def _random_case(rng: random.Random):
    n = rng.randint(2, 6)
    sides = ["host", "snic"]
    ports = {f"V{i}": (rng.choice(sides), f"P{i}") for i in range(n)}
    pm = PortMap(ports, {"host": "L0", "snic": "L1"})
    rules = []
    for _ in range(rng.randint(1, 8)):
        match = {}
        if rng.random() < 0.75:
            match["in_port"] = rng.choice(list(ports))
        for f in rng.sample(list(VALUES), rng.randint(0, 2)):
            match[f] = rng.choice(VALUES[f])
        actions = []
        for _ in range(rng.randint(0, 4)):
            if rng.random() < 0.4:
                f = rng.choice(list(VALUES))
                actions.append(("set", f, rng.choice(VALUES[f])))
            else:
                actions.append(("output", rng.choice(list(ports))))
        rules.append(rule(rng.randint(0, 3), match, *actions))
    return rules, pm


@pytest.mark.parametrize("seed", range(300))
def test_translation_preserves_outputs_on_random_rules_and_packets(seed):
    rng = random.Random(seed)
    rules, pm = _random_case(rng)
    # equal priorities: the virtual switch takes the first rule; give the physical side the
    # same order by making priorities distinct, as OpenFlow leaves overlapping equals undefined
    rules = [Rule(r.priority * 100 + (len(rules) - i), r.match, r.actions) for i, r in enumerate(rules)]
    tr = osw.translate(rules, pm)
    for _ in range(20):
        pkt = {f: rng.choice(v) for f, v in VALUES.items()}
        vin = rng.choice(list(pm.ports))
        want = sorted(osw.simulate_virtual(rules, vin, pkt), key=lambda x: json.dumps(x, sort_keys=True))
        got = sorted(osw.simulate_physical(tr, pm, vin, pkt), key=lambda x: json.dumps(x, sort_keys=True))
        assert got == want, (rules, pm, vin, pkt)


def test_cli_oneswitch(tmp_path, capsys):
    rules = tmp_path / "rules.json"
    rules.write_text(json.dumps({"rules": [{"priority": 5, "match": {"in_port": "V1", "ipv4_src": "10.0.0.1"},
                                            "actions": [["set", "ipv4_src", "1.1.1.1"], ["output", "V2"],
                                                        ["output", "V4"]]}]}))
    pm = tmp_path / "pm.json"
    pm.write_text(json.dumps({"link": {"host": "P2", "snic": "P3"},
                              "ports": {"V1": ["host", "P1"], "V2": ["host", "P4"], "V4": ["snic", "P5"]}}))
    assert main(["oneswitch", "--rules", str(rules), "--portmap", str(pm), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"host", "snic"}
    assert [r["table"] for r in out["host"]] == [0, "X"]
    assert out["snic"][0]["match"] == {"in_port": "P3", "flow_id": 100, "ipv4_src": "10.0.0.1"}
    assert main(["oneswitch", "--rules", str(rules), "--portmap", str(pm)]) == 0
    text = capsys.readouterr().out
    assert "host table 0 priority 5: in_port=P1,ipv4_src=10.0.0.1 -> push_flow_id:100,output:P2,goto:X" in text
    pm.write_text(json.dumps({"link": {"host": "P2", "snic": "P3"}, "ports": {"V1": ["host", "P2"]}}))
    assert main(["oneswitch", "--rules", str(rules), "--portmap", str(pm)]) == 2
    assert "ports.V1: host:P2 is the link port" in capsys.readouterr().err
