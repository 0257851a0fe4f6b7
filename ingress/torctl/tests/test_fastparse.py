# SPDX-License-Identifier: Apache-2.0
"""fastparse reads a stage-2 rule's FlowRemoved as os-ken's parser does, and leaves every
other FlowRemoved to os-ken. No switch needed."""
import struct

import pytest
from os_ken.ofproto import ofproto_parser
from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from keel_torctl import fastparse
from keel_torctl.ofp import match_fields
from keel_torctl.rules import FiveTuple

BODY = dict(cookie=0x0102030405060708, priority=200, reason=ofp.OFPRR_IDLE_TIMEOUT, table_id=1,
            duration_sec=12, duration_nsec=345, idle_timeout=10, hard_timeout=0, packet_count=4,
            byte_count=4321)
ATTRS = ("version", "msg_type", "msg_len", "xid", "cookie", "priority", "reason", "table_id",
         "duration_sec", "duration_nsec", "idle_timeout", "hard_timeout", "packet_count", "byte_count")


class Datapath:
    ofproto = ofp
    ofproto_parser = parser


def flow_removed(match: parser.OFPMatch, xid: int = 7) -> bytearray:
    """An OFPT_FLOW_REMOVED as the switch sends it."""
    m = bytearray()
    match.serialize(m, 0)
    body = struct.pack("!QHBBIIHHQQ", *BODY.values())
    return bytearray(struct.pack("!BBHI", ofp.OFP_VERSION, ofp.OFPT_FLOW_REMOVED, 8 + len(body) + len(m), xid)) + body + m


def osken(buf: bytearray):
    return parser.OFPFlowRemoved.parser(Datapath(), ofp.OFP_VERSION, ofp.OFPT_FLOW_REMOVED, len(buf), 7, buf)


def fast(buf: bytearray):
    return fastparse.parse_flow_removed(Datapath(), ofp.OFP_VERSION, ofp.OFPT_FLOW_REMOVED, len(buf), 7, buf,
                                        parser.OFPFlowRemoved.parser)


STAGE2 = {  # the matches keel's rules put on the switch (rules.py), and neighbours of them
    "udp": dict(FiveTuple("198.18.0.1", "198.18.3.9", 40000, 5001, 17).match()),
    "tcp": dict(FiveTuple("198.18.0.2", "198.18.2.1", 1234, 80, 6).match()),
    "icmp": dict(FiveTuple("198.18.0.3", "198.18.3.1", 0, 0, 1).match()),
    "in_port and vlan": dict(in_port=3, vlan_vid=0x1000 | 103, eth_type=0x800, ip_proto=17,
                             ipv4_src="198.18.0.1", ipv4_dst="198.18.3.9", udp_src=1, udp_dst=65535),
    "metadata": dict(metadata=0xABCDEF, eth_type=0x800, ip_proto=6, ipv4_src="10.0.0.1",
                     ipv4_dst="10.0.0.2", tcp_src=65535, tcp_dst=1),
}


@pytest.mark.parametrize("name", STAGE2)
def test_a_stage2_rules_flow_removed_reads_as_osken_reads_it(name):
    buf = flow_removed(parser.OFPMatch(**STAGE2[name]))
    want, got = osken(buf), fast(buf)
    assert isinstance(got, parser.OFPFlowRemoved) and isinstance(got.match, fastparse.FlowRemovedMatch)
    assert {a: getattr(got, a) for a in ATTRS} == {a: getattr(want, a) for a in ATTRS}
    assert match_fields(got.match) == match_fields(want.match) == STAGE2[name]
    assert bytes(got.buf) == bytes(buf)


OTHERS = {
    "a masked field": parser.OFPMatch(eth_type=0x800, ipv4_src=("198.18.0.0", "255.255.0.0")),
    "a field fastparse does not read": parser.OFPMatch(eth_type=0x800, eth_src="02:00:00:00:00:01"),
    "no field": parser.OFPMatch(),
}


@pytest.mark.parametrize("name", OTHERS)
def test_any_other_flow_removed_goes_to_osken(name):
    buf = flow_removed(OTHERS[name])
    got = fast(buf)
    if name == "no field":  # nothing to read: an empty match either way
        assert match_fields(got.match) == match_fields(osken(buf).match) == {}
        return
    assert isinstance(got.match, parser.OFPMatch)
    assert match_fields(got.match) == match_fields(osken(buf).match)


def test_a_torn_match_goes_to_osken():
    buf = flow_removed(parser.OFPMatch(**STAGE2["udp"]))
    struct.pack_into("!H", buf, 50, 200)  # the match's length runs past the message
    assert fastparse.match_fields(buf) is None
    struct.pack_into("!H", buf, 48, 0)  # not OFPMT_OXM
    assert fastparse.match_fields(buf) is None


def test_install_puts_it_in_osken_once_and_the_message_parser_uses_it():
    assert fastparse.install() and fastparse.install()
    buf = flow_removed(parser.OFPMatch(**STAGE2["tcp"]))
    msg = ofproto_parser.msg(Datapath(), ofp.OFP_VERSION, ofp.OFPT_FLOW_REMOVED, len(buf), 7, buf)
    assert isinstance(msg.match, fastparse.FlowRemovedMatch) and msg.cookie == BODY["cookie"]
    # a message fastparse leaves alone still parses through os-ken's own parser
    buf = flow_removed(OTHERS["a masked field"])
    msg = ofproto_parser.msg(Datapath(), ofp.OFP_VERSION, ofp.OFPT_FLOW_REMOVED, len(buf), 7, buf)
    assert isinstance(msg.match, parser.OFPMatch)
