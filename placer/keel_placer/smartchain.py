"""SmartChain: partition an element graph between a bump-in-the-wire SmartNIC and the CPU.

SmartChain (§III-IV) places each element at one of three positions, the SmartNIC's ingress
part, the CPU, or the SmartNIC's egress part, so that a packet crosses PCIe at most once
each way, suitable elements run on the SmartNIC, and element dependencies still hold.

- Dependency analyzer (§III-A): branch dependencies from the graph's shape, action
  dependencies from each element's declared read and write sets of header fields.
- Suitability analyzer (§III-B, eq. 1): s_e = t_e^CPU - t_e^NIC.
- Optimized placer (§IV-B, Fig. 6): a 0-1 ILP solved with HiGHS, then the element graph is
  rebuilt from the positions. Strawmen (§IV-A): `sequential` and `suitability-greedy`.

Every placement, the ILP's and the strawmen's, is scored the same way (`score`): the
latency benefit over running every element on the CPU, i.e. the summed suitability of the
SmartNIC's elements plus t_trans for each PCIe round trip fewer than the all-CPU graph's
one, counted on the graph's worst forwarding path.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from .catalog import Catalog
from .model import EGRESS, INGRESS, ChainGraph
from .solver import LinearModel
from .spec import parse_spec

T_TRANS_US = 26.0  # §II, Fig. 3: the SmartNIC <-> CPU round trip on the paper's Netronome testbed
NIC_IG, CPU, NIC_EG = 0, 1, 2  # p in P = {S_ig, C, S_eg}, in packet order (eq. 6-7)
POSITIONS = ("nic-ingress", "cpu", "nic-egress")
ALGOS = ("smartchain", "sequential", "suitability-greedy")
MAX_PATHS = 100_000


class ElementsError(ValueError):
    """An elements file that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class Element:
    """An element kind with its measured costs (SmartChain Table I) and header actions."""

    name: str
    t_cpu_us: float
    t_nic_us: float
    cap_cpu_gbps: float
    cap_nic_gbps: float
    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()

    @property
    def suitability(self) -> float:
        """s_e = t_e^C - t_e^S (§III-B, eq. 1), in microseconds."""
        return self.t_cpu_us - self.t_nic_us


# SmartChain Table I. ">10Gbps" is taken as 10 Gbps. The read/write sets are keel's reading
# of each element's description (the paper gives none): only the Load Balancer rewrites a
# header (the destination address it balances to).
FIVE_TUPLE = frozenset({"ip.src", "ip.dst", "ip.proto", "l4.sport", "l4.dport"})
TABLE_I: dict[str, Element] = {e.name: e for e in (
    Element("HeaderClassifier", 14.8, 0.8, 4.0, 10.0, FIVE_TUPLE),
    Element("Logger", 15.0, 245.0, 4.0, 2.0, FIVE_TUPLE),
    Element("Monitor", 4.0, 24.0, 10.0, 3.2, FIVE_TUPLE),
    Element("PayloadAnalyzer", 800.0, 65.0, 0.2, 5.0, frozenset({"payload"})),
    Element("Alert", 15.1, 2.1, 4.0, 10.0, FIVE_TUPLE | {"payload"}),
    Element("LoadBalancer", 14.5, 0.5, 4.0, 10.0, FIVE_TUPLE, frozenset({"ip.dst", "eth.dst"})),
)}


