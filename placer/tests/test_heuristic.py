"""Issue 16: the heuristic's four weaknesses, each pinned by a small hand-checked case.

Rates follow the model in pattern.py: a subgroup of C cycles per packet on k cores carries
k * 1.7 GHz * 12000 bits / (C + 180 if k > 1) Gbps; a server subgroup entered from the
switch pays 220 cycles of encap; 1500-byte packets.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from keel_placer.algos import run
from keel_placer.catalog import ENCAP_CYCLES, LB_CYCLES

from placer_env import one_server, problem

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
GBPS_PER_CYCLE = 1.7 * 12000  # Gbps of one 1.7 GHz core at 1 cycle per 1500-byte packet


def both(prob):
    """The heuristic's and the optimum's placements of one problem."""
    return run(prob, "heuristic"), run(prob, "optimal")


def test_coalescing_keeps_heavy_subgroups_replicable():
    # Weakness 1. Limiter (stateful) -> VLANPop (switch) -> AESCBC -> VLANPush (switch) -> AESCBCde.
    # Merging Limiter with AESCBC scores higher on 2 cores but pins AESCBC to one core; the
    # best placement merges only AESCBC, VLANPush, AESCBCde and gives that subgroup 15 cores.
    prob = problem("flow f = []\nchain c = TrafficShaper -> VLANPop -> AESCBC -> VLANPush -> AESCBCde\n"
                   "f : c @ {'t_min': '1Gbps'}\n", one_server(cores=16, gbps=40))
    heavy = 9123 + 110 + 9800 + ENCAP_CYCLES
    best = 15 * GBPS_PER_CYCLE / (heavy + LB_CYCLES) - 1.0  # 14.75 Gbps; link cap 40/2
    h, o = both(prob)
    assert o.marginal_gbps == pytest.approx(best, rel=1e-6)
    assert h.marginal_gbps == pytest.approx(best, rel=1e-6)
    sgs = {tuple(s.nfs): s.cores for s in h.chains[0].subgroups}
    assert sgs == {("limiter",): 1, ("encrypt", "tunnel", "decrypt"): 15}


def test_core_allocation_sees_the_shared_link():
    # Weakness 2. Chain a bounces twice over the 10 Gbps link (IPv4Forward is P4-only), chain
    # b once. Cores a's rate curve wants are worth more to b once the link binds:
    # b gets 14 cores (8.50 Gbps), a one core per subgroup and the rest of the link.
    prob = problem("flow f = []\nflow g = []\nchain a = AESCBC -> IPv4Forward -> AESCBC\n"
                   "chain b = DEDUP\nf : a @ {'t_min': '0.5Gbps'}\ng : b @ {'t_min': '0.5Gbps'}\n",
                   one_server(cores=16, gbps=10), str(EXAMPLES / "lemur_eval_profiles.json"))
    rb = 14 * GBPS_PER_CYCLE / (33185 + ENCAP_CYCLES + LB_CYCLES)
    ra = (10 - rb) / 2
    h, o = both(prob)
    assert o.marginal_gbps == pytest.approx(ra + rb - 1.0, rel=1e-6)
    assert h.marginal_gbps == pytest.approx(ra + rb - 1.0, rel=1e-6)


def test_smartnic_offload_takes_the_switch_nf_between_offloaded_nfs():
    # Weakness 3. CHACHA -> VLANPush -> CHACHA with both CHACHAs on the SmartNIC: leaving
    # VLANPush on the switch bounces twice over the 10 Gbps link (5 Gbps); on the SmartNIC
    # too, the chain crosses once (10 Gbps).
    prob = problem("flow f = []\nchain c = CHACHA -> VLANPush -> CHACHA\nf : c @ {'t_min': '1Gbps'}\n",
                   one_server(cores=4, gbps=10, smartnic={"kind": "ebpf", "cores": 48, "ghz": 0.8}))
    h, o = both(prob)
    assert o.marginal_gbps == pytest.approx(9.0, rel=1e-6)
    assert h.marginal_gbps == pytest.approx(9.0, rel=1e-6)
    assert [n.target for n in h.chains[0].nfs] == ["smartnic"] * 3


def test_light_sibling_arms_share_a_core():
    # Weakness 4a. PktFilter branches into two Limiters; on a one-core server the arms fit
    # only as one subgroup (PktFilter on the server too): 60 + 110/2 + 110/2 + 220 cycles,
    # 52 Gbps on the core, 40 Gbps by the link.
    prob = problem("flow f = []\nchain c = PktFilter -> ["
                   "{'flowspec': [{'gate_select': '1'}], 'nfchain': TrafficShaper()}, "
                   "{'flowspec': [{'gate_select': '2'}], 'nfchain': TrafficShaper()}]\n"
                   "f : c @ {'t_min': '1Gbps'}\n", one_server(cores=1, gbps=40))
    h, o = both(prob)
    assert o.feasible and o.marginal_gbps == pytest.approx(39.0, rel=1e-6)
    assert h.feasible, h.reason
    assert h.marginal_gbps == pytest.approx(39.0, rel=1e-6)


def test_openflow_switch_first_leaves_every_chain_a_pattern():
    # Weakness 4b. On an OpenFlow switch chain a's Measure -> ACL breaks the fixed table order
    # (ranks 2, 1), so one of them must leave the switch. Evicting the globally cheapest
    # switch NF first takes VLANPop out of chain b, which then runs NAT, VLANPop, NAT as one
    # stateful subgroup: 1.7 GHz * 12000 / 1344 = 15.2 Gbps < b's t_min of 25 Gbps. With
    # VLANPop on the switch each NAT has a core: 28.1 Gbps; a gets the rest of the link.
    prob = problem("flow f = []\nflow g = []\nchain a = Measure -> ACL\nchain b = NAT -> VLANPop -> NAT\n"
                   "f : a @ {'t_min': '1Gbps'}\ng : b @ {'t_min': '25Gbps'}\n",
                   one_server(cores=16, gbps=100, kind="openflow", stages=8))
    h, o = both(prob)
    assert o.feasible and o.marginal_gbps == pytest.approx(49.0, rel=1e-6)
    assert h.feasible, h.reason
    assert h.marginal_gbps == pytest.approx(49.0, rel=1e-6)


SNIC = {"kind": "ebpf", "cores": 48, "ghz": 0.8}


def arms(*chains: str) -> str:
    """Sibling branch arms of equal weight in the chain language."""
    return "[" + ", ".join(f"{{'flowspec': [{{'gate_select': '{k + 1}'}}], 'nfchain': {c}}}"
                           for k, c in enumerate(chains)) + "]"


def test_one_arm_joins_the_branch_point_without_the_other():
    # Measure -> IPv4Forward -> [Measure, IPv4Forward -> AESCBCde] (Measure has no P4 version).
    # Both IPv4Forwards on the switch: the chain crosses the 40 Gbps link 1 + 0.5 + 0.5 times
    # (20 Gbps). Moving their whole run to the server puts AESCBCde in the branch point's
    # unreplicable subgroup (one core: 3.7 Gbps). Only the branch point moves: it joins both
    # Measures, AESCBCde's arm keeps its own replicable subgroup, one bounce fewer:
    # 40 / 1.5 = 26.7 Gbps.
    prob = problem("flow f = []\nchain c = Measure -> IPv4Forward -> "
                   + arms("Measure", "IPv4Forward -> AESCBCde") + "\nf : c @ {'t_min': '1Gbps'}\n",
                   one_server(cores=16, gbps=40))
    h, o = both(prob)
    assert o.marginal_gbps == pytest.approx(40 / 1.5 - 1.0, rel=1e-6)
    assert h.marginal_gbps == pytest.approx(40 / 1.5 - 1.0, rel=1e-6)
    assert [n.target for n in h.chains[0].nfs] == ["server", "server", "server", "switch", "server"]


def test_smartnic_offload_does_not_split_a_subgroup_it_would_slow():
    # CHACHA -> AESCBC -> PktFilter -> AESCBC on three cores: CHACHA belongs on the SmartNIC,
    # PktFilter (which the SmartNIC also runs faster than a core) belongs on the server with
    # both AESCBCs, one replicable subgroup of 9123 + 60 + 9123 + 220 cycles on three cores.
    # Offloading PktFilter too splits it in two subgroups that share three cores (2.2 Gbps).
    prob = problem("flow f = []\nchain c = CHACHA -> AESCBC -> PktFilter -> AESCBC\n"
                   "f : c @ {'t_min': '1Gbps'}\n", one_server(cores=3, gbps=40, smartnic=SNIC))
    best = 3 * GBPS_PER_CYCLE / (9123 + 60 + 9123 + ENCAP_CYCLES + LB_CYCLES) - 1.0
    h, o = both(prob)
    assert o.marginal_gbps == pytest.approx(best, rel=1e-6)
    assert h.marginal_gbps == pytest.approx(best, rel=1e-6)
    assert [n.target for n in h.chains[0].nfs] == ["smartnic", "server", "server", "server"]


def test_a_switch_nf_between_server_nfs_may_go_to_the_smartnic_instead():
    # Measure -> IPv4Forward -> [Measure -> NAT, IPv4Forward -> AESCBCde] beside a SmartNIC on
    # 8 cores. Measure, IPv4Forward, Measure share one unreplicable subgroup (520 cycles:
    # 39 Gbps on one core), NAT stays on the switch. The arm's IPv4Forward on the server would
    # join AESCBCde to that subgroup; on the switch it bounces the arm (1.5 crossings: 26.7
    # Gbps); on the SmartNIC the chain crosses once and AESCBCde's 7 cores are the limit:
    # 7 * 20400 / (4900 + 110 + 180) = 27.5 Gbps.
    prob = problem("flow f = []\nchain c = Measure -> IPv4Forward -> "
                   + arms("Measure -> NAT", "IPv4Forward -> AESCBCde") + "\nf : c @ {'t_min': '1Gbps'}\n",
                   one_server(cores=8, gbps=40, smartnic=SNIC))
    rate = 7 * GBPS_PER_CYCLE / (4900 + ENCAP_CYCLES / 2 + LB_CYCLES)
    h, o = both(prob)
    assert o.marginal_gbps == pytest.approx(rate - 1.0, rel=1e-6)
    assert h.marginal_gbps == pytest.approx(rate - 1.0, rel=1e-6)
    assert [n.target for n in h.chains[0].nfs] == ["server", "server", "server", "switch", "smartnic", "server"]


def test_openflow_eviction_takes_the_nf_that_costs_the_server_least():
    # IPv4Forward -> [IPv4Forward -> AESCBCde, AESCBCde] on an OpenFlow switch: two IPv4Forwards
    # in a row break the fixed table order, so one leaves the switch. Both cost 90 cycles, but
    # the arm's sees half the traffic (45 cycles per chain packet) and on the server it joins
    # its AESCBCde in a replicable subgroup; the head would join the other arm's AESCBCde in an
    # unreplicable one (one core: 3.9 Gbps). Each arm gets 8 cores:
    # 8 * 20400 / (45 + 4900 + 110 + 180) = 31.2 Gbps.
    prob = problem("flow f = []\nchain c = IPv4Forward -> " + arms("IPv4Forward -> AESCBCde", "AESCBCde")
                   + "\nf : c @ {'t_min': '20Gbps'}\n", one_server(cores=16, gbps=40, kind="openflow", stages=8))
    rate = 8 * GBPS_PER_CYCLE / (45 + 4900 + ENCAP_CYCLES / 2 + LB_CYCLES)
    h, o = both(prob)
    assert o.marginal_gbps == pytest.approx(rate - 20.0, rel=1e-6)
    assert h.feasible, h.reason
    assert h.marginal_gbps == pytest.approx(rate - 20.0, rel=1e-6)


def test_openflow_eviction_may_keep_a_branch_point_that_costs_more_to_lose():
    # AESCBC -> IPv4Forward -> [AESCBC, ACL()] on an OpenFlow switch: IPv4Forward (table rank 5)
    # before ACL (rank 1) breaks the table order. IPv4Forward adds fewer server cycles (90 to
    # ACL's 4093 / 2 with its 1024 default rules), but on the server it joins both AESCBCs in
    # one unreplicable subgroup: 20400 / (9123 + 90 + 4562 + 220) = 1.5 Gbps < t_min. Kept on
    # the switch, the ACL leaves: AESCBC 9 cores (19.3 Gbps), the arm's AESCBC 5 (21.0), ACL 2:
    # 2 * 20400 / (4093 / 2 + 110 + 180) = 17.5 Gbps; the link (two crossings, 20) is not hit.
    prob = problem("flow f = []\nchain c = AESCBC -> IPv4Forward -> " + arms("AESCBC", "ACL()")
                   + "\nf : c @ {'t_min': '5Gbps'}\n", one_server(cores=16, gbps=40, kind="openflow", stages=8))
    acl = prob.cycles[0][3]
    assert acl == pytest.approx(4093, abs=1)
    rate = 2 * GBPS_PER_CYCLE / (acl / 2 + ENCAP_CYCLES / 2 + LB_CYCLES)
    h, o = both(prob)
    assert o.marginal_gbps == pytest.approx(rate - 5.0, rel=1e-6)
    assert h.feasible, h.reason
    assert h.marginal_gbps == pytest.approx(rate - 5.0, rel=1e-6)
    assert [n.target for n in h.chains[0].nfs] == ["server", "switch", "server", "server"]


def test_openflow_eviction_takes_only_nfs_that_break_the_table_order():
    # UrlFilter -> Measure -> [VLANPop, ACL(), CHACHA] -> Measure on an OpenFlow switch: the
    # branch point Measure (table rank 2) before VLANPop (0) and ACL (1) breaks the table
    # order. With Measure kept on the switch, VLANPop and ACL must leave; the merging Measure
    # breaks nothing and may stay, but is cheaper than ACL and was evicted first, joining the
    # arms into one unreplicable subgroup (5.8 Gbps < t_min). Both Measures on the switch:
    # every arm a replicable subgroup of its own, two crossings of the 40 Gbps link: 20 Gbps.
    prob = problem("flow f = []\nchain c = UrlFilter -> Measure -> " + arms("VLANPop", "ACL()", "CHACHA")
                   + " -> Measure\nf : c @ {'t_min': '10Gbps'}\n",
                   one_server(cores=16, gbps=40, kind="openflow", stages=8))
    h, o = both(prob)
    assert o.marginal_gbps == pytest.approx(10.0, rel=1e-6)
    assert h.feasible, h.reason
    assert h.marginal_gbps == pytest.approx(10.0, rel=1e-6)
    assert [n.target for n in h.chains[0].nfs] == ["server", "switch", "server", "server", "server", "switch"]


def test_a_stateful_nf_joins_its_subgroup_while_the_rest_of_its_run_goes_to_the_smartnic():
    # NAT -> Measure -> NAT -> HashLB -> AESCBCde beside a SmartNIC (Measure has no P4 version,
    # NAT no eBPF one). The second NAT joins Measure (140 + 507 + 220 cycles, stateful: one core,
    # 23.5 Gbps) and HashLB goes to the SmartNIC: the chain crosses the link once (40 Gbps) and
    # AESCBCde's subgroup stays replicable (12 cores: 24.0 Gbps). Moving NAT and HashLB as one
    # run leaves both on the switch (two crossings: 20 Gbps) or makes AESCBCde unreplicable.
    prob = problem("flow f = []\nchain c = NAT -> Measure -> NAT -> HashLB -> AESCBCde\n"
                   "f : c @ {'t_min': '1Gbps'}\n", one_server(cores=16, gbps=40, smartnic=SNIC))
    rate = GBPS_PER_CYCLE / (140 + 507 + ENCAP_CYCLES)
    h, o = both(prob)
    assert o.marginal_gbps == pytest.approx(rate - 1.0, rel=1e-6)
    assert h.marginal_gbps == pytest.approx(rate - 1.0, rel=1e-6)
    assert [n.target for n in h.chains[0].nfs] == ["switch", "server", "server", "smartnic", "server"]


def test_tenant_nf_cost_and_state_reach_the_placement():
    # Issue 16: a tenant NF is placed by its own declared cost; one that declares it keeps no
    # state is replicated over cores, one that declares nothing is not (conservative default).
    from keel_placer import catalog
    from keel_placer.catalog import load_profiles
    from keel_placer.pattern import Problem
    from keel_placer.spec import parse_spec

    text = "flow f = []\nchain c = heavy\nf : c @ {'t_min': '1Gbps'}\n"
    rates = {}
    for stateful in (False, None):
        entry = {"name": "heavy", "args": [], "cycles": 9780}
        if stateful is not None:
            entry["stateful"] = stateful
        cat = catalog.library().with_tenants([entry])
        pl = run(Problem(parse_spec(text, cat), one_server(cores=4, gbps=100),
                         load_profiles(None, None, cat)), "heuristic")
        rates[stateful] = (pl.chains[0].rate_gbps, pl.chains[0].subgroups[0].cores)
    assert rates[False] == (pytest.approx(4 * GBPS_PER_CYCLE / (9780 + ENCAP_CYCLES + LB_CYCLES)), 4)
    assert rates[None] == (pytest.approx(GBPS_PER_CYCLE / (9780 + ENCAP_CYCLES)), 1)
    with pytest.raises(catalog.CatalogError, match="stateful must be true or false"):
        catalog.library().with_tenants([{"name": "heavy", "args": [], "stateful": "no"}])


def test_a_chain_the_switch_can_run_alone_stays_off_the_server_cores():
    # stack.yml's chain1 alone on the local rack: the switch and one server core both carry
    # its t_max of 10 Gbps. With rate alone as the objective the heuristic picked the core
    # (make demo then lost chain1's VLAN tag at the worker's access port); the placement
    # with fewer cores wins the tie.
    from keel_placer.topology import load_topology

    topo = load_topology(str(Path(__file__).resolve().parents[2] / "deploy" / "local" / "topology.yaml"))
    prob = problem("flow f = [{'dst_ip':'198.18.1.0/24'}]\n"
                   "chain c = Tunnel(vlan=7) -> IPv4Fwd(routes=[{'prefix':'198.18.1.0/24',"
                   "'dst_mac':'02:00:00:00:01:01','port':0}])\n"
                   "f : c @ {'t_min':'1Gbps','t_max':'10Gbps'}\n", topo)
    for p in both(prob):
        assert p.feasible, p.reason
        assert p.marginal_gbps == pytest.approx(9.0)
        assert not p.chains[0].subgroups, (p.algo, p.chains[0].subgroups)
