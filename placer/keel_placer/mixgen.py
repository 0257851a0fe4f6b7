"""Seeded random Lemur-style chain mixes and the topologies issue 16's evaluation runs on.

A mix is 1-5 chains drawn from the library's NFs: linear chains and chains that branch
into 2-3 arms (optionally merging into one more NF), with stateful (NAT, Limiter) and
replicable NFs mixed. The same seed gives the same spec text, byte for byte.
"""

from __future__ import annotations

import random
from dataclasses import replace as dc_replace

from .catalog import SERVER
from .model import SLO, Spec, Topology
from .pattern import Problem
from .topology import topology_from_dict

# Library NFs by their chain-language names (Lemur Table 3 plus keel's own).
NFS = ["ACL", "NAT", "VLANPush", "VLANPop", "IPv4Forward", "UrlFilter", "AESCBC", "AESCBCde",
       "CHACHA", "DEDUP", "TrafficShaper", "Measure", "HashLB", "PktFilter", "MacSwap"]

TOPOLOGIES: dict[str, dict] = {
    # Lemur §5.1: a 12-stage PISA ToR and one 16-core 1.7 GHz server with a 40 Gbps NIC.
    "pisa_one_server": {
        "switch": {"kind": "pisa", "stages": 12, "ports_gbps": 100},
        "servers": [{"name": "s1", "cores": 16, "ghz": 1.7, "nics": [{"gbps": 40}]}]},
    # Two 8-core servers, each with a 40 Gbps eBPF SmartNIC (Lemur §5.4's Agilio CX).
    "pisa_two_servers_smartnic": {
        "switch": {"kind": "pisa", "stages": 12, "ports_gbps": 100},
        "servers": [{"name": f"s{i}", "cores": 8, "ghz": 1.7,
                     "nics": [{"gbps": 40, "smartnic": {"kind": "ebpf", "cores": 48, "ghz": 0.8}}]}
                    for i in (1, 2)]},
    # An OpenFlow (non-P4) ToR with 8 tables and one 16-core server (Lemur §5.3).
    "openflow_one_server": {
        "switch": {"kind": "openflow", "stages": 8, "ports_gbps": 100},
        "servers": [{"name": "s1", "cores": 16, "ghz": 1.7, "nics": [{"gbps": 40}]}]},
}


def topology(name: str) -> Topology:
    return topology_from_dict(TOPOLOGIES[name])


def _nf(rng: random.Random) -> str:
    name = rng.choice(NFS)
    if name == "ACL":
        n = rng.choice([1, 10, 100, 0])  # 0: ACL() with the default 1024 rules
        rule = "{'dst_ip': '198.18.0.0/16', 'drop': False}"
        return f"ACL(rules=[{', '.join([rule] * n)}])" if n else "ACL()"
    return f"{name}()"


def _linear(rng: random.Random, n: int) -> str:
    return " -> ".join(_nf(rng) for _ in range(n))


def chain_expr(rng: random.Random, max_nfs: int) -> str:
    """One chain: linear, or a head, 2-3 arms of 1-2 NFs and an optional merging tail."""
    if rng.random() < 0.6 or max_nfs < 4:
        return _linear(rng, rng.randint(2, max_nfs))
    arms = rng.randint(2, min(3, (max_nfs - 1) // 1))
    head = rng.randint(1, 2)
    parts = [_linear(rng, head)]
    arm_txt = []
    used = head
    for a in range(arms):
        k = rng.randint(1, 2) if used + 2 <= max_nfs - (arms - a - 1) else 1
        used += k
        arm_txt.append(f"{{'flowspec': [{{'gate_select': '{a + 1}'}}], 'nfchain': {_linear(rng, k)}}}")
    parts.append("[" + ", ".join(arm_txt) + "]")
    if used < max_nfs and rng.random() < 0.5:
        parts.append(_nf(rng))
    return " -> ".join(parts)


def mix_spec(seed: int, chains: int | None = None, max_nfs: int = 8) -> str:
    """The spec text of mix number `seed`: 1-5 chains (or `chains`) of at most max_nfs NFs."""
    rng = random.Random(seed)
    n = chains or rng.randint(1, 5)
    lines = []
    for c in range(n):
        lines.append(f"flow f{c} = [{{'dst_ip': '198.18.{c}.0/24'}}]")
        lines.append(f"chain c{c} = {chain_expr(rng, max_nfs)}")
        lines.append(f"f{c} : c{c}")
    return "\n".join(lines) + "\n"


def fair_share_gbps(problem: Problem, c: int) -> float:
    """Chain c's share of the rack if every chain got an equal part: the rate of all the
    servers' cores running its server-capable NFs, at most the fastest NIC link, over the
    number of chains. t_min levels of the evaluation are multiples of it."""
    link = max(n.gbps for s in problem.topo.servers for n in s.nics)
    cyc = sum(n.weight * cy for n, k, cy in zip(problem.chains[c].nodes, problem.kinds[c], problem.cycles[c])
              if SERVER in k.targets)
    cores = sum(s.cores * s.ghz * 1e9 for s in problem.topo.servers)
    rate = min(link, cores * problem.bits / cyc / 1e9) if cyc else link
    return rate / len(problem.chains)


def with_level(problem: Problem, level: float) -> Problem:
    """A copy of the problem whose chains have t_min = level x fair share, t_max = 100 Gbps."""
    chains = [dc_replace(g, slo=SLO(level * fair_share_gbps(problem, c), 100.0))
              for c, g in enumerate(problem.chains)]
    return Problem(Spec(chains), problem.topo, problem.profiles)
