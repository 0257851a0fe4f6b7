"""A fast parser for the switch's FlowRemoved messages (one per expiring flow).

os-ken parses every OFPT_FLOW_REMOVED into an OFPFlowRemoved with a full OFPMatch: ~33 us of
Python per message on these machines, most of it the generic OXM parser, at a thousand
expiries a second the largest share of torctl's cost per flow after the ToR rule's setup. A
stage-2 rule's match is a handful of exact-match OpenFlow-basic fields (rules.py), so this
parser reads those itself (~3 us) into a FlowRemovedMatch: a dict of the same {field: value}
that os-ken's OFPMatch.items() gives (ofp.match_fields). A message with any other field, a
masked field or an unexpected layout goes to os-ken's own parser, unchanged.

install() puts it in os-ken's OpenFlow 1.3 message-parser table (ofproto_v1_3_parser's
_MSG_PARSERS, where os-ken's @_register_parser puts each message class's parser); the event
os-ken makes of the message (EventOFPFlowRemoved) and its dispatch are os-ken's.
"""

from __future__ import annotations

import logging
import socket
import struct
from typing import Any, Callable

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

LOG = logging.getLogger("keel-torctl")

# ofp_flow_removed after the header: cookie, priority, reason, table_id, duration_sec,
# duration_nsec, idle_timeout, hard_timeout, packet_count, byte_count; then the ofp_match.
_BODY = struct.Struct("!QHBBIIHHQQ")
_MATCH_AT = ofp.OFP_HEADER_SIZE + _BODY.size  # 48
_MATCH_HEAD = struct.Struct("!HH")  # type (OFPMT_OXM), length (without padding)
_OXM_HEAD = struct.Struct("!HBB")  # class, field << 1 | hasmask, payload length


def _uint(b: bytes) -> int:
    return int.from_bytes(b, "big")


# OXM_OF_* field number -> (os-ken's name, payload length, decoder) for the exact-match fields
# keel's rules use; os-ken decodes these the same way (vlan_vid as on the wire, with
# OFPVID_PRESENT).
_FIELDS: dict[int, tuple[str, int, Callable[[bytes], Any]]] = {
    ofp.OFPXMT_OFB_IN_PORT: ("in_port", 4, _uint),
    ofp.OFPXMT_OFB_METADATA: ("metadata", 8, _uint),
    ofp.OFPXMT_OFB_ETH_TYPE: ("eth_type", 2, _uint),
    ofp.OFPXMT_OFB_VLAN_VID: ("vlan_vid", 2, _uint),
    ofp.OFPXMT_OFB_IP_PROTO: ("ip_proto", 1, _uint),
    ofp.OFPXMT_OFB_IPV4_SRC: ("ipv4_src", 4, socket.inet_ntoa),
    ofp.OFPXMT_OFB_IPV4_DST: ("ipv4_dst", 4, socket.inet_ntoa),
    ofp.OFPXMT_OFB_TCP_SRC: ("tcp_src", 2, _uint),
    ofp.OFPXMT_OFB_TCP_DST: ("tcp_dst", 2, _uint),
    ofp.OFPXMT_OFB_UDP_SRC: ("udp_src", 2, _uint),
    ofp.OFPXMT_OFB_UDP_DST: ("udp_dst", 2, _uint),
}


class FlowRemovedMatch(dict):
    """A FlowRemoved's match as {field: value}, read by fastparse (items() as OFPMatch's)."""

    def __repr__(self) -> str:
        return f"FlowRemovedMatch({dict.__repr__(self)})"


def match_fields(buf: bytes | bytearray) -> FlowRemovedMatch | None:
    """The exact-match fields of the ofp_match at _MATCH_AT, or None if it holds anything
    fastparse does not read (left to os-ken)."""
    if len(buf) < _MATCH_AT + _MATCH_HEAD.size:
        return None
    mtype, length = _MATCH_HEAD.unpack_from(buf, _MATCH_AT)
    end = _MATCH_AT + length
    if mtype != ofp.OFPMT_OXM or length < _MATCH_HEAD.size or end > len(buf):
        return None
    out = FlowRemovedMatch()
    at = _MATCH_AT + _MATCH_HEAD.size
    while at < end:
        if at + _OXM_HEAD.size > end:
            return None
        cls, fh, n = _OXM_HEAD.unpack_from(buf, at)
        at += _OXM_HEAD.size
        field = _FIELDS.get(fh >> 1)
        if cls != ofp.OFPXMC_OPENFLOW_BASIC or fh & 1 or field is None or n != field[1] or at + n > end:
            return None
        out[field[0]] = field[2](bytes(buf[at:at + n]))
        at += n
    return out


def parse_flow_removed(datapath: Any, version: int, msg_type: int, msg_len: int, xid: int,
                       buf: bytes | bytearray, fallback: Callable[..., Any]) -> Any:
    """An OFPFlowRemoved as os-ken's parser makes it, with a FlowRemovedMatch; what fallback
    (os-ken's parser) makes of a message fastparse does not read."""
    match = match_fields(buf)
    if match is None:
        return fallback(datapath, version, msg_type, msg_len, xid, buf)
    msg = parser.OFPFlowRemoved(datapath, *_BODY.unpack_from(buf, ofp.OFP_HEADER_SIZE), match=match)
    msg.set_headers(version, msg_type, msg_len, xid)
    msg.set_buf(buf)
    return msg


def install() -> bool:
    """Puts parse_flow_removed in os-ken's OpenFlow 1.3 parser table; False (os-ken's parser
    stays) if the table is not where this os-ken keeps it."""
    table = getattr(parser, "_MSG_PARSERS", None)
    osken = table.get(ofp.OFPT_FLOW_REMOVED) if isinstance(table, dict) else None
    if osken is None:
        LOG.warning("os-ken's OpenFlow 1.3 parser table not found: FlowRemoved goes through os-ken's parser")
        return False
    if getattr(osken, "keel_fastparse", False):
        return True

    def fast(datapath: Any, version: int, msg_type: int, msg_len: int, xid: int, buf: Any) -> Any:
        return parse_flow_removed(datapath, version, msg_type, msg_len, xid, buf, osken)

    fast.keel_fastparse = True  # type: ignore[attr-defined]
    table[ofp.OFPT_FLOW_REMOVED] = fast
    return True
