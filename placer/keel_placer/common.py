"""Shared final steps: the rate LP (Lemur §3.2 step 3) and turning choices into a Placement."""

from __future__ import annotations

from dataclasses import dataclass

from .model import HOST, SMARTNIC, SWITCH, ChainResult, NFResult, Placement, SubgroupResult
from .pattern import Host, Pattern, Problem
from .solver import LinearModel

EPS = 1e-7


@dataclass
class Choice:
    """A chain's chosen pattern and the number of server cores it gets."""

    pattern: Pattern
    cores: int


def server_cores_ok(problem: Problem, choices: list[Choice]) -> str | None:
    """Return why the choices overrun some server's cores, or None."""
    used: dict[int, int] = {}
    for ch in choices:
        if ch.pattern.host is not None:
            used[ch.pattern.host[0]] = used.get(ch.pattern.host[0], 0) + ch.cores
    for s, n in used.items():
        srv = problem.topo.servers[s]
        if n > srv.cores:
            return f"server {srv.name} needs {n} cores, has {srv.cores}"
    return None


def switch_fits(problem: Problem, pats: list[Pattern]) -> str | None:
    """Return why the patterns do not fit the switch together, or None."""
    for p in pats:
        if not problem.switch_ok(p):
            name = problem.chains[p.chain].name
            if problem.pisa and p.depth > problem.stage_budget:
                return f"chain {name} needs {p.depth} dependent switch stages, " \
                       f"{problem.stage_budget} are free"
            if problem.pisa:
                return f"chain {name} needs {p.memory:.1f} stages of switch table memory, " \
                       f"{problem.stage_budget} are free"
            return f"chain {name} breaks the OpenFlow switch's fixed table order or table count"
    used = problem.stages_used(pats)
    if used > problem.topo.switch.stages:
        return f"switch needs {used} stages, has {problem.topo.switch.stages}"
    return None


def rate_lp(problem: Problem, choices: list[Choice]) -> list[float] | None:
    """Max aggregate rate given patterns and cores, under t_min, NIC link and SmartNIC
    capacity (Lemur §3.2 'Finding Maximum Marginal Throughput'); None if infeasible."""
    m = LinearModel()
    cols = []
    link: dict[Host, dict[int, float]] = {}
    snic: dict[Host, dict[int, float]] = {}
    for c, ch in enumerate(choices):
        p = ch.pattern
        t_min = problem.chains[c].slo.t_min
        hi = p.value(ch.cores) if p.subgroups else p.cap_gbps
        if hi < t_min - EPS:
            return None
        j = m.var(t_min, max(hi, t_min), 1.0)
        cols.append(j)
        if p.host is not None and p.crossings > 0:
            link.setdefault(p.host, {})[j] = p.crossings
        if p.host is not None and p.smartnic_cycles > 0:
            snic.setdefault(p.host, {})[j] = p.smartnic_cycles / problem.bits
    for h, coefs in link.items():
        m.row(coefs, ub=problem.topo.servers[h[0]].nics[h[1]].gbps)
    for h, coefs in snic.items():
        nic = problem.topo.servers[h[0]].nics[h[1]].smartnic
        m.row(coefs, ub=nic.cycles_per_s / 1e9 if nic else 0.0)
    sol = m.solve()
    if not sol.optimal:
        return None
    return [sol.values[j] for j in cols]


def placement(problem: Problem, algo: str, choices: list[Choice], rates: list[float],
              seconds: float) -> Placement:
    """Assemble the user-visible Placement from per-chain choices and LP rates."""
    out: list[ChainResult] = []
    sg_id = 0
    for c, (ch, rate) in enumerate(zip(choices, rates)):
        g = problem.chains[c]
        p = ch.pattern
        srv = problem.topo.servers[p.host[0]].name if p.host is not None else None
        alloc = p.alloc[min(ch.cores, len(p.alloc) - 1)] if p.subgroups else ()
        node_sg: dict[int, int] = {}
        subgroups = []
        for k, sg in enumerate(p.subgroups):
            for i in sg.nodes:
                node_sg[i] = sg_id
            subgroups.append(SubgroupResult(sg_id, srv or "", alloc[k] if k < len(alloc) else 0,
                                            [g.nodes[i].name for i in sg.nodes]))
            sg_id += 1
        nfs = [NFResult(n.name, n.nf, {SWITCH: "switch", SMARTNIC: "smartnic", HOST: "server"}[t],
                        None if t == SWITCH else srv, node_sg.get(n.id))
               for n, t in zip(g.nodes, p.targets)]
        out.append(ChainResult(g.name, g.slo.t_min, rate, p.latency_us, nfs, subgroups))
    marginal = sum(r - problem.chains[c].slo.t_min for c, r in enumerate(rates))
    return Placement(True, algo, seconds, marginal if abs(marginal) > EPS else 0.0, out,
                     problem.stages_used([ch.pattern for ch in choices]))


def infeasible(algo: str, reason: str, seconds: float) -> Placement:
    return Placement(False, algo, seconds, 0.0, [], 0, reason)

