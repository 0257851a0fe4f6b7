"""The chain contract with the gateway (keel.v1.ChainSource): one parse, errors at their column
in the user's own annotation, the SLO read by one grammar, chains named by function name."""

from __future__ import annotations

import json

import pytest

from keel_placer.service import pb
from keel_placer.source import CHAIN, SLO_FIELD, Source, SourceError, parse_slo, parse_sources
from keel_placer.spec import parse_spec
from keel_placer.lang import SpecError

# tests/test_gateway.py's chain (its BAD suite edits it)
ACL_NAT = "ACL(rules=[{'dst_ip':'198.19.9.0/24'}]) -> NAT(external_ip='198.18.100.1', port_range=[1024, 65535])"
SLO = "p99=100us,t_min=10Mbps"

# Every syntax and argument error of the gateway's bad-input suites (tests/test_gateway.py's
# BAD, gateway/internal/chain's and nfcatalog's tests): the expression, where the error must
# point in it, and what its message must say.
BAD_EXPRESSIONS = [
    ("ACL -> Frobnicate", "Frobnicate", "unknown NF or chain 'Frobnicate'"),
    ("ACL -> Foo", "Foo", "unknown NF or chain 'Foo'"),
    ("ACL -> -> NAT", "-> NAT", ""),
    (ACL_NAT.replace("198.18.100.1", "notanip"), "external_ip=", "bad argument 'external_ip' for nat: expected an IPv4 address"),
    ("Tunnel(tag=7)", "tag=", "bad argument 'tag' for tunnel: accepted arguments: vlan"),
    ("Tunnel(vlan=7.5)", "vlan=", "expected an integer, got 7.5"),
    ("Tunnel(vlan='7')", "vlan=", "expected an integer"),
    ("MacSwap(x=1)", "x=", "bad argument 'x' for macswap: accepted arguments: none"),
    ("ACL(rules=[{'dst_ip': '198.18.0.0/33'}])", "rules=", "rules[0].dst_ip: expected an IPv4 prefix"),
    ("ACL(rules=[{'dst': '198.18.0.0/16'}])", "rules=", "rules[0]"),
    ("ACL(rules=[{'proto': 'sctp'}])", "rules=", "rules[0].proto"),
    ("ACL(rules={'dst_ip': '198.18.0.0/16'})", "rules=", "expected a list"),
    ("NAT(external_ip='198.18.0.1', port_range=[0, 2])", "port_range=", "out of range"),
    # a deployed chain's NFs run with these arguments: the required ones must be there
    ("Tunnel -> IPv4Fwd(routes=[])", "Tunnel", "NF tunnel: argument vlan: missing"),
    ("Tunnel(vlan=7) -> NAT(external_ip='198.18.0.1')", "NAT(", "NF nat: argument port_range: missing"),
]


@pytest.mark.parametrize("expr,at,says", BAD_EXPRESSIONS)
def test_errors_land_in_the_users_expression(expr, at, says):
    with pytest.raises(SourceError) as e:
        parse_sources([Source("chain-9", expr, SLO)])
    err = e.value.errors[0]
    assert (err.chain, err.field) == ("chain-9", CHAIN)
    assert expr[err.column - 1:].startswith(at), f"column {err.column} of {expr!r} is not at {at!r}: {err.message}"
    assert says in err.message


def test_an_unclosed_bracket_is_reported_at_the_end_of_the_expression():
    with pytest.raises(SourceError) as e:
        parse_sources([Source("c", "ACL -> NAT(", SLO)])
    err = e.value.errors[0]
    assert (err.field, err.column) == (CHAIN, len("ACL -> NAT(") + 1)
    assert "f0" not in err.message and "c0" not in err.message


def test_the_gateway_column_of_a_bad_argument_is_as_before():
    # tests/test_gateway.py asserts it: "annotations.com.keel.chain: column 48"
    with pytest.raises(SourceError) as e:
        parse_sources([Source("c", ACL_NAT.replace("198.18.100.1", "notanip"), SLO)])
    assert e.value.errors[0].column == 48