@dataclass
class Graph:
    """An element graph: node i runs element kinds[i]; edges between node ids, INGRESS and
    EGRESS. Several chains form one big graph (§IV-B3); chain[i] says whose node i is and
    rate_gbps[c] is chain c's estimated throughput theta^est (eq. 8)."""

    names: list[str]
    kinds: list[Element]
    edges: list[tuple[int, int]]
    chain: list[int] = field(default_factory=list)
    chain_names: list[str] = field(default_factory=list)
    rate_gbps: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.chain:
            self.chain = [0] * len(self.names)
        if not self.chain_names:
            self.chain_names = ["chain"]
        if not self.rate_gbps:
            self.rate_gbps = [1.0] * len(self.chain_names)

    def succ(self, n: int) -> list[int]:
        return [d for s, d in self.edges if s == n]

    def topo_order(self) -> list[int]:
        """Node ids in a topological order (Kahn's, smallest id first: chain order)."""
        indeg = {i: 0 for i in range(len(self.names))}
        for s, d in self.edges:
            if d >= 0 and s >= 0:
                indeg[d] += 1
        ready = sorted(i for i, k in indeg.items() if k == 0)
        out: list[int] = []
        while ready:
            n = ready.pop(0)
            out.append(n)
            for d in self.succ(n):
                if d >= 0:
                    indeg[d] -= 1
                    if indeg[d] == 0:
                        ready.append(d)
                        ready.sort()
        if len(out) != len(self.names):
            raise ValueError("element graph has a cycle")
        return out

    def reach(self, n: int, skip: int | None = None) -> set[int]:
        """Nodes (and EGRESS) reachable from n, not passing through skip."""
        seen: set[int] = set()
        stack = [n]
        while stack:
            for d in self.succ(stack.pop()):
                if d != skip and d not in seen:
                    seen.add(d)
                    if d >= 0:
                        stack.append(d)
        return seen

    def paths(self) -> list[list[int]]:
        """Every forwarding path from INGRESS to EGRESS, as node ids."""
        out: list[list[int]] = []

        def walk(n: int, path: list[int]) -> None:
            for d in self.succ(n):
                if d == EGRESS:
                    out.append(path)
                    if len(out) > MAX_PATHS:
                        raise ValueError(f"element graph has more than {MAX_PATHS} paths")
                else:
                    walk(d, path + [d])

        walk(INGRESS, [])
        return out


@dataclass(frozen=True)
class Dependency:
    """before ⊴ after: after must not run at an earlier position than before (§III-A)."""

    before: int
    after: int
    kind: str  # branch | action
    fields: tuple[str, ...] = ()


def branch_dependencies(g: Graph) -> list[Dependency]:
    """§III-A branch dependency: an element whose result picks among several downstream
    elements precedes every element that runs only on some of its arms, i.e. each node it
    reaches that does not post-dominate it. Elements after the arms merge run on every
    path and stay free to move."""
    deps = []
    for b in range(len(g.names)):
        if len(g.succ(b)) < 2:
            continue
        for d in sorted(x for x in g.reach(b) if x >= 0):
            if EGRESS in g.reach(b, skip=d):  # some path from b avoids d
                deps.append(Dependency(b, d, "branch"))
    return deps


# keel's library NFs' header actions, for SmartChain on placements of library chains;
# "*" (any field) for an NF whose actions are not known, so it keeps its place.
LIBRARY_ACTIONS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "acl": (FIVE_TUPLE, frozenset()),
    "monitor": (FIVE_TUPLE, frozenset()),
    "limiter": (FIVE_TUPLE, frozenset()),
    "urlfilter": (FIVE_TUPLE | {"payload"}, frozenset()),
    "dedup": (frozenset({"payload"}), frozenset()),
    "rededup": (frozenset({"payload"}), frozenset({"payload"})),
    "encrypt": (frozenset({"payload"}), frozenset({"payload"})),
    "decrypt": (frozenset({"payload"}), frozenset({"payload"})),
    "chacha": (frozenset({"payload"}), frozenset({"payload"})),
    "nat": (FIVE_TUPLE, frozenset({"ip.src", "l4.sport"})),
    "lb": (FIVE_TUPLE, frozenset({"ip.dst", "eth.dst"})),
    "ipv4fwd": (frozenset({"ip.dst"}), frozenset({"eth.src", "eth.dst", "ip.ttl"})),
    "macswap": (frozenset({"eth.src", "eth.dst"}), frozenset({"eth.src", "eth.dst"})),
    "tunnel": (frozenset({"vlan"}), frozenset({"vlan"})),
    "detunnel": (frozenset({"vlan"}), frozenset({"vlan"})),
    "stamp": (frozenset({"stamp"}), frozenset({"stamp"})),
}
ANY = frozenset({"*"})


