"""OneSwitch: translate one virtual switch's OpenFlow rules into rules for the host switch
and the SmartNIC switch behind it (UNO §3.3.1, Table 1).

Every virtual port maps to a port of one of the two physical switches; the switches are
joined by one link (host port <-> SmartNIC port, over PCIe). A virtual rule is expanded per
ingress port (a rule without in_port is the union of one rule per port, step 4) and
installed on that port's switch:
- every output on the same switch: one rule, ports mapped (steps 2-3);
- outputs on the other switch only: the ingress switch pushes a flow-id and sends the
  packet unmodified over the link; the other switch matches the link port, the flow-id and
  the rule's fields, pops the flow-id, and runs the rule's actions with its own outputs
  ("multi-ingress", Table 1 rule #1);
- outputs on both switches: the ingress switch does the push and the link output in table
  0 and continues in table X, which pops the flow-id and runs the actions with its local
  outputs ("multi-egress", Table 1 rule #2).
Actions run in order; an output emits the packet as modified so far. `simulate_virtual`
and `simulate_physical` run a packet through each side so that tests can check that the
two produce the same packets on the same (virtual) ports.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

TABLE0, TABLE_X = 0, 1
FIELDS = ("eth_src", "eth_dst", "vlan", "ipv4_src", "ipv4_dst", "ip_proto", "tp_src", "tp_dst")
FLOW_ID_BASE = 100


class OneSwitchError(ValueError):
    """A rules or port-map file that cannot be used; the message names the field."""


@dataclass(frozen=True)
class Rule:
    """A virtual rule: priority, match (in_port optional, header fields exact), actions:
    ("set", field, value) and ("output", port), in order."""

    priority: int
    match: tuple[tuple[str, Any], ...]
    actions: tuple[tuple, ...]

    @property
    def in_port(self) -> str | None:
        return dict(self.match).get("in_port")

    def fields(self) -> dict[str, Any]:
        return {k: v for k, v in self.match if k != "in_port"}


@dataclass(frozen=True)
class PortMap:
    """Virtual port -> (switch, physical port), and each switch's end of the link."""

    ports: dict[str, tuple[str, str]]
    link: dict[str, str]  # switch -> its link port

    def other(self, sw: str) -> str:
        return next(s for s in self.link if s != sw)


@dataclass
class PhysRule:
    """A physical rule: table, priority, match (in_port, flow_id, header fields) and
    actions ("set", f, v), ("output", p), ("push_flow_id", f), ("pop_flow_id",),
    ("goto", table)."""

    table: int
    priority: int
    match: dict[str, Any]
    actions: list[tuple]
    origin: int  # index of the virtual rule

    def to_dict(self) -> dict[str, Any]:
        return {"table": "X" if self.table == TABLE_X else 0, "priority": self.priority,
                "match": self.match, "actions": [list(a) for a in self.actions]}


@dataclass
class Translation:
    rules: dict[str, list[PhysRule]] = field(default_factory=dict)  # switch -> rules


def translate(rules: list[Rule], pm: PortMap) -> Translation:
    """Physical rules for both switches from the virtual rules (see the module docstring);
    flow-ids are numbered per (virtual rule, ingress port) from FLOW_ID_BASE."""
    out = Translation({sw: [] for sw in pm.link})
    next_id = FLOW_ID_BASE
    for idx, r in enumerate(rules):
        ingress = [r.in_port] if r.in_port is not None else sorted(pm.ports)
        fields = r.fields()
        for vin in ingress:
            if vin not in pm.ports:
                raise OneSwitchError(f"rule {idx}: unknown in_port {vin!r}")
            sw, pin = pm.ports[vin]
            far = pm.other(sw)
            outs = [a[1] for a in r.actions if a[0] == "output"]
            remote = [v for v in outs if pm.ports[v][0] != sw]
            local = [v for v in outs if pm.ports[v][0] == sw]
            match = {"in_port": pin, **fields}
            if not remote:
                out.rules[sw].append(PhysRule(TABLE0, r.priority, match, _mapped(r.actions, pm, sw), idx))
                continue
            fid = next_id
            next_id += 1
            head = [("push_flow_id", fid), ("output", pm.link[sw])]
            if local:
                out.rules[sw].append(PhysRule(TABLE0, r.priority, match, head + [("goto", TABLE_X)], idx))
                out.rules[sw].append(PhysRule(TABLE_X, r.priority, dict(match),
                                              [("pop_flow_id",)] + _mapped(r.actions, pm, sw), idx))
            else:
                out.rules[sw].append(PhysRule(TABLE0, r.priority, match, head, idx))
            out.rules[far].append(PhysRule(TABLE0, r.priority, {"in_port": pm.link[far], "flow_id": fid, **fields},
                                           [("pop_flow_id",)] + _mapped(r.actions, pm, far), idx))
    return out


