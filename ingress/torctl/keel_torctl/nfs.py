"""Switch NFs as OpenFlow 1.3 rules: the OpenFlow back end of keel's meta-compiler.

Lemur §4 (meta-compiler) compiles the switch-placed NFs of a chain into the switch's
language; for OpenFlow it gives each NF kind one table in a fixed order (detunnel, acl,
monitor, tunnel, ipv4fwd) and chains the tables with goto-table, a chain's rules selected
by metadata. keel does the same from the NF's keel-nf configuration JSON, with the
semantics of the library NF (functions/<nf>/<nf>.cc), so that a packet leaves the switch
exactly as it leaves keel-nf (tests/test_equivalence.py checks it byte for byte).

openflow_nfs.json (beside this package) is the one table of capabilities: torctl builds its
tables from it and the placer reads it to decide which NFs may be placed on an OpenFlow
switch.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .rules import (ETH_IPV4, KIND_PROGRAM, META_MASK, PROTO_TCP, PROTO_UDP, TPID_8021Q,
                    VLAN_PRESENT, Rule, chain_tag, cookie, goto, metadata)

CAPABILITIES_PATH = Path(__file__).resolve().parents[1] / "openflow_nfs.json"
PROTOS = {"tcp": PROTO_TCP, "udp": PROTO_UDP, "icmp": 1}
# Within one chain's NF table: catch-all drops below the NF's own rules.
PRIO_CATCH_ALL = 1
PRIO_RULES = 100


class ChainError(ValueError):
    """A chain whose switch NFs torctl cannot run (the reason is for the operator)."""


def load_capabilities(path: Path = CAPABILITIES_PATH) -> dict[str, Any]:
    """Read openflow_nfs.json: {"nfs": {nf: {"rank", "table", limits...}}, "not_expressible": {nf: why}}."""
    doc = json.loads(path.read_text())
    if doc.get("version") != 1 or not isinstance(doc.get("nfs"), dict):
        raise ValueError(f"{path}: not an OpenFlow NF capability table (version 1)")
    return doc


@dataclass(frozen=True)
class SwitchNf:
    """One switch-placed NF of a chain (keel.v1.SwitchNf with its configuration parsed)."""

    name: str
    nf: str
    config: Mapping[str, Any]
    after_server: bool


def _prefix(cidr: str) -> tuple[str, str] | None:
    """An OXM (address, mask) for a prefix; None for /0 (matches everything)."""
    net = ipaddress.IPv4Network(cidr, strict=False)
    if net.prefixlen == 0:
        return None
    return (str(net.network_address), str(net.netmask))


def _ports(value: Any, span_limit: int, where: str) -> list[int]:
    """The exact ports of a port or "lo-hi" range. OpenFlow 1.3's tcp/udp port fields take no
    mask, so a range becomes one entry per port, refused above max_port_span."""
    if isinstance(value, int):
        return [value]
    lo, _, hi = str(value).partition("-")
    lo_i, hi_i = int(lo), int(hi)
    if hi_i - lo_i + 1 > span_limit:
        raise ChainError(f"{where}: the range {value} spans {hi_i - lo_i + 1} ports; an OpenFlow "
                         f"switch runs ranges of at most {span_limit} (place this ACL on a server)")
    return list(range(lo_i, hi_i + 1))


def _acl_matches(rule: Mapping[str, Any], caps: Mapping[str, Any], where: str) -> list[tuple]:
    """The OXM matches one ACL rule expands into (all disjoint, so one priority serves)."""
    base: list[tuple[str, Any]] = [("eth_type", ETH_IPV4)]
    for field, oxm in (("src_ip", "ipv4_src"), ("dst_ip", "ipv4_dst")):
        if field in rule and (p := _prefix(rule[field])) is not None:
            base.append((oxm, p))
    proto = rule.get("proto")
    proto_num = PROTOS.get(proto, proto) if proto is not None else None
    has_ports = "src_port" in rule or "dst_port" in rule
    if not has_ports:
        return [tuple(base + ([("ip_proto", proto_num)] if proto_num is not None else []))]
    if proto_num not in (None, PROTO_TCP, PROTO_UDP):
        raise ChainError(f"{where}: port fields need proto tcp or udp, got {proto}")
    span = caps.get("max_port_span", 1)
    srcs = _ports(rule["src_port"], span, f"{where}.src_port") if "src_port" in rule else [None]
    dsts = _ports(rule["dst_port"], span, f"{where}.dst_port") if "dst_port" in rule else [None]
    protos = [proto_num] if proto_num is not None else [PROTO_TCP, PROTO_UDP]
    if len(protos) * len(srcs) * len(dsts) > caps.get("max_entries_per_rule", 1):
        raise ChainError(f"{where}: expands into {len(protos) * len(srcs) * len(dsts)} OpenFlow "
                         f"entries, more than {caps.get('max_entries_per_rule')}")
    out = []
    for p in protos:
        l4 = "tcp" if p == PROTO_TCP else "udp"
        for s in srcs:
            for d in dsts:
                m = base + [("ip_proto", p)]
                m += [(f"{l4}_src", s)] if s is not None else []
                m += [(f"{l4}_dst", d)] if d is not None else []
                out.append(tuple(m))
    return out


def _acl(nf: SwitchNf, caps: Mapping[str, Any], nxt: int | None) -> list[tuple[int, tuple, tuple]]:
    """First match wins: rules in descending priority; drop clears the action set and ends
    the pipeline, pass goes on; no match (and non-IPv4) is dropped, as keel's ACL does."""
    rules = nf.config.get("rules", [])
    if len(rules) > caps.get("max_rules", 0):
        raise ChainError(f"{nf.name}: {len(rules)} ACL rules, an OpenFlow switch takes at most "
                         f"{caps.get('max_rules')}")
    out = []
    for i, r in enumerate(rules):
        verdict = (("clear",),) if r.get("drop", False) else goto(nxt)
        for m in _acl_matches(r, caps, f"{nf.name}.rules[{i}]"):
            out.append((PRIO_RULES + len(rules) - i, m, verdict))
    out.append((PRIO_CATCH_ALL, (), (("clear",),)))
    return out