def _meet(a: frozenset[str], b: frozenset[str]) -> set[str]:
    if not a or not b:
        return set()
    if "*" in a or "*" in b:
        return {"*"}
    return set(a & b)


def action_conflict(a: Element, b: Element) -> tuple[str, ...]:
    """Header fields on which a and b cannot be swapped: one writes what the other reads or
    writes (read-after-write, write-after-read, write-after-write, as NFP classifies);
    "*" stands for every field."""
    return tuple(sorted(_meet(a.writes, b.reads | b.writes) | _meet(a.reads, b.writes)))


def action_dependencies(g: Graph) -> list[Dependency]:
    """§III-A action dependency: every pair on a common forwarding path (one reaches the
    other) whose read/write sets conflict keeps its order."""
    deps = []
    for i in range(len(g.names)):
        for j in sorted(x for x in g.reach(i) if x >= 0):
            f = action_conflict(g.kinds[i], g.kinds[j])
            if f:
                deps.append(Dependency(i, j, "action", f))
    return deps


def dependencies(g: Graph) -> list[Dependency]:
    """The dependency set D of constraint C1: branch and action dependencies."""
    return branch_dependencies(g) + action_dependencies(g)


@dataclass
class Result:
    """Where each node runs (a position per node), in which order, and what it gains."""

    algo: str
    feasible: bool
    positions: list[int]
    order: list[int]  # node ids in processing order: within a path, nodes run in this order
    benefit_us: float = 0.0
    round_trips: int = 0
    seconds: float = 0.0
    nic_load: float = 0.0
    cpu_load: float = 0.0
    reason: str | None = None
    migrations: int = 0  # elements moved by push_aside


def loads(g: Graph, positions: list[int]) -> tuple[float, float]:
    """Resource shares used on SmartNIC and CPU (eq. 8): sum of theta^est / theta_e, summed
    over every server of a multi-server placement (see server_loads)."""
    nic = cpu = 0.0
    for s_nic, s_cpu in server_loads(g, positions):
        nic, cpu = nic + s_nic, cpu + s_cpu
    return nic, cpu


