"""Octans (§III-IV): the drop-index model by hand, the least-squares fit recovering known
parameters, Algorithm 1 against exhaustive search and the baselines, `keel-place octans`."""

from __future__ import annotations

import json
import random

import pytest

from keel_placer import octans as o
from keel_placer.cli import main
from keel_placer.octans import Chain, Machine, NFModel


def model(name: str, stalls: float, local=(0.3, 2.0, 0.01), remote=(0.3, 3.0, 0.05),
          ideal=(4.0, 3.0)) -> NFModel:
    return NFModel(name, stalls, ideal[0], ideal[1], local, remote)


MODELS = {"a": model("a", 100), "b": model("b", 200), "c": model("c", 400)}


def test_competing_level_is_sum_of_inverse_stalls():
    # eq. 7: negative in each metric (Property 1), growing with slowing gradient (Property 2)
    assert o.competing_level([100, 200]) == pytest.approx(0.015)
    assert o.competing_level([]) == 0
    assert o.competing_level([100]) > o.competing_level([200])


def test_drop_index_cases_by_hand():
    # chains: x = a -> b, y = c; f(a)=0.01, f(b)=0.005, f(c)=0.0025
    chains = [Chain("x", ["a", "b"]), Chain("y", ["c"])]
    # all local: a competes in LLC with b and c, in memory with b and c (eq. 9, first case)
    f = o.features(chains, [[0, 0], [0]], MODELS, 0, 0)
    assert f == ("local", pytest.approx(0.0075), pytest.approx(0.0075))
    # b on the remote node behind a local a: no LLC hits (1), QPI competitors on its node: none
    assert o.features(chains, [[0, 1], [1]], MODELS, 0, 1) == ("remote", 1.0, pytest.approx(0.0025))
    # cross-node chaining (eq. 10): b local behind a remote a: LLC term 1, memory all others
    assert o.features(chains, [[1, 0], [0]], MODELS, 0, 1) == ("local", 1.0, pytest.approx(0.0125))
    # cache-prefetching chaining (eq. 11): b remote behind a on the same remote node: the run
    # a,b is one LLC competitor for c, b does not compete with its own run
    assert o.features(chains, [[1, 1], [1]], MODELS, 0, 1) == ("remote", pytest.approx(0.0025),
                                                                 pytest.approx(0.0125))
    assert o.features(chains, [[1, 1], [1]], MODELS, 1, 0)[1] == 1.0  # c's upstream is the NIC
    chains2 = [Chain("x", ["a", "b"]), Chain("y", ["c", "c"])]
    # c_2 behind c on node 1: LLC competitors are runs' heads other than its own: only a
    assert o.features(chains2, [[1, 1], [1, 1]], MODELS, 1, 1)[1] == pytest.approx(0.01)
    # lambda = alpha*LLC + beta*mem + c; phi = P(1 - lambda); chain rate is the min (eq. 1-2)
    p = o.predict(chains, [[0, 1], [0]], MODELS)
    assert p.lam[0][1] == pytest.approx(0.3 * 1 + 3.0 * 0 + 0.05)
    assert p.mpps[0][1] == pytest.approx(3.0 * (1 - 0.35))
    assert p.chain_mpps[0] == pytest.approx(min(p.mpps[0]))
    assert p.total == pytest.approx(sum(p.chain_mpps))


def test_fit_recovers_known_parameters(examples):
    _, truth = o.load_machine(str(examples / "octans_machine.json"))
    rng = random.Random(3)
    samples = o.synthetic_samples(truth, 2, 3000, rng, noise=0.005)
    got = o.fit(samples, {k: m.stalls for k, m in truth.items()})
    assert set(got) == set(truth)
    for k, m in truth.items():
        for side in ("local", "remote"):
            a, b, c = got[k][side]
            ta, tb, tc = m.params(side)
            assert a == pytest.approx(ta, abs=0.03), (k, side)
            assert b == pytest.approx(tb, rel=0.15), (k, side)
            assert c == pytest.approx(tc, abs=0.02), (k, side)


def test_fit_without_noise_is_exact():
    rng = random.Random(1)
    samples = o.synthetic_samples(MODELS, 2, 600, rng, noise=0.0)
    got = o.fit(samples, {k: m.stalls for k, m in MODELS.items()})
    for k, m in MODELS.items():
        assert got[k]["local"] == pytest.approx(m.local, abs=1e-6)
        assert got[k]["remote"] == pytest.approx(m.remote, abs=1e-6)


def test_octans_keeps_a_chain_off_a_contended_local_node():
    # Two chains fit the local node, but its LLC is contended (alpha_l large): one whole chain
    # is better on the remote node, where it is a cache-prefetching chain (eq. 11).
    # By hand: all local, each NF lambda = 8*0.06 + 1*0.06 = 0.54: 2 x 2.3 = 4.6 Mpps;
    # split, the local NFs 8*0.02 + 0.06 = 0.22 (3.9 Mpps), the remote chain's first NF
    # 0.3*1 + 0.02 + 0.02 = 0.34 (2.97 Mpps): 6.87 Mpps. Locality-first crowds the local node.
    models = {"r": model("r", 50, local=(8.0, 1.0, 0.0), remote=(0.3, 1.0, 0.02), ideal=(5, 4.5))}
    chains = [Chain("x", ["r", "r"]), Chain("y", ["r", "r"])]
    m = Machine((tuple(range(4)), tuple(range(4))))
    best = o.exhaustive(chains, m, models)
    oc = o.octans(chains, m, models)
    lf = o.locality_first(chains, m, models)
    assert lf.assign == [[0, 0], [0, 0]] and lf.prediction.total == pytest.approx(4.6)
    assert oc.prediction.total == pytest.approx(best.prediction.total)
    assert sorted(map(tuple, oc.assign)) == [(0, 0), (1, 1)]
    assert oc.prediction.total == pytest.approx(3.9 + 4.5 * 0.66)


