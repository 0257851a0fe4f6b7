"""Octans: map a server's chains onto NUMA nodes and cores (Octans §III-IV).

Node 0 is the local node (the one the NICs hang off); every NF gets a core of its own.
The objective (eq. 1-2) is the aggregate throughput: the sum over chains of the slowest
NF's interfered rate phi = P * (1 - lambda), P its ideal rate on a local or remote node.
The performance drop index lambda (eq. 8-11) is linear in two competing levels,
f(X) = sum of 1/x over competitors' resource_stalls per packet (eq. 7):

  local NF                          lambda = a_l*f(LLC on node 0) + b_l*f(every other NF) + c_l   (9)
  local NF, upstream on a remote node  lambda = a_l*1 + b_l*f(every other NF) + c_l              (10)
  remote NF                         lambda = a_r*1 + b_r*f(others on its node) + c_r              (9)
  remote NF, upstream on its node   lambda = a_r*f(LLC on its node) + b_r*f(others on its node) + c_r  (11)

LLC competitors are the other NFs on the node, except that a run of one chain's NFs on a
remote node (a cache-prefetching chain) counts as one competitor, its first NF, and an NF
does not compete with its own run. The first NF's upstream is the NIC, on node 0.

(a, b, c) per NF and side are fitted by least squares on measured drops (`fit`); there is
no PMU here, so resource_stalls, ideal rates and parameters come from a profile file
(`load_profile`, format in PROFILE_HELP).
"""

from __future__ import annotations

import itertools
import json
import math
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import numpy as np

LOCAL, REMOTE = "local", "remote"
LAMBDA_MAX = 0.99
ALGOS = ("octans", "random", "locality-first", "exhaustive")
EXHAUSTIVE_LIMIT = 1 << 16  # assignments exhaustive search will enumerate

PROFILE_HELP = """\
Profile (JSON; the "nfs" key of --machine, or --profile FILE):
  {"nfs": {"router": {"resource_stalls": 100,
                      "ideal_mpps": {"local": 9.0, "remote": 7.65},
                      "local":  {"alpha": 0.30, "beta": 2.0, "c": 0.01},
                      "remote": {"alpha": 0.28, "beta": 3.0, "c": 0.04}}, ...}}
  resource_stalls: the NF's resource-stall cycles per packet, alone on a core at line rate
    with 64 B packets (Octans §IV-A's metric; Octans §IV-C relies on f = sum 1/x < 1,
    which cycles per packet give).
  ideal_mpps: its rate alone on a core of the local node / of a remote node (P, eq. 2).
  local / remote: alpha, beta, c of eq. 8-11, fitted by least squares on measured drops
    (P - phi) / P of the NF co-located with others (keel_placer.octans.fit).
  placer/examples/octans_machine.json holds synthetic models of Octans' four NFs.
Machine (JSON): {"nodes": [{"cores": [6, 7, 8, 9, 10, 11]}, {"cores": 12}], "nfs": {...}}
  node 0 is the local node (the NICs' node); "cores" is the list of core ids NFs may use
  or their number (then numbered from 0 on each node).
"""


class OctansError(ValueError):
    """A profile, machine or placement file that cannot be used; the message says why."""


@dataclass(frozen=True)
class NFModel:
    """What Octans knows of one NF kind (a profile entry)."""

    name: str
    stalls: float
    ideal_local: float
    ideal_remote: float
    local: tuple[float, float, float]  # alpha, beta, c
    remote: tuple[float, float, float]

    def ideal(self, side: str) -> float:
        return self.ideal_local if side == LOCAL else self.ideal_remote

    def params(self, side: str) -> tuple[float, float, float]:
        return self.local if side == LOCAL else self.remote


@dataclass(frozen=True)
class Machine:
    """NUMA nodes and the core ids NFs may use on each; node 0 is the local node."""

    cores: tuple[tuple[int, ...], ...]

    @property
    def nodes(self) -> int:
        return len(self.cores)

    def capacity(self, k: int) -> int:
        return len(self.cores[k])


