"""rack -> NIC -> NUMA core: refine a Lemur placement on each server (issue 17 §4).

After Lemur has decided what runs on which server, each server with a SmartNIC gets its
NFs re-partitioned between SmartNIC and CPU: with SmartChain's 0-1 ILP (latency) for the
chains whose SLO has a d_max, with UNO's ILP (host cores) for the others. Then, on a server
with more than one NUMA node, Octans maps the CPU's subgroups (Lemur's run-to-completion
groups, each kept whole on one node) onto nodes and cores. Each step reports its measure
before (Lemur's own choice) and after.

Inputs come from the placement problem: an NF's latency and capacity on a server core or
the SmartNIC from its cycles per packet (the catalogue's or --profiles'), header actions
from smartchain.LIBRARY_ACTIONS. Octans' models for library NFs are derived unless a
profile is given: resource_stalls = server cycles per packet (a proxy: no PMU here), the
ideal rate one core's packet rate (85 % of it on a remote node), and the drop-index
parameters of DEFAULT_OCTANS_PARAMS.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from . import octans as oc
from . import smartchain as sc
from . import uno
from .catalog import EBPF
from .model import EGRESS, INGRESS, Placement
from .pattern import Problem

STEPS = ("smartchain", "uno", "octans")
DEFAULT_OCTANS_PARAMS = {oc.LOCAL: (0.33, 2.0, 0.015), oc.REMOTE: (0.29, 3.0, 0.05)}
REMOTE_IDEAL = 0.85


class RefineError(ValueError):
    """A --refine value that cannot be used."""


def parse_steps(text: str | None) -> list[str]:
    """'all' -> every step; 'none' or '' -> none; else a comma-separated list of STEPS."""
    if not text or text == "none":
        return []
    if text == "all":
        return list(STEPS)
    steps = [s.strip() for s in text.split(",") if s.strip()]
    bad = [s for s in steps if s not in STEPS]
    if bad:
        raise RefineError(f"--refine: unknown step {', '.join(bad)} (expected all, none or "
                          f"a comma-separated list of {', '.join(STEPS)})")
    return steps


@dataclass
class _Part:
    """One chain's NFs on one server: node ids in chain order and the edges among them."""

    chain: int
    nodes: list[int]
    edges: list[tuple[int, int]]  # node ids, INGRESS, EGRESS


def _part(problem: Problem, pl: Placement, c: int, server: str) -> _Part | None:
    """The chain's NFs that Lemur put on this server (its cores or its SmartNIC), with the
    original graph contracted over the NFs elsewhere (the switch)."""
    g = problem.chains[c]
    keep = [n.id for n, r in zip(g.nodes, pl.chains[c].nfs) if r.server == server and r.target != "switch"]
    if not keep:
        return None
    kept = set(keep)
    edges: set[tuple[int, int]] = set()

    def walk(src: int, at: int, seen: set[int]) -> None:
        for e in g.succ(at):
            d = e.dst
            if d == EGRESS or d in kept:
                edges.add((src, d))
            elif d not in seen:
                seen.add(d)
                walk(src, d, seen)

    walk(INGRESS, INGRESS, set())
    for n in keep:
        walk(n, n, set())
    return _Part(c, keep, sorted(edges))


def _nic(problem: Problem, server: int):
    return next((n for n in problem.topo.servers[server].nics if n.smartnic is not None), None)