def _ipv4fwd(nf: SwitchNf, caps: Mapping[str, Any], nxt: int | None) -> list[tuple[int, tuple, tuple]]:
    """Longest prefix first (priority = prefix length): set the next hop's MAC and decrement
    the TTL. The decrement goes into the action set, which runs it right before the output: a
    switch drops a packet whose TTL is <= 1 there, output included, as keel drops it (applied
    at once, a failed decrement would only stop the apply list, and the action set's output
    would still send the packet). keel's IPv4Fwd keeps eth_src and only counts `port` (the
    rule's counters do); no route and non-IPv4 are dropped."""
    routes = nf.config.get("routes", [])
    if len(routes) > caps.get("max_routes", 0):
        raise ChainError(f"{nf.name}: {len(routes)} routes, an OpenFlow switch takes at most "
                         f"{caps.get('max_routes')}")
    out = []
    for r in routes:
        net = ipaddress.IPv4Network(r["prefix"], strict=False)
        m: tuple = (("eth_type", ETH_IPV4),)
        if (p := _prefix(r["prefix"])) is not None:
            m += (("ipv4_dst", p),)
        act = (("apply", (("set", "eth_dst", r["dst_mac"].lower()),)), ("write", (("dec_ttl",),))) \
            + goto(nxt)
        out.append((PRIO_RULES + net.prefixlen, m, act))
    out.append((PRIO_CATCH_ALL, (), (("clear",),)))
    return out


def _tunnel(nf: SwitchNf, caps: Mapping[str, Any], nxt: int | None) -> list[tuple[int, tuple, tuple]]:
    """Push an 802.1Q tag with PCP 0 (OpenFlow would copy an inner tag's PCP; keel does not)."""
    vid = int(nf.config["vlan"])
    acts = (("push_vlan", TPID_8021Q), ("set", "vlan_vid", VLAN_PRESENT | vid), ("set", "vlan_pcp", 0))
    return [(PRIO_RULES, (), (("apply", acts),) + goto(nxt))]


def _detunnel(nf: SwitchNf, caps: Mapping[str, Any], nxt: int | None) -> list[tuple[int, tuple, tuple]]:
    """Pop the outer tag of tagged frames; untagged frames pass unchanged (OpenFlow 1.3 wants
    pop_vlan only where a tag is matched)."""
    return [(PRIO_RULES, (("vlan_vid", (VLAN_PRESENT, VLAN_PRESENT)),),
             (("apply", (("pop_vlan",),)),) + goto(nxt)),
            (PRIO_CATCH_ALL, (), goto(nxt))]


