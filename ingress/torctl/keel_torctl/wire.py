"""OpenFlow 1.3 flow-mods packed straight from a Rule, without os-ken's message objects.

os-ken builds an OFPFlowMod, an OFPMatch and an object per instruction and action, and
serializes them field by field: ~80 us of Python per flow rule, most of torctl's CPU per new
flow. A flow rule is a fixed layout with a few fields that change (its 5-tuple, cookie, VLAN,
ports), so add_bytes packs it with struct in a few microseconds: the same bytes os-ken would
send (tests/test_wire.py compares them for every kind of rule torctl installs). What this
module does not know (masked fields, other fields or actions) it leaves to os-ken: add_bytes
returns None for it.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from .rules import Rule

_OXM_CLASS = ofp.OFPXMC_OPENFLOW_BASIC
_IPV4 = socket.inet_aton  # the flow was checked (FiveTuple.check): a dotted quad
_U8, _U16, _U32, _U64 = (struct.Struct(f).pack for f in ("!B", "!H", "!I", "!Q"))


def _field(field: int, size: int, pack: Any) -> tuple[int, bytes, Any]:
    """(field number, OXM header, packer of its value) of a field of size bytes."""
    return field, _U32((_OXM_CLASS << 16) | (field << 9) | size), pack


_FIELDS: dict[str, tuple[int, bytes, Any]] = {
    "in_port": _field(ofp.OFPXMT_OFB_IN_PORT, 4, _U32),
    "metadata": _field(ofp.OFPXMT_OFB_METADATA, 8, _U64),
    "eth_type": _field(ofp.OFPXMT_OFB_ETH_TYPE, 2, _U16),
    "vlan_vid": _field(ofp.OFPXMT_OFB_VLAN_VID, 2, _U16),
    "ip_proto": _field(ofp.OFPXMT_OFB_IP_PROTO, 1, _U8),
    "ipv4_src": _field(ofp.OFPXMT_OFB_IPV4_SRC, 4, _IPV4),
    "ipv4_dst": _field(ofp.OFPXMT_OFB_IPV4_DST, 4, _IPV4),
    "tcp_src": _field(ofp.OFPXMT_OFB_TCP_SRC, 2, _U16),
    "tcp_dst": _field(ofp.OFPXMT_OFB_TCP_DST, 2, _U16),
    "udp_src": _field(ofp.OFPXMT_OFB_UDP_SRC, 2, _U16),
    "udp_dst": _field(ofp.OFPXMT_OFB_UDP_DST, 2, _U16),
}
_FLOW_MOD = struct.Struct("!QQBBHHHIIIH2x")  # ofp_flow_mod after its header
_HEADER = struct.Struct("!BBHI")
_HH = struct.Struct("!HH")


class _Unknown(Exception):
    """The rule uses something add_bytes does not pack."""


def _pad8(n: int) -> bytes:
    return b"\0" * (-n % 8)


def _oxm(name: str, value: Any) -> tuple[int, bytes]:
    if isinstance(value, tuple) or name not in _FIELDS:
        raise _Unknown(name)
    field, header, pack = _FIELDS[name]
    return field, header + pack(value)


def _match(fields: tuple[tuple[str, Any], ...]) -> bytes:
    # os-ken orders the fields by their number (prerequisites come first that way)
    oxms = b"".join(b for _, b in sorted((_oxm(n, v) for n, v in fields), key=lambda x: x[0]))
    length = 4 + len(oxms)
    return _HH.pack(ofp.OFPMT_OXM, length) + oxms + _pad8(length)


def _action(a: tuple) -> bytes:
    op = a[0]
    if op == "output":
        return struct.pack("!HHIH6x", ofp.OFPAT_OUTPUT, 16, a[1], 0)
    if op == "push_vlan":
        return struct.pack("!HHH2x", ofp.OFPAT_PUSH_VLAN, 8, a[1])
    if op == "pop_vlan":
        return struct.pack("!HH4x", ofp.OFPAT_POP_VLAN, 8)
    if op == "dec_ttl":
        return struct.pack("!HH4x", ofp.OFPAT_DEC_NW_TTL, 8)
    if op == "set":
        _, oxm = _oxm(a[1], a[2])
        length = 4 + len(oxm)
        return _HH.pack(ofp.OFPAT_SET_FIELD, length + len(_pad8(length))) + oxm + _pad8(length)
    raise _Unknown(op)


def _instruction(i: tuple) -> bytes:
    op = i[0]
    if op in ("apply", "write"):
        actions = b"".join(_action(a) for a in i[1])
        kind = ofp.OFPIT_APPLY_ACTIONS if op == "apply" else ofp.OFPIT_WRITE_ACTIONS
        return struct.pack("!HH4x", kind, 8 + len(actions)) + actions
    if op == "clear":
        return struct.pack("!HH4x", ofp.OFPIT_CLEAR_ACTIONS, 8)
    if op == "meta":
        return struct.pack("!HH4xQQ", ofp.OFPIT_WRITE_METADATA, 24, i[1], i[2])
    if op == "goto":
        return struct.pack("!HHB3x", ofp.OFPIT_GOTO_TABLE, 8, i[1])
    raise _Unknown(op)


def add_bytes(rule: Rule) -> bytes | None:
    """The body (after the 8-byte header) of rule's OFPFC_ADD flow-mod, as ofp.add builds it;
    None if the rule needs what only os-ken packs."""
    try:
        match = _match(rule.match)
        instructions = b"".join(_instruction(i) for i in rule.instructions)
    except _Unknown:
        return None
    return _FLOW_MOD.pack(rule.cookie, 0, rule.table, ofp.OFPFC_ADD, rule.idle_timeout, 0, rule.priority,
                          ofp.OFP_NO_BUFFER, 0, 0, ofp.OFPFF_SEND_FLOW_REM if rule.flow_removed else 0) \
        + match + instructions


def instructions_bytes(rule: Rule) -> bytes | None:
    """rule's instructions as its flow-mod carries them (None as for add_bytes): with the
    rule's table, priority, cookie, timeout and flags, what keel-ingress needs to write the
    same kind of rule for another flow itself (RuleTemplate)."""
    try:
        return b"".join(_instruction(i) for i in rule.instructions)
    except _Unknown:
        return None


class PackedFlowMod(parser.MsgBase):
    """A flow-mod whose body add_bytes packed; os-ken's datapath sends it like any message
    (set_xid, then serialize puts the header in front)."""

    def __init__(self, datapath: Any, body: bytes):
        super().__init__(datapath)
        self.body = body

    def serialize(self) -> None:
        self.msg_type = ofp.OFPT_FLOW_MOD
        self.msg_len = _HEADER.size + len(self.body)
        self.buf = bytearray(_HEADER.pack(ofp.OFP_VERSION, ofp.OFPT_FLOW_MOD, self.msg_len, self.xid) + self.body)