def server_loads(g: Graph, positions: list[int]) -> list[tuple[float, float]]:
    """Each server's SmartNIC and CPU shares (eq. 8). Position p is part p % 3 (NIC_IG, CPU,
    NIC_EG) of server p // 3 (§IV-B3: P extended to several servers; one server: p < 3)."""
    out = [[0.0, 0.0] for _ in range(max(positions, default=0) // 3 + 1)]
    for n, p in enumerate(positions):
        rate = g.rate_gbps[g.chain[n]]
        if p % 3 == CPU:
            out[p // 3][1] += rate / g.kinds[n].cap_cpu_gbps
        else:
            out[p // 3][0] += rate / g.kinds[n].cap_nic_gbps
    return [(a, b) for a, b in out]


def score(g: Graph, positions: list[int], order: list[int], t_trans: float) -> tuple[float, int]:
    """Latency benefit (us) over the all-CPU graph and the worst path's PCIe round trips.
    A packet enters and leaves through the SmartNIC; each maximal run of CPU elements on its
    path (on one server) costs one round trip (t_trans), and the all-CPU graph pays exactly one."""
    rank = {n: i for i, n in enumerate(order)}
    worst = [0] * len(g.chain_names)
    for path in g.paths():
        at = [positions[n] for n in sorted(path, key=rank.__getitem__)]
        trips = sum(1 for k, p in enumerate(at)
                    if p % 3 == CPU and (k == 0 or at[k - 1] != p))
        if path:
            worst[g.chain[path[0]]] = max(worst[g.chain[path[0]]], trips)
    proc = sum(g.kinds[n].suitability for n, p in enumerate(positions) if p % 3 != CPU)
    return proc + t_trans * sum(1 - w for w in worst), max(worst, default=0)


def _finish(g: Graph, res: Result, t_trans: float, nic_share: float, cpu_cores: float) -> Result:
    res.nic_load, res.cpu_load = loads(g, res.positions)
    res.benefit_us, res.round_trips = score(g, res.positions, res.order, t_trans)
    per = server_loads(g, res.positions)
    if len(per) > 1:  # report the busiest server's shares, which the capacities bound
        res.nic_load, res.cpu_load = max(a for a, _ in per), max(b for _, b in per)
    if res.feasible and (res.nic_load > nic_share + 1e-9 or res.cpu_load > cpu_cores + 1e-9):
        res.feasible = False
        res.reason = "over capacity: SmartNIC %.3f of %.3g, CPU %.3f of %.3g" % (
            res.nic_load, nic_share, res.cpu_load, cpu_cores)
    return res


def solve_ilp(g: Graph, deps: Iterable[Dependency], t_trans: float = T_TRANS_US,
              nic_share: float = 1.0, cpu_cores: float = 1.0,
              cpu_only: frozenset[int] = frozenset(), servers: int = 1) -> Result:
    """SmartChain's 0-1 ILP (Fig. 6). x[e][p] = 1 places element e at position p; y[c] = 1
    when chain c keeps any element on the CPU (eq. 3, one per chain so that several chains
    form one big graph, §IV-B3). Maximise t_trans*(1-y) + sum_e s_e*(x_e^ig + x_e^eg)
    (eq. 4, 5) subject to
      C1  sum_p p*x_j^p >= sum_p p*x_i^p for every i ⊴ j in D (eq. 6-7)
      C2  theta^est * sum_e (x_e^ig + x_e^eg) / theta_e^S <= nic_share (1: the paper's)
      C3  theta^est * sum_e x_e^C / theta_e^C <= cpu_cores (1: the paper's)
      C4  sum_p x_e^p = 1
      C5  y >= x_e^C
    The element graph is then rebuilt: each path runs its elements ordered by (position,
    original order), so an element moves only across positions, never past a dependency.
    Nodes in cpu_only cannot run on the SmartNIC.

    servers > 1 is §IV-B3/§V-D's multi-server case, "extend the placement destination set
    P": P = {S_ig^1, C^1, S_eg^1, ..., S_ig^k, C^k, S_eg^k}, position p being part p % 3 of
    server p // 3, in the order a packet visits them (our reading: the paper gives no
    formulation), so C1 keeps its form; C2 and C3 hold per server (each with nic_share and
    cpu_cores), C5 over every server's CPU."""
    t0 = time.perf_counter()
    m = LinearModel()
    n = len(g.names)
    P = 3 * servers
    x = [[m.var(0, 0 if (p % 3 != CPU and e in cpu_only) else 1,
                 g.kinds[e].suitability if p % 3 != CPU else 0.0, integer=True) for p in range(P)]
         for e in range(n)]
    y = [m.var(0, 1, -t_trans, integer=True) for _ in g.chain_names]
    for d in deps:  # C1
        coefs: dict[int, float] = {}
        for p in range(P):
            coefs[x[d.after][p]] = coefs.get(x[d.after][p], 0.0) + p
            coefs[x[d.before][p]] = coefs.get(x[d.before][p], 0.0) - p
        m.row({k: v for k, v in coefs.items() if v}, lb=0.0)
    for s in range(servers):
        ig, c, eg = 3 * s + NIC_IG, 3 * s + CPU, 3 * s + NIC_EG
        m.row({x[e][p]: g.rate_gbps[g.chain[e]] / g.kinds[e].cap_nic_gbps
               for e in range(n) for p in (ig, eg)}, ub=nic_share)  # C2
        m.row({x[e][c]: g.rate_gbps[g.chain[e]] / g.kinds[e].cap_cpu_gbps for e in range(n)},
              ub=cpu_cores)  # C3
    for e in range(n):
        m.row({x[e][p]: 1.0 for p in range(P)}, lb=1.0, ub=1.0)  # C4
        m.row({y[g.chain[e]]: 1.0, **{x[e][3 * s + CPU]: -1.0 for s in range(servers)}}, lb=0.0)  # C5
    sol = m.solve()
    secs = time.perf_counter() - t0
    if not sol.optimal:
        return Result("smartchain", False, [], [], seconds=secs,
                      reason=f"no feasible partition ({sol.status}): relax the rate estimate "
                             "or add CPU cores / SmartNIC capacity (§IV-B2)")
    pos = [max(range(P), key=lambda p: sol.values[x[e][p]]) for e in range(n)]
    topo = {v: i for i, v in enumerate(g.topo_order())}
    order = sorted(range(n), key=lambda e: (pos[e], topo[e]))
    res = Result("smartchain", True, pos, order, seconds=secs)
    return _finish(g, res, t_trans, nic_share, cpu_cores)


def push_aside(g: Graph, res: Result, t_trans: float = T_TRANS_US, nic_share: float = 1.0,
               cpu_cores: float = 1.0) -> Result:
    """Repair a one-server placement that overloads a device under the true capacities with
    push-aside migration, as SmartChain's sensitivity analysis does (§V-E, after CoCo [14]):
    while the SmartNIC or the CPU is over its capacity (eq. 8), move one of its elements to
    the other device. A candidate borders the other device in the processing order (or ends
    the order when the other device holds nothing), so the order stays as it was (every
    dependency still holds) and no element is pulled out of the middle of a run; of the
    candidates that fit on the other device, the one whose move keeps the most benefit
    (score) goes. The result records the moves in `migrations`; it is infeasible, with a
    reason, when both devices are over capacity or no candidate fits."""
    pos = list(res.positions)
    order = list(res.order)
    moves = 0
    while True:
        nic, cpu = loads(g, pos)
        over_nic, over_cpu = nic > nic_share + 1e-9, cpu > cpu_cores + 1e-9
        if not (over_nic or over_cpu):
            break
        if over_nic and over_cpu:
            return _pushed(g, res, pos, order, moves, t_trans, "SmartNIC and CPU both over capacity")
        on_cpu = [pos[e] == CPU for e in order]
        src_cpu = over_cpu
        others = [k for k, c in enumerate(on_cpu) if c != src_cpu]
        if others:
            cand = [k for k, c in enumerate(on_cpu) if c == src_cpu and
                    ((k > 0 and on_cpu[k - 1] != src_cpu) or (k + 1 < len(order) and on_cpu[k + 1] != src_cpu))]
        else:
            cand = sorted({0, len(order) - 1})
        best: tuple[float, list[int]] | None = None
        for k in cand:
            e = order[k]
            trial = list(pos)
            trial[e] = NIC_IG if src_cpu else CPU
            trial = _label_by_order(g, trial, order)
            t_nic, t_cpu = loads(g, trial)
            if (t_nic > nic_share + 1e-9) if src_cpu else (t_cpu > cpu_cores + 1e-9):
                continue
            q, _ = score(g, trial, order, t_trans)
            if best is None or q > best[0] + 1e-12:
                best = (q, trial)
        if best is None:
            return _pushed(g, res, pos, order, moves, t_trans,
                           f"no element can be pushed aside from the {'CPU' if src_cpu else 'SmartNIC'}")
        pos, moves = best[1], moves + 1
    return _pushed(g, res, pos, order, moves, t_trans, None)


def _label_by_order(g: Graph, pos: list[int], order: list[int]) -> list[int]:
    """SmartNIC elements after a CPU element on one of their paths (in the given order) run
    at the egress part, the others at the ingress part."""
    rank = {n: i for i, n in enumerate(order)}
    eg: set[int] = set()
    for path in g.paths():
        seen_cpu = False
        for n in sorted(path, key=rank.__getitem__):
            if pos[n] == CPU:
                seen_cpu = True
            elif seen_cpu:
                eg.add(n)
    return [CPU if p == CPU else (NIC_EG if n in eg else NIC_IG) for n, p in enumerate(pos)]


def _pushed(g: Graph, res: Result, pos: list[int], order: list[int], moves: int, t_trans: float,
            reason: str | None) -> Result:
    out = Result(res.algo, reason is None, pos, order, seconds=res.seconds, migrations=moves, reason=reason)
    out.nic_load, out.cpu_load = loads(g, pos)
    out.benefit_us, out.round_trips = score(g, pos, order, t_trans)
    return out


def _label_egress(g: Graph, pos: list[int]) -> list[int]:
    """A strawman keeps the graph's order: its SmartNIC elements downstream of a CPU element
    run at the SmartNIC's egress part."""
    after_cpu = set()
    for a, p in enumerate(pos):
        if p == CPU:
            after_cpu |= g.reach(a)
    return [NIC_EG if p != CPU and n in after_cpu else p for n, p in enumerate(pos)]


def sequential(g: Graph, t_trans: float = T_TRANS_US, nic_share: float = 1.0,
               cpu_cores: float = 1.0) -> Result:
    """§IV-A strawman: elements go onto the SmartNIC in processing order until the next one
    does not fit; the rest run on the CPU. The graph keeps its order."""
    t0 = time.perf_counter()
    order = g.topo_order()
    pos = [CPU] * len(order)
    used = 0.0
    for e in order:
        need = g.rate_gbps[g.chain[e]] / g.kinds[e].cap_nic_gbps
        if used + need > nic_share + 1e-12:
            break
        pos[e], used = NIC_IG, used + need
    res = Result("sequential", True, _label_egress(g, pos), order, seconds=time.perf_counter() - t0)
    return _finish(g, res, t_trans, nic_share, cpu_cores)


def suitability_greedy(g: Graph, t_trans: float = T_TRANS_US, nic_share: float = 1.0,
                       cpu_cores: float = 1.0) -> Result:
    """§IV-A strawman: the most suitable elements (s_e > 0, highest first) go onto the
    SmartNIC while they fit, wherever they sit in the graph, which keeps its order; a
    packet crosses PCIe at every change of device."""
    t0 = time.perf_counter()
    order = g.topo_order()
    pos = [CPU] * len(order)
    used = 0.0
    for e in sorted(order, key=lambda e: -g.kinds[e].suitability):
        need = g.rate_gbps[g.chain[e]] / g.kinds[e].cap_nic_gbps
        if g.kinds[e].suitability > 0 and used + need <= nic_share + 1e-12:
            pos[e], used = NIC_IG, used + need
    res = Result("suitability-greedy", True, _label_egress(g, pos), order, seconds=time.perf_counter() - t0)
    return _finish(g, res, t_trans, nic_share, cpu_cores)


def place(g: Graph, algo: str = "smartchain", deps: list[Dependency] | None = None,
          t_trans: float = T_TRANS_US, nic_share: float = 1.0, cpu_cores: float = 1.0) -> Result:
    """Partition g with the named algorithm (one of ALGOS)."""
    if algo == "smartchain":
        return solve_ilp(g, dependencies(g) if deps is None else deps, t_trans, nic_share, cpu_cores)
    if algo == "sequential":
        return sequential(g, t_trans, nic_share, cpu_cores)
    if algo == "suitability-greedy":
        return suitability_greedy(g, t_trans, nic_share, cpu_cores)
    raise ValueError(f"unknown SmartChain algorithm {algo!r} (expected one of {', '.join(ALGOS)})")


def rebuilt_edges(g: Graph, res: Result) -> list[tuple[int, int]]:
    """The reconstructed element graph: each forwarding path with its elements in the
    result's order (§IV-B: "interpret the placement results to a deployable graph")."""
    rank = {n: i for i, n in enumerate(res.order)}
    edges: list[tuple[int, int]] = []
    for path in g.paths():
        hops = [INGRESS] + sorted(path, key=rank.__getitem__) + [EGRESS]
        for a, b in zip(hops, hops[1:]):
            if (a, b) not in edges:
                edges.append((a, b))
    return edges


# ----- files -----

_NUM_KEYS = ("t_cpu_us", "t_nic_us", "cap_cpu_gbps", "cap_nic_gbps")


def load_elements(path: str) -> dict[str, Element]:
    """Read an elements file: {"elements": [{"name", "t_cpu_us", "t_nic_us",
    "cap_cpu_gbps", "cap_nic_gbps", "reads": [FIELD...], "writes": [FIELD...]}, ...]}."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as e:
        raise ElementsError(f"{path}: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise ElementsError(f"{path}: bad JSON: {e}") from e
    if not isinstance(doc, dict) or not isinstance(doc.get("elements"), list) or not doc["elements"]:
        raise ElementsError(f"{path}: expected {{\"elements\": [...]}} with at least one element")
    out: dict[str, Element] = {}
    for i, e in enumerate(doc["elements"]):
        where = f"{path}: elements[{i}]"
        if not isinstance(e, dict) or not isinstance(e.get("name"), str) or not e["name"].isidentifier():
            raise ElementsError(f"{where}: 'name' must be an identifier")
        where = f"{path}: {e['name']}"
        if e["name"].lower() in out:
            raise ElementsError(f"{where}: duplicate element")
        vals = {}
        for k in _NUM_KEYS:
            v = e.get(k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or (k.startswith("cap") and v == 0):
                raise ElementsError(f"{where}: '{k}' must be a {'positive' if k.startswith('cap') else 'non-negative'} number, got {v!r}")
            vals[k] = float(v)
        sets = {}
        for k in ("reads", "writes"):
            v = e.get(k, [])
            if not isinstance(v, list) or not all(isinstance(f, str) for f in v):
                raise ElementsError(f"{where}: '{k}' must be a list of header field names")
            sets[k] = frozenset(v)
        unknown = set(e) - {"name", "help", *_NUM_KEYS, "reads", "writes"}
        if unknown:
            raise ElementsError(f"{where}: unknown key '{sorted(unknown)[0]}'")
        out[e["name"].lower()] = Element(e["name"], **vals, **sets)
    return out


def graph_from_spec(text: str, elements: dict[str, Element], default_rate_gbps: float = 1.0) -> Graph:
    """Build one big element graph from a chain-language spec whose NFs are the elements'
    names (raises SpecError). Each chain's theta^est is its t_min, else default_rate_gbps."""
    cat = Catalog({}, "elements").with_tenants([{"name": e.name} for e in elements.values()], "elements")
    spec = parse_spec(text, cat)
    g = Graph([], [], [], [], [c.name for c in spec.chains],
              [c.slo.t_min if c.slo.t_min > 0 else default_rate_gbps for c in spec.chains])
    for c, chain in enumerate(spec.chains):
        _add_chain(g, chain, elements, c, len(spec.chains) > 1)
    return g


def _add_chain(g: Graph, chain: ChainGraph, elements: dict[str, Element], c: int,
               prefix: bool) -> None:
    base = len(g.names)
    for nd in chain.nodes:
        name = elements[nd.nf].name + nd.name[len(nd.nf):]  # the file's spelling, _2 for a second
        g.names.append(f"{chain.name}.{name}" if prefix else name)
        g.kinds.append(elements[nd.nf])
        g.chain.append(c)
    for e in chain.edges:
        g.edges.append((e.src if e.src < 0 else base + e.src, e.dst if e.dst < 0 else base + e.dst))


def result_dict(g: Graph, res: Result, deps: list[Dependency] | None = None) -> dict[str, Any]:
    """A result as JSON data (what `keel-place smartchain --json` prints per algorithm)."""
    d: dict[str, Any] = {"algo": res.algo, "feasible": res.feasible,
                         "seconds": round(res.seconds, 6)}
    if not res.positions:
        d["reason"] = res.reason
        return d
    d.update({
        "benefit_us": round(res.benefit_us, 3), "round_trips": res.round_trips,
        "nic_load": round(res.nic_load, 6), "cpu_load": round(res.cpu_load, 6),
        "elements": [{"name": g.names[n], "element": g.kinds[n].name,
                      "position": POSITIONS[res.positions[n]],
                      "suitability_us": round(g.kinds[n].suitability, 3)} for n in res.order],
        "edges": [{"src": _end(g, a), "dst": _end(g, b)} for a, b in rebuilt_edges(g, res)],
    })
    if res.reason:
        d["reason"] = res.reason
    if deps is not None:
        d["dependencies"] = [{"before": g.names[x.before], "after": g.names[x.after], "kind": x.kind,
                              "fields": list(x.fields)} for x in deps]
    return d


def _end(g: Graph, n: int) -> str:
    return {INGRESS: "ingress", EGRESS: "egress"}.get(n) or g.names[n]

