"""UNO: place NFs on the host or a SmartNIC to spare host cores (UNO §3.2).

The placement graph (§3.2.1) has a vertex per NF, VM and SmartNIC Ethernet port and an edge
per pair that exchanges traffic, weighted by its rate. The ILP (UNO Algorithm 1) picks a
side per NF: minimise the host resources sum p_i h_i subject to the PCIe traffic of cut
edges sum d_ij t_ij <= T and the SmartNIC's resources sum (1 - p_i) n_i <= D, with
d_ij >= p_i - p_j, VMs pinned to the host, ports to their SmartNIC, and NFs the SmartNIC
accelerates pinned to it. With k SmartNICs it is a (k+1)-way partition: every SmartNIC has
its own capacity D and PCIe link T; an edge between the host and SmartNIC s loads link s,
one between two SmartNICs loads both.

§3.2.2: the agent re-runs the ILP on each new traffic matrix and migrates only when the
host usage of the new optimum is far from that of the current placement; `Migrator` adds
the hysteresis the paper leaves to "standard techniques": the gain must exceed a
threshold for `patience` consecutive matrices, unless the current placement no longer fits.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .solver import LinearModel

HOST = "host"
MOVE_PENALTY = 1e-4  # host cores per moved NF: among equal optima keep the current placement
PCIE_TIEBREAK = 1e-7  # host cores per Gbps on PCIe: among equal optima cross PCIe less


class UnoError(ValueError):
    """A placement graph that cannot be used; the message names the field."""


@dataclass(frozen=True)
class Vertex:
    """An NF, a VM or a SmartNIC port. An NF uses r_host (host cores per Gbps) or r_nic
    (SmartNIC cores per Gbps) times its traffic, the larger of what enters and leaves it."""

    name: str
    kind: str  # nf | vm | port
    r_host: float = 0.0
    r_nic: float = 0.0
    accelerated: bool = False  # the SmartNIC has hardware for it: pinned to a SmartNIC
    host_only: bool = False  # it cannot run on a SmartNIC at all
    nic: str | None = None  # a port's SmartNIC


@dataclass
class PlacementGraph:
    """Vertices, SmartNICs with their capacities, and traffic t[(i, j)] in Gbps."""

    vertices: dict[str, Vertex]
    nics: dict[str, tuple[float, float]]  # name -> (D cores, T Gbps of its PCIe link)
    traffic: dict[tuple[str, str], float] = field(default_factory=dict)

    def load(self, v: str) -> float:
        """Gbps through v: the larger of its in and out traffic."""
        into = sum(t for (a, b), t in self.traffic.items() if b == v)
        out = sum(t for (a, b), t in self.traffic.items() if a == v)
        return max(into, out)

    def h(self, v: str) -> float:
        return self.vertices[v].r_host * self.load(v)

    def n(self, v: str) -> float:
        return self.vertices[v].r_nic * self.load(v)

    def nfs(self) -> list[str]:
        return [v for v, x in self.vertices.items() if x.kind == "nf"]

    def with_traffic(self, traffic: dict[tuple[str, str], float]) -> "PlacementGraph":
        return PlacementGraph(self.vertices, self.nics, dict(traffic))


def side_of(g: PlacementGraph, where: dict[str, str], v: str) -> str:
    """Where a vertex runs: VMs on the host, ports on their SmartNIC, NFs per where."""
    x = g.vertices[v]
    if x.kind == "vm":
        return HOST
    if x.kind == "port":
        return x.nic or next(iter(g.nics))
    return where[v]


@dataclass
class Usage:
    host_cores: float
    nic_cores: dict[str, float]
    pcie_gbps: dict[str, float]
    fits: bool


def usage(g: PlacementGraph, where: dict[str, str]) -> Usage:
    """Host cores, SmartNIC cores and PCIe traffic per link of a placement."""
    host = sum(g.h(v) for v in g.nfs() if where[v] == HOST)
    nic = {s: sum(g.n(v) for v in g.nfs() if where[v] == s) for s in g.nics}
    pcie = {s: 0.0 for s in g.nics}
    for (a, b), t in g.traffic.items():
        sa, sb = side_of(g, where, a), side_of(g, where, b)
        for s in {sa, sb} - {HOST}:
            if sa != sb:
                pcie[s] += t
    fits = all(nic[s] <= g.nics[s][0] + 1e-6 and pcie[s] <= g.nics[s][1] + 1e-6 for s in g.nics)
    return Usage(host, nic, pcie, fits)


@dataclass
class Result:
    feasible: bool
    where: dict[str, str]
    usage: Usage | None
    seconds: float
    status: str = ""


def solve(g: PlacementGraph, current: dict[str, str] | None = None,
          time_limit: float | None = 30.0, move_penalty: float = MOVE_PENALTY) -> Result:
    """UNO Algorithm 1 as a (k+1)-way partition. x[i][s] = 1 puts NF i on side s (the host
    or a SmartNIC); c[e][s] = 1 when edge e has exactly one end on SmartNIC s (then its
    traffic crosses link s; with one SmartNIC that is d_ij >= p_i - p_j, counted in both
    directions because traffic crosses PCIe either way). With current, moving an NF costs
    move_penalty host cores (by default just enough that ties keep the running placement)."""
    t0 = time.perf_counter()
    sides = [HOST] + list(g.nics)
    m = LinearModel()
    x: dict[str, dict[str, int]] = {}
    for v in g.nfs():
        vx = g.vertices[v]
        x[v] = {}
        for s in sides:
            cost = -g.h(v) if s == HOST else 0.0  # LinearModel maximises
            if current is not None and current.get(v, s) != s:
                cost -= move_penalty
            ub = 0.0 if (vx.accelerated and s == HOST) or (vx.host_only and s != HOST) else 1.0
            x[v][s] = m.var(0, ub, cost, integer=True)
        m.row({x[v][s]: 1.0 for s in sides}, lb=1.0, ub=1.0)

    def on(v: str, s: str) -> tuple[dict[int, float], float]:
        """(coefficients, constant) of the 0/1 expression 'v runs on side s'."""
        if v in x:
            return {x[v][s]: 1.0}, 0.0
        return {}, 1.0 if side_of(g, {}, v) == s else 0.0

    for s in g.nics:
        m.row({x[v][s]: g.n(v) for v in g.nfs()}, ub=g.nics[s][0])  # sum (1-p_i) n_i <= D
        pcie: dict[int, float] = {}
        const = 0.0
        for (a, b), t in g.traffic.items():
            ca, ka = on(a, s)
            cb, kb = on(b, s)
            if not ca and not cb:
                const += t * abs(ka - kb)
                continue
            c = m.var(0, 1, -PCIE_TIEBREAK * t)  # c >= |on(a,s) - on(b,s)|: 0/1 at the optimum
            for sign in (1.0, -1.0):
                coefs = {c: 1.0}
                for j, w in ca.items():
                    coefs[j] = coefs.get(j, 0.0) - sign * w
                for j, w in cb.items():
                    coefs[j] = coefs.get(j, 0.0) + sign * w
                m.row(coefs, lb=sign * (ka - kb))
            pcie[c] = pcie.get(c, 0.0) + t
        m.row(pcie, ub=g.nics[s][1] - const)  # sum d_ij t_ij <= T
    sol = m.solve(time_limit=time_limit)
    secs = time.perf_counter() - t0
    if not sol.optimal:
        return Result(False, {}, None, secs, sol.status)
    where = {v: max(sides, key=lambda s: sol.values[x[v][s]]) for v in g.nfs()}
    return Result(True, where, usage(g, where), secs, sol.status)


def all_host(g: PlacementGraph) -> dict[str, str]:
    """Every NF on the host (accelerated ones on the first SmartNIC): the no-offload base."""
    first = next(iter(g.nics))
    return {v: first if g.vertices[v].accelerated else HOST for v in g.nfs()}


def moved(a: dict[str, str], b: dict[str, str]) -> int:
    return sum(a[v] != b[v] for v in a)


@dataclass
class Migrator:
    """§3.2.2 with hysteresis: re-solve on every traffic matrix, each move costing
    move_cost host cores (a migration serialises state and delays packets, UNO §5.2);
    migrate when the current placement no longer fits, or when the new target saves more
    than threshold host cores for patience matrices in a row."""

    g: PlacementGraph
    threshold: float = 1.0
    patience: int = 2
    move_cost: float = 0.5
    where: dict[str, str] = field(default_factory=dict)
    streak: int = 0
    migrations: int = 0  # NF moves

    def step(self, traffic: dict[tuple[str, str], float]) -> tuple[dict[str, str], Usage, bool]:
        """Take a new traffic matrix; return the placement in force, its usage, and whether
        it changed."""
        g = self.g.with_traffic(traffic)
        best = solve(g, self.where or None, move_penalty=self.move_cost if self.where else MOVE_PENALTY)
        if not self.where:
            self.where = best.where if best.feasible else all_host(g)
            return self.where, usage(g, self.where), True
        now = usage(g, self.where)
        if not best.feasible:
            self.streak = 0
            return self.where, now, False
        gain = now.host_cores - best.usage.host_cores
        self.streak = self.streak + 1 if gain > self.threshold else 0
        if not now.fits or self.streak >= self.patience:
            self.migrations += moved(self.where, best.where)
            changed = best.where != self.where
            self.where, self.streak = best.where, 0
            return self.where, best.usage, changed
        return self.where, now, False


# ----- files -----

def graph_from_dict(doc: Any, where: str) -> PlacementGraph:
    """A placement graph from JSON:
    {"smartnics": [{"name": "snic0", "cores": 36, "pcie_gbps": 64}],
     "vertices": [{"name": "dpi1", "kind": "nf", "r_host": 0.556, "r_nic": 1.111,
                   "accelerated": false}, {"name": "vm1", "kind": "vm"},
                  {"name": "eth0", "kind": "port", "smartnic": "snic0"}],
     "traffic": [{"src": "eth0", "dst": "dpi1", "gbps": 4}, ...]}"""
    if not isinstance(doc, dict):
        raise UnoError(f"{where}: expected a JSON object")
    nics = {}
    for i, s in enumerate(doc.get("smartnics") or []):
        w = f"{where}: smartnics[{i}]"
        if not isinstance(s, dict) or not isinstance(s.get("name"), str) or s["name"] == HOST:
            raise UnoError(f"{w}: 'name' must be a string other than 'host'")
        nics[s["name"]] = (_pos(s, "cores", w), _pos(s, "pcie_gbps", w))
    if not nics:
        raise UnoError(f"{where}: 'smartnics' must list at least one SmartNIC")
    vertices: dict[str, Vertex] = {}
    for i, v in enumerate(doc.get("vertices") or []):
        w = f"{where}: vertices[{i}]"
        if not isinstance(v, dict) or not isinstance(v.get("name"), str):
            raise UnoError(f"{w}: 'name' must be a string")
        if v["name"] in vertices:
            raise UnoError(f"{w}: duplicate vertex '{v['name']}'")
        kind = v.get("kind")
        if kind == "nf":
            vx = Vertex(v["name"], kind, _pos(v, "r_host", w, zero=True), _pos(v, "r_nic", w, zero=True),
                        bool(v.get("accelerated", False)))
        elif kind == "vm":
            vx = Vertex(v["name"], kind)
        elif kind == "port":
            nic = v.get("smartnic", next(iter(nics)))
            if nic not in nics:
                raise UnoError(f"{w}: unknown smartnic {nic!r}")
            vx = Vertex(v["name"], kind, nic=nic)
        else:
            raise UnoError(f"{w}: 'kind' must be nf, vm or port, got {kind!r}")
        vertices[vx.name] = vx
    traffic: dict[tuple[str, str], float] = {}
    for i, e in enumerate(doc.get("traffic") or []):
        w = f"{where}: traffic[{i}]"
        if not isinstance(e, dict) or e.get("src") not in vertices or e.get("dst") not in vertices:
            raise UnoError(f"{w}: 'src' and 'dst' must name vertices")
        key = (e["src"], e["dst"])
        traffic[key] = traffic.get(key, 0.0) + _pos(e, "gbps", w, zero=True)
    return PlacementGraph(vertices, nics, traffic)


def _pos(d: dict, key: str, where: str, zero: bool = False) -> float:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (v == 0 and not zero):
        raise UnoError(f"{where}: '{key}' must be a {'non-negative' if zero else 'positive'} number, got {v!r}")
    return float(v)


def load_graph(path: str) -> PlacementGraph:
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as e:
        raise UnoError(f"{path}: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise UnoError(f"{path}: bad JSON: {e}") from e
    return graph_from_dict(doc, path)


def result_dict(g: PlacementGraph, res: Result) -> dict[str, Any]:
    """`keel-place uno --json`: the placement, its usage and the saving over all-host."""
    base = usage(g, all_host(g))
    d: dict[str, Any] = {"feasible": res.feasible, "seconds": round(res.seconds, 6), "status": res.status}
    if res.feasible and res.usage is not None:
        u = res.usage
        d.update({"placement": {v: res.where[v] for v in g.nfs()},
                  "host_cores": round(u.host_cores, 4),
                  "host_cores_all_host": round(base.host_cores, 4),
                  "host_cores_saved": round(base.host_cores - u.host_cores, 4),
                  "smartnic_cores": {s: round(c, 4) for s, c in u.nic_cores.items()},
                  "pcie_gbps": {s: round(c, 4) for s, c in u.pcie_gbps.items()}})
    return d