def _smartchain(problem: Problem, pl: Placement, si: int, parts: list[_Part]) -> dict[str, Any]:
    srv = problem.topo.servers[si]
    nic = _nic(problem, si)
    bits = problem.bits
    g = sc.Graph([], [], [], [], [problem.chains[p.chain].name for p in parts],
                 [max(pl.chains[p.chain].rate_gbps, 1e-6) for p in parts])
    cpu_only: set[int] = set()
    lemur: list[int] = []
    index: dict[tuple[int, int], int] = {}
    who: list[tuple[str, str]] = []  # (chain, NF) of each element
    for ci, p in enumerate(parts):
        chain = problem.chains[p.chain]
        for n in p.nodes:
            kind = problem.kinds[p.chain][n]
            cyc = problem.cycles[p.chain][n]
            on_nic = EBPF in kind.targets and kind.smartnic_cycles
            snic_cyc = kind.smartnic_cycles if on_nic else cyc
            reads, writes = sc.LIBRARY_ACTIONS.get(kind.name, (sc.ANY, sc.ANY))
            el = sc.Element(kind.name, cyc / (srv.ghz * 1e3), snic_cyc / (nic.smartnic.ghz * 1e3),
                            srv.ghz * 1e9 / cyc * bits / 1e9,
                            nic.smartnic.cycles_per_s / snic_cyc * bits / 1e9, reads, writes)
            index[(p.chain, n)] = len(g.names)
            if not on_nic:
                cpu_only.add(len(g.names))
            g.names.append(f"{chain.name}.{chain.nodes[n].name}")
            who.append((chain.name, chain.nodes[n].name))
            g.kinds.append(el)
            g.chain.append(ci)
            lemur.append(sc.NIC_IG if pl.chains[p.chain].nfs[n].target == "smartnic" else sc.CPU)
        for a, b in p.edges:
            g.edges.append((a if a < 0 else index[(p.chain, a)], b if b < 0 else index[(p.chain, b)]))
    cores = sum(s.cores for p in parts for s in pl.chains[p.chain].subgroups if s.server == srv.name)
    before, _ = sc.score(g, lemur, g.topo_order(), sc.T_TRANS_US)
    res = sc.solve_ilp(g, sc.dependencies(g), cpu_cores=max(cores, 1), cpu_only=frozenset(cpu_only))
    out: dict[str, Any] = {"algo": "smartchain", "measure": "latency benefit over all-CPU, us",
                           "before": round(before, 3)}
    if not res.feasible:
        out.update({"after": None, "reason": res.reason})
        return out
    out.update({"after": round(res.benefit_us, 3), "round_trips": res.round_trips,
                "nfs": [{"name": g.names[n], "chain": who[n][0], "nf": who[n][1],
                         "target": "server" if res.positions[n] == sc.CPU else "smartnic",
                         "position": sc.POSITIONS[res.positions[n]]} for n in res.order]})
    return out


def _uno(problem: Problem, pl: Placement, si: int, parts: list[_Part]) -> dict[str, Any]:
    srv = problem.topo.servers[si]
    nic = _nic(problem, si)
    bits = problem.bits
    vs = [uno.Vertex("wire", "port", nic="smartnic")]
    traffic: dict[tuple[str, str], float] = {}
    lemur: dict[str, str] = {}
    who: dict[str, tuple[str, str]] = {}  # vertex name -> (chain, NF)
    for p in parts:
        chain = problem.chains[p.chain]
        rate = pl.chains[p.chain].rate_gbps

        def name(n: int) -> str:
            return "wire" if n < 0 else f"{chain.name}.{chain.nodes[n].name}"

        for n in p.nodes:
            kind = problem.kinds[p.chain][n]
            on_nic = bool(EBPF in kind.targets and kind.smartnic_cycles)
            vs.append(uno.Vertex(name(n), "nf", problem.cycles[p.chain][n] / (bits * srv.ghz),
                                 (kind.smartnic_cycles or 0.0) / (bits * nic.smartnic.ghz),
                                 host_only=not on_nic))
            lemur[name(n)] = "smartnic" if pl.chains[p.chain].nfs[n].target == "smartnic" else uno.HOST
            who[name(n)] = (chain.name, chain.nodes[n].name)
        for a, b in p.edges:
            w = min(chain.nodes[x].weight for x in (a, b) if x >= 0) if (a >= 0 or b >= 0) else 1.0
            key = (name(a), name(b))
            traffic[key] = traffic.get(key, 0.0) + rate * w
    # T: the PCIe link carries the NIC's line rate each way
    g = uno.PlacementGraph({v.name: v for v in vs},
                           {"smartnic": (float(nic.smartnic.cores), 2 * nic.gbps)}, traffic)
    before = uno.usage(g, lemur)
    res = uno.solve(g, lemur)
    out: dict[str, Any] = {"algo": "uno", "measure": "host cores", "before": round(before.host_cores, 4),
                           "before_fits": before.fits}
    if not res.feasible:
        out.update({"after": None, "reason": f"no placement within PCIe and SmartNIC limits ({res.status})"})
        return out
    out.update({"after": round(res.usage.host_cores, 4),
                "pcie_gbps": round(res.usage.pcie_gbps["smartnic"], 4),
                "nfs": [{"name": v, "chain": who[v][0], "nf": who[v][1],
                         "target": "server" if w == uno.HOST else "smartnic"}
                        for v, w in res.where.items() if v in who]})
    return out