@dataclass
class Chain:
    """One chain on the server: NF kinds in order, their display names, and the cores each
    takes (1: Octans' one NF per core; more for a group of replicas kept on one node)."""

    name: str
    kinds: list[str]
    names: list[str] = field(default_factory=list)
    cores: list[int] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.names:
            self.names = list(self.kinds)
        if not self.cores:
            self.cores = [1] * len(self.kinds)


Assignment = list[list[int]]  # node of NF j of chain i


def competing_level(stalls: Iterable[float]) -> float:
    """f(X) = sum 1/x_k (eq. 7): more competitors, and hungrier ones (fewer stalls per
    packet, i.e. more packets and memory traffic per second), compete harder."""
    return sum(1.0 / x for x in stalls)


@dataclass
class _Context:
    """What every NF's features share under one assignment: the NFs per node, and the
    head of each NF's cache-prefetching run (itself unless it follows its chain's previous
    NF on the same remote node)."""

    stalls: dict[tuple[int, int], float]
    node_of: dict[tuple[int, int], int]
    run_head: dict[tuple[int, int], tuple[int, int]]
    total: float  # f over every NF of the server


def _context(chains: list[Chain], assign: Assignment, models: dict[str, NFModel]) -> _Context:
    stalls, node_of, head = {}, {}, {}
    for ci, nodes in enumerate(assign):
        for cj, node in enumerate(nodes):
            x = (ci, cj)
            stalls[x] = models[chains[ci].kinds[cj]].stalls
            node_of[x] = node
            same_run = cj > 0 and node != 0 and nodes[cj - 1] == node
            head[x] = head[(ci, cj - 1)] if same_run else x
    return _Context(stalls, node_of, head, competing_level(stalls.values()))


def features(chains: list[Chain], assign: Assignment, models: dict[str, NFModel],
             i: int, j: int, ctx: _Context | None = None) -> tuple[str, float, float]:
    """(side, LLC level, memory level) of NF j of chain i under assign (eq. 9-11)."""
    ctx = ctx or _context(chains, assign, models)
    me = (i, j)
    k = assign[i][j]
    up = assign[i][j - 1] if j > 0 else 0

    def llc(node: int) -> float:
        heads = {ctx.run_head[x] for x, n in ctx.node_of.items() if n == node and x != me}
        heads.discard(ctx.run_head[me])
        return competing_level(ctx.stalls[h] for h in heads)

    if k == 0:
        mem = ctx.total - 1.0 / ctx.stalls[me]
        return LOCAL, (1.0 if up != 0 else llc(0)), mem
    mem = competing_level(ctx.stalls[x] for x, n in ctx.node_of.items() if n == k and x != me)
    return REMOTE, (llc(k) if up == k else 1.0), mem


def drop_index(model: NFModel, side: str, llc: float, mem: float) -> float:
    """lambda = alpha*LLC + beta*memory + c (eq. 8), kept within [0, LAMBDA_MAX]."""
    a, b, c = model.params(side)
    return min(LAMBDA_MAX, max(0.0, a * llc + b * mem + c))


@dataclass
class Prediction:
    lam: list[list[float]]
    mpps: list[list[float]]  # phi per NF (eq. 2)
    chain_mpps: list[float]  # min over the chain's NFs (eq. 1)

    @property
    def total(self) -> float:
        return sum(self.chain_mpps)


def predict(chains: list[Chain], assign: Assignment, models: dict[str, NFModel]) -> Prediction:
    """Every NF's drop index and rate, and each chain's bottleneck rate, under assign."""
    lam, rate = [], []
    ctx = _context(chains, assign, models)
    for i, ch in enumerate(chains):
        li, ri = [], []
        for j, kind in enumerate(ch.kinds):
            side, a, b = features(chains, assign, models, i, j, ctx)
            x = drop_index(models[kind], side, a, b)
            li.append(x)
            ri.append(models[kind].ideal(side) * (1 - x))
        lam.append(li)
        rate.append(ri)
    return Prediction(lam, rate, [min(r) if r else 0.0 for r in rate])


