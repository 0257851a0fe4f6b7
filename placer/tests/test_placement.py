"""Placement algorithms: SLOs met, optimal bounds the heuristic, infeasibility is reported."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from keel_placer import catalog
from keel_placer import optimal
from keel_placer.algos import ALGOS, run
from keel_placer.catalog import ENCAP_CYCLES, OPENFLOW, load_catalog, load_profiles
from keel_placer.evaluate import evaluate, with_delta
from keel_placer.pattern import Problem
from keel_placer.spec import parse_spec
from keel_placer.topology import load_topology

from placer_env import one_server, problem

ROOT = Path(__file__).resolve().parents[2]

DELTAS = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0]


def assert_valid(prob: Problem, pl) -> None:
    """Every chain meets t_min, fits the cores, and its rate respects its subgroups."""
    assert pl.feasible, pl.reason
    cores_used = 0
    for c, g in zip(pl.chains, prob.chains):
        assert c.rate_gbps >= g.slo.t_min - 1e-6
        assert c.rate_gbps <= g.slo.t_max + 1e-6
        cores_used += sum(s.cores for s in c.subgroups)
        assert all(s.cores >= 1 for s in c.subgroups)
        if g.slo.d_max is not None:
            assert c.latency_us <= g.slo.d_max + 1e-6
    assert cores_used <= sum(s.cores for s in prob.topo.servers)
    assert pl.stages_used <= prob.topo.switch.stages


def test_canonical_heuristic_matches_optimal_and_is_fast(canonical):
    table = evaluate(canonical, DELTAS, ["heuristic", "optimal", "hw-preferred", "sw-preferred",
                                         "min-bounce", "greedy"])
    checks = table["checks"]
    assert checks["heuristic_equals_optimal_fraction"] >= 0.9
    assert checks["heuristic_infeasible_where_optimal_feasible"] == 0
    assert checks["optimal_ge_heuristic"]
    assert checks["heuristic_feasible_wherever_a_baseline_is"]
    assert checks["heuristic_max_seconds"] < 0.5
    assert checks["optimal_max_seconds"] < 60
    rows = {r["delta"]: r["algos"] for r in table["rows"]}
    assert rows[0.5]["heuristic"]["feasible"] and not rows[4.0]["optimal"]["feasible"]
    # Lemur §5.2: the heuristic beats HW-preferred and stays feasible longer than it
    assert rows[0.5]["heuristic"]["marginal_gbps"] > rows[0.5]["hw-preferred"]["marginal_gbps"]
    assert rows[2.0]["heuristic"]["feasible"] and not rows[2.0]["hw-preferred"]["feasible"]
    assert not rows[1.0]["sw-preferred"]["feasible"]


def test_patterns_apart_only_in_resources_no_choice_can_exhaust_are_one_pattern():
    # Two chains IPv4Forward -> AESCBC beside a SmartNIC. IPv4Forward on the switch, on the
    # SmartNIC, or with AESCBC on the server: each crosses the link once; the first two give
    # AESCBC the same subgroup and differ only in switch memory (0.3 of 10 stages) and
    # SmartNIC cycles (200 per packet: 0.7 of 38.4 G/s per chain at the 40 Gbps link), which
    # both chains together cannot exhaust; the third is slower and uses neither. So one
    # pattern per chain reaches the MILP, not three, and the placement is the same: one chain
    # on one core (no load-balancing cycles), the other on 15.
    prob = problem("flow f = []\nflow g = []\nchain a = IPv4Forward -> AESCBC\n"
                   "chain b = IPv4Forward -> AESCBC\nf : a @ {'t_min': '1Gbps'}\ng : b @ {'t_min': '1Gbps'}\n",
                   one_server(cores=16, gbps=40, smartnic={"kind": "ebpf", "cores": 48, "ghz": 0.8}))
    per_chain = [prob.enumerate(c, 1.0, 100.0, None, 1000) for c in range(2)]
    assert [len(optimal.prune(pats)) for pats in per_chain] == [3, 3]
    assert optimal.slack(prob, per_chain) == {("smartnic", (0, 0)), "memory", "tables"}
    assert [len(pats) for pats in optimal.prune_all(prob, per_chain)] == [1, 1]
    h, o = run(prob, "heuristic"), run(prob, "optimal")
    assert h.marginal_gbps == pytest.approx(o.marginal_gbps, rel=1e-9)
    one = 1.7 * 12000 / (9123 + ENCAP_CYCLES)
    assert o.marginal_gbps == pytest.approx(one + 15 * 1.7 * 12000 / (9123 + ENCAP_CYCLES + 180) - 2.0, rel=1e-6)


@pytest.mark.parametrize("delta", [0.5, 1.5, 2.5])
def test_every_feasible_algo_meets_t_min(canonical, delta):
    prob = with_delta(canonical, delta)
    for algo in ALGOS:
        pl = run(prob, algo)
        if pl.feasible:
            assert_valid(prob, pl)


def test_subgroup_rate_model_and_nonreplicable_nat():
    # one NAT (stateful, not replicable) forced onto the server by a 2-stage switch
    prob = problem("flow f = []\nchain c = NAT()\nf : c @ {'t_min': '1Gbps'}\n",
                   one_server(stages=2))
    pl = run(prob, "optimal")
    (sg,) = pl.chains[0].subgroups
    assert sg.cores == 1  # NAT is never replicated (Lemur §3.2)
    expected = 1.7e9 / (507 + ENCAP_CYCLES) * 1500 * 8 / 1e9
    assert pl.chains[0].rate_gbps == pytest.approx(expected, rel=1e-6)
    assert run(prob, "heuristic").chains[0].rate_gbps == pytest.approx(expected, rel=1e-6)


def test_replicable_subgroup_scales_with_cores():
    prob = problem("flow f = []\nchain c = AESCBC()\nf : c @ {'t_min': '5Gbps'}\n",
                   one_server(cores=4, gbps=100))
    pl = run(prob, "heuristic")
    (sg,) = pl.chains[0].subgroups
    assert sg.cores == 4
    # k*f/(C + 220 encap + 180 load balancing), Lemur §3.2 and §5.3
    assert pl.chains[0].rate_gbps == pytest.approx(4 * 1.7 * 12000 / (9123 + 220 + 180), rel=1e-6)


def test_infeasible_t_min_reports_a_reason():
    prob = problem("flow f = []\nchain c = DEDUP()\nf : c @ {'t_min': '50Gbps'}\n", one_server(cores=8))
    for algo in ALGOS:
        pl = run(prob, algo)
        assert not pl.feasible and pl.reason
        assert pl.to_dict()["feasible"] is False and "reason" in pl.to_dict()


def test_link_capacity_limits_bounced_chains():
    # Encrypt -> (switch) IPv4Fwd -> Decrypt crosses the 10G link twice
    prob = problem("flow f = []\nchain c = AESCBC -> IPv4Forward -> AESCBCde\nf : c\n",
                   one_server(cores=16, gbps=10), profiles=None)
    pl = run(prob, "optimal")
    c = pl.chains[0]
    ipv4 = next(n for n in c.nfs if n.nf == "ipv4fwd")
    if ipv4.target == "switch":
        assert c.rate_gbps <= 5.0 + 1e-6
    assert c.rate_gbps <= 10.0 + 1e-6


def test_d_max_forces_fewer_bounces():
    # NAT on the switch lets both Encrypts replicate but costs a second bounce (Lemur §5.3).
    text = ("flow f = []\nchain c = AESCBC -> NAT -> AESCBC\n"
            "f : c @ {'t_min': '0.5Gbps', 'd_max': '%s'}\n")
    for algo in ("optimal", "heuristic"):
        loose = run(problem(text % "45us", one_server(gbps=100)), algo)
        tight = run(problem(text % "25us", one_server(gbps=100)), algo)
        assert loose.feasible and tight.feasible
        assert next(n for n in loose.chains[0].nfs if n.nf == "nat").target == "switch"
        assert all(n.target == "server" for n in tight.chains[0].nfs)
        assert tight.chains[0].latency_us <= 25 < loose.chains[0].latency_us
        assert tight.marginal_gbps < loose.marginal_gbps
    assert not run(problem(text % "5us", one_server(gbps=100)), "heuristic").feasible


def test_switch_stage_pressure_like_lemur_nat_stress(examples):
    prob = Problem(parse_spec((examples / "nat_stress.conf").read_text()),
                   load_topology(str(examples / "lemur_testbed.yaml")),
                   load_profiles(str(examples / "lemur_eval_profiles.json")))
    hw = run(prob, "hw-preferred")
    assert not hw.feasible and "switch table memory" in hw.reason
    h = run(prob, "heuristic")
    assert_valid(prob, h)
    on_switch = [n.name for n in h.chains[0].nfs if n.target == "switch" and n.nf == "nat"]
    assert len(on_switch) == 10  # Lemur §5.2: 10 of the 11 NATs stay on the switch
    assert run(prob, "optimal").marginal_gbps >= h.marginal_gbps - 1e-6


def test_smartnic_offload_of_chacha(examples):
    snic = {"kind": "ebpf", "cores": 48, "ghz": 0.8}
    text = (examples / "smartnic_chain.conf").read_text()
    with_nic = run(problem(text, one_server(cores=4, smartnic=snic)), "heuristic")
    without = run(problem(text, one_server(cores=4)), "heuristic")
    chacha = next(n for n in with_nic.chains[0].nfs if n.nf == "chacha")
    assert chacha.target == "smartnic"
    assert with_nic.marginal_gbps > 2 * without.marginal_gbps


def test_openflow_table_order():
    # On OpenFlow, Tunnel (table 3) cannot precede ACL (table 1) in one switch pass.
    text = "flow f = []\nchain c = VLANPush -> ACL -> AESCBC\nf : c @ {'t_min': '1Gbps'}\n"
    prob = problem(text, one_server(kind="openflow", stages=8))
    for algo in ("heuristic", "optimal"):
        pl = run(prob, algo)
        assert_valid(prob, pl)
        targets = {n.nf: n.target for n in pl.chains[0].nfs}
        assert not (targets["tunnel"] == "switch" and targets["acl"] == "switch")
    assert not run(prob, "hw-preferred").feasible


def test_profiles_replace_catalog_costs(tmp_path):
    prof = tmp_path / "p.json"
    prof.write_text('{"packet_bytes": 64, "server_cycles": {"encrypt": 1000}}')
    text = "flow f = []\nchain c = AESCBC\nf : c\n"
    pl = run(problem(text, one_server(cores=1, gbps=100), str(prof)), "heuristic")
    assert pl.chains[0].rate_gbps == pytest.approx(1.7 * 64 * 8 / (1000 + 220), rel=1e-6)


def test_nf_profile_rows_fit_a_linear_acl_model(tmp_path):
    nfp = tmp_path / "nf_profile.json"
    nfp.write_text('{"tsc_hz": 2600000000, "rows": ['
                   '{"nf":"acl","rules":100,"pkt_bytes":80,"cycles_per_pkt":500},'
                   '{"nf":"acl","rules":1100,"pkt_bytes":80,"cycles_per_pkt":2500}]}')
    prof = load_profiles(None, str(nfp))
    assert prof.kind("acl").cycles({"rules": [{}] * 600}) == pytest.approx(1500)


def test_multi_server_placement_uses_both_servers(examples):
    spec = parse_spec((examples / "chain_0_1_2_3.conf").read_text())
    from keel_placer.model import Spec
    prob = Problem(Spec(spec.chains[:3]), load_topology(str(examples / "lemur_two_servers.yaml")),
                   load_profiles(str(examples / "lemur_eval_profiles.json")))
    prob = with_delta(prob, 1.0)
    h, o = run(prob, "heuristic"), run(prob, "optimal")
    assert_valid(prob, h)
    assert o.marginal_gbps >= h.marginal_gbps - 1e-6
    servers = {s.server for c in h.chains for s in c.subgroups}
    assert servers == {"bess-1", "bess-2"}


def test_openflow_placement_follows_keel_torctls_nf_table(tmp_path):
    # MacSwap cannot be expressed in standard OpenFlow 1.3: never on an OpenFlow switch.
    text = "flow f = []\nchain c = MacSwap -> Monitor -> AESCBC\nf : c @ {'t_min': '1Gbps'}\n"
    prob = problem(text, one_server(kind="openflow", stages=8))
    for algo in ("heuristic", "optimal", "hw-preferred"):
        pl = run(prob, algo)
        targets = {n.nf: n.target for n in pl.chains[0].nfs}
        assert targets["macswap"] != "switch", algo
    assert run(prob, "hw-preferred").chains[0].nfs[1].target == "switch"
    # The file drives it: an NF table without monitor keeps monitor off the switch, and the
    # ranks (the table order) come from it.
    table = json.loads((ROOT / "ingress" / "torctl" / "openflow_nfs.json").read_text())
    del table["nfs"]["monitor"]
    path = tmp_path / "openflow_nfs.json"
    path.write_text(json.dumps(table))
    lib = load_catalog(catalog.default_catalog_path(), path)
    assert OPENFLOW not in lib.kinds["monitor"].targets and OPENFLOW not in lib.kinds["macswap"].targets
    assert lib.kinds["ipv4fwd"].openflow_rank == 5 and OPENFLOW in lib.kinds["acl"].targets
