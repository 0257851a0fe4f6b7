"""UNO (§3.2): the offload ILP on hand-checked graphs and against brute force, k
SmartNICs, migration with hysteresis, `keel-place uno`."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from keel_placer import uno
from keel_placer.cli import main
from keel_placer.uno import HOST, Migrator, PlacementGraph, Vertex

DPI = dict(r_host=5 / 9, r_nic=10 / 9)  # UNO §5.3: 5 x86 cores or 10 sNIC cores for 9 Gbps


def nf(name, **kw) -> Vertex:
    return Vertex(name, "nf", **{**DPI, **kw})


def graph(vertices, traffic, nics=None) -> PlacementGraph:
    return PlacementGraph({v.name: v for v in vertices}, nics or {"snic": (36.0, 40.0)}, traffic)


def test_ingress_nf_offloads_without_extra_pcie():
    # eth0 -> dpi -> vm at 9 Gbps: on the host the cut is eth0-dpi, on the SmartNIC dpi-vm;
    # either way 9 Gbps cross PCIe, so offloading saves the DPI's 5 host cores for free
    g = graph([Vertex("eth0", "port"), nf("dpi"), Vertex("vm", "vm")],
              {("eth0", "dpi"): 9.0, ("dpi", "vm"): 9.0})
    r = uno.solve(g)
    assert r.where == {"dpi": "snic"}
    assert r.usage.host_cores == pytest.approx(0) and r.usage.pcie_gbps["snic"] == pytest.approx(9)
    assert r.usage.nic_cores["snic"] == pytest.approx(10)


def test_east_west_nf_needs_pcie_for_both_directions():
    # vm1 -> dpi -> vm2 at 4 Gbps: offloading crosses PCIe twice (8 Gbps)
    vs = [Vertex("vm1", "vm"), nf("dpi"), Vertex("vm2", "vm"), Vertex("eth0", "port")]
    t = {("vm1", "dpi"): 4.0, ("dpi", "vm2"): 4.0}
    assert uno.solve(graph(vs, t, {"snic": (36.0, 7.9)})).where == {"dpi": HOST}
    r = uno.solve(graph(vs, t, {"snic": (36.0, 8.0)}))
    assert r.where == {"dpi": "snic"} and r.usage.pcie_gbps["snic"] == pytest.approx(8)


def test_smartnic_capacity_keeps_the_costliest_nf_offloaded():
    # two ingress NFs, 6 and 3 Gbps: 6.67 + 3.33 SmartNIC cores, D = 7 fits only one; the
    # 6 Gbps one saves 3.33 host cores against 1.67
    vs = [Vertex("eth0", "port"), nf("a"), nf("b"), Vertex("vm", "vm")]
    t = {("eth0", "a"): 6.0, ("a", "vm"): 6.0, ("eth0", "b"): 3.0, ("b", "vm"): 3.0}
    r = uno.solve(graph(vs, t, {"snic": (7.0, 40.0)}))
    assert r.where == {"a": "snic", "b": HOST}
    assert r.usage.host_cores == pytest.approx(5 / 9 * 3)


def test_accelerated_nf_is_pinned_to_the_smartnic_and_infeasible_when_it_cannot_fit():
    vs = [Vertex("vm1", "vm"), nf("crypto", accelerated=True, r_nic=0.1), Vertex("vm2", "vm"),
          Vertex("eth0", "port")]
    t = {("vm1", "crypto"): 4.0, ("crypto", "vm2"): 4.0}
    assert uno.solve(graph(vs, t, {"snic": (36.0, 8.0)})).where == {"crypto": "snic"}
    assert not uno.solve(graph(vs, t, {"snic": (36.0, 7.0)})).feasible


def test_two_smartnics_partition_with_their_own_links():
    # eth0 on snicA feeds a, eth1 on snicB feeds b; each NF belongs on its own port's card
    vs = [Vertex("eth0", "port", nic="A"), Vertex("eth1", "port", nic="B"), nf("a"), nf("b"),
          Vertex("vm", "vm")]
    t = {("eth0", "a"): 5.0, ("a", "vm"): 5.0, ("eth1", "b"): 5.0, ("b", "vm"): 5.0}
    r = uno.solve(graph(vs, t, {"A": (36.0, 5.0), "B": (36.0, 5.0)}))
    assert r.where == {"a": "A", "b": "B"} and r.usage.host_cores == pytest.approx(0)
    assert r.usage.pcie_gbps == {"A": pytest.approx(5), "B": pytest.approx(5)}
    # b on card A would cross both links (eth1 -> b over B's and A's PCIe)
    u = uno.usage(graph(vs, t, {"A": (36.0, 5.0), "B": (36.0, 5.0)}), {"a": "A", "b": "A"})
    assert u.pcie_gbps == {"A": pytest.approx(15), "B": pytest.approx(5)} and not u.fits


@pytest.mark.parametrize("seed", range(15))
def test_ilp_matches_brute_force(seed):
    rng = random.Random(seed)
    names = [f"n{i}" for i in range(rng.randint(2, 6))]
    vs = [Vertex("eth0", "port", nic="A"), Vertex("eth1", "port", nic=rng.choice(["A", "B"])),
          Vertex("vm1", "vm"), Vertex("vm2", "vm")]
    vs += [nf(n, r_host=rng.uniform(0.2, 1), r_nic=rng.uniform(0.2, 2), accelerated=rng.random() < 0.1)
           for n in names]
    ends = [v.name for v in vs]
    t = {}
    for _ in range(rng.randint(3, 10)):
        a, b = rng.sample(ends, 2)
        t[(a, b)] = t.get((a, b), 0) + rng.choice([1.0, 2.0, 4.0])
    nics = {"A": (rng.uniform(1, 8), rng.uniform(2, 20)), "B": (rng.uniform(1, 8), rng.uniform(2, 20))}
    g = graph(vs, t, nics)
    best = None
    for combo in itertools.product([HOST, "A", "B"], repeat=len(names)):
        where = dict(zip(names, combo))
        if any(g.vertices[n].accelerated and where[n] == HOST for n in names):
            continue
        u = uno.usage(g, where)
        if u.fits and (best is None or u.host_cores < best - 1e-9):
            best = u.host_cores
    r = uno.solve(g)
    if best is None:
        assert not r.feasible
    else:
        assert r.feasible and r.usage.fits and r.usage.host_cores == pytest.approx(best, abs=1e-3)


def _ingress_pair():
    vs = [Vertex("eth0", "port"), nf("a"), nf("b"), Vertex("vm", "vm")]
    return graph(vs, {}, {"snic": (7.0, 40.0)})


def _traffic(ta, tb):
    return {("eth0", "a"): ta, ("a", "vm"): ta, ("eth0", "b"): tb, ("b", "vm"): tb}


def test_migration_hysteresis_stops_oscillation():
    # The better NF to offload flips between a and b as their traffic swaps; the gain of
    # swapping is 5/9 * (3.5 - 3) = 0.28 host cores, below a 1-core threshold
    a, b = _traffic(3.5, 3.0), _traffic(3.0, 3.5)
    eager = Migrator(_ingress_pair(), threshold=0.0, patience=1, move_cost=0.0)
    calm = Migrator(_ingress_pair(), threshold=1.0, patience=2)
    for m in (eager, calm):
        for t in [a, b] * 5:
            m.step(t)
    assert eager.migrations == 2 * 9  # both NFs move at every change after the first matrix
    assert calm.migrations == 0


def test_migration_after_a_lasting_change_and_at_once_when_out_of_capacity():
    m = Migrator(_ingress_pair(), threshold=1.0, patience=2)
    where, _, _ = m.step(_traffic(6.0, 1.0))
    assert where == {"a": "snic", "b": HOST}
    # b grows to 6 Gbps and a shrinks to 1: swapping saves 5/9*5 = 2.8 cores; the first
    # matrix is not enough (patience 2), the second one is
    assert m.step(_traffic(1.0, 6.0))[2] is False
    where, _, changed = m.step(_traffic(1.0, 6.0))
    assert changed and where == {"a": HOST, "b": "snic"} and m.migrations == 2
    # b at 6.3 Gbps needs 7.0 SmartNIC cores: still fits, nothing moves; at 6.5 Gbps it
    # needs 7.2: the placement no longer fits and changes at once (a, at 6.2, goes instead)
    assert m.step(_traffic(1.0, 6.3))[2] is False
    where, u, changed = m.step(_traffic(6.2, 6.5))
    assert changed and where == {"a": "snic", "b": HOST} and u.fits


def test_cli_uno(tmp_path, capsys):
    doc = {"smartnics": [{"name": "snic0", "cores": 36, "pcie_gbps": 40}],
           "vertices": [{"name": "eth0", "kind": "port"}, {"name": "dpi", "kind": "nf", "r_host": 0.5,
                                                          "r_nic": 1.0}, {"name": "vm", "kind": "vm"}],
           "traffic": [{"src": "eth0", "dst": "dpi", "gbps": 9}, {"src": "dpi", "dst": "vm", "gbps": 9}]}
    f = tmp_path / "g.json"
    f.write_text(json.dumps(doc))
    assert main(["uno", "--graph", str(f), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["feasible"] and out["placement"] == {"dpi": "snic0"}
    assert out["host_cores_saved"] == pytest.approx(4.5) and out["pcie_gbps"] == {"snic0": 9}
    doc["vertices"][1]["kind"] = "router"
    f.write_text(json.dumps(doc))
    assert main(["uno", "--graph", str(f)]) == 2
    assert "vertices[1]: 'kind' must be nf, vm or port" in capsys.readouterr().err