def _fits(chains: list[Chain], assign: Assignment, machine: Machine) -> bool:
    used = [0] * machine.nodes
    for c, nodes in zip(chains, assign):
        for w, k in zip(c.cores, nodes):
            used[k] += w
    return all(used[k] <= machine.capacity(k) for k in range(machine.nodes))


def _free(chains: list[Chain], assign: Assignment, machine: Machine, k: int) -> int:
    return machine.capacity(k) - sum(w for c, nodes in zip(chains, assign)
                                     for w, n in zip(c.cores, nodes) if n == k)


def _check(chains: list[Chain], machine: Machine) -> None:
    need = sum(sum(c.cores) for c in chains)
    have = sum(machine.capacity(k) for k in range(machine.nodes))
    if need > have:
        raise OctansError(f"{need} NFs need a core each but the machine offers {have}")


@dataclass
class Result:
    algo: str
    assign: Assignment
    prediction: Prediction
    seconds: float
    evaluated: int = 0


def octans(chains: list[Chain], machine: Machine, models: dict[str, NFModel]) -> Result:
    """Octans' online placement (Algorithm 1): every placement of whole chains on nodes
    that fits (the initial placements), then from each a depth-first search that moves the
    remote part of a chain up to and including its bottleneck NF to the local node while
    the local node has the cores; the best predicted placement wins."""
    t0 = time.perf_counter()
    _check(chains, machine)
    best: list[Any] = [None, -math.inf]
    seen: set[tuple] = set()

    def update(a: Assignment) -> Prediction:
        p = predict(chains, a, models)
        if p.total > best[1] + 1e-12:
            best[0], best[1] = [list(x) for x in a], p.total
        return p

    def dfs(a: Assignment, p: Prediction) -> None:
        for i, nodes in enumerate(a):
            if all(k == 0 for k in nodes):
                continue
            b = min(range(len(nodes)), key=lambda j: p.mpps[i][j])
            move = [j for j in range(b) if nodes[j] != 0]
            if not move or _free(chains, a, machine, 0) < sum(chains[i].cores[j] for j in move):
                continue
            nxt = [list(x) for x in a]
            for j in move:
                nxt[i][j] = 0
            key = tuple(map(tuple, nxt))
            if key in seen:
                continue
            seen.add(key)
            dfs(nxt, update(nxt))

    inits = [[[k] * len(c.kinds) for c, k in zip(chains, combo)]
             for combo in itertools.product(range(machine.nodes), repeat=len(chains))]
    inits = [a for a in inits if _fits(chains, a, machine)] or [locality_first(chains, machine, models).assign]
    for a in inits:
        key = tuple(map(tuple, a))
        if key not in seen:
            seen.add(key)
            dfs(a, update(a))
    return Result("octans", best[0], predict(chains, best[0], models), time.perf_counter() - t0, len(seen))


def locality_first(chains: list[Chain], machine: Machine, models: dict[str, NFModel]) -> Result:
    """Baseline (Wang et al., Octans §II): each chain whole on the lowest-numbered node
    with room for it, the local node first; a chain that fits on no node whole fills the
    free cores in node order."""
    t0 = time.perf_counter()
    _check(chains, machine)
    free = [machine.capacity(k) for k in range(machine.nodes)]
    assign: Assignment = []
    for c in chains:
        n = sum(c.cores)
        k = next((k for k in range(machine.nodes) if free[k] >= n), None)
        if k is not None:
            assign.append([k] * len(c.kinds))
            free[k] -= n
            continue
        nodes = []
        for w in c.cores:
            k = next((k for k in range(machine.nodes) if free[k] >= w), None)
            if k is None:
                raise OctansError(f"chain {c.name}: a group of {w} cores fits on no node")
            nodes.append(k)
            free[k] -= w
        assign.append(nodes)
    return Result("locality-first", assign, predict(chains, assign, models), time.perf_counter() - t0, 1)


