"""The switch's rules as plain data: table layout, cookies, chain tags, steering and flow rules.

Everything here is pure (no switch, no os-ken), so the table layout can be read and tested on
its own; ofp.py turns a Rule into an OpenFlow 1.3 flow-mod. Only standard OpenFlow 1.3 match
fields and actions are used, so any OpenFlow 1.3 ToR can run what torctl installs.

Table 0 steers (priorities low to high):
  0   table-miss                        -> output ingress (new flows go to keel-ingress)
  1   in_port=ingress                   -> drop (the ingress port's own chatter, e.g. IPv6)
  2   in_port=ingress, vlan_vid=4094    -> pop_vlan, output egress (the ingress's normal path)
  2   in_port=ingress, no VLAN, IPv4    -> drop (a re-injected packet whose stage-1 rule is gone)
  100 5-tuple (stage 2)                 -> metadata=chain|pre, action set: push instance VLAN,
                                           output trunk (or egress), goto the first pre-server NF
  110 in_port=ingress, vlan_vid=instance -> the same for every flow of the instance: pop_vlan,
                                           metadata=chain|pre, action set: push instance VLAN,
                                           output trunk, goto the first pre-server NF
  110 5-tuple, in_port=ingress (stage 1)   the same, for the untagged packets the ingress
                                           re-injects for a chain that runs on the switch only
  111 in_port=ingress, vlan_vid=instance, eth_type=0x88B5
                                        -> output trunk as it is: the ingress' in-band control
                                           frames for the instance (handover markers), past
                                           the chain's switch NFs, which drop what is not IPv4
  120 in_port=trunk, vlan present       -> pop_vlan, output egress (return traffic)
  130 in_port=trunk, vlan_vid=instance  -> pop_vlan, metadata=chain|post, action set: output
                                           egress, goto the chain's first after-server NF table
  135 in_port=trunk, vlan_vid=instance, eth_type=0x88B5
                                        -> output ingress as it is: a flow move's in-band frame
                                           (EXPORT_STATE / IMPORT_STATE) the instance ran
                                           through its chain and sends back, for the ingress
                                           to read (instance VLAN, mark, 0x88B5), past the
                                           chain's after-server NFs and the egress
  140 UDP to PROBE_NET port PROBE_PORT  -> output egress (the ToR probe: no ingress, no server)
The ingress tags its normal path (flows of no chain) with NORMAL_VLAN so that OVS's datapath
cache never holds a wide "in_port=ingress -> egress" entry: such an entry, cached before a new
flow's stage-1 rule went in, would carry the flow's re-injected first packets to the egress
untransformed until OVS revalidated it (the barrier reply does not wait for that). Every
untagged IPv4 packet from the ingress matches its flow's own 5-tuple rule, so the cache entries
they make are exact; the drops are split so that one made by other traffic (priority 1) keeps
the EtherType and cannot catch IPv4.
The probe rule gives the ToR's own share of a chain's latency: keel-trafgen sends a probe
flow (bench/scenarios/e2e.json's "tor-probe") that crosses the switch once, from the source
port to the egress, as every chain's packets do on their way in; make demo and the latency
tests subtract it from a chain's end-to-end figures to compare them with the server's sojourn.
A flow with an instance needs no rule of its own before its first packets can go: the ingress
sends them back tagged with the instance's VLAN, and the instance's reinject rule (installed
with the instance, like its return rule) steers them. So one flow-mod per flow (stage 2) is
on the switch's books, not two; only switch-only chains, which have no VLAN to steer by, keep
a per-flow stage-1 rule.
Return traffic outranks the flow rules: a chain that leaves the 5-tuple unchanged (ACL,
UrlFilter, Encrypt) sends back packets that the flow's own rule also matches (eth_type and
the IPv4 fields match behind the instance's VLAN tag), and that rule would send them out the
trunk they came in on, where OVS drops them.
Order across the switch-over: the ingress marks what it sends to an instance with an inner
tag (nf-runtime/include/keel/inband.h) and follows a flow's last packet with a marker once
the flow's stage-2 rule is in; the instance's position 0 holds the flow's direct packets until
the marker. The mark sits under the packet's own tags, so the NF tables match behind it.
The NF tables follow (nfs.py), one per NF kind in Lemur's fixed table order.
"""

