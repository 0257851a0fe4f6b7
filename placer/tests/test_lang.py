"""Chain language: Lemur-style constructs parse into the right DAGs; errors are located."""

from __future__ import annotations

import pytest

from keel_placer.lang import SpecError
from keel_placer.model import EGRESS, INGRESS
from keel_placer.spec import parse_spec


def errors(text: str) -> list[tuple[int, int, str]]:
    with pytest.raises(SpecError) as e:
        parse_spec(text)
    return [(d.line, d.col, d.message) for d in e.value.diagnostics]


def edges(g) -> set[tuple[str, str]]:
    name = {INGRESS: "in", EGRESS: "out", **{n.id: n.name for n in g.nodes}}
    return {(name[e.src], name[e.dst]) for e in g.edges}


def test_linear_chain_with_aliases_and_bare_names():
    spec = parse_spec("flow t = [{'dst_ip' : '1.0.1.3'}]\n"
                      "chain sp_1 = TrafficShaper()->NAT->IPv4Forward()\n"
                      "t : sp_1\n")
    (g,) = spec.chains
    assert [n.nf for n in g.nodes] == ["limiter", "nat", "ipv4fwd"]
    assert edges(g) == {("in", "limiter"), ("limiter", "nat"), ("nat", "ipv4fwd"), ("ipv4fwd", "out")}
    assert g.slo.t_min == 0 and g.slo.t_max == float("inf") and g.slo.d_max is None


def test_nf_names_are_case_insensitive():
    spec = parse_spec("flow f = []\nchain c = aCl -> HASHLB() -> vlanpush -> Match\nf : c\n")
    assert [n.nf for n in spec.chains[0].nodes] == ["acl", "lb", "tunnel", "bpf"]


def test_canonical_chains_parse_with_branch_weights(examples):
    spec = parse_spec((examples / "chain_0_1_2_3.conf").read_text())
    by = {g.name: g for g in spec.chains}
    assert set(by) == {"chain_1", "chain_2", "chain_3", "chain_4"}
    c2 = by["chain_2"]
    assert [n.name for n in c2.nodes] == ["encrypt", "lb", "nat", "nat_2", "nat_3", "ipv4fwd"]
    assert {("lb", "nat"), ("lb", "nat_2"), ("lb", "nat_3"), ("nat_3", "ipv4fwd")} <= edges(c2)
    assert [round(n.weight, 3) for n in c2.nodes] == [1, 1, 0.333, 0.333, 0.333, 1]
    assert len(by["chain_4"].nodes) == 15  # 5 + 3 x subchain_6 + IPv4Fwd
    assert by["chain_1"].slo.t_min == pytest.approx(1.1)
    assert by["chain_3"].slo.t_min == pytest.approx(0.3)


def test_nested_branches_pass_through_and_funcs(examples):
    spec = parse_spec((examples / "chain_5.conf").read_text())
    web = next(g for g in spec.chains if g.name == "web_chain")
    w = {n.name: round(n.weight, 3) for n in web.nodes}
    # outer branch halves the traffic, the inner one halves it again
    assert w["filter_a"] == 1 and w["acl"] == 0.5 and w["urlfilter"] == 0.25 and w["pop"] == 1
    assert ("filter_a", "pop") in edges(web)      # outer pass-through arm
    assert ("filter_b", "pop") in edges(web)      # inner pass-through arm merges after the branch
    assert ("urlfilter", "pop") in edges(web)
    assert web.nodes[0].args == {"filters": ["tcp port 80"]}
    assert web.slo.d_max == 200 and web.slo.t_max == 40
    tenant = next(g for g in spec.chains if g.name == "tenant_chain")
    assert round(tenant.nodes[5].weight, 3) == 0.5  # 'weight': 2 of 4


def test_multiline_comments_and_hex_literals():
    spec = parse_spec("/* a\n comment */ flow f = [{'vlan': 0x1}] // tail\n"
                      "chain c = ACL(rules=[{'dst_ip':'10.0.0.0/8','drop': False}])\nf:c @ {'t_min': '500Gbps'}\n")
    assert spec.chains[0].flowspec == [{"vlan": 1}]
    assert spec.chains[0].nodes[0].args["rules"][0]["drop"] is False
    assert spec.chains[0].slo.t_min == 500


def test_unknown_nf_names_line_and_column():
    assert errors("flow f = []\nchain c = ACL ->  Frobnicate() -> NAT\nf : c\n") == [
        (2, 19, _unknown("Frobnicate"))]


def _unknown(name):
    from keel_placer import catalog
    return f"unknown NF '{name}' (known: {', '.join(catalog.library().names())})"


def test_unknown_bare_name():
    assert errors("flow f = []\nchain c = ACL -> nosuch\nf : c\n") == [
        (2, 18, "unknown NF or chain 'nosuch'")]


def test_unknown_chain_in_binding():
    assert errors("flow f = []\nchain c = ACL\nf : d\n") == [(3, 5, "unknown chain 'd'")]


def test_cycle_between_chains():
    errs = errors("flow f = []\nchain a = ACL -> b\nchain b = NAT -> a\nf : a\n")
    assert (3, 18, "cycle in chain references: a -> b -> a") in errs


def test_bad_argument_name_and_type():
    errs = errors("flow f = []\nchain c = ACL(rules=5) -> NAT(bogus=1)\nf : c\n")
    assert errs[0][:2] == (2, 15) and "bad argument 'rules' for acl: expected a list" in errs[0][2]
    assert errs[1][:2] == (2, 31) and "bad argument 'bogus' for nat" in errs[1][2]