def random_placement(chains: list[Chain], machine: Machine, models: dict[str, NFModel],
                     rng: random.Random | None = None) -> Result:
    """Baseline: every NF on a node drawn with probability proportional to its free cores
    (a uniformly drawn free core), among the nodes with room for it."""
    t0 = time.perf_counter()
    _check(chains, machine)
    rng = rng or random.Random(0)
    free = [machine.capacity(k) for k in range(machine.nodes)]
    assign = []
    for c in chains:
        nodes = []
        for w in c.cores:
            room = [k for k in range(machine.nodes) if free[k] >= w]
            if not room:
                raise OctansError(f"chain {c.name}: no node has {w} free cores left")
            k = rng.choices(room, weights=[free[k] for k in room])[0]
            nodes.append(k)
            free[k] -= w
        assign.append(nodes)
    return Result("random", assign, predict(chains, assign, models), time.perf_counter() - t0, 1)


def exhaustive(chains: list[Chain], machine: Machine, models: dict[str, NFModel],
               judge: dict[str, NFModel] | None = None) -> Result | None:
    """The best assignment of NFs to nodes by enumeration (None if more than
    EXHAUSTIVE_LIMIT assignments). Scored with judge's models when given."""
    t0 = time.perf_counter()
    _check(chains, machine)
    n = sum(len(c.kinds) for c in chains)
    if machine.nodes ** n > EXHAUSTIVE_LIMIT:
        return None
    best, best_v, count = None, -math.inf, 0
    for flat in itertools.product(range(machine.nodes), repeat=n):
        it = iter(flat)
        a = [[next(it) for _ in c.kinds] for c in chains]
        if not _fits(chains, a, machine):
            continue
        count += 1
        v = predict(chains, a, judge or models).total
        if v > best_v + 1e-12:
            best, best_v = a, v
    return Result("exhaustive", best, predict(chains, best, models), time.perf_counter() - t0, count)


def place(chains: list[Chain], machine: Machine, models: dict[str, NFModel], algo: str = "octans",
          seed: int = 0) -> Result | None:
    """Run the named algorithm (one of ALGOS)."""
    if algo == "octans":
        return octans(chains, machine, models)
    if algo == "random":
        return random_placement(chains, machine, models, random.Random(seed))
    if algo == "locality-first":
        return locality_first(chains, machine, models)
    if algo == "exhaustive":
        return exhaustive(chains, machine, models)
    raise OctansError(f"unknown algorithm {algo!r} (expected one of {', '.join(ALGOS)})")


def cores_of(chains: list[Chain], assign: Assignment, machine: Machine) -> list[list[list[int]]]:
    """The core ids of each NF: each node's cores handed out in chain order."""
    nxt = [0] * machine.nodes
    out = []
    for c, nodes in zip(chains, assign):
        row = []
        for w, k in zip(c.cores, nodes):
            row.append(list(machine.cores[k][nxt[k]:nxt[k] + w]))
            nxt[k] += w
        out.append(row)
    return out


# ----- fitting (§IV-B, §V Model Generator) -----

@dataclass(frozen=True)
class Sample:
    """One measurement: a placement and the drop index measured for one of its NFs,
    (P - phi) / P as Octans' Model Generator records it."""

    chains: tuple[tuple[str, ...], ...]
    assign: tuple[tuple[int, ...], ...]
    chain: int
    nf: int
    drop: float