def _mapped(actions: tuple[tuple, ...], pm: PortMap, sw: str) -> list[tuple]:
    """The actions that belong on sw: sets, and outputs to sw's ports (mapped)."""
    res = []
    for a in actions:
        if a[0] == "output":
            if pm.ports[a[1]][0] == sw:
                res.append(("output", pm.ports[a[1]][1]))
        else:
            res.append(tuple(a))
    return res


# ----- simulation -----

Packet = dict[str, Any]  # header fields; "flow_ids" is the tag stack on the physical side


def _matches(match: dict[str, Any], in_port: str, pkt: Packet) -> bool:
    for k, v in match.items():
        if k == "in_port":
            if in_port != v:
                return False
        elif k == "flow_id":
            if not pkt.get("flow_ids") or pkt["flow_ids"][-1] != v:
                return False
        elif pkt.get(k) != v:
            return False
    return True


def _lookup(rules: list, in_port: str, pkt: Packet, match_of) -> Any:
    best = None
    for r in rules:  # highest priority wins; among equals the first installed
        if _matches(match_of(r), in_port, pkt) and (best is None or r.priority > best.priority):
            best = r
    return best


def simulate_virtual(rules: list[Rule], in_port: str, pkt: Packet) -> list[tuple[str, Packet]]:
    """(virtual port, packet) for every packet the virtual switch emits."""
    r = _lookup(rules, in_port, pkt, lambda r: dict(r.match))
    if r is None:
        return []
    cur, out = dict(pkt), []
    for a in r.actions:
        if a[0] == "set":
            cur[a[1]] = a[2]
        elif a[0] == "output":
            out.append((a[1], dict(cur)))
    return out


def simulate_physical(tr: Translation, pm: PortMap, vin: str, pkt: Packet,
                      max_hops: int = 8) -> list[tuple[str, Packet]]:
    """(virtual port, packet) for every packet the two physical switches emit on a mapped
    port, after a packet enters at the physical port vin maps to. Raises AssertionError if
    a packet leaves with a flow-id or loops over the link."""
    back = {v: k for k, v in pm.ports.items()}
    out: list[tuple[str, Packet]] = []

    def run(sw: str, port: str, p: Packet, hops: int) -> None:
        assert hops <= max_hops, "packet loops between the switches"
        table, cur = TABLE0, dict(p, flow_ids=list(p.get("flow_ids", [])))
        while table is not None:
            r = _lookup([x for x in tr.rules[sw] if x.table == table], port, cur, lambda r: r.match)
            if r is None:
                return
            table = None
            for a in r.actions:
                if a[0] == "set":
                    cur[a[1]] = a[2]
                elif a[0] == "push_flow_id":
                    cur["flow_ids"] = cur["flow_ids"] + [a[1]]
                elif a[0] == "pop_flow_id":
                    cur["flow_ids"] = cur["flow_ids"][:-1]
                elif a[0] == "goto":
                    table = a[1]
                elif a[0] == "output":
                    if a[1] == pm.link[sw]:
                        far = pm.other(sw)
                        run(far, pm.link[far], cur, hops + 1)
                    else:
                        assert not cur["flow_ids"], f"flow-id leaks out of {sw}:{a[1]}"
                        out.append((back[(sw, a[1])], {k: v for k, v in cur.items() if k != "flow_ids"}))

    sw, port = pm.ports[vin]
    run(sw, port, pkt, 0)
    return out


