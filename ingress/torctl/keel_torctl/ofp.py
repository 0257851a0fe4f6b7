"""Rules (rules.py) to OpenFlow 1.3 messages and back, with os-ken's ofproto parser."""

from __future__ import annotations

from typing import Any

from os_ken.ofproto import ofproto_v1_3 as ofp
from os_ken.ofproto import ofproto_v1_3_parser as parser

from .rules import Rule
from .wire import PackedFlowMod, add_bytes

ALL_TABLES = ofp.OFPTT_ALL


def _action(a: tuple) -> Any:
    op = a[0]
    if op == "output":
        return parser.OFPActionOutput(a[1], 0)
    if op == "push_vlan":
        return parser.OFPActionPushVlan(a[1])
    if op == "pop_vlan":
        return parser.OFPActionPopVlan()
    if op == "set":
        return parser.OFPActionSetField(**{a[1]: a[2]})
    if op == "dec_ttl":
        return parser.OFPActionDecNwTtl()
    raise ValueError(f"unknown action {a!r}")


def _instruction(i: tuple) -> Any:
    op = i[0]
    if op == "apply":
        return parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [_action(a) for a in i[1]])
    if op == "write":
        return parser.OFPInstructionActions(ofp.OFPIT_WRITE_ACTIONS, [_action(a) for a in i[1]])
    if op == "clear":
        return parser.OFPInstructionActions(ofp.OFPIT_CLEAR_ACTIONS, [])
    if op == "meta":
        return parser.OFPInstructionWriteMetadata(i[1], i[2])
    if op == "goto":
        return parser.OFPInstructionGotoTable(i[1])
    raise ValueError(f"unknown instruction {i!r}")


def add(dp: Any, rule: Rule) -> Any:
    """An OFPFC_ADD flow-mod for a rule (replacing an identical entry is harmless), packed by
    wire.add_bytes when it can (a flow rule always), else by os-ken."""
    body = add_bytes(rule)
    if body is not None:
        return PackedFlowMod(dp, body)
    return osken_add(dp, rule)


def osken_add(dp: Any, rule: Rule) -> Any:
    """add's flow-mod as os-ken's own objects build it."""
    return parser.OFPFlowMod(
        dp, cookie=rule.cookie, table_id=rule.table, command=ofp.OFPFC_ADD,
        idle_timeout=rule.idle_timeout, priority=rule.priority, buffer_id=ofp.OFP_NO_BUFFER,
        flags=ofp.OFPFF_SEND_FLOW_REM if rule.flow_removed else 0,
        match=parser.OFPMatch(**dict(rule.match)),
        instructions=[_instruction(i) for i in rule.instructions])


def delete_strict(dp: Any, table: int, priority: int, match: tuple) -> Any:
    """Delete the one entry with exactly this table, priority and match."""
    return parser.OFPFlowMod(dp, table_id=table, command=ofp.OFPFC_DELETE_STRICT, priority=priority,
                             out_port=ofp.OFPP_ANY, out_group=ofp.OFPG_ANY,
                             match=parser.OFPMatch(**dict(match)))


def delete_cookie(dp: Any, value: int, mask: int) -> Any:
    """Delete every entry (any table) whose cookie matches value under mask."""
    return parser.OFPFlowMod(dp, cookie=value, cookie_mask=mask, table_id=ALL_TABLES,
                             command=ofp.OFPFC_DELETE, out_port=ofp.OFPP_ANY,
                             out_group=ofp.OFPG_ANY, match=parser.OFPMatch())


def flow_stats_request(dp: Any, cookie: int = 0, mask: int = 0) -> Any:
    """Ask for every entry (all tables) whose cookie matches value under mask."""
    return parser.OFPFlowStatsRequest(dp, 0, ALL_TABLES, ofp.OFPP_ANY, ofp.OFPG_ANY,
                                      cookie, mask, parser.OFPMatch())


def barrier(dp: Any) -> Any:
    return parser.OFPBarrierRequest(dp)


def port_desc_request(dp: Any) -> Any:
    return parser.OFPPortDescStatsRequest(dp, 0)


def match_fields(match: Any) -> dict[str, Any]:
    """A read-back OFPMatch as {field: value} (masked fields as (value, mask))."""
    return dict(match.items())


def output_ports(instructions: list[Any]) -> list[int]:
    """The output ports of a read-back entry's apply/write actions, in order."""
    ports = []
    for inst in instructions:
        for a in getattr(inst, "actions", None) or []:
            if isinstance(a, parser.OFPActionOutput):
                ports.append(a.port)
    return ports


def goes_to_table(instructions: list[Any]) -> bool:
    return any(isinstance(i, parser.OFPInstructionGotoTable) for i in instructions)
