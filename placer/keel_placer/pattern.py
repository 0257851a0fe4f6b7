"""The placement model: a chain's pattern (a target per NF on one host) and what it costs.

Model (Lemur §3.2): server NFs form run-to-completion subgroups; a subgroup with k cores
runs at k*f/C packets/s (C its cycles per chain packet, plus the load-balancing cost
when k > 1); a chain runs at the minimum over its subgroups, its SmartNIC share and its
link share; switch NFs run at line rate.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field

from .catalog import EBPF, ENCAP_CYCLES, LB_CYCLES, OPENFLOW, OPENFLOW_STEER_TABLES, P4, \
    PISA_ENCAP_STAGES, SERVER, Profiles
from .model import EGRESS, HOST, SMARTNIC, SWITCH, ChainGraph, Spec, Topology

Host = tuple[int, int]  # (server index, nic index)


@dataclass(frozen=True)
class Subgroup:
    """A run-to-completion group of server NFs (node ids) and its cycles per chain packet."""

    nodes: tuple[int, ...]
    cycles: float
    replicable: bool


@dataclass
class Pattern:
    """One chain's placement pattern with everything the algorithms need to compare it."""

    chain: int
    host: Host | None  # None when every NF is on the switch
    targets: tuple[str, ...]
    subgroups: list[Subgroup]
    crossings: float  # switch->host link traversals per chain packet (weighted)
    smartnic_cycles: float  # SmartNIC cycles per chain packet
    latency_us: float
    depth: int  # PISA: stages on the longest switch path
    memory: float  # PISA: table memory in stage units
    of_kinds: frozenset[str]
    of_ok: bool
    cap_gbps: float = math.inf  # rate bound independent of cores
    curve: list[float] = field(default_factory=list)  # best rate with n cores, n = 0..cores
    alloc: list[tuple[int, ...]] = field(default_factory=list)  # cores per subgroup for each n
    n_min: int | None = None  # fewest cores meeting t_min, None if never

    @property
    def server_nodes(self) -> int:
        return sum(len(g.nodes) for g in self.subgroups)

    def value(self, n: int) -> float:
        """Best chain rate (Gbps) with n cores on its server, or -inf if it cannot run."""
        if n >= len(self.curve):
            return self.curve[-1] if self.curve else -math.inf
        return self.curve[n]


