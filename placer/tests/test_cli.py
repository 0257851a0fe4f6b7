"""keel-place command line: --json schema, exit status 2 on bad input, eval table."""

from __future__ import annotations

import json
import subprocess
import sys

from keel_placer.cli import main

PLACE_KEYS = {"feasible", "algo", "seconds", "marginal_gbps", "chains", "switch"}
CHAIN_KEYS = {"name", "t_min_gbps", "rate_gbps", "latency_us", "nfs", "subgroups"}


def test_place_json_schema(examples, capsys):
    rc = main(["place", "--spec", str(examples / "chain_0_1_2_3.conf"),
               "--topology", str(examples / "topology.yaml"), "--algo", "heuristic", "--json"])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == PLACE_KEYS and out["feasible"] is True and out["algo"] == "heuristic"
    assert set(out["switch"]) == {"stages_used"} and 0 < out["switch"]["stages_used"] <= 12
    for c in out["chains"]:
        assert set(c) == CHAIN_KEYS
        assert c["rate_gbps"] >= c["t_min_gbps"]
        for n in c["nfs"]:
            assert set(n) == {"name", "nf", "target", "server", "subgroup"}
            assert n["target"] in ("switch", "smartnic", "server")
            assert (n["subgroup"] is not None) == (n["target"] == "server")
        ids = {s["id"] for s in c["subgroups"]}
        assert {n["subgroup"] for n in c["nfs"] if n["subgroup"] is not None} == ids
        for s in c["subgroups"]:
            assert set(s) == {"id", "server", "cores", "nfs"} and s["cores"] >= 1


def test_infeasible_is_exit_0_with_reason(tmp_path, examples, capsys):
    spec = tmp_path / "s.conf"
    spec.write_text("flow f = []\nchain c = DEDUP()\nf : c @ {'t_min': '90Gbps'}\n")
    rc = main(["place", "--spec", str(spec), "--topology", str(examples / "lemur_testbed.yaml"),
               "--json", "--algo", "optimal"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["feasible"] is False and out["reason"]


def test_bad_spec_exits_2_naming_line_and_column(tmp_path, examples, capsys):
    spec = tmp_path / "bad.conf"
    spec.write_text("flow f = []\nchain c = ACL -> Foo()\nf : c\n")
    rc = main(["place", "--spec", str(spec), "--topology", str(examples / "topology.yaml")])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"{spec}:2:18: error: unknown NF 'Foo'" in err


def test_bad_topology_and_profiles_exit_2(tmp_path, examples, capsys):
    topo = tmp_path / "t.yaml"
    topo.write_text("switch: {kind: pisa, stages: twelve}\nservers: []\n")
    assert main(["place", "--spec", str(examples / "chain_5.conf"), "--topology", str(topo)]) == 2
    assert "switch: 'stages' must be a positive integer" in capsys.readouterr().err
    prof = tmp_path / "p.json"
    prof.write_text('{"server_cycles": {"frob": 3}}')
    assert main(["place", "--spec", str(examples / "chain_5.conf"), "--topology",
                 str(examples / "topology.yaml"), "--profiles", str(prof)]) == 2
    assert "unknown NF 'frob'" in capsys.readouterr().err


def test_eval_writes_table(tmp_path, examples, capsys):
    out = tmp_path / "eval.json"
    rc = main(["eval", "--spec", str(examples / "chain_0_1_2_3.conf"), "--topology",
               str(examples / "lemur_testbed.yaml"), "--profiles",
               str(examples / "lemur_eval_profiles.json"), "--deltas", "0.5,4",
               "--algos", "heuristic,optimal,greedy", "--out", str(out)])
    assert rc == 0
    table = json.loads(out.read_text())
    assert [r["delta"] for r in table["rows"]] == [0.5, 4.0]
    assert set(table["rows"][0]["algos"]) == {"heuristic", "optimal", "greedy"}
    assert table["rows"][0]["algos"]["heuristic"]["feasible"] is True
    assert table["checks"]["heuristic_equals_optimal_fraction"] == 1.0
    assert "heuristic_equals_optimal_fraction: 1.0" in capsys.readouterr().out


def test_parse_json_and_help_via_entry_point(examples):
    r = subprocess.run([sys.executable, "-m", "keel_placer.cli", "parse", "--spec",
                        str(examples / "chain_5.conf"), "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    chains = json.loads(r.stdout)["chains"]
    assert [c["name"] for c in chains] == ["web_chain", "nat_chain", "bulk_chain", "tenant_chain"]
    assert chains[1]["edges"][0] == {"src": "ingress", "dst": 0, "weight": 1.0}
    h = subprocess.run([sys.executable, "-m", "keel_placer.cli", "--help"], capture_output=True, text=True)
    assert h.returncode == 0
    for word in ("flow NAME", "gate_select", "t_min", "smartnic", "--profiles", "aescbc=encrypt"):
        assert word in h.stdout
