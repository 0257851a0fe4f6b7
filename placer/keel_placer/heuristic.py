"""`heuristic`: Lemur's fast placement heuristic (Lemur §3.2, "A Fast, Scalable Heuristic"),
with its choices made jointly instead of one after another (issue 16).

1. Switch-first starting points per chain and host: every switch-capable NF on the switch,
   evicting the NF that costs the server least until the chain fits (per chain, again with
   each NF that evicted kept on the switch, and Lemur's global eviction over all chains),
   plus every server-capable NF on the server.
2. Candidates: moves from each starting point, tried in every combination (a few chosen
   ones when there are many), so no move forces itself on the others. A move takes a
   switch NF that sits between server subgroups to the server (coalescing them) or to the
   SmartNIC (no bounce, subgroups stay apart), or a linear run of server NFs the SmartNIC
   runs faster than a core to it. Offload is chosen with the coalescing, not after it.
3. One small MILP (optimal.select) picks a candidate, a host and a core count per chain
   under the shared cores, NIC links, SmartNICs and switch stages or tables.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, replace

from .catalog import SERVER
from .common import infeasible, switch_fits
from .model import HOST, SMARTNIC, SWITCH, Placement
from .optimal import prune_all, select
from .pattern import Host, Pattern, Problem

Targets = tuple[str, ...]
# Seeds whose units have more combinations of moves than this try only a few of them.
EXHAUSTIVE_CHOICES = 64
# The candidate MILP is small; this only bounds pathological inputs.
MILP_SECONDS = 3.0
# Relative MILP gap: proving the last 0.1 % costs most of the time on symmetric racks.
MILP_GAP = 1e-3


def _server_cost(problem: Problem, c: int, i: int) -> float:
    """Server cycles NF i adds per chain packet: its cycles on the share of traffic it sees."""
    return problem.chains[c].nodes[i].weight * problem.cycles[c][i]


def _order_breakers(problem: Problem, c: int, targets: list[str]) -> set[int]:
    """The switch NFs of chain c on an edge that goes against the OpenFlow switch's fixed
    table order (Lemur §5.3); none on a PISA switch."""
    if problem.pisa:
        return set()
    kinds = problem.kinds[c]
    out: set[int] = set()
    for e in problem.chains[c].edges:
        if (e.src >= 0 and e.dst >= 0 and targets[e.src] == SWITCH and targets[e.dst] == SWITCH
                and (kinds[e.src].openflow_rank or 0) >= (kinds[e.dst].openflow_rank or 0)):
            out |= {e.src, e.dst}
    return out


def _evict(problem: Problem, targets: dict[int, list[str]], fits,
           pinned: frozenset[tuple[int, int]] = frozenset()) -> bool:
    """Lemur §3.2 step 1: move the cheapest server-capable switch NF of the chains in targets
    (but not the (chain, NF) pairs in pinned) to the server until fits(); False if what is
    left on the switch cannot be made to fit. Cheapest is by the server cycles it adds per
    chain packet: an NF in one of three branch arms costs the server a third of its cycles,
    and Lemur's rationale (the cheap NF is the easier one to pack on the server) is about
    that load. While some chain breaks the OpenFlow table order, only NFs on the offending
    edges are candidates: evicting any other cannot repair it."""
    while not fits():
        movable = [(_server_cost(problem, c, i), c, i) for c, t in targets.items()
                   for i, x in enumerate(t) if x == SWITCH and SERVER in problem.kinds[c][i].targets
                   and (c, i) not in pinned]
        breakers = {(c, i) for c, t in targets.items() for i in _order_breakers(problem, c, t)}
        if breakers:
            movable = [m for m in movable if m[1:] in breakers]
        if not movable:
            return False
        _, c, i = min(movable)
        targets[c][i] = HOST
    return True


def _first_choice(opts: list[list[str]]) -> list[str]:
    return [SWITCH if SWITCH in o else (HOST if HOST in o else o[0]) for o in opts]


def global_switch_first(problem: Problem) -> list[Targets | None]:
    """Lemur's step 1 over all chains at once (cheapest NF evicted first, whichever chain it
    is in); None for every chain when the switch-only NFs do not fit."""
    host = problem.hosts[0]
    n = len(problem.chains)
    if any(not o for c in range(n) for o in problem.options(c, host)):
        return [None] * n
    targets = {c: _first_choice(problem.options(c, host)) for c in range(n)}

    def fits() -> bool:
        pats = [problem.evaluate(c, host, tuple(t)) for c, t in targets.items()]
        return switch_fits(problem, pats) is None

    if not _evict(problem, targets, fits):
        return [None] * n
    return [tuple(targets[c]) for c in range(n)]


def _switch_first(problem: Problem, c: int, host: Host, keep: int | None = None) -> Targets | None:
    """Lemur's step 1 for chain c alone, NF keep (if any) staying on the switch; None if the
    chain's switch part cannot be made to fit that way."""
    local = {c: _first_choice(problem.options(c, host))}
    pinned = frozenset() if keep is None else frozenset([(c, keep)])
    if not _evict(problem, local, lambda: problem.switch_ok(problem.evaluate(c, host, tuple(local[c]))),
                  pinned):
        return None
    return tuple(local[c])


