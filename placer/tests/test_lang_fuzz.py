"""Fuzzing the chain-language parser (issue 19): arbitrary text, token soup, mutated specs
and grammar-shaped random chains go through parse_spec (lang.py and spec.py).

Properties: parse_spec returns a Spec or raises SpecError, never anything else, and each of
its diagnostics has a message and a position inside the text; a generated valid spec parses
to the chains it was generated from (NFs in order, branch arms, literal arguments and flow
specs as written), so rendering and parsing round-trip.

Bounded for `make test`: each property runs a fixed number of examples, derandomized (the
same inputs every run, no example database written). KEEL_FUZZ_EXAMPLES=N runs N random
examples per property instead, e.g. to fuzz for longer by hand.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Union

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keel_placer import catalog
from keel_placer.lang import SpecError, parse_tree
from keel_placer.spec import parse_spec

_N = int(os.environ.get("KEEL_FUZZ_EXAMPLES", "0"))


def bounded(examples: int):
    """Settings of one property: `examples` fixed inputs, or KEEL_FUZZ_EXAMPLES random ones."""
    return settings(max_examples=_N or examples, derandomize=not _N, database=None,
                    deadline=timedelta(seconds=2), suppress_health_check=[HealthCheck.too_slow])


def check(text: str):
    """parse_spec(text): a Spec, or SpecError with located, non-empty diagnostics."""
    try:
        return parse_spec(text)
    except SpecError as e:
        assert e.diagnostics, text
        lines = text.count("\n") + 1
        for d in e.diagnostics:
            assert d.message.strip(), (text, d)
            assert 1 <= d.line <= lines and d.col >= 1, (text, d)
        return None


# ----- arbitrary text and token soup -----

WORDS = ["flow", "func", "chain", "True", "False", "None", "f", "c", "x", "Monitor", "MacSwap",
         "ACL", "NAT", "Tunnel", "vlan", "rules", "dst_ip", "flowspec", "nfchain", "weight",
         "gate_select", "t_min", "t_max", "d_max", "'flowspec'", "'nfchain'", "'weight'",
         "'gate_select'", "'t_min'", "'1Gbps'", "'45us'", "'198.18.0.0/16'", "''", '"', "'",
         "'\\x'", "'\\N{'", "0", "1", "-1", "1.5", "1e5", "1e-5", "0x1f", "0b2", "9" * 30,
         "->", "=", "[", "]", "{", "}", "(", ")", ",", ":", "@", "-", "\n", "//", "/*", "*/", "#",
         "²", "\x00", "\t", "\\"]


@bounded(300)
@given(st.text(max_size=200))
def test_arbitrary_text_raises_only_spec_error(text):
    check(text)


@bounded(250)
@given(st.lists(st.sampled_from(WORDS), max_size=60), st.lists(st.sampled_from(["", " ", "\n"]), max_size=60))
def test_token_soup_raises_only_spec_error(words, gaps):
    check("".join(w + (gaps[i] if i < len(gaps) else " ") for i, w in enumerate(words)))


@bounded(150)
@given(st.text(alphabet=st.sampled_from("\\xuUN{}0a9'\"\n\x00 "), max_size=12))
def test_string_escapes_raise_only_spec_error(body):
    # what a quoted string holds goes to ast.literal_eval: backslash escapes of every kind
    check(f"flow f = [{{'k': '{body}'}}]\nchain c = Monitor\nf : c\n")


# ----- grammar-shaped chains -----

# Library NFs whose arguments are all optional, so a bare call is a valid chain element.
NO_ARGS = ["Monitor", "MacSwap", "Detunnel", "Dedup", "ReDedup", "VLANPop", "Measure"]
NAMES = st.from_regex(r"[a-z][a-z0-9_]{0,5}", fullmatch=True).filter(
    lambda s: s not in ("flow", "func", "chain"))


@dataclass
class Call:
    nf: str
    parens: bool


@dataclass
class Arm:
    flowspec: list[dict[str, Any]]
    chain: "list[Elem] | None"
    weight: float | None


@dataclass
class Br:
    arms: list[Arm]


Elem = Union[Call, Br]

FLOWSPEC = st.lists(st.fixed_dictionaries({"dst_ip": st.sampled_from(["198.18.0.0/24", "198.19.1.0/24"])},
                                          optional={"dst_port": st.integers(0, 65535)}), max_size=2)
CALL = st.builds(Call, st.sampled_from(NO_ARGS), st.booleans())


def chains(depth: int = 2) -> st.SearchStrategy[list[Elem]]:
    if depth == 0:
        return st.lists(CALL, min_size=1, max_size=4)
    arm = st.builds(Arm, FLOWSPEC, st.none() | chains(depth - 1),
                    st.none() | st.sampled_from([0.5, 1.0, 2.0, 3.25]))
    return st.lists(CALL | st.builds(Br, st.lists(arm, min_size=1, max_size=3)), min_size=1, max_size=4)


def render(elems: list[Elem]) -> str:
    out = []
    for e in elems:
        if isinstance(e, Call):
            out.append(e.nf + ("()" if e.parens else ""))
            continue
        arms = []
        for a in e.arms:
            s = f"{{'flowspec': {a.flowspec!r}, 'nfchain': {render(a.chain) if a.chain else repr('')}"
            arms.append(s + (f", 'weight': {a.weight!r}}}" if a.weight is not None else "}"))
        out.append("[" + ", ".join(arms) + "]")
    return " -> ".join(out)


def calls(elems: list[Elem]) -> list[str]:
    """The NFs in the order the resolver numbers them (depth first, arms in order)."""
    out: list[str] = []
    for e in elems:
        if isinstance(e, Call):
            out.append(catalog.lookup(e.nf).name)
        else:
            for a in e.arms:
                out += calls(a.chain or [])
    return out


def tree_shape(expr) -> list:
    """A parsed ChainExpr as the generator's data, to compare with what was generated."""
    out: list = []
    for e in expr.elements:
        if hasattr(e, "arms"):
            out.append(Br([Arm(a.flowspec, tree_shape(a.chain) if a.chain else None, a.weight) for a in e.arms]))
        else:
            out.append(Call(e.name, e.args is not None))
    return out


