"""`heuristic`: Lemur's fast placement heuristic (Lemur §3.2, "A Fast, Scalable Heuristic"),
with its choices made jointly instead of one after another (issue 16).

1. Switch-first starting points per chain and host: every switch-capable NF on the switch,
   evicting the cheapest NF until the chain fits (per chain, and Lemur's global eviction
   over all chains), plus every server-capable NF on the server.
2. Coalescing candidates: the runs of switch NFs that touch two server subgroups (between
   consecutive subgroups, or the branch point of sibling arms) may move to the server;
   every subset of them is a candidate (a few chosen subsets when there are many), so a
   merge that would make a heavy subgroup non-replicable never forces itself on the others.
   Each candidate also comes with its SmartNIC offload: server NFs the SmartNIC runs faster
   than a core, and then the switch NFs whose neighbours are all offloaded.
3. One small MILP (optimal.select) picks a candidate, a host and a core count per chain
   under the shared cores, NIC links, SmartNICs and switch stages or tables.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import replace

from .catalog import EBPF, SERVER
from .common import infeasible, switch_fits
from .model import HOST, SMARTNIC, SWITCH, Placement
from .optimal import prune, select
from .pattern import Host, Pattern, Problem

Targets = tuple[str, ...]
# Coalescing runs beyond this many are not tried in every subset (2^k candidates).
EXHAUSTIVE_RUNS = 4
# The candidate MILP is small; this only bounds pathological inputs.
MILP_SECONDS = 3.0
# Relative MILP gap: proving the last 0.1 % costs most of the time on symmetric racks.
MILP_GAP = 1e-3


def with_smartnic(problem: Problem, c: int, targets: Targets, host: Host) -> Targets:
    """Move server NFs to the host's SmartNIC where it runs them faster than one core."""
    nic = problem.topo.servers[host[0]].nics[host[1]].smartnic
    if nic is None:
        return tuple(HOST if t == SMARTNIC else t for t in targets)
    ghz = problem.topo.servers[host[0]].ghz
    out = list(targets)
    for i, t in enumerate(targets):
        k = problem.kinds[c][i]
        if t == HOST and EBPF in k.targets and k.smartnic_cycles:
            if nic.cycles_per_s / k.smartnic_cycles > ghz * 1e9 / problem.cycles[c][i]:
                out[i] = SMARTNIC
    return tuple(out)


def _fill_smartnic(problem: Problem, c: int, targets: Targets, opts: list[list[str]]) -> Targets:
    """Offload the switch NFs whose every neighbour is an offloaded NF: on the switch they
    cost the chain a bounce over the NIC link (Lemur §4.3 keeps such runs on the SmartNIC)."""
    g = problem.chains[c]
    out = list(targets)
    changed = True
    while changed:
        changed = False
        for i, t in enumerate(out):
            if t != SWITCH or SMARTNIC not in opts[i]:
                continue
            near = [e.src for e in g.pred(i)] + [e.dst for e in g.succ(i)]
            if near and all(j >= 0 and out[j] == SMARTNIC for j in near):
                out[i] = SMARTNIC
                changed = True
    return tuple(out)


def _evict(problem: Problem, targets: dict[int, list[str]], fits) -> bool:
    """Move the cheapest server-capable switch NF of the chains in targets to the server
    until fits(); False if the switch-only NFs alone do not fit."""
    while not fits():
        movable = [(problem.cycles[c][i], c, i) for c, t in targets.items()
                   for i, x in enumerate(t) if x == SWITCH and SERVER in problem.kinds[c][i].targets]
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


def _seeds(problem: Problem, c: int, host: Host, glob: Targets | None) -> list[Targets]:
    """Starting placements of chain c on host: switch-first for this chain alone, Lemur's
    global switch-first, and every server-capable NF on the server."""
    opts = problem.options(c, host)
    if any(not o for o in opts):
        return []
    local = {c: _first_choice(opts)}
    _evict(problem, local, lambda: problem.switch_ok(problem.evaluate(c, host, tuple(local[c]))))
    server = tuple(HOST if HOST in o else o[0] for o in opts)
    out = [tuple(local[c]), server]
    if glob is not None:
        out.append(tuple(t if t in o else (HOST if HOST in o else o[0]) for t, o in zip(glob, opts)))
    return list(dict.fromkeys(out))


def _runs(problem: Problem, c: int, host: Host, targets: Targets) -> list[tuple[int, ...]]:
    """Connected runs of server-capable switch NFs that touch two server subgroups, or one
    subgroup both upstream and downstream: moving a run to the server joins them."""
    g = problem.chains[c]
    opts = problem.options(c, host)
    movable = [i for i, t in enumerate(targets) if t == SWITCH and HOST in opts[i]]
    if not movable:
        return []
    p = problem.evaluate(c, host, targets)
    sg_of = {i: k for k, sg in enumerate(p.subgroups) for i in sg.nodes}
    parent = {i: i for i in movable}

    def find(x: int) -> int:
        while parent[x] != x:
            x = parent[x]
        return x

    for e in g.edges:
        if e.src in parent and e.dst in parent:
            parent[find(e.src)] = find(e.dst)
    comps: dict[int, list[int]] = {}
    for i in movable:
        comps.setdefault(find(i), []).append(i)
    out = []
    for nodes in comps.values():
        members = set(nodes)
        up = {sg_of[e.src] for e in g.edges if e.dst in members and e.src in sg_of}
        down = {sg_of[e.dst] for e in g.edges if e.src in members and e.dst in sg_of}
        if len(up | down) >= 2 or (up and down):
            out.append(tuple(sorted(nodes)))
    return sorted(out)


def _subsets(runs: list[tuple[int, ...]]) -> list[tuple[tuple[int, ...], ...]]:
    """Every subset of the runs when there are few; else none, each one, all but each one, all."""
    k = len(runs)
    if k <= EXHAUSTIVE_RUNS:
        return [s for r in range(k + 1) for s in itertools.combinations(runs, r)]
    out = [(), tuple(runs)]
    out += [(r,) for r in runs]
    out += [tuple(x for x in runs if x != r) for r in runs]
    return out


def candidates(problem: Problem, c: int, host: Host, glob: Targets | None) -> list[Pattern]:
    """Step 2: the admissible candidate patterns of chain c on host."""
    g = problem.chains[c]
    s = g.slo
    opts = problem.options(c, host)
    has_snic = problem.topo.servers[host[0]].nics[host[1]].smartnic is not None
    seen: set[Targets] = set()
    out: list[Pattern] = []
    for seed in _seeds(problem, c, host, glob):
        for moved in _subsets(_runs(problem, c, host, seed)):
            t = list(seed)
            for run in moved:
                for i in run:
                    t[i] = HOST
            variants = [tuple(t)]
            if has_snic:
                snic = with_smartnic(problem, c, tuple(t), host)
                variants += [snic, _fill_smartnic(problem, c, snic, opts)]
            for v in variants:
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
        per_chain.append(prune(pats))
    return select(problem, per_chain, "heuristic", t0, MILP_SECONDS, MILP_GAP)