from __future__ import annotations

import hashlib
import socket
from dataclasses import dataclass
from typing import Any, Callable

# A port name -> OpenFlow port number lookup that raises MissingPort.
Ports = Callable[[str], int]

STEER_TABLE = 0
PRIO_MISS, PRIO_INGRESS_OTHER, PRIO_NORMAL = 0, 1, 2
PRIO_FLOW, PRIO_REINJECT, PRIO_INBAND = 100, 110, 111
PRIO_RETURN, PRIO_RETURN_CHAIN, PRIO_MOVE_RETURN = 120, 130, 135
PRIO_PROBE = 140
# The ToR probe's destinations (198.19.255.0/30, inside keel's bench range 198.18.0.0/15) and
# UDP port (echo); keel-trafgen's "tor-probe" sends there (deploy/local/demo.py).
PROBE_NET, PROBE_MASK, PROBE_PORT = "198.19.255.0", "255.255.255.252", 7
VLAN_PRESENT = 0x1000  # OFPVID_PRESENT
VLAN_NONE = 0x0000  # OFPVID_NONE: the packet has no VLAN tag
# The VLAN keel-ingress tags its normal path with (ingress/src/dataplane.h kNormalPathVlan).
NORMAL_VLAN = 4094
ETH_IPV4 = 0x0800
# keel's in-band control frames, ingress -> instance and, for flow moves, back
# (nf-runtime/include/keel/inband.h kEtherType).
ETH_KEEL_INBAND = 0x88B5
TPID_8021Q = 0x8100
PROTO_TCP, PROTO_UDP = 6, 17

# Cookie layout (64 bits): kind (4) | chain tag (32) | detail (28). The detail is the VLAN
# for flows and return rules, program hash (12) | rule index (16) for NF table rules and
# the rule index for base rules. A restarted torctl reads its state back from it.
KIND_BASE, KIND_PROGRAM, KIND_RETURN, KIND_FLOW, KIND_REINJECT = 1, 2, 3, 4, 5
KIND_INSTANCE_REINJECT = 6  # not 4 or 5: the flow kinds are told apart by mask 0xE (controller.py)
KIND_CHAIN_REINJECT = 7  # a switch-only chain's reinject rule (detail: its reinject VLAN)
_KIND_SHIFT, _TAG_SHIFT = 60, 28
KIND_MASK = 0xF << _KIND_SHIFT
TAG_MASK = 0xFFFFFFFF << _TAG_SHIFT
DETAIL_MASK = (1 << _TAG_SHIFT) - 1
# Metadata: chain tag << 1 | post (1: after the server NFs, on the way back from the worker).
META_MASK = (0xFFFFFFFF << 1) | 1


class MissingPort(LookupError):
    """The switch has no port of a name a rule needs (e.g. a worker's trunk not yet attached)."""


def chain_tag(chain: str) -> int:
    """A deterministic 32-bit tag of a chain name (so a restarted torctl needs no state)."""
    return int.from_bytes(hashlib.sha256(chain.encode()).digest()[:4], "big")


def metadata(tag: int, post: bool) -> int:
    """The metadata value that selects a chain's pre- or post-server NF rules."""
    return (tag << 1) | int(post)


def cookie(kind: int, tag: int = 0, detail: int = 0) -> int:
    """Pack a rule's cookie (see the layout above)."""
    return (kind << _KIND_SHIFT) | (tag << _TAG_SHIFT) | (detail & DETAIL_MASK)


