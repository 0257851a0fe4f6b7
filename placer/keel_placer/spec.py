"""Resolve a parsed spec into chain DAGs: names, sub-chains, branches, SLOs, bindings."""

from __future__ import annotations

import math
import re
from typing import Any

from . import catalog
from .lang import (MAX_DEPTH, Branch, ChainDef, ChainExpr, Diagnostic, NFCall, Pos, SpecError,
                   SpecTree, parse_tree)
from .model import EGRESS, INGRESS, SLO, ChainGraph, Edge, NFNode, Spec

# A chain expands to at most this many NFs (chain references may repeat a sub-chain, and a
# sub-chain that names another twice doubles at each level).
MAX_NODES = 4096

_RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*([kmgt]?)(bps|b/s)\s*$", re.I)
_TIME = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*(ns|us|µs|ms|s)\s*$", re.I)
_RATE_SCALE = {"": 1e-9, "k": 1e-6, "m": 1e-3, "g": 1.0, "t": 1e3}
_TIME_SCALE = {"ns": 1e-3, "us": 1.0, "µs": 1.0, "ms": 1e3, "s": 1e6}


# A rate or a delay always has its unit: a bare number (500, or '500' in com.keel.slo) is
# refused, in the chain language's @ {...} as in the com.keel.slo annotation (source.py),
# since nothing says whether 500 is Mbps or Gbps.


def parse_rate(v: Any) -> float | None:
    """Gbps from '1.1Gbps' or '500Mbps'; None if malformed or without its unit."""
    m = _RATE.match(v) if isinstance(v, str) else None
    return float(m.group(1)) * _RATE_SCALE[m.group(2).lower()] if m else None


def parse_time(v: Any) -> float | None:
    """Microseconds from '45us' or '0.1ms' (positive); None if malformed or without its unit."""
    m = _TIME.match(v) if isinstance(v, str) else None
    if not m or float(m.group(1)) <= 0:
        return None
    return float(m.group(1)) * _TIME_SCALE[m.group(2).lower()]