def _seeds(problem: Problem, c: int, host: Host, glob: Targets | None) -> list[Targets]:
    """Starting placements of chain c on host: switch-first for this chain alone, Lemur's
    global switch-first, and every server-capable NF on the server. Cheapest-first eviction
    may take an NF off the switch whose place there is worth more than its cycles (a branch
    point that keeps the arms' subgroups apart, a chain's head that saves a bounce): the
    OpenFlow table order conflicts over pairs of NFs, and either one may leave. So also
    switch-first again with each NF it evicted kept on the switch; step 2 never moves an NF
    back to the switch (Lemur §3.2)."""
    opts = problem.options(c, host)
    if any(not o for o in opts):
        return []
    out = []
    local = _switch_first(problem, c, host)
    if local is not None:
        out.append(local)
        first = _first_choice(opts)
        for i, t in enumerate(local):
            if first[i] == SWITCH and t != SWITCH:
                seed = _switch_first(problem, c, host, keep=i)
                if seed is not None:
                    out.append(seed)
    out.append(tuple(HOST if HOST in o else o[0] for o in opts))
    if glob is not None:
        out.append(tuple(t if t in o else (HOST if HOST in o else o[0]) for t, o in zip(glob, opts)))
    return list(dict.fromkeys(out))


@dataclass(frozen=True)
class Unit:
    """NFs the candidates move together, the targets they may move to, and the connected
    run of switch NFs they belong to (-1 for server NFs)."""

    nodes: tuple[int, ...]
    moves: tuple[str, ...]
    run: int = -1


def _components(problem: Problem, c: int, members: list[int], linear: bool) -> list[tuple[int, ...]]:
    """Split members into the runs that chain edges connect. linear: an edge joins two members
    only if it is the source's only way out and the destination's only way in, so a branch or
    merge point ends a run."""
    g = problem.chains[c]
    parent = {i: i for i in members}

    def find(x: int) -> int:
        while parent[x] != x:
            x = parent[x]
        return x

    for e in g.edges:
        if e.src in parent and e.dst in parent and (
                not linear or (len(g.succ(e.src)) == 1 and len(g.pred(e.dst)) == 1)):
            parent[find(e.src)] = find(e.dst)
    runs: dict[int, list[int]] = {}
    for i in members:
        runs.setdefault(find(i), []).append(i)
    return sorted(tuple(sorted(r)) for r in runs.values())


