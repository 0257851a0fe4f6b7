"""The NF catalogue: read from keel-chain's export, keel-nf's argument names, tenant NFs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from keel_placer import catalog
from keel_placer.catalog import SERVER, CatalogError, load_catalog, load_profiles
from keel_placer.cli import main
from keel_placer.lang import SpecError
from keel_placer.pattern import Problem
from keel_placer.algos import run
from keel_placer.service import pb
from keel_placer.spec import parse_spec

from placer_env import one_server

ROOT = Path(__file__).resolve().parents[2]
TTLGUARD = {"name": "ttlguard", "help": "drops IPv4 packets whose TTL is below min_ttl", "cycles": 300,
            "args": [{"name": "min_ttl", "type": "integer", "minimum": 1, "maximum": 255, "default": 1,
                      "doc": "packets with a lower TTL are dropped"}]}


def errors(text: str, cat=None) -> list[tuple[int, int, str]]:
    with pytest.raises(SpecError) as e:
        parse_spec(text, cat)
    return [(d.line, d.col, d.message) for d in e.value.diagnostics]


def one_chain(expr: str) -> str:
    return f"flow f = []\nchain c = {expr}\nf : c\n"


def test_the_catalogue_is_keel_chains_export_and_every_profile_names_one_of_its_nfs():
    exported = json.loads(subprocess.run([str(ROOT / "build" / "bin" / "keel-chain"), "--list", "--json"],
                                         capture_output=True, text=True, check=True).stdout)
    lib = catalog.library()
    assert lib.names() == sorted(nf["name"] for nf in exported["nfs"])
    for nf in exported["nfs"]:
        assert list(lib.kinds[nf["name"]].args) == nf["args"]
    assert set(catalog.PROFILES) <= set(lib.names())
    # every NF has a cost profile except the diagnostic stamp (server-only, default cycles)
    assert set(lib.names()) - set(catalog.PROFILES) == {"stamp"}
    assert lib.kinds["stamp"].targets == {SERVER} and lib.kinds["stamp"].server_cycles == catalog.DEFAULT_CYCLES
    assert lib.kinds["nat"].server_cycles == 507.0 and not lib.kinds["nat"].replicable


def test_arguments_take_keel_nfs_names():
    spec = parse_spec(one_chain("Tunnel(vlan=7) -> NAT(external_ip='198.18.100.1', port_range=[1024, 65535])"
                                " -> TrafficShaper(rate_bps=1000000000, burst_bytes=15000)"
                                " -> UrlFilter(blocklist=['example.com/ads']) -> PktFilter(filters=['udp'])"))
    assert [(n.nf, n.args) for n in spec.chains[0].nodes][:2] == [
        ("tunnel", {"vlan": 7}), ("nat", {"external_ip": "198.18.100.1", "port_range": [1024, 65535]})]
    assert errors(one_chain("Tunnel(tag=7)")) == [
        (2, 18, "bad argument 'tag' for tunnel: accepted arguments: vlan")]
    assert errors(one_chain("NAT(ext_addr='198.18.0.1', entries=10)"))[0][2] == (
        "bad argument 'ext_addr' for nat: accepted arguments: external_ip, port_range")


def test_values_are_checked_by_the_schema_with_line_and_column():
    assert errors(one_chain("ACL -> NAT(external_ip='notanip')")) == [
        (2, 22, "bad argument 'external_ip' for nat: expected an IPv4 address 'A.B.C.D', got 'notanip'")]
    assert errors(one_chain("Tunnel(vlan=4096)")) == [
        (2, 18, "bad argument 'vlan' for tunnel: 4096 is out of range [0, 4095]")]
    assert errors(one_chain("NAT(port_range=[1])"))[0][2] == (
        "bad argument 'port_range' for nat: expected 2 items, got 1")
    assert errors(one_chain("ACL(rules=[{'dst_ip': '198.18.0.0/33'}])"))[0][2] == (
        "bad argument 'rules' for acl: rules[0].dst_ip: expected an IPv4 prefix 'A.B.C.D/N', "
        "got '198.18.0.0/33'")
    assert errors(one_chain("ACL(rules=[{'dst': '198.18.0.0/16'}])"))[0][2].startswith(
        "bad argument 'rules' for acl: rules[0].dst: unknown field (accepted: src_ip, dst_ip,")
    # required arguments may be left out for placement (Lemur's examples name bare NFs)
    assert parse_spec(one_chain("NAT() -> IPv4Fwd")).chains[0].nodes[0].args == {}


def test_tenant_nfs_are_accepted_with_their_arguments_case_insensitively_and_run_on_servers():
    cat = catalog.library().with_tenants([TTLGUARD])
    spec = parse_spec(one_chain("ACL -> ttlguard(min_ttl=10) -> TTLGuard"), cat)
    assert [(n.name, n.nf, n.args) for n in spec.chains[0].nodes] == [
        ("acl", "acl", {}), ("ttlguard", "ttlguard", {"min_ttl": 10}), ("ttlguard_2", "ttlguard", {})]
    assert errors(one_chain("ACL -> ttlguard(min_ttl=0)"), cat) == [
        (2, 27, "bad argument 'min_ttl' for ttlguard: 0 is out of range [1, 255]")]
    assert errors(one_chain("ttlguard(max_ttl=3)"), cat)[0][2] == (
        "bad argument 'max_ttl' for ttlguard: accepted arguments: min_ttl")
    assert errors(one_chain("ttlguard(min_ttl=10)"))[0][2].startswith("unknown NF 'ttlguard'")
    kind = load_profiles(None, None, cat).kind("ttlguard")
    assert kind.targets == {SERVER} and kind.server_cycles == 300 and kind.tenant
    pl = run(Problem(spec, one_server(), load_profiles(None, None, cat)), "heuristic")
    assert pl.feasible and {n.target for n in pl.chains[0].nfs if n.nf == "ttlguard"} == {"server"}


def test_bad_tenant_entries_are_refused():
    lib = catalog.library()
    with pytest.raises(CatalogError, match="already the name of a library NF"):
        lib.with_tenants([{"name": "NAT", "args": []}])
    with pytest.raises(CatalogError, match="cycles must be a positive number"):
        lib.with_tenants([{**TTLGUARD, "cycles": -1}])
    with pytest.raises(CatalogError, match="expected a JSON list"):
        lib.with_tenants({"name": "x"})


def test_catalogue_file_errors_name_the_file(tmp_path, monkeypatch):
    with pytest.raises(CatalogError, match="not an NF catalogue"):
        (tmp_path / "c.json").write_text('{"nfs": []}')
        load_catalog(str(tmp_path / "c.json"))
    monkeypatch.setenv("KEEL_NF_CATALOG", str(tmp_path / "missing.json"))
    catalog.use_catalog(None)
    try:
        with pytest.raises(CatalogError, match="missing.json: no NF catalogue .*make build"):
            catalog.library()
    finally:
        monkeypatch.delenv("KEEL_NF_CATALOG")
        catalog.use_catalog(None)


def test_cli_catalog_and_tenant_nfs_flags(tmp_path, capsys):
    spec = tmp_path / "s.conf"
    spec.write_text(one_chain("ttlguard(min_ttl=10) -> Tunnel(vlan=7)"))
    tenants = tmp_path / "t.json"
    tenants.write_text(json.dumps([TTLGUARD]))
    assert main(["parse", "--spec", str(spec)]) == 2
    assert "unknown NF 'ttlguard'" in capsys.readouterr().err
    assert main(["parse", "--spec", str(spec), "--tenant-nfs", str(tenants), "--json",
                 "--catalog", str(ROOT / "build" / "nf-catalog.json")]) == 0
    nodes = json.loads(capsys.readouterr().out)["chains"][0]["nodes"]
    assert [(n["nf"], n["args"]) for n in nodes] == [("ttlguard", {"min_ttl": 10}), ("tunnel", {"vlan": 7})]
    small = tmp_path / "small.json"
    small.write_text(json.dumps({"version": 1, "nfs": [{"name": "tunnel", "help": "h", "args": []}]}))
    assert main(["parse", "--spec", str(spec), "--tenant-nfs", str(tenants), "--catalog", str(small)]) == 2
    assert "bad argument 'vlan' for tunnel: accepted arguments: none" in capsys.readouterr().err
    catalog.use_catalog(None)


def test_service_takes_tenant_nfs_in_parse_and_place(stub, examples):
    spec = one_chain("ACL -> ttlguard(min_ttl=10)")
    tenants = json.dumps([TTLGUARD])
    r = stub.Parse(pb.ParseRequest(spec=spec, tenant_nfs_json=tenants), timeout=10)
    assert r.ok and [(n.nf, json.loads(n.args_json)) for n in r.chains[0].nodes] == [
        ("acl", {}), ("ttlguard", {"min_ttl": 10})]
    r = stub.Parse(pb.ParseRequest(spec=one_chain("ACL -> ttlguard(min_ttl=300)"), tenant_nfs_json=tenants),
                   timeout=10)
    assert not r.ok and (r.errors[0].line, r.errors[0].column) == (2, 27)
    assert "out of range" in r.errors[0].message
    r = stub.Parse(pb.ParseRequest(spec=spec), timeout=10)
    assert not r.ok and "unknown NF 'ttlguard'" in r.errors[0].message
    r = stub.Parse(pb.ParseRequest(spec=spec, tenant_nfs_json="[{"), timeout=10)
    assert not r.ok and r.errors[0].message.startswith("tenant_nfs_json:")
    p = stub.Place(pb.PlaceRequest(spec=spec, tenant_nfs_json=tenants,
                                   topology_yaml=(examples / "topology.yaml").read_text()), timeout=30)
    assert p.ok and p.feasible
    assert [(n.nf, n.target) for n in p.chains[0].nfs if n.nf == "ttlguard"] == [("ttlguard", "server")]
