"""Chains as a function's stack.yml gives them (keel.v1.ChainSource): the placer writes them in
its chain language itself, parses them once, and reports each error by the annotation it is in
and its column in the user's own text. Placements and reasons name chains by function name.

The SLO annotation, com.keel.slo, is keel's one SLO grammar:

    KEY=VALUE[,KEY=VALUE]...

    p99    a delay: a positive number with ns, us, µs, ms or s (the chain language's d_max)
    t_min  a rate: a number with bps, kbps, Mbps, Gbps or Tbps (default 0)
    t_max  a rate, as t_min (default: unbounded; positive, not below t_min)

e.g. p99=100us,t_min=1Gbps,t_max=10Gbps. A bare number (p99=100) is refused: nothing says
which unit it is in. The values are read by spec.parse_time and spec.parse_rate, as the chain
language's @ {'d_max': ..., 't_min': ..., 't_max': ...} reads them: one rule for both.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from . import catalog
from .lang import SpecError
from .model import SLO, Spec
from .spec import parse_rate, parse_spec, parse_time

CHAIN = "com.keel.chain"
SLO_FIELD = "com.keel.slo"


@dataclass(frozen=True)
class Source:
    """One chain as its function's annotations give it."""

    name: str        # the function's name
    expression: str  # com.keel.chain
    slo: str         # com.keel.slo


@dataclass(frozen=True)
class UserError:
    """A problem in one annotation of one chain; column is 1-based in that annotation's text
    (0: the annotation as a whole)."""

    chain: str
    field: str
    column: int
    message: str


class SourceError(Exception):
    """Chains that cannot be used; carries every error found."""

    def __init__(self, errors: list[UserError]):
        super().__init__("; ".join(e.message for e in errors))
        self.errors = errors


_KEYS = {"p99": "d_max", "t_min": "t_min", "t_max": "t_max"}


def parse_slo(text: str) -> tuple[SLO | None, list[tuple[int, str]]]:
    """The SLO of a com.keel.slo annotation, or None and its errors as (column, message)."""
    if not text.strip():
        return None, [(0, "empty SLO (expected e.g. p99=100us,t_min=1Gbps,t_max=10Gbps)")]
    values: dict[str, str] = {}
    col = 1
    for item in text.split(","):
        at = col + len(item) - len(item.lstrip())
        col += len(item) + 1
        key, eq, val = (s.strip() for s in item.partition("="))
        if not eq or not key or not val:
            return None, [(at, f"{item.strip()!r}: expected KEY=VALUE (keys p99, t_min, t_max)")]
        if key not in _KEYS:
            return None, [(at, f"unknown key {key!r} (expected p99, t_min, t_max)")]
        if key in values:
            return None, [(at, f"{key} is given twice")]
        values[key] = val
        if key == "p99" and parse_time(val) is None:
            return None, [(at, f"p99 {val!r}: expected a delay like 100us")]
        if key != "p99" and parse_rate(val) is None:
            return None, [(at, f"{key} {val!r}: expected a rate like 1Gbps")]
    t_min = parse_rate(values.get("t_min", 0))
    t_max = parse_rate(values["t_max"]) if "t_max" in values else math.inf
    if t_max == 0:
        return None, [(0, f"t_max {values['t_max']!r}: must be positive")]
    if t_max < t_min:
        return None, [(0, f"t_max ({t_max:g} Gbps) is below t_min ({t_min:g} Gbps)")]
    d_max = parse_time(values["p99"]) if "p99" in values else None
    return SLO(t_min, t_max, d_max), []


def parse_sources(sources: list[Source], cat: catalog.Catalog | None = None) -> Spec:
    """Parse and resolve chains given by their annotations against an NF catalogue; the
    Spec's chains carry the sources' names. Raises SourceError with every error found."""
    errors: list[UserError] = []
    slos = []
    for s in sources:
        slo, bad = parse_slo(s.slo)
        slos.append(slo)
        errors += [UserError(s.name, SLO_FIELD, c, m) for c, m in bad]
        if "\n" in s.expression:
            errors.append(UserError(s.name, CHAIN, 0, "must be one line"))
    if errors:
        raise SourceError(errors)
    # Flows and bindings first, then one chain per line: an expression that runs on (an
    # unclosed bracket) reaches the next chain's line or the end, never a line the user did
    # not write. (A chain is parsed alone first, at its deploy: then it reaches the end.)
    n = len(sources)
    head = "".join(f"flow f{i} = [{{}}]\nf{i} : c{i}\n" for i in range(n))
    text = head + "".join(f"chain c{i} = {s.expression}\n" for i, s in enumerate(sources))
    try:
        # complete: each NF runs with these arguments, so its required ones must be there
        spec = parse_spec(text, cat, complete=True)
    except SpecError as e:
        raise SourceError([_user_error(d, sources, 2 * n) for d in e.diagnostics]) from None
    by_name = {f"c{i}": i for i in range(n)}
    chains = [dataclasses.replace(g, name=sources[by_name[g.name]].name, slo=slos[by_name[g.name]])
              for g in spec.chains]
    return Spec(chains)


def _user_error(d, sources: list[Source], first: int) -> UserError:
    """A diagnostic of the generated text as an error in the user's annotation: the chain line
    of source i is line first+1+i, its expression after "chain cI = "."""
    i = d.line - first - 1
    if not 0 <= i < len(sources):
        # A line the placer wrote: an expression that ran past its own line (the next one is
        # another chain's) is reported at the end of the last expression.
        i = min(max(i, 0), len(sources) - 1)
        return UserError(sources[i].name, CHAIN, len(sources[i].expression) + 1, d.message)
    expr = sources[i].expression
    col = min(max(d.col - len(f"chain c{i} = "), 1), len(expr) + 1)
    return UserError(sources[i].name, CHAIN, col, d.message)