def fit(samples: Iterable[Sample], stalls: dict[str, float]) -> dict[str, dict[str, tuple[float, float, float]]]:
    """Least-squares (alpha, beta, c) per NF kind and side from measured drops: each sample
    is one row [LLC level, memory level, 1] -> drop (the paper runs LMS on the same
    objective). Kinds or sides without samples are left out."""
    rows: dict[tuple[str, str], tuple[list[list[float]], list[float]]] = {}
    models = {k: NFModel(k, s, 1.0, 1.0, (0, 0, 0), (0, 0, 0)) for k, s in stalls.items()}
    for s in samples:
        chains = [Chain(f"c{i}", list(c)) for i, c in enumerate(s.chains)]
        side, a, b = features(chains, [list(x) for x in s.assign], models, s.chain, s.nf)
        xs, ys = rows.setdefault((s.chains[s.chain][s.nf], side), ([], []))
        xs.append([a, b, 1.0])
        ys.append(s.drop)
    out: dict[str, dict[str, tuple[float, float, float]]] = {}
    for (kind, side), (xs, ys) in rows.items():
        coef = np.linalg.lstsq(np.array(xs), np.array(ys), rcond=None)[0]
        out.setdefault(kind, {})[side] = tuple(float(v) for v in coef)
    return out


def synthetic_samples(models: dict[str, NFModel], nodes: int, count: int, rng: random.Random,
                      noise: float = 0.005, max_nfs: int = 12) -> list[Sample]:
    """Measurements as a Model Generator would take them, simulated from known models:
    random chain sets on random nodes, each NF's drop from the model plus Gaussian noise."""
    kinds = sorted(models)
    out = []
    while len(out) < count:
        chains = [tuple(rng.choice(kinds) for _ in range(rng.randint(1, 4)))
                  for _ in range(rng.randint(1, 4))]
        if sum(map(len, chains)) > max_nfs:
            continue
        assign = tuple(tuple(rng.randrange(nodes) for _ in c) for c in chains)
        cs = [Chain(f"c{i}", list(c)) for i, c in enumerate(chains)]
        for i, c in enumerate(chains):
            for j in range(len(c)):
                side, a, b = features(cs, [list(x) for x in assign], models, i, j)
                p, q, r = models[c[j]].params(side)
                out.append(Sample(chains, assign, i, j, p * a + q * b + r + rng.gauss(0, noise)))
    return out[:count]


# ----- files -----

def _num(d: Any, key: str, where: str) -> float:
    v = d.get(key) if isinstance(d, dict) else None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise OctansError(f"{where}: '{key}' must be a number, got {v!r}")
    return float(v)


def profile_from_dict(doc: Any, where: str) -> dict[str, NFModel]:
    """NF models from a profile document (PROFILE_HELP)."""
    nfs = doc.get("nfs") if isinstance(doc, dict) else None
    if not isinstance(nfs, dict) or not nfs:
        raise OctansError(f"{where}: expected {{\"nfs\": {{NAME: {{...}}}}}} with at least one NF")
    out = {}
    for name, e in nfs.items():
        w = f"{where}: nfs.{name}"
        stalls = _num(e, "resource_stalls", w)
        if stalls <= 0:
            raise OctansError(f"{w}: 'resource_stalls' must be positive")
        ideal = e.get("ideal_mpps")
        lo, re_ = _num(ideal, LOCAL, f"{w}.ideal_mpps"), _num(ideal, REMOTE, f"{w}.ideal_mpps")
        if lo <= 0 or re_ <= 0:
            raise OctansError(f"{w}.ideal_mpps: rates must be positive")
        params = {}
        for side in (LOCAL, REMOTE):
            p = e.get(side)
            params[side] = tuple(_num(p, k, f"{w}.{side}") for k in ("alpha", "beta", "c"))
        out[name.lower()] = NFModel(name.lower(), stalls, lo, re_, params[LOCAL], params[REMOTE])
    return out


def profile_dict(models: dict[str, NFModel]) -> dict[str, Any]:
    """The profile document of models (inverse of profile_from_dict)."""
    return {"nfs": {m.name: {"resource_stalls": m.stalls,
                             "ideal_mpps": {LOCAL: m.ideal_local, REMOTE: m.ideal_remote},
                             LOCAL: dict(zip(("alpha", "beta", "c"), m.local)),
                             REMOTE: dict(zip(("alpha", "beta", "c"), m.remote))}
                    for m in models.values()}}