# ----- files -----

def _load(path: str) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except OSError as e:
        raise OneSwitchError(f"{path}: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise OneSwitchError(f"{path}: bad JSON: {e}") from e


def portmap_from_dict(doc: Any, where: str) -> PortMap:
    """{"link": {"host": "P2", "snic": "P3"}, "ports": {"V1": ["host", "P1"], ...}}"""
    link = doc.get("link") if isinstance(doc, dict) else None
    if not isinstance(link, dict) or len(link) != 2 or not all(isinstance(v, str) for v in link.values()):
        raise OneSwitchError(f"{where}: 'link' must name the two switches' link ports, "
                             "e.g. {\"host\": \"P2\", \"snic\": \"P3\"}")
    ports = {}
    for v, m in (doc.get("ports") or {}).items():
        if not (isinstance(m, list) and len(m) == 2 and m[0] in link and isinstance(m[1], str)):
            raise OneSwitchError(f"{where}: ports.{v}: expected [SWITCH, PORT] with SWITCH one of {sorted(link)}")
        if m[1] == link[m[0]]:
            raise OneSwitchError(f"{where}: ports.{v}: {m[0]}:{m[1]} is the link port")
        if tuple(m) in ports.values():
            raise OneSwitchError(f"{where}: ports.{v}: {m[0]}:{m[1]} is mapped twice")
        ports[v] = (m[0], m[1])
    if not ports:
        raise OneSwitchError(f"{where}: 'ports' must map at least one virtual port")
    return PortMap(ports, dict(link))


def rules_from_dict(doc: Any, where: str, pm: PortMap) -> list[Rule]:
    """{"rules": [{"priority": 10, "match": {"in_port": "V1", "ipv4_src": "10.0.0.1"},
    "actions": [["set", "ipv4_src", "1.1.1.1"], ["output", "V2"]]}]}"""
    raw = doc.get("rules") if isinstance(doc, dict) else None
    if not isinstance(raw, list):
        raise OneSwitchError(f"{where}: expected {{\"rules\": [...]}}")
    out = []
    for i, r in enumerate(raw):
        w = f"{where}: rules[{i}]"
        if not isinstance(r, dict) or not isinstance(r.get("priority", 0), int):
            raise OneSwitchError(f"{w}: expected {{\"priority\": INT, \"match\": {{...}}, \"actions\": [...]}}")
        match = r.get("match", {})
        if not isinstance(match, dict):
            raise OneSwitchError(f"{w}: 'match' must be an object")
        for k in match:
            if k != "in_port" and k not in FIELDS:
                raise OneSwitchError(f"{w}: unknown match field {k!r} (known: in_port, {', '.join(FIELDS)})")
        if "in_port" in match and match["in_port"] not in pm.ports:
            raise OneSwitchError(f"{w}: in_port {match['in_port']!r} is not in the port map")
        acts = []
        for a in r.get("actions", []):
            if isinstance(a, list) and len(a) == 2 and a[0] == "output" and a[1] in pm.ports:
                acts.append(("output", a[1]))
            elif isinstance(a, list) and len(a) == 3 and a[0] == "set" and a[1] in FIELDS:
                acts.append(("set", a[1], a[2]))
            else:
                raise OneSwitchError(f"{w}: bad action {a!r} (expected [\"output\", VPORT] or "
                                     "[\"set\", FIELD, VALUE])")
        out.append(Rule(r.get("priority", 0), tuple(sorted(match.items())), tuple(acts)))
    return out


def load(rules_path: str, portmap_path: str) -> tuple[list[Rule], PortMap]:
    pm = portmap_from_dict(_load(portmap_path), portmap_path)
    return rules_from_dict(_load(rules_path), rules_path, pm), pm
