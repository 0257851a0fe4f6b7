"""`heuristic`: Lemur's fast placement heuristic (Lemur §3.2, "A Fast, Scalable Heuristic").

1. Put every NF with a switch implementation on the switch, then move the lowest-cycle
   NF off until the switch model fits. Later steps never add an NF to the switch.
2. Coalesce server subgroups by moving the switch NFs between them to the server:
   baseline, strict+aggressive and strict+conservative placements.
3. For each placement allocate cores and solve the rate LP; keep the best.
"""

from __future__ import annotations

import math
import time

from .catalog import EBPF, SERVER
from .common import Choice, infeasible, placement, rate_lp, switch_fits
from .model import HOST, SMARTNIC, SWITCH, Placement
from .pattern import Host, Pattern, Problem

Targets = list[tuple[str, ...]]


def switch_first(problem: Problem) -> Targets | str:
    """Step 1: everything switch-capable on the switch, then evict cheapest NFs until it fits."""
    targets: list[list[str]] = []
    for c in range(len(problem.chains)):
        opts = problem.options(c, problem.hosts[0])
        targets.append([SWITCH if SWITCH in o else HOST for o in opts])
    while True:
        pats = [problem.evaluate(c, problem.hosts[0], tuple(t)) for c, t in enumerate(targets)]
        if switch_fits(problem, pats) is None:
            return [tuple(t) for t in targets]
        movable = [(problem.cycles[c][i], c, i) for c, t in enumerate(targets)
                   for i, x in enumerate(t) if x == SWITCH and SERVER in problem.kinds[c][i].targets]
        if not movable:
            return f"NFs that only run on the switch do not fit it: {switch_fits(problem, pats)}"
        _, c, i = min(movable)
        targets[c][i] = HOST


def with_smartnic(problem: Problem, c: int, targets: tuple[str, ...], host: Host) -> tuple[str, ...]:
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


def assign_hosts(problem: Problem, targets: Targets) -> list[Host | None]:
    """Give each chain a (server, NIC): biggest core demand first, to the freest server."""
    free = {i: s.cores for i, s in enumerate(problem.topo.servers)}
    demand = []
    for c, t in enumerate(targets):
        if all(x == SWITCH for x in t):
            demand.append((0, c))
            continue
        p = _finish(problem, problem.evaluate(c, problem.hosts[0], t))
        demand.append((p.n_min if p.n_min is not None else len(p.curve), c))
    hosts: list[Host | None] = [None] * len(targets)
    for need, c in sorted(demand, key=lambda d: (-d[0], d[1])):
        if all(x == SWITCH for x in targets[c]):
            continue
        wants_snic = any(EBPF in problem.kinds[c][i].targets and problem.kinds[c][i].smartnic_cycles
                         and x == HOST for i, x in enumerate(targets[c]))
        best = max(problem.hosts, key=lambda h: (
            free[h[0]] - need,
            wants_snic and problem.topo.servers[h[0]].nics[h[1]].smartnic is not None,
            problem.topo.servers[h[0]].nics[h[1]].gbps, -h[0], -h[1]))
        hosts[c] = best
        free[best[0]] -= need
    return hosts


def _finish(problem: Problem, p: Pattern) -> Pattern:
    s = problem.chains[p.chain].slo
    return problem.finish(p, s.t_min, s.t_max)


def _routes(problem: Problem, p: Pattern) -> list[tuple[int, ...]]:
    """Switch-NF runs that join two server subgroups of one chain (all server-capable)."""
    g = problem.chains[p.chain]
    sg_of = {i: k for k, sg in enumerate(p.subgroups) for i in sg.nodes}
    succ: dict[int, list[int]] = {}
    for e in g.edges:
        if e.src >= 0 and e.dst >= 0:
            succ.setdefault(e.src, []).append(e.dst)
    routes: set[tuple[int, ...]] = set()

    def walk(start_sg: int, node: int, path: tuple[int, ...]) -> None:
        for nxt in succ.get(node, []):
            t = p.targets[nxt]
            if t == HOST and sg_of[nxt] != start_sg and path:
                routes.add(path)
            elif t == SWITCH and SERVER in problem.kinds[p.chain][nxt].targets and len(path) < 8:
                walk(start_sg, nxt, path + (nxt,))

    for i, k in sg_of.items():
        walk(k, i, ())
    return sorted(routes)


def coalesce(problem: Problem, p: Pattern, mode: str) -> Pattern:
    """Step 2 on one chain: apply strict coalescing plus `mode` (aggressive|conservative)."""
    t_min = problem.chains[p.chain].slo.t_min
    d_max = problem.chains[p.chain].slo.d_max
    host = p.host
    if host is None:
        return p
    cores = problem.topo.servers[host[0]].cores
    while True:
        best: tuple[float, Pattern] | None = None
        sg_of = {i: sg for sg in p.subgroups for i in sg.nodes}
        g = problem.chains[p.chain]
        for route in _routes(problem, p):
            targets = list(p.targets)
            for i in route:
                targets[i] = HOST
            q = _finish(problem, problem.evaluate(p.chain, host, tuple(targets)))
            if not problem.admissible(q, d_max):
                continue
            merged = next(sg for sg in q.subgroups if route[0] in sg.nodes)
            joined = {id(sg_of[e.src]) for e in g.edges if e.dst == route[0] and e.src in sg_of} | \
                {id(sg_of[e.dst]) for e in g.edges if e.src == route[-1] and e.dst in sg_of}
            before = min((problem.subgroup_rate(host, sg, 1) for sg in p.subgroups if id(sg) in joined),
                         default=math.inf)
            m2 = problem.subgroup_rate(host, merged, 2)
            mmax = problem.subgroup_rate(host, merged, cores)
            # strict: two cores on the merged subgroup beat one core on each of the two
            strict = m2 > before + 1e-12
            if mode == "aggressive":  # the chain can still reach t_min
                extra = mmax >= t_min - 1e-12
            else:  # conservative: the chain's one-core-per-subgroup rate does not drop
                extra = _one_core_rate(problem, q) >= _one_core_rate(problem, p) - 1e-12
            if strict or extra:
                score = m2
                if best is None or score > best[0]:
                    best = (score, q)
        if best is None:
            return p
        p = best[1]