def spec_text(name: str, elems: list[Elem], flow: list[dict[str, Any]], slo: str) -> str:
    return f"flow f_{name} = {flow!r}\nchain c_{name} = {render(elems)}\nf_{name} : c_{name}{slo}\n"


SLOS = st.sampled_from(["", " @ {'t_min': '1Gbps'}", " @ {'t_min': '500Mbps', 't_max': '10Gbps', 'd_max': '45us'}"])


@bounded(80)
@given(NAMES, chains(), FLOWSPEC, SLOS)
def test_generated_chains_round_trip(name, elems, flow, slo):
    text = spec_text(name, elems, flow, slo)
    tree, errors = parse_tree(text)
    assert not errors, (text, errors)
    (c,) = tree.chains
    assert tree_shape(c.expr) == elems and tree.flows[0].spec == flow
    (g,) = parse_spec(text).chains
    assert [n.nf for n in g.nodes] == calls(elems)
    # every NF is reached from the ingress and reaches the egress
    assert {e.dst for e in g.edges if e.dst >= 0} == {n.id for n in g.nodes} == {e.src for e in g.edges if e.src >= 0}


@bounded(100)
@given(NAMES, chains(), FLOWSPEC, st.data())
def test_mutated_chains_raise_only_spec_error(name, elems, flow, data):
    text = spec_text(name, elems, flow, "")
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(text)))
        j = data.draw(st.integers(i, min(len(text), i + 8)))
        text = text[:i] + data.draw(st.sampled_from(WORDS) | st.text(max_size=3)) + text[j:]
    check(text)


# ----- literals and arguments -----

SCALARS = (st.none() | st.booleans() | st.integers(-10**30, 10**30)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12))
LITERALS = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                        | st.dictionaries(st.text(max_size=5) | st.integers(-9, 9), inner, max_size=3), max_leaves=12)


@bounded(150)
@given(st.dictionaries(st.text(max_size=6), LITERALS, max_size=3))
def test_literals_round_trip(d):
    text = f"flow f = [{d!r}]\nchain c = Monitor\nf : c\n"
    tree, errors = parse_tree(text)
    assert not errors, (text, errors)
    assert tree.flows[0].spec == [d]


ARG_NFS = ["ACL", "NAT", "Tunnel", "IPv4Forward", "LB", "Limiter", "BPF", "Chacha", "Stamp", "Dedup"]


@bounded(120)
@given(st.sampled_from(ARG_NFS), st.data())
def test_random_arguments_raise_only_spec_error(nf, data):
    # argument names from the NF's own schema (or not), values of any literal shape, so the
    # catalogue's value checks see every type
    names = [a["name"] for a in catalog.lookup(nf).args] + ["x"]
    args = data.draw(st.dictionaries(st.sampled_from(names), LITERALS | st.sampled_from(
        ["198.18.0.1", "198.18.0.0/²", "198.18.0.0/" + "9" * 5000, "1-" + "9" * 5000, "aa:bb:cc:dd:ee:ff"]),
        max_size=3))
    rendered = ", ".join(f"{k}={v!r}" for k, v in args.items())
    slo = data.draw(st.sampled_from(["", " @ {1: 2, 't_min': '1Gbps'}", " @ {'t_min': 1e400}",
                                     " @ {'t_min': '1Gbps', 'x': 1}"]))
    check(f"flow f = [{{}}]\nchain c = {nf}({rendered})\nf : c{slo}\n")