@pytest.mark.parametrize("slo,column,says", [
    ("p99=100,t_min=1Gbps", 1, "p99 '100': expected a delay like 100us"),
    ("p99=100us,t_min=1", 11, "t_min '1': expected a rate like 1Gbps"),
    ("t_min=fast", 1, "expected a rate"),
    ("p99=100us, bogus=2", 12, "unknown key 'bogus'"),
    ("p99=100us,p99=200us", 11, "p99 is given twice"),
    ("p99", 1, "expected KEY=VALUE"),
    ("t_min=2Gbps,t_max=1Gbps", 0, "t_max (1 Gbps) is below t_min (2 Gbps)"),
    ("t_max=0Gbps", 0, "must be positive"),
    ("", 0, "empty SLO"),
])
def test_bad_slos_name_the_key_at_its_column(slo, column, says):
    got, errors = parse_slo(slo)
    assert got is None and errors and errors[0][0] == column and says in errors[0][1]


def test_a_bare_number_is_refused_in_the_annotation_and_in_the_language():
    # one rule: a rate or a delay has its unit
    for slo in ("p99=100", "t_min=1", "t_max=10"):
        assert parse_slo(slo)[0] is None, slo
    for d in ("{'d_max': 100}", "{'d_max': '100'}", "{'t_min': 1}", "{'t_max': '10'}"):
        with pytest.raises(SpecError):
            parse_spec(f"flow f = [{{}}]\nchain c = ACL\nf : c @ {d}\n")
    with_units = parse_slo("p99=100us,t_min=1Gbps,t_max=10Gbps")[0]
    lang = parse_spec("flow f = [{}]\nchain c = ACL\nf : c @ {'d_max': '100us', 't_min': '1Gbps', 't_max': '10Gbps'}\n")
    assert with_units == lang.chains[0].slo


def test_one_place_request_returns_the_typed_slo_checked_nf_arguments_and_placement(stub, examples):
    topo = (examples / "topology.yaml").read_text()
    src = pb.ChainSource(name="chain-2", expression=ACL_NAT, slo="p99=100us,t_min=10Mbps")
    r = stub.Place(pb.PlaceRequest(chains=[src], topology_yaml=topo), timeout=30)
    assert r.ok and r.feasible and [g.name for g in r.graphs] == [c.name for c in r.chains] == ["chain-2"]
    g = r.graphs[0]
    assert (g.d_max_us, g.t_min_gbps, g.t_max_gbps) == pytest.approx((100, 0.01, 0))
    assert [(n.nf, json.loads(n.args_json)) for n in g.nodes] == [
        ("acl", {"rules": [{"dst_ip": "198.19.9.0/24"}]}), ("nat", {"external_ip": "198.18.100.1", "port_range": [1024, 65535]})]
    bad = pb.ChainSource(name="chain-2", expression="Tunnel(tag=7)", slo="p99=100")
    r = stub.Place(pb.PlaceRequest(chains=[bad], topology_yaml=topo), timeout=10)
    assert not r.ok and [(e.chain, e.field, e.column) for e in r.errors] == [("chain-2", SLO_FIELD, 1)]


def test_place_names_chains_and_reasons_by_function_name(stub, examples):
    topo = (examples / "topology.yaml").read_text()
    nat = "NAT(external_ip='198.18.100.1', port_range=[1024, 65535])"
    chains = [pb.ChainSource(name="web-1", expression="Tunnel(vlan=5)", slo="t_min=1Mbps"),
              pb.ChainSource(name="web-2", expression="Tunnel(vlan=7) -> " + nat, slo="p99=500us,t_min=1Mbps")]
    p = stub.Place(pb.PlaceRequest(chains=chains, topology_yaml=topo), timeout=30)
    assert p.ok and p.feasible and sorted(c.name for c in p.chains) == ["web-1", "web-2"]
    full = stub.Place(pb.PlaceRequest(chains=[pb.ChainSource(name="big-one", expression=nat, slo="t_min=5000Gbps")],
                                      topology_yaml=topo), timeout=30)
    assert full.ok and not full.feasible and "big-one" in full.reason and "c0" not in full.reason