def test_positional_argument_is_a_bad_argument():
    assert errors("flow f = []\nchain c = NAT(5)\nf : c\n") == [
        (2, 15, "bad argument to NAT: expected name=value, found '5'")]


def test_unbound_flow():
    assert errors("flow f = []\nflow g = []\nchain c = ACL\nf : c\n") == [
        (2, 1, "unbound flow 'g': no 'g : CHAIN' line uses it")]


def test_syntax_errors_are_reported_per_statement():
    errs = errors("flow f = []\nchain c = ACL -> -> NAT\nchain d = [ ]\nf : c\n")
    assert errs[0] == (2, 18, "expected an NF, chain name or branch, found '->'")
    assert errs[1] == (3, 11, "a branch needs at least one arm")


def test_a_syntax_error_is_not_buried_under_what_it_breaks_later():
    # The chain line does not parse, so nothing binds f; "unbound flow 'f'" on line 1 used to
    # come first and the gateway showed it instead of the syntax error.
    for chain, col, message in [("ACL -> (NAT", 18, "expected an NF, chain name or branch, found '('"),
                                ("ACL -> NAT $", 22, "unexpected character '$'"),
                                ("ACL ->", 17, "expected an NF, chain name or branch, found end of line")]:
        assert errors(f"flow f = []\nchain c = {chain}\nf : c\n") == [(2, col, message)], chain


def test_bad_slo_and_arm():
    assert errors("flow f = []\nchain c = ACL\nf : c @ {'t_min': 'fast'}\n") == [
        (3, 9, "bad SLO t_min 'fast': expected a rate like '1.1Gbps'")]
    errs = errors("flow f = []\nchain c = ACL -> [{'flowspec': []}]\nf : c\n")
    assert errs == [(2, 19, "branch arm needs an 'nfchain' ('' for pass-through)")]


def test_unterminated_string():
    errs = errors("flow f = [{'a': 'b}]\nchain c = ACL\nf : c\n")
    assert errs[0][:2] == (1, 17) and errs[0][2] == "unterminated string"


# Crashes the fuzzer (test_lang_fuzz.py) or a review of what it feeds found: each input
# raised something other than SpecError before its fix.

def test_a_bad_escape_in_a_string_is_a_spec_error():
    # ast.literal_eval raised SyntaxError on '\x' (found by the fuzzer) and ValueError on a NUL
    assert errors("flow f = ['\\x']\nchain c = ACL\nf : c\n") == [
        (1, 11, "bad string literal: 'unicodeescape' codec can't decode bytes in position 0-1: "
                "truncated \\xXX escape")]
    assert errors("flow f = ['a\x00']\nchain c = ACL\nf : c\n")[0][2] == (
        "bad string literal: source code string cannot contain null bytes")


def test_numbers_take_a_signed_exponent():
    # Python writes 1e-05 and 1e+16; the '-' and '+' used to end the number (found by the fuzzer)
    spec = parse_spec("flow f = [{'a': 1e-05, 'b': 1e+16, 'c': 2.5E-3, 'd': 0x1e}]\nchain c = ACL\nf : c\n")
    assert spec.chains[0].flowspec == [{"a": 1e-05, "b": 1e+16, "c": 2.5e-3, "d": 30}]
    assert errors("flow f = [0x1e-1]\nchain c = ACL\nf : c\n")[0][2] == "expected closing ']', found '-'"


def test_deep_nesting_is_a_spec_error_not_a_recursion_error():
    deep_literal = "[" * 3000 + "]" * 3000
    assert errors(f"flow f = {deep_literal}\nchain c = ACL\nf : c\n") == [(1, 110, "nested more than 100 levels deep")]
    arm = "[{'flowspec': [], 'nfchain': "
    assert errors(f"flow f = []\nchain c = {arm * 400}ACL{'}]' * 400}\nf : c\n")[0][2] == (
        "nested more than 100 levels deep")
    refs = "".join(f"chain c{i} = c{i + 1}\n" for i in range(150)) + "chain c150 = ACL\n"
    assert errors(f"flow f = []\n{refs}f : c0\n")[0][2] == (
        "chain c0 nests branches and chain references more than 100 levels deep")


def test_a_chain_that_doubles_at_each_reference_is_cut_off():
    refs = "".join(f"chain c{i} = c{i + 1} -> c{i + 1}\n" for i in range(20)) + "chain c20 = ACL\n"
    # c0 would be 2^20 NFs; the 4097th (an ACL of c20, line 22) stops c0, and c1 ... c7 too
    errs = errors(f"flow f = []\n{refs}f : c0\n")
    assert errs[0] == (22, 13, "chain c0 expands to more than 4096 NFs") and len(errs) == 8


def test_odd_slo_keys_and_argument_values_are_spec_errors():
    # sorted() of an int and a str key raised TypeError
    assert errors("flow f = []\nchain c = ACL\nf : c @ {1: 2, 'x': 3}\n") == [
        (3, 9, "unknown SLO key '1' (expected t_min, t_max, d_max)")]
    # int() of a superscript digit (str.isdigit accepts it) and of 5000 digits raised ValueError
    for prefix in ("198.18.0.0/\u00b2", "198.18.0.0/" + "9" * 5000):
        (err,) = errors(f"flow f = []\nchain c = ACL(rules=[{{'dst_ip': '{prefix}'}}])\nf : c\n")
        assert "expected an IPv4 prefix 'A.B.C.D/N'" in err[2]
    (err,) = errors(f"flow f = []\nchain c = ACL(rules=[{{'dst_port': '1-{'9' * 5000}'}}])\nf : c\n")
    assert "expected a port 0-65535 or a range 'lo-hi'" in err[2]
