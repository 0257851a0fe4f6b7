"""`optimal`: the exact optimum of the placement model as one MILP over patterns x cores x rates.

Lemur §3.2 ("Brute-force Placement") enumerates patterns, searches core allocations and
solves an LP per combination. Here the enumeration feeds a single MILP: a binary x[p,n]
picks pattern p with n cores for its chain, r[p] is the chain's rate. For a fixed pattern
and n the best rate is Pattern.curve[n] (exact greedy max-min over subgroups), so the
MILP's optimum is the model's optimum. Dominated patterns are dropped first, not counting
the shared resources that no choice of patterns can exhaust (they cannot make a difference).
"""

from __future__ import annotations

import time

import numpy as np

from .common import Choice, infeasible, placement, rate_lp
from .model import Placement
from .pattern import Host, Pattern, Problem, TooLarge
from .solver import LinearModel

PATTERN_LIMIT = 200_000


CORE_TIEBREAK = 1e-5  # objective per server core, in Gbps


Slack = frozenset  # of ("link", host), ("smartnic", host), "memory", "tables"


def prune(pats: list[Pattern], slack: Slack = frozenset()) -> list[Pattern]:
    """Drop patterns that another pattern of the same chain and host matches or beats on
    every core count while using no more link, SmartNIC or switch resources. Resources in
    slack (no choice of patterns can exhaust them) do not count."""
    groups: dict[object, list[Pattern]] = {}
    for p in pats:
        groups.setdefault(p.host, []).append(p)
    kinds = [] if "tables" in slack else sorted({k for p in pats for k in p.of_kinds})
    out: list[Pattern] = []
    for host, ps in groups.items():
        width = max(len(p.curve) for p in ps)
        link = ("link", host) not in slack
        snic = ("smartnic", host) not in slack
        memory = "memory" not in slack

        def vec(p: Pattern) -> np.ndarray:
            c = [max(v, -1e18) for v in p.curve]
            c += [c[-1]] * (width - len(c))
            # larger is better in every coordinate
            return np.array(c + [-p.crossings] * link + [-p.smartnic_cycles] * snic + [-p.memory] * memory
                            + [0.0 if k in p.of_kinds else 1.0 for k in kinds])

        ps = sorted(ps, key=lambda p: -float(np.sum(np.clip(vec(p)[:width], 0, None))))
        front = np.empty((0, len(vec(ps[0]))))
        keep: list[Pattern] = []
        for p in ps:
            v = vec(p)
            if len(keep) and np.any(np.all(front >= v - 1e-12, axis=1)):
                continue
            alive = ~np.all(v >= front - 1e-12, axis=1) if len(keep) else np.ones(0, dtype=bool)
            front = np.vstack([front[alive], v])
            keep = [q for q, a in zip(keep, alive) if a] + [p]
        out.extend(keep)
    return out


def slack(problem: Problem, per_chain: list[list[Pattern]]) -> Slack:
    """The shared resources that no choice of one pattern per chain, each at its highest
    rate, can exhaust: a host's NIC link or SmartNIC, the switch's table memory (PISA) or
    its tables (OpenFlow; a PISA switch has no per-kind tables)."""
    out: set = set()
    for h in problem.hosts:
        nic = problem.topo.servers[h[0]].nics[h[1]]
        link = sum(max((p.crossings * p.cap_gbps for p in pats if p.host == h), default=0.0)
                   for pats in per_chain)
        if link <= nic.gbps:
            out.add(("link", h))
        cycles = sum(max((p.smartnic_cycles * p.cap_gbps / problem.bits for p in pats if p.host == h),
                         default=0.0) for pats in per_chain)
        if cycles <= (nic.smartnic.cycles_per_s / 1e9 if nic.smartnic else 0.0):
            out.add(("smartnic", h))
    if sum(max(p.memory for p in pats) for pats in per_chain) <= problem.stage_budget:
        out.add("memory")
    if problem.pisa or len({k for pats in per_chain for p in pats for k in p.of_kinds}) <= problem.stage_budget:
        out.add("tables")
    return frozenset(out)


def prune_all(problem: Problem, per_chain: list[list[Pattern]]) -> list[list[Pattern]]:
    """prune() each chain's patterns, not counting the resources that are in slack."""
    free = slack(problem, per_chain)
    return [prune(pats, free) for pats in per_chain]


def place(problem: Problem, time_limit: float = 600.0) -> Placement:
    """Solve the placement MILP; infeasible Placement with a reason if none exists."""
    t0 = time.perf_counter()
    per_chain: list[list[Pattern]] = []
    try:
        for c, g in enumerate(problem.chains):
            s = g.slo
            pats = problem.enumerate(c, s.t_min, s.t_max, s.d_max, PATTERN_LIMIT)
            if not pats:
                return infeasible("optimal", f"chain {g.name}: no placement meets its SLO "
                                  "(t_min, d_max, switch fit)", time.perf_counter() - t0)
            per_chain.append(prune(pats))
    except TooLarge as e:
        return infeasible("optimal", str(e), time.perf_counter() - t0)
    return select(problem, prune_all(problem, per_chain), "optimal", t0, time_limit)