def _monitor(nf: SwitchNf, caps: Mapping[str, Any], nxt: int | None) -> list[tuple[int, tuple, tuple]]:
    """One counting rule per chain (its packet and byte counters are the monitor's totals)."""
    return [(PRIO_RULES, (), goto(nxt))]


TRANSLATORS = {"acl": _acl, "ipv4fwd": _ipv4fwd, "tunnel": _tunnel, "detunnel": _detunnel,
               "monitor": _monitor}


@dataclass(frozen=True)
class Program:
    """A chain's switch NFs as rules: its NF table rules and where its two segments start."""

    chain: str
    rules: tuple[Rule, ...]
    first_pre: int | None   # table of the first pre-server NF (None: no pre segment)
    first_post: int | None  # table of the first after-server NF (None: no post segment)
    hash: int               # 12 bits of the program, in its rules' cookies


def _segments(chain_nfs: list[str], members: list[str], nfs: list[SwitchNf]) -> tuple[list, list]:
    """Split switch NFs into the pre- and post-server segments; refuse a switch NF between two
    server NFs (switch -> server -> switch -> server), which one ToR pass cannot run."""
    server = [chain_nfs.index(m) for m in members if m in chain_nfs]
    for nf in nfs:
        if server and nf.name in chain_nfs and min(server) < chain_nfs.index(nf.name) < max(server):
            raise ChainError(f"switch NF {nf.name} sits between server NFs: keel-torctl runs switch "
                             "NFs only before or after all of a chain's server NFs")
    flags = [nf.after_server for nf in nfs]
    if flags != sorted(flags):
        raise ChainError("switch NFs after the server NFs are followed by switch NFs before them "
                         f"({', '.join(nf.name for nf in nfs)}): not one ToR pass each way")
    return [nf for nf in nfs if not nf.after_server], [nf for nf in nfs if nf.after_server]


def _check_kind(nf: SwitchNf, caps: Mapping[str, Any]) -> Mapping[str, Any]:
    kind = caps["nfs"].get(nf.nf)
    if kind is None:
        why = caps.get("not_expressible", {}).get(nf.nf, "not in openflow_nfs.json")
        raise ChainError(f"switch NF {nf.name} ({nf.nf}) cannot run on an OpenFlow switch: {why}")
    return kind


def compile_program(chain: str, chain_nfs: list[str], members: list[str], nfs: list[SwitchNf],
                    caps: Mapping[str, Any]) -> Program:
    """Compile a chain's switch NFs into NF table rules, or raise ChainError saying why not.

    Each segment's NFs must climb the fixed table order (Lemur §5.3: a pass can only go to a
    later table); the last NF of a segment ends the pipeline, so the action set (the VLAN push
    and output the steering rule wrote) runs.
    """
    tag = chain_tag(chain)
    pre, post = _segments(chain_nfs, members, nfs)
    digest = hashlib.sha256(json.dumps([(n.nf, n.config, n.after_server) for n in nfs],
                                       sort_keys=True).encode()).digest()
    phash = int.from_bytes(digest[:2], "big") & 0xFFF
    rules: list[Rule] = []
    firsts: list[int | None] = []
    for post_flag, seg in ((False, pre), (True, post)):
        tables = [_check_kind(nf, caps)["table"] for nf in seg]
        if any(a >= b for a, b in zip(tables, tables[1:])):
            raise ChainError(f"switch NFs {', '.join(n.name for n in seg)} are not in OpenFlow's fixed "
                             "table order (detunnel, acl, monitor, tunnel, ipv4fwd), each kind once")
        meta = (("metadata", (metadata(tag, post_flag), META_MASK)),)
        for i, (nf, table) in enumerate(zip(seg, tables)):
            nxt = tables[i + 1] if i + 1 < len(tables) else None
            for prio, match, instr in TRANSLATORS[nf.nf](nf, caps["nfs"][nf.nf], nxt):
                rules.append(Rule(table, prio, meta + match, instr,
                                  cookie(KIND_PROGRAM, tag, phash << 16 | len(rules))))
        firsts.append(tables[0] if tables else None)
    if len(rules) >= 1 << 16:
        raise ChainError(f"{len(rules)} switch rules for one chain, at most {(1 << 16) - 1}")
    return Program(chain, tuple(rules), firsts[0], firsts[1], phash)
