"""Lemur §5.1 baselines: hw-preferred, sw-preferred, min-bounce and greedy."""

from __future__ import annotations

import time

from .catalog import SERVER
from .common import Choice, infeasible, placement, rate_lp, switch_fits
from .model import HOST, SMARTNIC, SWITCH, Placement
from .pattern import Host, Pattern, Problem, TooLarge

PATTERN_LIMIT = 200_000


def with_smartnic(problem: Problem, c: int, targets: tuple[str, ...], host: Host) -> tuple[str, ...]:
    """Move each server NF to the host's SmartNIC where it runs faster than one core."""
    return tuple(SMARTNIC if t == HOST and problem.nic_faster(c, i, host) else t
                 for i, t in enumerate(targets))


def allocate(problem: Problem, cands: list[list[Pattern]]) -> list[Choice] | None:
    """Pick per chain one candidate placement and its core count, maximising the summed
    rate above t_min on each server (a multiple-choice knapsack solved by DP; blind to the
    links and SmartNICs the chains share, which the rate LP then clips)."""
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


def _round_robin_hosts(problem: Problem, targets: list[tuple[str, ...]]) -> list[Host | None]:
    out: list[Host | None] = []
    k = 0
    for t in targets:
        if all(x == SWITCH for x in t):
            out.append(None)
        else:
            out.append(problem.hosts[k % len(problem.hosts)])
            k += 1
    return out


def _patterns(problem: Problem, prefer_switch: bool) -> list[Pattern]:
    targets = []
    for c in range(len(problem.chains)):
        opts = problem.options(c, problem.hosts[0])
        if prefer_switch:
            targets.append(tuple(SWITCH if SWITCH in o else HOST for o in opts))
        else:
            targets.append(tuple(HOST if SERVER in problem.kinds[c][i].targets else SWITCH
                                 for i, o in enumerate(opts)))
    hosts = _round_robin_hosts(problem, targets)
    pats = []
    for c, (t, h) in enumerate(zip(targets, hosts)):
        if h is not None:
            t = with_smartnic(problem, c, t, h)
        s = problem.chains[c].slo
        pats.append(problem.finish(problem.evaluate(c, h, t), s.t_min, s.t_max))
    return pats


def _even_cores(problem: Problem, pats: list[Pattern]) -> list[Choice] | None:
    """One core per subgroup, then spare cores round-robin over the chains (HW Preferred)."""
    counts = [len(p.subgroups) for p in pats]
    for s, srv in enumerate(problem.topo.servers):
        mine = [c for c, p in enumerate(pats) if p.host is not None and p.host[0] == s and p.subgroups]
        spare = srv.cores - sum(counts[c] for c in mine)
        if spare < 0:
            return None
        while spare > 0:
            grew = False
            for c in mine:
                if spare and pats[c].value(counts[c] + 1) > pats[c].value(counts[c]) + 1e-12:
                    counts[c] += 1
                    spare -= 1
                    grew = True
            if not grew:
                break
    return [Choice(p, n) for p, n in zip(pats, counts)]


def _sequential_cores(problem: Problem, pats: list[Pattern]) -> list[Choice] | None:
    """Greedy (Lemur §5.1): meet each t_min, then spare cores to chains in index order."""
    counts = []
    for p in pats:
        if p.n_min is None:
            return None
        counts.append(p.n_min if p.subgroups else 0)
    for s, srv in enumerate(problem.topo.servers):
        mine = [c for c, p in enumerate(pats) if p.host is not None and p.host[0] == s and p.subgroups]
        spare = srv.cores - sum(counts[c] for c in mine)
        if spare < 0:
            return None
        for c in mine:
            while spare and pats[c].value(counts[c] + 1) > pats[c].value(counts[c]) + 1e-12:
                counts[c] += 1
                spare -= 1
    return [Choice(p, n) for p, n in zip(pats, counts)]


def _finish(problem: Problem, algo: str, pats: list[Pattern], choices: list[Choice] | None,
            t0: float) -> Placement:
    bad = switch_fits(problem, pats)
    if bad:
        return infeasible(algo, bad, time.perf_counter() - t0)
    for p in pats:
        g = problem.chains[p.chain]
        if g.slo.d_max is not None and p.latency_us > g.slo.d_max:
            return infeasible(algo, f"chain {g.name}: latency {p.latency_us:.1f}us exceeds d_max",
                              time.perf_counter() - t0)
    if choices is None:
        return infeasible(algo, "not enough cores for every t_min", time.perf_counter() - t0)
    rates = rate_lp(problem, choices)
    if rates is None:
        return infeasible(algo, "some chain's t_min is not met", time.perf_counter() - t0)
    return placement(problem, algo, choices, rates, time.perf_counter() - t0)


def hw_preferred(problem: Problem) -> Placement:
    """As many NFs as possible on the switch; cores spread evenly over chains."""
    t0 = time.perf_counter()
    pats = _patterns(problem, prefer_switch=True)
    return _finish(problem, "hw-preferred", pats, _even_cores(problem, pats), t0)


def sw_preferred(problem: Problem) -> Placement:
    """Every NF with a software implementation on the server."""
    t0 = time.perf_counter()
    pats = _patterns(problem, prefer_switch=False)
    return _finish(problem, "sw-preferred", pats, allocate(problem, [[p] for p in pats]), t0)


def greedy(problem: Problem) -> Placement:
    """HW-preferred placement; cores first to each t_min, then to chains in order."""
    t0 = time.perf_counter()
    pats = _patterns(problem, prefer_switch=True)
    return _finish(problem, "greedy", pats, _sequential_cores(problem, pats), t0)


def min_bounce(problem: Problem) -> Placement:
    """Per chain the admissible pattern with the fewest switch-server bounces (E2-like)."""
    t0 = time.perf_counter()
    chosen: list[Pattern] = []
    for c, g in enumerate(problem.chains):
        try:
            pats = problem.enumerate(c, g.slo.t_min, g.slo.t_max, g.slo.d_max, PATTERN_LIMIT)
        except TooLarge as e:
            return infeasible("min-bounce", str(e), time.perf_counter() - t0)
        pats.sort(key=lambda p: (round(p.crossings, 9), p.n_min or 0, -p.value(p.n_min or 0),
                                 p.host or (-1, -1)))
        pick = next((p for p in pats if switch_fits(problem, chosen + [p]) is None), None)
        if pick is None:
            return infeasible("min-bounce", f"chain {g.name}: no pattern meets its SLO and fits",
                              time.perf_counter() - t0)
        chosen.append(pick)
    return _finish(problem, "min-bounce", chosen, allocate(problem, [[p] for p in chosen]), t0)