def _one_core_rate(problem: Problem, p: Pattern) -> float:
    assert p.host is not None
    return min((problem.subgroup_rate(p.host, sg, 1) for sg in p.subgroups), default=math.inf)


def allocate(problem: Problem, cands: list[list[Pattern]]) -> list[Choice] | None:
    """Pick per chain one candidate placement and its core count, maximising the summed
    rate above t_min on each server (a multiple-choice knapsack solved by DP)."""
    choices: list[Choice | None] = [None] * len(cands)
    by_server: dict[int, list[int]] = {}
    for c, ps in enumerate(cands):
        ps = [p for p in ps if p.n_min is not None]
        if not ps:
            return None
        cands[c] = ps
        if ps[0].host is None or not any(p.subgroups for p in ps):
            choices[c] = Choice(ps[0], 0)
        else:
            by_server.setdefault(ps[0].host[0], []).append(c)
    for s, chains in by_server.items():
        cores = problem.topo.servers[s].cores
        best: dict[int, tuple[float, tuple[Choice, ...]]] = {0: (0.0, ())}
        for c in chains:
            t_min = problem.chains[c].slo.t_min
            nxt: dict[int, tuple[float, tuple[Choice, ...]]] = {}
            for used, (val, picked) in best.items():
                for p in cands[c]:
                    for n in range(p.n_min, cores - used + 1):
                        v = val + p.value(n) - t_min
                        key = used + n
                        if key not in nxt or v > nxt[key][0] + 1e-12:
                            nxt[key] = (v, picked + (Choice(p, n),))
            if not nxt:
                return None
            best = nxt
        _, picked = max(best.values(), key=lambda vp: (vp[0], -sum(ch.cores for ch in vp[1])))
        for c, ch in zip(chains, picked):
            choices[c] = ch
    return [ch for ch in choices if ch is not None]


def _solve(problem: Problem, cands: list[list[Pattern]]) -> tuple[list[Choice], list[float]] | str:
    """Step 3: core allocation then the rate LP; a reason string if infeasible."""
    bad = [problem.chains[c].name for c, ps in enumerate(cands) if not ps]
    if bad:
        return f"chain(s) {', '.join(bad)} cannot meet t_min/d_max with the switch-first placement"
    choices = allocate(problem, [list(ps) for ps in cands])
    if choices is None:
        return "not enough cores for every chain's t_min"
    rates = rate_lp(problem, choices)
    if rates is None:
        return "links or SmartNICs cannot carry every chain's t_min"
    return choices, rates


def place(problem: Problem) -> Placement:
    """Run the three heuristic steps; infeasible Placement with a reason if none works."""
    t0 = time.perf_counter()
    step1 = switch_first(problem)
    if isinstance(step1, str):
        return infeasible("heuristic", step1, time.perf_counter() - t0)
    cache: dict[tuple[int, Host | None], list[Pattern]] = {}

    def candidates(c: int, host: Host | None) -> list[Pattern]:
        if (c, host) not in cache:
            t = with_smartnic(problem, c, step1[c], host) if host is not None else step1[c]
            base = _finish(problem, problem.evaluate(c, host, t))
            # Step 2: baseline, strict+aggressive and strict+conservative coalescing.
            variants = [base, coalesce(problem, base, "aggressive"), coalesce(problem, base, "conservative")]
            # Lemur picks the best of the three whole placements; keel lets the core
            # allocation choose per chain among them, which is never worse.
            cache[(c, host)] = [v for v in variants if problem.admissible(v, _d_max(problem, c))]
        return cache[(c, host)]

    hosts = assign_hosts(problem, step1)
    best = _solve(problem, [candidates(c, h) for c, h in enumerate(hosts)])
    if len(problem.hosts) > 1:
        # With several servers, move single chains to another host while that helps.
        for _ in range(3):
            improved = False
            for c, h in enumerate(hosts):
                if h is None:
                    continue
                for alt in problem.hosts:
                    if alt == hosts[c]:
                        continue
                    trial = hosts[:c] + [alt] + hosts[c + 1:]
                    res = _solve(problem, [candidates(i, x) for i, x in enumerate(trial)])
                    if not isinstance(res, str) and (isinstance(best, str)
                                                     or sum(res[1]) > sum(best[1]) + 1e-9):
                        best, hosts, improved = res, trial, True
            if not improved:
                break
    if isinstance(best, str):
        return infeasible("heuristic", best, time.perf_counter() - t0)
    return placement(problem, "heuristic", best[0], best[1], time.perf_counter() - t0)


def _d_max(problem: Problem, c: int) -> float | None:
    return problem.chains[c].slo.d_max