class _Resolver:
    def __init__(self, tree: SpecTree, errors: list[Diagnostic], cat: catalog.Catalog, complete: bool = False):
        self.tree = tree
        self.cat = cat
        self.complete = complete
        # required arguments left out (with complete): told only when nothing else is wrong
        self.incomplete: list[Diagnostic] = []
        self.errors = errors
        self.funcs = {}
        self.chains: dict[str, ChainDef] = {}
        self.flows = {}
        for kind, defs, table in (("func", tree.funcs, self.funcs), ("chain", tree.chains, self.chains),
                                  ("flow", tree.flows, self.flows)):
            for d in defs:
                if d.name in table:
                    self.err(d.pos, f"duplicate {kind} '{d.name}'")
                table[d.name] = d
        for f in tree.funcs:
            self.check_call(f.call)

    def err(self, pos: Pos, msg: str) -> None:
        self.errors.append(Diagnostic(pos.line, pos.col, msg))

    def check_call(self, call: NFCall) -> catalog.NFKind | None:
        kind = self.cat.lookup(call.name)
        if kind is None:
            self.err(call.pos, f"unknown NF '{call.name}' (known: {', '.join(self.cat.names())})")
            return None
        msg = catalog.check_args(kind, call.args or {})
        if msg:
            bad = next((k for k in (call.args or {}) if msg.startswith(f"bad argument '{k}'")), None)
            self.err(call.arg_pos.get(bad, call.pos) if bad else call.pos, msg)
            return None
        missing = catalog.missing_args(kind, call.args or {}) if self.complete else None
        if missing:
            self.incomplete.append(Diagnostic(call.pos.line, call.pos.col, missing))
        return kind

    def build(self, name: str, flow: str, flowspec: list, slo: SLO, expr: ChainExpr) -> ChainGraph | None:
        g = ChainGraph(name, flow, flowspec, slo, [], [])
        self.used: dict[str, int] = {}
        self.depth, self.too_big = 0, False
        n_err = len(self.errors)
        tails = self.expr(g, expr, [(INGRESS, 1.0)], [name])
        if len(self.errors) > n_err:
            return None
        for t, w in tails:
            g.edges.append(Edge(t, EGRESS, w))
        g.edges = _merge_edges(g.edges)
        return g

    def expr(self, g: ChainGraph, expr: ChainExpr, preds: list[tuple[int, float]],
             stack: list[str]) -> list[tuple[int, float]]:
        if self.too_big:
            return preds
        if self.depth >= MAX_DEPTH:
            self.err(expr.pos, f"chain {g.name} nests branches and chain references more than "
                               f"{MAX_DEPTH} levels deep")
            self.too_big = True
            return preds
        self.depth += 1
        for el in expr.elements:
            if isinstance(el, Branch):
                preds = self.branch(g, el, preds, stack)
            else:
                preds = self.call(g, el, preds, stack)
        self.depth -= 1
        return preds

    def branch(self, g: ChainGraph, br: Branch, preds: list[tuple[int, float]],
               stack: list[str]) -> list[tuple[int, float]]:
        weights = [a.weight if a.weight is not None else 1.0 for a in br.arms]
        total = sum(weights)
        out: list[tuple[int, float]] = []
        for arm, w in zip(br.arms, weights):
            scaled = [(p, pw * w / total) for p, pw in preds]
            out.extend(scaled if arm.chain is None else self.expr(g, arm.chain, scaled, stack))
        return out

    def call(self, g: ChainGraph, call: NFCall, preds: list[tuple[int, float]],
             stack: list[str]) -> list[tuple[int, float]]:
        if call.name in self.chains and call.args is None:
            if call.name in stack:
                cyc = " -> ".join(stack[stack.index(call.name):] + [call.name])
                self.err(call.pos, f"cycle in chain references: {cyc}")
                return preds
            return self.expr(g, self.chains[call.name].expr, preds, stack + [call.name])
        if call.name in self.funcs and call.args is None:
            fcall = self.funcs[call.name].call
            kind = self.cat.lookup(fcall.name)
            if kind is None:
                return preds  # reported at the func definition
            base, args = call.name, dict(fcall.args or {})
        else:
            if call.name in self.tree.broken:
                return preds
            if call.args is None and self.cat.lookup(call.name) is None:
                self.err(call.pos, f"unknown NF or chain '{call.name}'")
                return preds
            kind = self.check_call(call)
            if kind is None:
                return preds
            base, args = kind.name, dict(call.args or {})
        if len(g.nodes) >= MAX_NODES:
            self.err(call.pos, f"chain {g.name} expands to more than {MAX_NODES} NFs")
            self.too_big = True
            return preds
        k = self.used.get(base, 0) + 1
        self.used[base] = k
        node = NFNode(len(g.nodes), base if k == 1 else f"{base}_{k}", kind.name, args,
                      sum(w for _, w in preds), call.pos.line, call.pos.col)
        g.nodes.append(node)
        g.edges.extend(Edge(p, node.id, w) for p, w in preds)
        return [(node.id, node.weight)]

    def slo(self, b) -> SLO | None:
        pos = b.slo_pos or b.pos
        unknown = set(b.slo) - {"t_min", "t_max", "d_max"}
        if unknown:
            self.err(pos, f"unknown SLO key '{sorted(unknown, key=str)[0]}' (expected t_min, t_max, d_max)")
            return None
        t_min = parse_rate(b.slo["t_min"]) if "t_min" in b.slo else 0.0
        t_max = parse_rate(b.slo["t_max"]) if "t_max" in b.slo else math.inf
        d_max = parse_time(b.slo["d_max"]) if "d_max" in b.slo else None
        for key, val in (("t_min", t_min), ("t_max", t_max)):
            if val is None:
                self.err(pos, f"bad SLO {key} {b.slo[key]!r}: expected a rate like '1.1Gbps'")
                return None
        if "d_max" in b.slo and d_max is None:
            self.err(pos, f"bad SLO d_max {b.slo['d_max']!r}: expected a delay like '45us'")
            return None
        if t_max < t_min:
            self.err(pos, f"SLO t_max ({t_max} Gbps) is below t_min ({t_min} Gbps)")
            return None
        return SLO(t_min, t_max, d_max)

    def resolve(self) -> Spec:
        chains: list[ChainGraph] = []
        bound: dict[str, Pos] = {}
        names = [b.chain for b in self.tree.bindings]
        for b in self.tree.bindings:
            if b.flow in self.tree.broken or b.chain in self.tree.broken:
                bound[b.flow] = b.pos
                continue
            if b.flow not in self.flows:
                self.err(b.pos, f"unknown flow '{b.flow}'")
            if b.flow in bound:
                self.err(b.pos, f"flow '{b.flow}' is already bound at line {bound[b.flow].line}")
            bound[b.flow] = b.pos
            if b.chain not in self.chains:
                self.err(b.chain_pos, f"unknown chain '{b.chain}'")
                continue
            slo = self.slo(b)
            if slo is None or b.flow not in self.flows:
                continue
            name = b.chain if names.count(b.chain) == 1 else f"{b.chain}:{b.flow}"
            g = self.build(name, b.flow, self.flows[b.flow].spec, slo, self.chains[b.chain].expr)
            if g is not None:
                chains.append(g)
        for f in self.tree.flows:
            if f.name not in bound and f.name not in self.tree.broken:
                self.err(f.pos, f"unbound flow '{f.name}': no '{f.name} : CHAIN' line uses it")
        # chains that no flow uses are still checked, so their errors are not hidden
        for c in self.tree.chains:
            if c.name not in names:
                self.build(c.name, "", [], SLO(), c.expr)
        return Spec(chains)


def _merge_edges(edges: list[Edge]) -> list[Edge]:
    acc: dict[tuple[int, int], float] = {}
    for e in edges:
        acc[(e.src, e.dst)] = acc.get((e.src, e.dst), 0.0) + e.weight
    return [Edge(s, d, w) for (s, d), w in acc.items()]


def parse_spec(text: str, cat: catalog.Catalog | None = None, complete: bool = False) -> Spec:
    """Parse and resolve spec text against an NF catalogue (default: the library's);
    raise SpecError with every diagnostic if it is bad. With complete, every NF must be given
    its required arguments too (catalog.check_args)."""
    tree, errors = parse_tree(text)
    if errors:
        # Syntax errors only: resolving a tree with holes in it adds noise such as "unbound
        # flow" for a flow whose chain line did not parse.
        raise SpecError(sorted(set(errors), key=lambda d: (d.line, d.col, d.message)))
    resolver = _Resolver(tree, errors, cat or catalog.library(), complete)
    spec = resolver.resolve()
    errors = errors or resolver.incomplete
    if errors:
        raise SpecError(sorted(set(errors), key=lambda d: (d.line, d.col, d.message)))
    if not spec.chains:
        raise SpecError([Diagnostic(1, 1, "no chain is bound to a flow ('FLOW : CHAIN')")])
    return spec
