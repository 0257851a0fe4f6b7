"""gRPC service keel.v1.Placer over a real loopback server."""

from __future__ import annotations

import grpc
import pytest

from placer_env import TOKEN
from keel_placer.service import controltoken, pb, pb_grpc, start


def test_parse_returns_graph(stub, examples):
    r = stub.Parse(pb.ParseRequest(spec=(examples / "chain_0_1_2_3.conf").read_text()), timeout=10)
    assert r.ok and [c.name for c in r.chains] == ["chain_1", "chain_2", "chain_3", "chain_4"]
    c2 = r.chains[1]
    assert [n.nf for n in c2.nodes] == ["encrypt", "lb", "nat", "nat", "nat", "ipv4fwd"]
    assert c2.t_min_gbps == pytest.approx(1.1) and c2.t_max_gbps == pytest.approx(100)


def test_parse_returns_located_errors(stub):
    r = stub.Parse(pb.ParseRequest(spec="flow f = []\nchain c = ACL -> b\nchain b = a\nf : c\n"), timeout=10)
    assert not r.ok
    assert [(e.line, e.column) for e in r.errors] == [(3, 11)]
    assert "unknown NF or chain 'a'" in r.errors[0].message


def test_place_over_grpc_matches_library(stub, examples):
    req = pb.PlaceRequest(spec=(examples / "chain_0_1_2_3.conf").read_text(),
                          topology_yaml=(examples / "lemur_testbed.yaml").read_text(),
                          algo="optimal", profiles_json='{"targets": {"ipv4fwd": ["p4"]}}')
    r = stub.Place(req, timeout=60)
    assert r.ok and r.feasible and r.algo == "optimal"
    assert r.marginal_gbps > 0 and 0 < r.switch_stages_used <= 12
    for c in r.chains:
        assert c.rate_gbps >= c.t_min_gbps - 1e-6
        for n in c.nfs:
            assert n.target in ("switch", "smartnic", "server")
            assert n.nf != "ipv4fwd" or n.target == "switch"
    h = stub.Place(pb.PlaceRequest(spec=req.spec, topology_yaml=req.topology_yaml,
                                   profiles_json=req.profiles_json), timeout=10)
    assert h.algo == "heuristic" and h.marginal_gbps <= r.marginal_gbps + 1e-6


def test_place_bad_inputs(stub, examples):
    spec = (examples / "chain_5.conf").read_text()
    r = stub.Place(pb.PlaceRequest(spec=spec, topology_yaml="switch: {kind: asic}", algo="heuristic"),
                   timeout=10)
    assert not r.ok and "switch: 'kind' must be pisa or openflow" in r.input_error
    r = stub.Place(pb.PlaceRequest(spec=spec, topology_yaml="x: 1", algo="fastest"), timeout=10)
    assert not r.ok and "unknown algo 'fastest'" in r.input_error


@pytest.fixture
def server():
    """A keel-place gRPC service wanting placer_env's TOKEN; yields its address."""
    srv, port = start("127.0.0.1:0", TOKEN)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        srv.stop(grace=None)


@pytest.mark.parametrize("token, why", [
    (None, 'no "authorization: Bearer TOKEN" metadata'),
    ("fedcba9876543210fedcba9876543210", "wrong token"),
])
def test_calls_without_the_control_token_are_refused(server, token, why):
    channel = grpc.insecure_channel(server) if token is None else controltoken.channel(server, token)
    with channel:
        with pytest.raises(grpc.RpcError) as e:
            pb_grpc.PlacerStub(channel).Parse(pb.ParseRequest(spec="flow f = []\n"), timeout=10)
    assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    assert why in e.value.details()


def test_serve_creates_a_private_token_file_at_first_start(tmp_path):
    path = tmp_path / "secrets" / "control-token"
    token, created = controltoken.ensure(str(path))
    assert created and len(token) == 64
    assert path.stat().st_mode & 0o777 == 0o600 and path.parent.stat().st_mode & 0o777 == 0o700
    assert controltoken.ensure(str(path)) == (token, False)
    path.write_text("short\n")
    with pytest.raises(controltoken.TokenError, match="at least 16"):
        controltoken.ensure(str(path))