def cookie_kind(c: int) -> int:
    return (c & KIND_MASK) >> _KIND_SHIFT


def cookie_tag(c: int) -> int:
    return (c & TAG_MASK) >> _TAG_SHIFT


def cookie_detail(c: int) -> int:
    return c & DETAIL_MASK


# Actions and instructions are tuples, e.g. ("output", 3), ("set", "vlan_vid", 0x1007),
# ("push_vlan", 0x8100), ("pop_vlan",), ("dec_ttl",); instructions ("apply", actions),
# ("write", actions), ("clear",), ("meta", value, mask), ("goto", table).
Action = tuple
Instruction = tuple


@dataclass(frozen=True)
class Rule:
    """One flow entry: where it goes, what it matches and does, and how it is known again."""

    table: int
    priority: int
    match: tuple[tuple[str, Any], ...]  # os-ken OXM field names; a masked value is (value, mask)
    instructions: tuple[Instruction, ...]
    cookie: int
    idle_timeout: int = 0
    flow_removed: bool = False

    @property
    def key(self) -> tuple[int, int, int]:
        """What identifies the rule when it is read back (cookies are unique per rule)."""
        return (self.table, self.priority, self.cookie)


@dataclass(frozen=True)
class FiveTuple:
    """A flow as keel-ingress and the gateway name it."""

    src_ip: str
    dst_ip: str
    src_port: int
    dst_port: int
    proto: int

    def match(self) -> tuple[tuple[str, Any], ...]:
        """OXM fields matching the flow; L4 ports only for TCP and UDP (OpenFlow prerequisites)."""
        m: list[tuple[str, Any]] = [("eth_type", ETH_IPV4), ("ip_proto", self.proto),
                                    ("ipv4_src", self.src_ip), ("ipv4_dst", self.dst_ip)]
        if self.proto == PROTO_TCP:
            m += [("tcp_src", self.src_port), ("tcp_dst", self.dst_port)]
        elif self.proto == PROTO_UDP:
            m += [("udp_src", self.src_port), ("udp_dst", self.dst_port)]
        return tuple(m)

    def check(self) -> None:
        """Raise ValueError naming the bad field of a flow that no rule can match."""
        for name in ("src_ip", "dst_ip"):
            # inet_pton: the strict dotted quad, in C (ipaddress costs ~5 us a flow per record)
            try:
                socket.inet_pton(socket.AF_INET, getattr(self, name))
            except (OSError, TypeError):
                raise ValueError(f"flow.{name}: {getattr(self, name)!r} is not an IPv4 address") from None
        if not 0 <= self.proto <= 255:
            raise ValueError(f"flow.proto: {self.proto} is not an IP protocol number")
        for name in ("src_port", "dst_port"):
            if not 0 <= getattr(self, name) <= 65535:
                raise ValueError(f"flow.{name}: {getattr(self, name)} is not a port")

    @staticmethod
    def from_match(fields: dict[str, Any]) -> "FiveTuple":
        """The flow a stage-1/2 rule's match (read back from the switch) was built from."""
        proto = int(fields.get("ip_proto", 0))
        l4 = "tcp" if proto == PROTO_TCP else "udp" if proto == PROTO_UDP else None
        return FiveTuple(str(fields.get("ipv4_src", "")), str(fields.get("ipv4_dst", "")),
                         int(fields.get(f"{l4}_src", 0)) if l4 else 0,
                         int(fields.get(f"{l4}_dst", 0)) if l4 else 0, proto)


