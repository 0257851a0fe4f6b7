"""`keel-place place --refine`: Lemur, then SmartChain or UNO on servers with a SmartNIC,
then Octans on servers with several NUMA nodes; and the gRPC Place call's refine field."""

from __future__ import annotations

import json

import pytest

from keel_placer import refine as rf
from keel_placer.cli import main
from keel_placer.service import pb

LATENCY_SPEC = """flow tenant = [{'dst_ip': '198.18.5.0/24'}]
chain chain_5 = ACL(rules=[{'dst_ip': '198.18.5.0/24', 'drop': False}]) -> UrlFilter() -> Chacha() -> IPv4Forward()
tenant : chain_5 @ {'t_min': '2Gbps', 't_max': '40Gbps', 'd_max': '100us'}
"""


def _place(capsys, *args) -> dict:
    assert main(["place", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_parse_steps():
    assert rf.parse_steps("all") == ["smartchain", "uno", "octans"]
    assert rf.parse_steps("none") == [] and rf.parse_steps(None) == []
    assert rf.parse_steps("uno, octans") == ["uno", "octans"]
    with pytest.raises(rf.RefineError, match="unknown step nic"):
        rf.parse_steps("nic")


def test_place_without_refine_keeps_its_schema(examples, capsys):
    out = _place(capsys, "--spec", str(examples / "smartnic_chain.conf"), "--topology",
                 str(examples / "topology.yaml"))
    assert "refine" not in out


def test_latency_chain_gets_smartchain_partition(tmp_path, examples, capsys):
    spec = tmp_path / "lat.conf"
    spec.write_text(LATENCY_SPEC)
    out = _place(capsys, "--spec", str(spec), "--topology", str(examples / "topology.yaml"),
                 "--refine", "all")
    rep = out["refine"]
    assert rep["steps"] == ["smartchain", "uno", "octans"]
    (srv,) = rep["servers"]
    assert srv["server"] == "worker-b" and srv["numa"] is None  # one NUMA node
    (nic,) = srv["nic"]
    assert nic["algo"] == "smartchain" and nic["after"] >= nic["before"]
    assert nic["round_trips"] <= 1
    where = {n["name"]: n["target"] for n in nic["nfs"]}
    # The NFs Lemur left on worker-b (its server and SmartNIC NFs; ACL and IPv4Forward may
    # go to the switch instead, an equal-rate placement) are what SmartChain re-partitions.
    server_side = {"chain_5." + n["name"] for n in out["chains"][0]["nfs"] if n.get("server") == "worker-b"}
    assert set(where) == server_side and {"chain_5.urlfilter", "chain_5.chacha"} <= set(where)
    assert where["chain_5.urlfilter"] == "server"  # no eBPF version: pinned to the CPU


def test_chain_without_d_max_gets_uno_and_numa_server_gets_octans(examples, capsys):
    out = _place(capsys, "--spec", str(examples / "chain_0_1_2_3.conf"), "--topology",
                 str(examples / "topology.yaml"), "--refine", "all")
    servers = {s["server"]: s for s in out["refine"]["servers"]}
    (nic,) = servers["worker-b"]["nic"]
    assert nic["algo"] == "uno" and nic["after"] is not None
    if nic["before_fits"]:
        assert nic["after"] <= nic["before"] + 1e-6
    numa = servers["worker-a"]["numa"]  # worker-a: 16 cores on 2 NUMA nodes
    assert numa["algo"] == "octans" and numa["after"] >= numa["before"] - 1e-9
    cores = [c for g in numa["subgroups"] for c in g["cores"]]
    assert len(cores) == len(set(cores)) and all(0 <= c < 16 for c in cores)
    for g in numa["subgroups"]:
        assert all(c // 8 == g["node"] for c in g["cores"])


def test_refine_steps_can_be_chosen(examples, capsys):
    out = _place(capsys, "--spec", str(examples / "chain_0_1_2_3.conf"), "--topology",
                 str(examples / "topology.yaml"), "--refine", "octans")
    assert all(s["nic"] == [] for s in out["refine"]["servers"])
    assert main(["place", "--spec", str(examples / "chain_0_1_2_3.conf"), "--topology",
                 str(examples / "topology.yaml"), "--refine", "numa"]) == 2
    assert "--refine: unknown step numa" in capsys.readouterr().err


def test_place_over_grpc_with_refine(stub, examples):
    req = pb.PlaceRequest(spec=(examples / "chain_0_1_2_3.conf").read_text(),
                          topology_yaml=(examples / "topology.yaml").read_text(), refine="all")
    r = stub.Place(req, timeout=60)
    assert r.ok and r.feasible
    rep = json.loads(r.refine_json)
    assert rep["steps"] == ["smartchain", "uno", "octans"]
    assert {s["server"] for s in rep["servers"]} >= {"worker-a", "worker-b"}
    plain = stub.Place(pb.PlaceRequest(spec=req.spec, topology_yaml=req.topology_yaml), timeout=60)
    assert plain.refine_json == ""
    bad = stub.Place(pb.PlaceRequest(spec=req.spec, topology_yaml=req.topology_yaml, refine="x"), timeout=10)
    assert not bad.ok and "unknown step x" in bad.input_error


def test_octans_profile_replaces_derived_models(tmp_path, examples, capsys):
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps({"nfs": {"encrypt": {
        "resource_stalls": 5000, "ideal_mpps": {"local": 0.2, "remote": 0.1},
        "local": {"alpha": 0.3, "beta": 2.0, "c": 0.0}, "remote": {"alpha": 0.3, "beta": 3.0, "c": 0.0}}}}))
    out = _place(capsys, "--spec", str(examples / "chain_0_1_2_3.conf"), "--topology",
                 str(examples / "topology.yaml"), "--refine", "octans", "--octans-profile", str(prof))
    numa = {s["server"]: s for s in out["refine"]["servers"]}["worker-a"]["numa"]
    derived = _place(capsys, "--spec", str(examples / "chain_0_1_2_3.conf"), "--topology",
                     str(examples / "topology.yaml"), "--refine", "octans")
    numa0 = {s["server"]: s for s in derived["refine"]["servers"]}["worker-a"]["numa"]
    # worker-a runs chain_2's encrypt subgroup (16 cores: two 8-core pieces, one per node);
    # with the profile's 0.2 Mpps per core the chain can do at most 16 x 0.2 Mpps
    (enc,) = {g["name"].split(" (")[0] for g in numa["subgroups"] if "encrypt" in g["name"]}
    assert numa["after"] <= 16 * 0.2 and numa["after"] != numa0["after"]


def test_report_names_each_nfs_chain_and_subgroup(tmp_path, examples, capsys):
    # What the gateway reads to show a chain's refined placement: each NIC-step NF by chain
    # and NF name (no "wire" port), each Octans piece by Lemur's subgroup id and its NFs.
    spec = tmp_path / "lat.conf"
    spec.write_text(LATENCY_SPEC)
    out = _place(capsys, "--spec", str(spec), "--topology", str(examples / "topology.yaml"), "--refine", "all")
    (nic,) = out["refine"]["servers"][0]["nic"]
    assert all(n["name"] == f"{n['chain']}.{n['nf']}" and n["chain"] == "chain_5" for n in nic["nfs"])
    out = _place(capsys, "--spec", str(examples / "chain_0_1_2_3.conf"), "--topology",
                 str(examples / "topology.yaml"), "--refine", "all")
    servers = {s["server"]: s for s in out["refine"]["servers"]}
    assert "wire" not in {n["name"] for n in servers["worker-b"]["nic"][0]["nfs"]}
    subgroups = {(c["name"], s["id"]): s["nfs"] for c in out["chains"] for s in c["subgroups"]}
    for g in servers["worker-a"]["numa"]["subgroups"]:
        assert g["name"].startswith(f"subgroup {g['subgroup']}: ")
        assert set(g["nfs"]) <= set(subgroups[(g["chain"], g["subgroup"])])