def _octans(problem: Problem, pl: Placement, si: int, parts: list[_Part], on_cpu: set[str],
            profile: dict[str, oc.NFModel] | None) -> dict[str, Any] | None:
    srv = problem.topo.servers[si]
    per = srv.cores // srv.numa_nodes
    chains: list[oc.Chain] = []
    sg_of: list[list[tuple[int, list[str]]]] = []  # per chain and piece: Lemur's subgroup id, its NFs
    models: dict[str, oc.NFModel] = {}
    for p in parts:
        ch = pl.chains[p.chain]
        prefix = problem.chains[p.chain].name
        kinds, names, cores, groups = [], [], [], []
        for sg in ch.subgroups:
            if sg.server != srv.name or sg.cores <= 0:
                continue
            members = [n for n in sg.nfs if f"{prefix}.{n}" in on_cpu]
            if not members:
                continue
            ids = [next(x.id for x in problem.chains[p.chain].nodes if x.name == n) for n in members]
            cyc = sum(problem.cycles[p.chain][i] for i in ids)
            key = f"{prefix}.sg{sg.id}"
            if profile and len(ids) == 1 and problem.kinds[p.chain][ids[0]].name in profile:
                m = profile[problem.kinds[p.chain][ids[0]].name]
                models[key] = oc.NFModel(key, m.stalls, m.ideal_local * sg.cores, m.ideal_remote * sg.cores,
                                         m.local, m.remote)
            else:
                mpps = srv.ghz * 1e3 / cyc * sg.cores
                models[key] = oc.NFModel(key, cyc, mpps, mpps * REMOTE_IDEAL,
                                         DEFAULT_OCTANS_PARAMS[oc.LOCAL], DEFAULT_OCTANS_PARAMS[oc.REMOTE])
            # a subgroup with more cores than a node is cut into node-sized pieces; each
            # piece is scored at the whole subgroup's rate, so the subgroup runs at the
            # rate its most disturbed piece allows
            left, k = sg.cores, 0
            while left > 0:
                w = min(left, per)
                kinds.append(key)
                names.append(f"subgroup {sg.id}: {'+'.join(members)}" + (f" (part {k + 1})" if sg.cores > per else ""))
                cores.append(w)
                groups.append((sg.id, members))
                left, k = left - w, k + 1
        if kinds:
            chains.append(oc.Chain(prefix, kinds, names, cores))
            sg_of.append(groups)
    if not chains:
        return None
    machine = oc.Machine(tuple(tuple(range(k * per, (k + 1) * per)) for k in range(srv.numa_nodes)))
    try:
        base = oc.locality_first(chains, machine, models)
        res = oc.octans(chains, machine, models)
    except oc.OctansError as e:
        return {"algo": "octans", "measure": "aggregate Mpps", "before": None, "after": None, "reason": str(e)}
    cores_of = oc.cores_of(chains, res.assign, machine)
    return {"algo": "octans", "measure": "aggregate Mpps (model)", "baseline": "locality-first",
            "before": round(base.prediction.total, 4), "after": round(res.prediction.total, 4),
            "subgroups": [{"chain": c.name, "name": c.names[j], "subgroup": sg_of[i][j][0],
                           "nfs": sg_of[i][j][1], "node": res.assign[i][j], "cores": cores_of[i][j]}
                          for i, c in enumerate(chains) for j in range(len(c.kinds))]}


def refine(problem: Problem, pl: Placement, steps: list[str],
           octans_profile: dict[str, oc.NFModel] | None = None) -> dict[str, Any]:
    """Run the steps on every server the placement uses; the report of `--refine`."""
    out: dict[str, Any] = {"steps": steps, "servers": []}
    if not pl.feasible or not steps:
        return out
    for si, srv in enumerate(problem.topo.servers):
        parts = [p for c in range(len(problem.chains)) if (p := _part(problem, pl, c, srv.name))]
        if not parts:
            continue
        entry: dict[str, Any] = {"server": srv.name, "nic": [], "numa": None}
        on_cpu = {f"{problem.chains[p.chain].name}.{problem.chains[p.chain].nodes[n].name}"
                  for p in parts for n in p.nodes if pl.chains[p.chain].nfs[n].target == "server"}
        if _nic(problem, si) is not None:
            latency = [p for p in parts if problem.chains[p.chain].slo.d_max is not None]
            cores = [p for p in parts if problem.chains[p.chain].slo.d_max is None]
            if "smartchain" not in steps:
                cores, latency = parts, []
            elif "uno" not in steps:
                latency, cores = parts, []
            for group, fn, step in ((latency, _smartchain, "smartchain"), (cores, _uno, "uno")):
                if group and step in steps:
                    r = fn(problem, pl, si, group)
                    entry["nic"].append(r)
                    for n in r.get("nfs", []):
                        (on_cpu.add if n["target"] == "server" else on_cpu.discard)(n["name"])
        if "octans" in steps and srv.numa_nodes > 1:
            entry["numa"] = _octans(problem, pl, si, parts, on_cpu, octans_profile)
        out["servers"].append(entry)
    return out