def base_rules(ports: Ports, ingress: str, egress: str, trunks: list[str]) -> list[Rule]:
    """Table 0's chain-independent rules: table-miss, the normal path, return traffic."""
    ing, eg = ports(ingress), ports(egress)
    rules = [
        Rule(STEER_TABLE, PRIO_MISS, (), (("apply", (("output", ing),)),), cookie(KIND_BASE, 0, 0)),
        Rule(STEER_TABLE, PRIO_NORMAL, (("in_port", ing), ("vlan_vid", VLAN_PRESENT | NORMAL_VLAN)),
             (("apply", (("pop_vlan",), ("output", eg))),), cookie(KIND_BASE, 0, 1)),
        Rule(STEER_TABLE, PRIO_NORMAL, (("in_port", ing), ("vlan_vid", VLAN_NONE), ("eth_type", ETH_IPV4)), (),
             cookie(KIND_BASE, 0, 2)),
        Rule(STEER_TABLE, PRIO_INGRESS_OTHER, (("in_port", ing),), (), cookie(KIND_BASE, 0, 3)),
        Rule(STEER_TABLE, PRIO_PROBE, (("eth_type", ETH_IPV4), ("ip_proto", PROTO_UDP),
                                       ("ipv4_dst", (PROBE_NET, PROBE_MASK)), ("udp_dst", PROBE_PORT)),
             (("apply", (("output", eg),)),), cookie(KIND_BASE, 0, 4)),
    ]
    for trunk in trunks:
        port = ports(trunk)
        rules.append(Rule(STEER_TABLE, PRIO_RETURN,
                          (("in_port", port), ("vlan_vid", (VLAN_PRESENT, VLAN_PRESENT))),
                          (("apply", (("pop_vlan",), ("output", eg))),),
                          cookie(KIND_BASE, 0, 0x10000 | port)))
    return rules


def goto(table: int | None) -> tuple[Instruction, ...]:
    """A goto-table instruction, or none at the end of a pipeline (the action set runs)."""
    return () if table is None else (("goto", table),)


def return_rule(ports: Ports, trunk: str, egress: str, chain: str, vlan: int,
                first_post_table: int) -> Rule:
    """An instance's return traffic through its chain's after-server switch NFs."""
    tag = chain_tag(chain)
    return Rule(STEER_TABLE, PRIO_RETURN_CHAIN,
                (("in_port", ports(trunk)), ("vlan_vid", VLAN_PRESENT | vlan)),
                (("apply", (("pop_vlan",),)), ("meta", metadata(tag, True), META_MASK),
                 ("write", (("output", ports(egress)),)), *goto(first_post_table)),
                cookie(KIND_RETURN, tag, vlan))


def instance_reinject_rule(ports: Ports, ingress: str, trunk: str, chain: str, vlan: int,
                           first_pre_table: int | None) -> Rule:
    """The packets the ingress sends back tagged with an instance's VLAN (the first packets of
    the instance's flows, until each flow's stage-2 rule is in) -> through the chain's
    pre-server switch NFs to the instance, as its flows' stage-2 rules send them."""
    tag = chain_tag(chain)
    match = (("in_port", ports(ingress)), ("vlan_vid", VLAN_PRESENT | vlan))
    out = ports(trunk)
    if first_pre_table is None:
        # Already tagged with the instance's VLAN: only the way out is left.
        instructions: tuple[Instruction, ...] = (("apply", (("output", out),)),)
    else:
        # Untagged for the NF tables, as from the source; the action set tags it again last.
        instructions = (("apply", (("pop_vlan",),)), ("meta", metadata(tag, False), META_MASK),
                        ("write", (("push_vlan", TPID_8021Q), ("set", "vlan_vid", VLAN_PRESENT | vlan),
                                   ("output", out))),
                        ("goto", first_pre_table))
    return Rule(STEER_TABLE, PRIO_REINJECT, match, instructions, cookie(KIND_INSTANCE_REINJECT, tag, vlan))