def test_octans_tries_the_prefix_before_the_bottleneck_on_the_local_node():
    # One chain a -> c, c the slow NF; the local node has one core, so the only initial
    # placement is the whole chain remote. Algorithm 1 then tries s[0:bottleneck] = [a] on
    # the local node (c becomes remote behind a local NF: no LLC hits, 1.8*(1-0.35) = 1.17
    # Mpps) and keeps the better: the prefetching chain, c at 1.8*(1-0.08) = 1.656 Mpps.
    models = dict(MODELS, c=model("c", 400, ideal=(2.0, 1.8)))
    chains = [Chain("x", ["a", "c"])]
    m = Machine(((0,), (1, 2)))
    res = o.octans(chains, m, models)
    assert res.evaluated == 2
    assert res.assign == o.exhaustive(chains, m, models).assign == [[1, 1]]
    assert res.prediction.total == pytest.approx(1.8 * (1 - 0.3 * 0 - 3.0 * 0.01 - 0.05))
    assert o.predict(chains, [[0, 1]], models).total == pytest.approx(1.8 * 0.65)


def test_heuristic_is_near_exhaustive_and_beats_baselines_on_small_cases(examples):
    machine, models = o.load_machine(str(examples / "octans_machine.json"))
    rng = random.Random(7)
    kinds = sorted(models)
    gaps, lf_gain, rnd_gain = [], [], []
    for _ in range(25):
        chains = [Chain(f"c{i}", [rng.choice(kinds) for _ in range(3)]) for i in range(rng.randint(1, 4))]
        h = o.octans(chains, machine, models).prediction.total
        e = o.exhaustive(chains, machine, models).prediction.total
        assert h <= e + 1e-9
        gaps.append((e - h) / e)
        lf_gain.append(h / o.locality_first(chains, machine, models).prediction.total - 1)
        rnd_gain.append(h / o.random_placement(chains, machine, models, rng).prediction.total - 1)
    assert sum(gaps) / len(gaps) < 0.05
    assert min(lf_gain) >= -1e-9  # never worse: locality-first's placement is an initial one
    assert sum(rnd_gain) / len(rnd_gain) > 0.2


def test_exhaustive_refuses_large_cases():
    chains = [Chain("x", ["a"] * 17)]
    assert o.exhaustive(chains, Machine((tuple(range(9)), tuple(range(9)))), MODELS) is None


def test_cli_octans_json_and_place_output(tmp_path, examples, capsys):
    rc = main(["octans", "--placement", str(examples / "octans_chains.json"),
               "--machine", str(examples / "octans_machine.json"), "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"algo", "seconds", "aggregate_mpps", "chains", "compare"}
    assert out["algo"] == "octans"
    assert set(out["compare"]) == {"random", "locality-first", "exhaustive"}
    assert out["aggregate_mpps"] >= out["compare"]["locality-first"] - 1e-9
    cores = [n["core"] for c in out["chains"] for n in c["nfs"]]
    assert len(set(cores)) == len(cores) == 9
    for c in out["chains"]:
        for n in c["nfs"]:
            assert (n["node"] == 0) == (n["core"] in range(6, 12))
        assert c["mpps"] == pytest.approx(min(n["mpps"] for n in c["nfs"]), abs=1e-3)
    # keel-place place --json output: only the server's NFs of the named server are mapped
    placed = tmp_path / "placed.json"
    placed.write_text(json.dumps({"chains": [{"name": "c", "nfs": [
        {"name": "router", "nf": "router", "target": "switch", "server": None},
        {"name": "nids", "nf": "nids", "target": "server", "server": "s1"},
        {"name": "vpn", "nf": "vpn", "target": "server", "server": "s1"}]}]}))
    assert main(["octans", "--placement", str(placed), "--machine",
                 str(examples / "octans_machine.json"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [n["nf"] for n in out["chains"][0]["nfs"]] == ["nids", "vpn"]


def test_cli_octans_bad_input_exits_2(tmp_path, examples, capsys):
    chains = tmp_path / "c.json"
    chains.write_text('{"chains": [{"name": "x", "nfs": ["router", "frob"]}]}')
    assert main(["octans", "--placement", str(chains), "--machine",
                 str(examples / "octans_machine.json")]) == 2
    assert "no model for NF frob" in capsys.readouterr().err
    machine = tmp_path / "m.json"
    machine.write_text('{"nodes": [{"cores": 2}], "nfs": {"router": {"resource_stalls": 1}}}')
    assert main(["octans", "--placement", str(examples / "octans_chains.json"), "--machine",
                 str(machine)]) == 2
    assert "nfs.router.ideal_mpps: 'local' must be a number" in capsys.readouterr().err