def _units(problem: Problem, c: int, host: Host, targets: Targets) -> list[Unit]:
    """Lemur §3.2 step 2's moves from a seed ("each PISA switch NF, or combinations thereof"):
    - each NF of a connected run of switch NFs that touches two server subgroups, or one
      both upstream and downstream, may move to the server (the whole run moved joins them:
      a bounce and a core fewer) or to the SmartNIC (no bounce, the subgroups stay apart).
      NF by NF, so a branch point may join one arm without the others and a stateful NF may
      join its upstream subgroup while the rest of its run goes to the SmartNIC: either
      would otherwise make a heavy subgroup unreplicable;
    - each NF of such a run next to NFs the SmartNIC runs faster than a core may follow
      them there;
    - a linear run of server NFs the SmartNIC runs faster than a core may move to it
      (splitting its subgroup if it sits inside one)."""
    g = problem.chains[c]
    opts = problem.options(c, host)
    p = problem.evaluate(c, host, targets)
    sg_of = {i: k for k, sg in enumerate(p.subgroups) for i in sg.nodes}
    faster = {i for i, t in enumerate(targets) if t == HOST and problem.nic_faster(c, i, host)}
    out = [Unit(run, (SMARTNIC,)) for run in _components(problem, c, sorted(faster), linear=True)]
    movable = [i for i, t in enumerate(targets) if t == SWITCH and (HOST in opts[i] or SMARTNIC in opts[i])]
    for r, run in enumerate(_components(problem, c, movable, linear=False)):
        members = set(run)
        up = {sg_of[e.src] for e in g.edges if e.dst in members and e.src in sg_of}
        down = {sg_of[e.dst] for e in g.edges if e.src in members and e.dst in sg_of}
        near = {e.src for e in g.edges if e.dst in members} | {e.dst for e in g.edges if e.src in members}
        joins = len(up | down) >= 2 or bool(up and down)
        if not joins and not near & faster:
            continue
        for i in run:
            moves = tuple(t for t, ok in ((HOST, joins), (SMARTNIC, True)) if ok and t in opts[i])
            if moves:
                out.append(Unit((i,), moves, r))
    return out


def _choices(units: list[Unit]) -> list[tuple[str | None, ...]]:
    """Every combination of the units' moves (None: the unit stays) when there are few; else
    the seed, each move alone, each run of switch NFs whole on each target, and every unit
    on each target it can take."""
    if math.prod(len(u.moves) + 1 for u in units) <= EXHAUSTIVE_CHOICES:
        return list(itertools.product(*[(None, *u.moves) for u in units]))
    out: list[tuple[str | None, ...]] = [(None,) * len(units)]
    for k, u in enumerate(units):
        for m in u.moves:
            out.append(tuple(m if j == k else None for j in range(len(units))))
    for target in (HOST, SMARTNIC):
        for r in {u.run for u in units if u.run >= 0}:
            out.append(tuple(target if u.run == r and target in u.moves else None for u in units))
        out.append(tuple(target if target in u.moves else None for u in units))
    return list(dict.fromkeys(out))


def candidates(problem: Problem, c: int, host: Host, glob: Targets | None) -> list[Pattern]:
    """Step 2: the admissible candidate patterns of chain c on host."""
    s = problem.chains[c].slo
    seen: set[Targets] = set()
    out: list[Pattern] = []
    for seed in _seeds(problem, c, host, glob):
        units = _units(problem, c, host, seed)
        for choice in _choices(units):
            t = list(seed)
            for u, target in zip(units, choice):
                for i in u.nodes:
                    t[i] = target or t[i]
            v = tuple(t)
            if v in seen:
                continue
            seen.add(v)
            p = problem.finish(problem.evaluate(c, host, v), s.t_min, s.t_max)
            if problem.admissible(p, s.d_max):
                out.append(p)
    return out


def place(problem: Problem) -> Placement:
    """Run the three heuristic steps; infeasible Placement with a reason if none works."""
    t0 = time.perf_counter()
    glob = global_switch_first(problem)
    per_chain: list[list[Pattern]] = []
    for c, g in enumerate(problem.chains):
        pats: list[Pattern] = []
        by_class: dict[tuple, list[Pattern]] = {}
        for host in problem.hosts:
            key = problem.host_class(host)
            if key in by_class:
                pats += [replace(p, host=host if p.host is not None else None)
                         for p in by_class[key] if p.host is not None]
                continue
            by_class[key] = candidates(problem, c, host, glob[c])
            pats += by_class[key]
        if not pats:
            return infeasible("heuristic", f"chain {g.name}: no candidate placement meets its SLO "
                              "(t_min, d_max, switch fit)", time.perf_counter() - t0)
        per_chain.append(pats)
    return select(problem, prune_all(problem, per_chain), "heuristic", t0, MILP_SECONDS, MILP_GAP)