def chain_reinject_rule(ports: Ports, ingress: str, egress: str, chain: str, vlan: int,
                        first_pre_table: int | None) -> Rule:
    """A switch-only chain's packets the ingress sends back tagged with the chain's reinject
    VLAN (each flow's first packets, until its own rule is in) -> untagged through the chain's
    switch NFs to the egress, as the flows' own rules send them. One rule for every flow of the
    chain, installed with its program: a new flow's first packet needs no rule of its own."""
    tag = chain_tag(chain)
    match = (("in_port", ports(ingress)), ("vlan_vid", VLAN_PRESENT | vlan))
    out = (("output", ports(egress)),)
    if first_pre_table is None:
        instructions: tuple[Instruction, ...] = (("apply", (("pop_vlan",),) + out),)
    else:
        instructions = (("apply", (("pop_vlan",),)), ("meta", metadata(tag, False), META_MASK),
                        ("write", out), ("goto", first_pre_table))
    return Rule(STEER_TABLE, PRIO_REINJECT, match, instructions, cookie(KIND_CHAIN_REINJECT, tag, vlan))


def instance_inband_rule(ports: Ports, ingress: str, trunk: str, chain: str, vlan: int) -> Rule:
    """keel-ingress' in-band control frames for an instance (the markers of its flows'
    handover) -> straight out to the instance, as tagged as they came: the chain's switch NFs
    would drop them (not IPv4). Same cookie as the instance's reinject rule: the two go
    together."""
    tag = chain_tag(chain)
    match = (("in_port", ports(ingress)), ("vlan_vid", VLAN_PRESENT | vlan), ("eth_type", ETH_KEEL_INBAND))
    return Rule(STEER_TABLE, PRIO_INBAND, match, (("apply", (("output", ports(trunk)),)),),
                cookie(KIND_INSTANCE_REINJECT, tag, vlan))


def instance_move_return_rule(ports: Ports, trunk: str, ingress: str, chain: str, vlan: int) -> Rule:
    """A flow move's in-band frames an instance sends back (EXPORT_STATE / IMPORT_STATE after its
    chain's positions ran them, nf-runtime/include/keel/inband.h) -> straight to keel-ingress, as
    tagged as they came from the worker (instance VLAN over the mark): the instance's return
    rules would send them to the egress. Above those; same cookie as the instance's return rule
    (installed and removed with the instance)."""
    tag = chain_tag(chain)
    match = (("in_port", ports(trunk)), ("vlan_vid", VLAN_PRESENT | vlan), ("eth_type", ETH_KEEL_INBAND))
    return Rule(STEER_TABLE, PRIO_MOVE_RETURN, match, (("apply", (("output", ports(ingress)),)),),
                cookie(KIND_RETURN, tag, vlan))


def flow_rule(flow: FiveTuple, chain: str, vlan: int, out_port: int, first_pre_table: int | None,
              idle_timeout: int, ingress_port: int | None) -> Rule:
    """A flow's steering rule: stage 2 (ingress_port None) or stage 1 (re-injected packets).

    The VLAN push and the output go into the action set, which OpenFlow runs push_vlan,
    set_field, output in that order at the end of the pipeline, after the chain's pre-server
    NFs; a Tunnel NF's own tag is pushed earlier (apply-actions), so the instance VLAN is
    outermost. Without pre-server NFs the same actions are simply applied.
    """
    tag = chain_tag(chain)
    actions: tuple[Action, ...] = (("output", out_port),)
    if vlan:
        actions = (("push_vlan", TPID_8021Q), ("set", "vlan_vid", VLAN_PRESENT | vlan)) + actions
    if first_pre_table is None:
        instructions: tuple[Instruction, ...] = (("apply", actions),)
    else:
        instructions = (("meta", metadata(tag, False), META_MASK), ("write", actions),
                        ("goto", first_pre_table))
    match = flow.match()
    if ingress_port is not None:
        match = (("in_port", ingress_port),) + match
    stage1 = ingress_port is not None
    return Rule(STEER_TABLE, PRIO_REINJECT if stage1 else PRIO_FLOW, match, instructions,
                cookie(KIND_REINJECT if stage1 else KIND_FLOW, tag, vlan), idle_timeout,
                flow_removed=not stage1)