def _load_json(path: str) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except OSError as e:
        raise OctansError(f"{path}: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise OctansError(f"{path}: bad JSON: {e}") from e


def load_profile(path: str) -> dict[str, NFModel]:
    """Read a profile file (PROFILE_HELP)."""
    return profile_from_dict(_load_json(path), path)


def load_machine(path: str, profile: str | None = None) -> tuple[Machine, dict[str, NFModel]]:
    """Read a machine file and the NF models (its "nfs", or the profile file's)."""
    doc = _load_json(path)
    nodes = doc.get("nodes") if isinstance(doc, dict) else None
    if not isinstance(nodes, list) or not nodes:
        raise OctansError(f"{path}: expected {{\"nodes\": [{{\"cores\": ...}}, ...]}}")
    cores = []
    for k, n in enumerate(nodes):
        c = n.get("cores") if isinstance(n, dict) else None
        if isinstance(c, int) and not isinstance(c, bool) and c >= 0:
            c = list(range(c))
        if not isinstance(c, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in c):
            raise OctansError(f"{path}: nodes[{k}]: 'cores' must be a count or a list of core ids")
        cores.append(tuple(c))
    prof = _load_json(profile) if profile else doc
    return Machine(tuple(cores)), profile_from_dict(prof, profile or path)


def load_placement(path: str, server: str | None = None) -> list[Chain]:
    """Chains to map: {"chains": [{"name", "nfs": ["router", ...]}]}, or the output of
    `keel-place place --json` (its NFs placed on `server`, default the first server)."""
    doc = _load_json(path)
    raw = doc.get("chains") if isinstance(doc, dict) else None
    if not isinstance(raw, list):
        raise OctansError(f"{path}: expected {{\"chains\": [...]}}")
    if server is None:
        server = next((n.get("server") for c in raw for n in c.get("nfs", [])
                       if isinstance(n, dict) and n.get("target") == "server"), None)
    out = []
    for i, c in enumerate(raw):
        if not isinstance(c, dict) or not isinstance(c.get("nfs"), list):
            raise OctansError(f"{path}: chains[{i}]: expected {{\"name\", \"nfs\": [...]}}")
        kinds, names = [], []
        for n in c["nfs"]:
            if isinstance(n, str):
                kinds.append(n.lower())
                names.append(n)
            elif isinstance(n, dict) and isinstance(n.get("nf"), str):
                if n.get("target") == "server" and n.get("server") == server:
                    kinds.append(n["nf"].lower())
                    names.append(str(n.get("name", n["nf"])))
            else:
                raise OctansError(f"{path}: chains[{i}]: an NF is a kind name or {{\"nf\", ...}}")
        if kinds:
            out.append(Chain(str(c.get("name", f"chain{i}")), kinds, names))
    if not out:
        raise OctansError(f"{path}: no chain has an NF to place" + (f" on server {server}" if server else ""))
    return out


def result_dict(res: Result, chains: list[Chain], machine: Machine) -> dict[str, Any]:
    """A result as JSON data (`keel-place octans --json`)."""
    cores = cores_of(chains, res.assign, machine)
    p = res.prediction
    return {
        "algo": res.algo, "seconds": round(res.seconds, 6), "aggregate_mpps": round(p.total, 4),
        "chains": [{"name": c.name, "mpps": round(p.chain_mpps[i], 4),
                    "nfs": [{"name": c.names[j], "nf": c.kinds[j], "node": res.assign[i][j],
                             "core": cores[i][j][0], "drop_index": round(p.lam[i][j], 4),
                             "mpps": round(p.mpps[i][j], 4)} for j in range(len(c.kinds))]}
                   for i, c in enumerate(chains)],
    }


def unknown_kinds(chains: list[Chain], models: dict[str, NFModel]) -> list[str]:
    return sorted({k for c in chains for k in c.kinds if k not in models})


