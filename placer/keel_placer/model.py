"""Data model shared by the parser, the algorithms and the interfaces."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

INGRESS = -1  # the switch port where a chain's traffic enters
EGRESS = -2  # the switch port where it leaves

SWITCH, SMARTNIC, HOST = "switch", "smartnic", "server"


@dataclass(frozen=True)
class SLO:
    """Lemur §2 SLO: rates in Gbps, delay in microseconds."""

    t_min: float = 0.0
    t_max: float = math.inf
    d_max: float | None = None


@dataclass(frozen=True)
class NFNode:
    """One NF instance in a chain DAG; weight is the fraction of the chain's traffic it sees."""

    id: int
    name: str
    nf: str
    args: dict[str, Any]
    weight: float
    line: int
    col: int


@dataclass(frozen=True)
class Edge:
    src: int  # node id or INGRESS
    dst: int  # node id or EGRESS
    weight: float


@dataclass
class ChainGraph:
    """A bound chain: its DAG of NFs, the flow it serves and its SLO."""

    name: str
    flow: str
    flowspec: list[dict[str, Any]]
    slo: SLO
    nodes: list[NFNode]
    edges: list[Edge]

    def succ(self, n: int) -> list[Edge]:
        return [e for e in self.edges if e.src == n]

    def pred(self, n: int) -> list[Edge]:
        return [e for e in self.edges if e.dst == n]

    def to_dict(self) -> dict[str, Any]:
        """The graph as plain JSON data (what `keel-place parse --json` prints)."""
        return {
            "name": self.name, "flow": self.flow, "flowspec": self.flowspec,
            "slo": {"t_min_gbps": self.slo.t_min,
                    "t_max_gbps": None if math.isinf(self.slo.t_max) else self.slo.t_max,
                    "d_max_us": self.slo.d_max},
            "nodes": [{"id": n.id, "name": n.name, "nf": n.nf, "args": n.args,
                       "weight": round(n.weight, 6)} for n in self.nodes],
            "edges": [{"src": _end(e.src), "dst": _end(e.dst), "weight": round(e.weight, 6)}
                      for e in self.edges],
        }


def _end(n: int) -> int | str:
    return {INGRESS: "ingress", EGRESS: "egress"}.get(n, n)


@dataclass
class Spec:
    chains: list[ChainGraph]


@dataclass(frozen=True)
class SwitchSpec:
    kind: str  # pisa | openflow
    stages: int
    ports_gbps: float


@dataclass(frozen=True)
class SmartNicSpec:
    kind: str
    cores: int
    ghz: float

    @property
    def cycles_per_s(self) -> float:
        return self.cores * self.ghz * 1e9


@dataclass(frozen=True)
class NicSpec:
    gbps: float
    smartnic: SmartNicSpec | None


@dataclass(frozen=True)
class ServerSpec:
    name: str
    cores: int
    ghz: float
    numa_nodes: int
    nics: tuple[NicSpec, ...]
    link_latency_us: float


@dataclass(frozen=True)
class Topology:
    switch: SwitchSpec
    servers: tuple[ServerSpec, ...]


@dataclass
class NFResult:
    name: str
    nf: str
    target: str
    server: str | None
    subgroup: int | None


@dataclass
class SubgroupResult:
    id: int
    server: str
    cores: int
    nfs: list[str]


@dataclass
class ChainResult:
    name: str
    t_min_gbps: float
    rate_gbps: float
    latency_us: float
    nfs: list[NFResult]
    subgroups: list[SubgroupResult]


@dataclass
class Placement:
    """What `keel-place place --json` prints (schema fixed by issue 4)."""

    feasible: bool
    algo: str
    seconds: float
    marginal_gbps: float
    chains: list[ChainResult] = field(default_factory=list)
    stages_used: int = 0
    reason: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "feasible": self.feasible, "algo": self.algo, "seconds": round(self.seconds, 6),
            "marginal_gbps": round(self.marginal_gbps, 6),
            "chains": [{
                "name": c.name, "t_min_gbps": round(c.t_min_gbps, 6),
                "rate_gbps": round(c.rate_gbps, 6), "latency_us": round(c.latency_us, 3),
                "nfs": [{"name": n.name, "nf": n.nf, "target": n.target, "server": n.server,
                         "subgroup": n.subgroup} for n in c.nfs],
                "subgroups": [{"id": s.id, "server": s.server, "cores": s.cores, "nfs": s.nfs}
                              for s in c.subgroups],
            } for c in self.chains],
            "switch": {"stages_used": self.stages_used},
        }
        if not self.feasible:
            d["reason"] = self.reason or "no feasible placement"
        return d