class Problem:
    """A spec on a topology with profiles: the per-node facts every algorithm shares."""

    def __init__(self, spec: Spec, topo: Topology, profiles: Profiles):
        self.spec = spec
        self.topo = topo
        self.profiles = profiles
        self.bits = profiles.packet_bytes * 8
        self.kinds = [[profiles.kind(n.nf) for n in c.nodes] for c in spec.chains]
        self.cycles = [[k.cycles(n.args) for k, n in zip(ks, c.nodes)]
                       for ks, c in zip(self.kinds, spec.chains)]
        self.hosts: list[Host] = [(i, j) for i, s in enumerate(topo.servers) for j in range(len(s.nics))]
        self.stage_budget = topo.switch.stages - (PISA_ENCAP_STAGES if self.pisa else OPENFLOW_STEER_TABLES)

    @property
    def pisa(self) -> bool:
        return self.topo.switch.kind == "pisa"

    @property
    def chains(self) -> list[ChainGraph]:
        return self.spec.chains

    def host_class(self, host: Host) -> tuple:
        """Hosts of one class (same server and NIC specs) give the same patterns."""
        srv = self.topo.servers[host[0]]
        return dataclasses.replace(srv, name="", nics=()), srv.nics[host[1]]

    def options(self, c: int, host: Host | None) -> list[list[str]]:
        """Targets each NF of chain c may use when the chain's host is `host`."""
        sw_target = P4 if self.pisa else OPENFLOW
        snic = host is not None and self.topo.servers[host[0]].nics[host[1]].smartnic is not None
        out = []
        for k in self.kinds[c]:
            o = []
            if sw_target in k.targets:
                o.append(SWITCH)
            if host is not None and SERVER in k.targets:
                o.append(HOST)
            if snic and EBPF in k.targets and k.smartnic_cycles:
                o.append(SMARTNIC)
            out.append(o)
        return out

    def nic_faster(self, c: int, i: int, host: Host) -> bool:
        """Whether the host's SmartNIC runs NF i of chain c faster than one server core."""
        nic = self.topo.servers[host[0]].nics[host[1]].smartnic
        k = self.kinds[c][i]
        if nic is None or EBPF not in k.targets or not k.smartnic_cycles:
            return False
        return nic.cycles_per_s / k.smartnic_cycles > self.topo.servers[host[0]].ghz * 1e9 / self.cycles[c][i]

    def base_rate(self, c: int) -> float:
        """Lemur §5.1 base rate: one core of the first server running the chain's costliest
        server-capable NF on all of its traffic (Gbps); line rate if none exists."""
        costs = [cy for k, cy in zip(self.kinds[c], self.cycles[c]) if SERVER in k.targets]
        if not costs:
            return self.topo.switch.ports_gbps
        return self.topo.servers[0].ghz * self.bits / max(costs)

    def evaluate(self, c: int, host: Host | None, targets: tuple[str, ...]) -> Pattern:
        """Compute the subgroups, link use, latency and switch needs of one pattern."""
        g = self.chains[c]
        kinds, cycles = self.kinds[c], self.cycles[c]
        n = len(g.nodes)
        ghz = self.topo.servers[host[0]].ghz if host else 1.0
        parent = list(range(n))

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        def side(x: int) -> str:
            return SWITCH if x < 0 else (SWITCH if targets[x] == SWITCH else HOST)

        indeg = [0] * n
        outdeg = [0] * n
        crossings = 0.0
        entry = [0.0] * n
        for e in g.edges:
            if e.src >= 0:
                outdeg[e.src] += 1
            if e.dst >= 0:
                indeg[e.dst] += 1
            if side(e.src) == SWITCH and side(e.dst) == HOST:
                crossings += e.weight
            s_srv = e.src >= 0 and targets[e.src] == HOST
            d_srv = e.dst >= 0 and targets[e.dst] == HOST
            if s_srv and d_srv:
                parent[find(e.src)] = find(e.dst)
            elif d_srv:
                entry[e.dst] += e.weight
        groups: dict[int, list[int]] = {}
        for i in range(n):
            if targets[i] == HOST:
                groups.setdefault(find(i), []).append(i)
        subgroups = []
        for members in groups.values():
            cyc = sum(g.nodes[i].weight * cycles[i] + ENCAP_CYCLES * entry[i] for i in members)
            # Lemur §3.2: stateful NFs and branch/merge points are not replicated.
            repl = all(kinds[i].replicable and indeg[i] <= 1 and outdeg[i] <= 1 for i in members)
            subgroups.append(Subgroup(tuple(members), cyc, repl))
        subgroups.sort(key=lambda s: s.nodes[0])
        snic = sum(g.nodes[i].weight * (kinds[i].smartnic_cycles or 0.0)
                   for i in range(n) if targets[i] == SMARTNIC)
        # longest path (node ids are topologically ordered): latency and PISA depth
        lat = [0.0] * n
        depth = [0] * n
        link_us = self.topo.servers[host[0]].link_latency_us if host else 0.0
        snic_ghz = 1.0
        if host and self.topo.servers[host[0]].nics[host[1]].smartnic:
            snic_ghz = self.topo.servers[host[0]].nics[host[1]].smartnic.ghz
        end_lat, end_depth = 0.0, 0
        of_ok = True
        for e in sorted(g.edges, key=lambda e: (e.dst if e.dst >= 0 else n, e.src)):
            prev_lat = lat[e.src] if e.src >= 0 else 0.0
            prev_depth = depth[e.src] if e.src >= 0 else 0
            hop = link_us if side(e.src) != side(e.dst) else 0.0
            if e.dst == EGRESS:
                end_lat = max(end_lat, prev_lat + hop)
                end_depth = max(end_depth, prev_depth)
                continue
            d = e.dst
            t = targets[d]
            if t == HOST:
                own = (cycles[d] + (ENCAP_CYCLES if e.src < 0 or targets[e.src] != HOST else 0.0)) \
                    / (ghz * 1e3)
            elif t == SMARTNIC:
                own = (kinds[d].smartnic_cycles or 0.0) / (snic_ghz * 1e3)
            else:
                own = 0.0
            lat[d] = max(lat[d], prev_lat + hop + own)
            depth[d] = max(depth[d], prev_depth + (kinds[d].p4_stages if t == SWITCH else 0))
            if (not self.pisa and t == SWITCH and e.src >= 0 and targets[e.src] == SWITCH
                    and (kinds[e.src].openflow_rank or 0) >= (kinds[d].openflow_rank or 0)):
                of_ok = False  # OpenFlow's fixed table order (Lemur §5.3)
        on_switch = [i for i in range(n) if targets[i] == SWITCH]
        return Pattern(
            c, host if any(t != SWITCH for t in targets) else None, targets, subgroups, crossings,
            snic, end_lat, end_depth, sum(kinds[i].p4_memory for i in on_switch),
            frozenset(kinds[i].name for i in on_switch), of_ok)

    def switch_ok(self, p: Pattern) -> bool:
        """Whether one chain's switch part fits on its own (stages / OpenFlow order)."""
        if self.pisa:
            return p.depth <= self.stage_budget and p.memory <= self.stage_budget + 1e-9
        return p.of_ok and len(p.of_kinds) <= self.stage_budget

    def stages_used(self, pats: list[Pattern]) -> int:
        """Switch stages (PISA) or tables (OpenFlow) a set of chain patterns needs together."""
        if self.pisa:
            if not pats:
                return 0
            depth = max(p.depth for p in pats)
            mem = math.ceil(sum(p.memory for p in pats) - 1e-9)
            return PISA_ENCAP_STAGES + max(depth, mem)
        kinds = set().union(*(p.of_kinds for p in pats)) if pats else set()
        return OPENFLOW_STEER_TABLES + len(kinds)

    def subgroup_rate(self, host: Host, sg: Subgroup, k: int) -> float:
        """Gbps of chain traffic a subgroup carries on k cores (Lemur §3.2; §5.3 LB cost)."""
        if k <= 0:
            return 0.0
        if not sg.replicable:
            k = 1
        ghz = self.topo.servers[host[0]].ghz
        return k * ghz * self.bits / (sg.cycles + (LB_CYCLES if k > 1 else 0.0))

    def finish(self, p: Pattern, t_min: float, t_max: float) -> Pattern:
        """Fill in the pattern's rate cap, its best-rate-per-cores curve and n_min."""
        cap = min(t_max, self.topo.switch.ports_gbps)
        cores = 0
        if p.host is not None:
            srv = self.topo.servers[p.host[0]]
            nic = srv.nics[p.host[1]]
            cores = srv.cores
            if p.crossings > 0:
                cap = min(cap, nic.gbps / p.crossings)
            if p.smartnic_cycles > 0 and nic.smartnic:
                cap = min(cap, nic.smartnic.cycles_per_s / 1e9 * self.bits / p.smartnic_cycles)
        p.cap_gbps = cap
        m = len(p.subgroups)
        curve = [-math.inf] * (cores + 1)
        alloc: list[tuple[int, ...]] = [()] * (cores + 1)
        if m == 0:
            curve = [cap]
            alloc = [()]
        elif m <= cores:
            # Greedy max-min: each extra core goes to the bottleneck subgroup; with rates
            # increasing in k this gives the best chain rate for every core count.
            k = [1] * m
            rates = [self.subgroup_rate(p.host, s, 1) for s in p.subgroups]
            for n in range(m, cores + 1):
                curve[n] = min(min(rates), cap)
                alloc[n] = tuple(k)
                b = min(range(m), key=lambda i: rates[i])
                if not p.subgroups[b].replicable or rates[b] >= cap:
                    for n2 in range(n + 1, cores + 1):
                        curve[n2], alloc[n2] = curve[n], alloc[n]
                    break
                k[b] += 1
                rates[b] = self.subgroup_rate(p.host, p.subgroups[b], k[b])
        p.curve, p.alloc = curve, alloc
        p.n_min = next((n for n, r in enumerate(curve) if r >= t_min - 1e-9), None)
        return p

    def admissible(self, p: Pattern, slo_d_max: float | None) -> bool:
        """Chain-local feasibility: switch fit, latency and some core count meeting t_min."""
        return (p.n_min is not None and self.switch_ok(p)
                and (slo_d_max is None or p.latency_us <= slo_d_max + 1e-9))

    def enumerate(self, c: int, t_min: float, t_max: float, d_max: float | None,
                  limit: int) -> list[Pattern]:
        """Every admissible pattern of chain c over every host (Lemur §3.2 brute force, a)."""
        out: list[Pattern] = []
        seen_switch_only = False
        for host in self.hosts:
            opts = self.options(c, host)
            count = math.prod(len(o) for o in opts)
            if count == 0:
                continue
            if count > limit:
                raise TooLarge(f"chain '{self.chains[c].name}' has {count} placement patterns "
                               f"per host (limit {limit}); use --algo heuristic")
            for targets in itertools.product(*opts):
                if all(t == SWITCH for t in targets):
                    if seen_switch_only:
                        continue
                    seen_switch_only = True
                p = self.finish(self.evaluate(c, host, targets), t_min, t_max)
                if self.admissible(p, d_max):
                    out.append(p)
        return out


class TooLarge(Exception):
    """The exhaustive search space exceeds the configured limit."""