def select(problem: Problem, per_chain: list[list[Pattern]], algo: str, t0: float,
           time_limit: float, mip_gap: float = 1e-7) -> Placement:
    """Pick one pattern and core count per chain from per_chain (finished, admissible
    patterns over any hosts) maximising the marginal throughput under the servers' cores,
    the NIC links, the SmartNICs and the switch's stages or tables: one MILP."""
    per_chain = _break_symmetry(problem, per_chain)
    m = LinearModel()
    xs: list[list[tuple[int, Pattern, int]]] = []
    cores_rows: dict[int, dict[int, float]] = {}
    link_rows: dict[tuple[int, int], dict[int, float]] = {}
    snic_rows: dict[tuple[int, int], dict[int, float]] = {}
    mem_row: dict[int, float] = {}
    kind_users: dict[str, dict[int, float]] = {}
    for c, pats in enumerate(per_chain):
        t_min = problem.chains[c].slo.t_min
        pick: dict[int, float] = {}
        chain_x: list[tuple[int, Pattern, int]] = []
        for p in pats:
            r = m.var(0.0, p.cap_gbps, 1.0)
            use: dict[int, float] = {}
            bound: dict[int, float] = {r: 1.0}
            counts = [0] if not p.subgroups else _useful_counts(p)
            for n in counts:
                # Among placements of equal throughput, the one with fewer server cores (a
                # chain the switch can run alone stays there): a tie-breaker far below any
                # rate difference that matters (1e-5 Gbps per core).
                x = m.var(0.0, 1.0, -CORE_TIEBREAK * n if p.host is not None else 0.0, integer=True)
                chain_x.append((x, p, n))
                use[x] = 1.0
                bound[x] = -p.value(n)
                if n and p.host is not None:
                    cores_rows.setdefault(p.host[0], {})[x] = float(n)
            pick.update(use)
            m.row(bound, ub=0.0)  # r <= curve(n) of the chosen n
            m.row({r: 1.0, **{x: -t_min for x in use}}, lb=0.0)  # r >= t_min if chosen
            m.row({r: 1.0, **{x: -p.cap_gbps for x in use}}, ub=0.0)  # r = 0 unless chosen
            if p.host is not None and p.crossings > 0:
                link_rows.setdefault(p.host, {})[r] = p.crossings
            if p.host is not None and p.smartnic_cycles > 0:
                snic_rows.setdefault(p.host, {})[r] = p.smartnic_cycles / problem.bits
            for x in use:
                if p.memory:
                    mem_row[x] = p.memory
                for k in p.of_kinds:
                    kind_users.setdefault(k, {})[x] = 1.0
        m.row(pick, lb=1.0, ub=1.0)
        xs.append(chain_x)
    for s, coefs in cores_rows.items():
        m.row(coefs, ub=problem.topo.servers[s].cores)
    for h, coefs in link_rows.items():
        m.row(coefs, ub=problem.topo.servers[h[0]].nics[h[1]].gbps)
    for h, coefs in snic_rows.items():
        nic = problem.topo.servers[h[0]].nics[h[1]].smartnic
        m.row(coefs, ub=nic.cycles_per_s / 1e9 if nic else 0.0)
    if problem.pisa:
        m.row(mem_row, ub=problem.stage_budget)
    else:
        used = {}
        for k, users in kind_users.items():
            hk = m.var(0.0, 1.0, 0.0, integer=True)
            used[hk] = 1.0
            for x in users:
                m.row({x: 1.0, hk: -1.0}, ub=0.0)
        m.row(used, ub=problem.stage_budget)
    sol = m.solve(time_limit=time_limit, mip_gap=mip_gap)
    if not sol.values:
        reason = "no placement meets every chain's t_min within cores, links and switch" \
            if sol.status.lower().startswith("infeasible") else f"solver: {sol.status}"
        return infeasible(algo, reason, time.perf_counter() - t0)
    choices = []
    for chain_x in xs:
        x, p, n = max(chain_x, key=lambda t: sol.values[t[0]])
        choices.append(Choice(p, n))
    rates = rate_lp(problem, choices)
    if rates is None:
        return infeasible(algo, "rate LP infeasible for the MILP's choice", time.perf_counter() - t0)
    out = placement(problem, algo, choices, rates, time.perf_counter() - t0)
    if not sol.optimal:
        out.reason = f"not proven optimal: {sol.status}"
    return out


def _break_symmetry(problem: Problem, per_chain: list[list[Pattern]]) -> list[list[Pattern]]:
    """Identical hosts are interchangeable, so the first chain may as well use the first host
    of each class: its patterns on the others go (the optimum is unchanged, the search halves)."""
    first: dict[tuple, Host] = {}
    for h in problem.hosts:
        first.setdefault(problem.host_class(h), h)
    out = list(per_chain)
    for c, pats in enumerate(per_chain):
        if any(p.host is not None for p in pats):
            out[c] = [p for p in pats if p.host is None or first[problem.host_class(p.host)] == p.host]
            break
    return out


def _useful_counts(p: Pattern) -> list[int]:
    """Core counts worth offering: from n_min up to where the rate stops growing."""
    assert p.n_min is not None
    out = []
    last = None
    for n in range(p.n_min, len(p.curve)):
        v = p.curve[n]
        if last is not None and v <= last + 1e-12:
            continue
        out.append(n)
        last = v
    return out
