"""SmartChain (§III-IV): dependencies, the 0-1 ILP against hand-worked cases and exhaustive
search, the strawmen's behaviour as the paper describes it, and `keel-place smartchain`."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from keel_placer import smartchain as sc
from keel_placer.cli import main
from keel_placer.model import EGRESS, INGRESS
from keel_placer.smartchain import CPU, NIC_EG, NIC_IG, TABLE_I, Element, Graph

T = TABLE_I


def linear(*kinds: str, rate: float = 1.0) -> Graph:
    n = len(kinds)
    edges = [(INGRESS, 0)] + [(i, i + 1) for i in range(n - 1)] + [(n - 1, EGRESS)]
    return Graph(list(kinds), [T[k] for k in kinds], edges, rate_gbps=[rate])


def test_suitability_is_table_i_latency_difference():
    # Table I's s_e column: 14, -230, -20, 735, 13, 14 us
    assert {k: round(e.suitability, 6) for k, e in T.items()} == {
        "HeaderClassifier": 14, "Logger": -230, "Monitor": -20, "PayloadAnalyzer": 735,
        "Alert": 13, "LoadBalancer": 14}


def test_fig5_chain_smartchain_beats_both_strawmen_by_hand():
    # HC -> Logger -> PA -> Monitor -> LB at 1 Gbps, one CPU core, t_trans = 26 us.
    # NIC shares: HC .1, Logger .5, PA .2, Monitor .3125, LB .1.
    g = linear("HeaderClassifier", "Logger", "PayloadAnalyzer", "Monitor", "LoadBalancer")
    deps = sc.dependencies(g)
    # LB rewrites ip.dst, which HC, Logger and Monitor read before it: only those stay ordered
    assert {(d.before, d.after) for d in deps} == {(0, 4), (1, 4), (3, 4)}
    assert all(d.kind == "action" and d.fields == ("ip.dst",) for d in deps)

    best = sc.place(g, "smartchain", deps)
    # Logger and Monitor (negative suitability) on the CPU, the rest on the SmartNIC:
    # 14 + 735 + 14 = 763 us, one round trip as for the all-CPU graph
    assert best.feasible and best.round_trips == 1
    assert best.benefit_us == pytest.approx(763)
    assert [p == CPU for p in best.positions] == [False, True, False, True, False]
    assert best.positions[4] == NIC_EG  # LB must follow Logger and Monitor (C1)
    order = [g.names[n] for n in best.order]
    assert order.index("LoadBalancer") > max(order.index("Logger"), order.index("Monitor"))

    # Sequential (Fig. 5a): HC, Logger, PA fill 0.8 of the SmartNIC, Monitor does not fit;
    # the I/O-heavy Logger lands on the SmartNIC: 14 - 230 + 735 = 519 us
    seq = sc.place(g, "sequential")
    assert [p != CPU for p in seq.positions] == [True, True, True, False, False]
    assert seq.benefit_us == pytest.approx(519) and seq.round_trips == 1

    # Suitability-greedy (Fig. 5b): HC, PA, LB on the SmartNIC in place: NIC, CPU, NIC, CPU,
    # NIC is two round trips (four PCIe transmissions): 763 - 26 = 737 us
    greedy = sc.place(g, "suitability-greedy")
    assert [p != CPU for p in greedy.positions] == [True, False, True, False, True]
    assert greedy.round_trips == 2 and greedy.benefit_us == pytest.approx(737)


def test_all_on_smartnic_saves_the_round_trip():
    g = linear("HeaderClassifier", "Alert", "LoadBalancer")
    r = sc.place(g)
    assert r.round_trips == 0 and all(p != CPU for p in r.positions)
    assert r.benefit_us == pytest.approx(14 + 13 + 14 + 26)  # y = 0: t_trans gained (eq. 4)


def test_transmission_benefit_against_a_negative_element():
    # A Monitor (-20 us on the SmartNIC) is worth keeping on the SmartNIC only when that
    # avoids the 26 us round trip; a Logger (-230 us) never is.
    r = sc.place(linear("HeaderClassifier", "Monitor"))
    assert r.round_trips == 0 and r.benefit_us == pytest.approx(14 - 20 + 26)
    r = sc.place(linear("HeaderClassifier", "Logger"))
    assert r.round_trips == 1 and r.benefit_us == pytest.approx(14)


def test_capacity_c2_limits_the_smartnic():
    # Two Payload Analyzers at 3 Gbps need 0.6 of the SmartNIC each: only one fits. The other
    # runs on the CPU, which it only fits with 15 cores (C3).
    g = linear("PayloadAnalyzer", "PayloadAnalyzer", rate=3.0)
    assert not sc.place(g, cpu_cores=14).feasible
    r = sc.place(g, cpu_cores=15)
    assert r.feasible and sorted(p == CPU for p in r.positions) == [False, True]
    assert r.nic_load == pytest.approx(0.6) and r.cpu_load == pytest.approx(15)
    assert r.benefit_us == pytest.approx(735)


def test_branch_dependencies_stop_at_the_merge():
    # HC -> [PA -> Alert | Logger] -> LB: the arms' elements follow HC, LB (after the merge)
    # runs on every path and does not depend on HC's branch.
    kinds = ["HeaderClassifier", "PayloadAnalyzer", "Alert", "Logger", "LoadBalancer"]
    edges = [(INGRESS, 0), (0, 1), (1, 2), (0, 3), (2, 4), (3, 4), (4, EGRESS)]
    g = Graph(kinds, [T[k] for k in kinds], edges)
    assert {(d.before, d.after) for d in sc.branch_dependencies(g)} == {(0, 1), (0, 2), (0, 3)}
    # a pass-through arm: HC -> [Monitor | ''] -> Alert
    g2 = Graph(["HC", "M", "A"], [T["HeaderClassifier"], T["Monitor"], T["Alert"]],
               [(INGRESS, 0), (0, 1), (0, 2), (1, 2), (2, EGRESS)])
    assert {(d.before, d.after) for d in sc.branch_dependencies(g2)} == {(0, 1)}


def test_action_dependencies_from_read_write_sets():
    nat = Element("NAT", 15, 1, 4, 10, frozenset({"ip.src"}), frozenset({"ip.src", "ip.dst"}))
    lb = Element("LB", 14.5, 0.5, 4, 10, frozenset({"ip.dst"}), frozenset({"ip.dst"}))
    mon = T["Monitor"]
    pa = T["PayloadAnalyzer"]
    assert sc.action_conflict(nat, lb) == ("ip.dst",)  # both rewrite addresses: fixed order
    assert sc.action_conflict(mon, T["Logger"]) == ()  # read-only: free to reorder
    assert sc.action_conflict(pa, lb) == ()  # disjoint fields
    g = Graph(["PA", "NAT", "Mon", "LB"], [pa, nat, mon, lb],
              [(INGRESS, 0), (0, 1), (1, 2), (2, 3), (3, EGRESS)])
    got = {(g.names[d.before], g.names[d.after]) for d in sc.action_dependencies(g)}
    assert got == {("NAT", "Mon"), ("NAT", "LB"), ("Mon", "LB")}


def test_reordering_moves_a_cpu_element_but_never_past_a_dependency():
    # Logger sits between two suitable elements. Without dependencies SmartChain moves it to
    # the CPU between the ingress and egress parts (one round trip, Fig. 1b); with LB ⊴ ...
    g = linear("HeaderClassifier", "Logger", "PayloadAnalyzer")
    r = sc.place(g, deps=[])
    assert r.round_trips == 1 and r.benefit_us == pytest.approx(14 + 735)
    # PA must come before the Logger and HC after it: PA at ingress, HC at egress
    deps = [sc.Dependency(2, 1, "action"), sc.Dependency(1, 0, "action")]
    r = sc.place(g, deps=deps)
    assert [r.positions[n] for n in (2, 1, 0)] == [NIC_IG, CPU, NIC_EG]
    assert [g.names[n] for n in r.order] == ["PayloadAnalyzer", "Logger", "HeaderClassifier"]


def _brute(g: Graph, deps, t_trans=26.0, cores=1.0):
    best = None
    for pos in itertools.product(range(3), repeat=len(g.names)):
        if any(pos[d.before] > pos[d.after] for d in deps):
            continue
        nic, cpu = sc.loads(g, list(pos))
        if nic > 1 + 1e-9 or cpu > cores + 1e-9:
            continue
        v = sum(g.kinds[n].suitability for n in range(len(pos)) if pos[n] != CPU)
        v += 0 if CPU in pos else t_trans
        best = v if best is None else max(best, v)
    return best


@pytest.mark.parametrize("seed", range(25))
def test_ilp_matches_exhaustive_search_and_its_own_score(seed):
    rng = random.Random(seed)
    kinds = [rng.choice(list(T)) for _ in range(rng.randint(2, 6))]
    g = linear(*kinds, rate=rng.choice([0.5, 1.0, 2.0]))
    pairs = [(i, j) for i in range(len(kinds)) for j in range(i + 1, len(kinds))]
    deps = [sc.Dependency(i, j, "action") for i, j in rng.sample(pairs, rng.randint(0, len(pairs)))]
    cores = rng.choice([1.0, 6.0])
    r = sc.solve_ilp(g, deps, cpu_cores=cores)
    want = _brute(g, deps, cores=cores)
    if want is None:
        assert not r.feasible
        return
    assert r.feasible and r.benefit_us == pytest.approx(want, abs=1e-6)
    assert r.round_trips <= 1  # the rebuilt graph crosses PCIe at most once each way
    for d in deps:
        assert r.order.index(d.before) < r.order.index(d.after)


def test_several_chains_are_one_big_graph(tmp_path, examples):
    spec = tmp_path / "two.conf"
    spec.write_text("flow a = []\nflow b = []\nchain x = HeaderClassifier -> Alert\n"
                    "chain y = Logger -> LoadBalancer\na : x @ {'t_min': '2Gbps'}\nb : y\n")
    g = sc.graph_from_spec(spec.read_text(), sc.load_elements(str(examples / "smartchain_elements.json")))
    assert g.names == ["x.HeaderClassifier", "x.Alert", "y.Logger", "y.LoadBalancer"]
    assert g.rate_gbps == [2.0, 1.0]
    r = sc.place(g)
    # chain x stays on the SmartNIC (saves its round trip), chain y keeps its Logger on the CPU
    assert r.benefit_us == pytest.approx(14 + 13 + 26 + 14)


def test_cli_smartchain_json(examples, capsys):
    rc = main(["smartchain", "--spec", str(examples / "smartchain_graph.conf"),
               "--elements", str(examples / "smartchain_elements.json"), "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"t_trans_us", "chains", "dependencies", "algos"}
    assert out["t_trans_us"] == 26 and out["chains"] == [{"name": "ids", "rate_gbps": 1.0}]
    assert set(out["algos"]) == {"smartchain", "sequential", "suitability-greedy"}
    best = out["algos"]["smartchain"]
    assert best["feasible"] and best["round_trips"] == 1
    assert best["benefit_us"] >= max(a["benefit_us"] for a in out["algos"].values())
    where = {e["name"]: e["position"] for e in best["elements"]}
    assert where["Logger"] == where["Monitor"] == "cpu"
    assert where["PayloadAnalyzer"] != "cpu"
    assert {"src": "ingress", "dst": "HeaderClassifier"} in best["edges"]
    kinds = {(d["before"], d["after"]): d["kind"] for d in out["dependencies"]}
    assert kinds[("HeaderClassifier", "Logger")] == "branch"
    assert kinds[("NAT", "LoadBalancer")] == "action"


def test_cli_smartchain_bad_input_exits_2(tmp_path, examples, capsys):
    bad = tmp_path / "e.json"
    bad.write_text('{"elements": [{"name": "X", "t_cpu_us": 1, "t_nic_us": 1, "cap_cpu_gbps": 0, '
                   '"cap_nic_gbps": 1}]}')
    assert main(["smartchain", "--spec", str(examples / "smartchain_graph.conf"),
                 "--elements", str(bad)]) == 2
    assert "X: 'cap_cpu_gbps' must be a positive number" in capsys.readouterr().err
    spec = tmp_path / "s.conf"
    spec.write_text("flow f = []\nchain c = Logger -> Frob\nf : c\n")
    assert main(["smartchain", "--spec", str(spec), "--elements",
                 str(examples / "smartchain_elements.json")]) == 2
    assert f"{spec}:2:21: error: unknown NF or chain 'Frob'" in capsys.readouterr().err


def _el(name: str, s: float, nic_share: float, cpu_share: float = 0.1) -> Element:
    # at 1 Gbps: suitability s (t_cpu - t_nic), shares 1/cap of the SmartNIC and of a core
    return Element(name, 100.0, 100.0 - s, 1 / cpu_share, 1 / nic_share)


def _chain(*els: Element) -> Graph:
    n = len(els)
    return Graph([e.name for e in els], list(els),
                 [(INGRESS, 0)] + [(i, i + 1) for i in range(n - 1)] + [(n - 1, EGRESS)])


def test_push_aside_moves_the_bordering_element_that_loses_least_off_the_nic():
    # A B | C | D on ingress, CPU, egress; the true NIC shares .4 each overload it (1.2).
    # B and D border the CPU; D's move loses 5 us, B's 100: D goes, and the order stays.
    g = _chain(_el("A", 10, .4), _el("B", 100, .4), _el("C", -20, .4), _el("D", 5, .4))
    placed = sc.Result("smartchain", True, [NIC_IG, NIC_IG, CPU, NIC_EG], [0, 1, 2, 3])
    r = sc.push_aside(g, placed)
    assert r.feasible and r.migrations == 1
    assert r.positions == [NIC_IG, NIC_IG, CPU, CPU] and r.order == [0, 1, 2, 3]
    assert r.benefit_us == pytest.approx(110) and r.nic_load == pytest.approx(.8)


def test_push_aside_pulls_the_most_suitable_bordering_element_onto_the_nic():
    # B and C on one core at .6 each (1.2 of 1): B (s 100) moves to the SmartNIC's ingress
    # part rather than C (s -20); the SmartNIC has room (.2 + .2 + .2)
    g = _chain(_el("A", 10, .2), _el("B", 100, .2, .6), _el("C", -20, .2, .6), _el("D", 5, .2))
    placed = sc.Result("sequential", True, [NIC_IG, CPU, CPU, NIC_EG], [0, 1, 2, 3])
    r = sc.push_aside(g, placed)
    assert r.feasible and r.migrations == 1
    assert r.positions == [NIC_IG, NIC_IG, CPU, NIC_EG]
    assert r.benefit_us == pytest.approx(115)


def test_push_aside_gives_up_when_nothing_fits_and_leaves_a_fitting_placement_alone():
    g = _chain(_el("A", 10, .7, 1.5), _el("B", 100, .7, 1.5))
    r = sc.push_aside(g, sc.Result("smartchain", True, [NIC_IG, NIC_IG], [0, 1]))
    assert not r.feasible and "no element can be pushed aside from the SmartNIC" in r.reason
    both = sc.push_aside(g, sc.Result("smartchain", True, [NIC_IG, CPU], [0, 1]), cpu_cores=1.0, nic_share=.5)
    assert not both.feasible and "both over capacity" in both.reason
    fine = sc.Result("smartchain", True, [NIC_IG, CPU], [0, 1])
    r = sc.push_aside(g, fine, cpu_cores=2.0)
    assert r.feasible and r.migrations == 0 and r.positions == [NIC_IG, CPU]


def test_ilp_over_several_servers_uses_each_servers_smartnic():
    # Two 4 Gbps graphs of one Payload Analyzer: .8 of a SmartNIC each, 20 cores on a CPU.
    # One server (6 cores) cannot hold them; two can, one on each SmartNIC: 2 x (735 + 26) us.
    pa = T["PayloadAnalyzer"]
    g = Graph(["a", "b"], [pa, pa], [(INGRESS, 0), (0, EGRESS), (INGRESS, 1), (1, EGRESS)],
              chain=[0, 1], chain_names=["x", "y"], rate_gbps=[4.0, 4.0])
    assert not sc.solve_ilp(g, [], cpu_cores=6.0).feasible
    r = sc.solve_ilp(g, [], cpu_cores=6.0, servers=2)
    assert r.feasible and r.benefit_us == pytest.approx(2 * (735 + 26))
    assert {p // 3 for p in r.positions} == {0, 1} and all(p % 3 != CPU for p in r.positions)
    assert r.nic_load == pytest.approx(.8)  # the busiest server's share
    # one server is the paper's model unchanged
    one = linear("HeaderClassifier", "Logger", "PayloadAnalyzer", "Monitor", "LoadBalancer")
    a, b = sc.solve_ilp(one, sc.dependencies(one)), sc.solve_ilp(one, sc.dependencies(one), servers=1)
    assert a.positions == b.positions and a.benefit_us == b.benefit_us == pytest.approx(763)


def _bench():
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[1] / "bench_smartchain.py"
    spec = importlib.util.spec_from_file_location("bench_smartchain", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_bench_scaling_servers_reports_each_graphs_x_servers_cell():
    cells = _bench().scaling_servers(17, graphs=(1, 2), servers=(1, 2), reps=1)
    assert list(cells) == ["1 graphs x 1 servers", "1 graphs x 2 servers", "2 graphs x 1 servers",
                           "2 graphs x 2 servers"]
    c = cells["2 graphs x 2 servers"]
    assert c["elements"] == 16 and c["variables"] == 16 * 6 + 2 and c["feasible_pct"] == 100
    assert 0 < c["solve_ms_median"] <= c["solve_ms_p90"] and c["cpu_ms_p90"] > 0


def test_bench_capacity_sensitivity_reports_the_ratio_per_error():
    out = _bench().sensitivity_capacity(3, 17)
    assert list(out) == ["-50%", "-25%", "-10%", "+10%", "+25%", "+50%"]
    for row in out.values():
        assert set(row) == set(sc.ALGOS)
        s = row["smartchain"]
        assert s["min"] <= s["mean"] <= s["max"] <= 1 + 1e-9
        assert set(s) == {"mean", "min", "max", "migrated_pct", "failed_pct"}
