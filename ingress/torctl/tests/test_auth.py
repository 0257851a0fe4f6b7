# SPDX-License-Identifier: Apache-2.0
"""The control-plane token on keel-torctl's gRPC: its TorControl API refuses calls without it,
and its Control client (the gateway's Watch and ListFlows) sends it. No switch needed."""
from concurrent import futures

import grpc
import pytest

from torctl_env import TOKEN, free_port
from keel_torctl import cli
from keel_torctl.controller import Controller, Options
from keel_torctl.gateway import Gateway
from keel_torctl.metrics import Metrics
from keel_torctl.nfs import CAPABILITIES_PATH, load_capabilities
from keel_torctl.pb import control_pb2, control_pb2_grpc, controltoken, torctl_pb2, torctl_pb2_grpc
from keel_torctl.service import TorControl
from keel_torctl.switch import Switch

WRONG = "fedcba9876543210fedcba9876543210"


@pytest.fixture
def torcontrol():
    """keel-torctl's TorControl server (no switch connected) wanting TOKEN; yields its address."""
    metrics = Metrics()
    opts = Options("ing", "egr", {}, 10, load_capabilities(CAPABILITIES_PATH), False)
    addr = f"127.0.0.1:{free_port()}"
    server = cli.grpc_server(addr, TorControl(Controller(opts, Switch(metrics), metrics), metrics), TOKEN)
    server.start()
    yield addr
    server.stop(None)


@pytest.mark.parametrize("token, why", [
    (None, 'no "authorization: Bearer TOKEN" metadata'),
    (WRONG, "wrong token"),
])
def test_torcontrol_refuses_unary_and_streaming_calls_without_the_token(torcontrol, token, why):
    channel = grpc.insecure_channel(torcontrol) if token is None else controltoken.channel(torcontrol, token)
    with channel:
        stub = torctl_pb2_grpc.TorControlStub(channel)
        for call in (lambda: stub.Status(torctl_pb2.TorStatusRequest(), timeout=10),
                     lambda: next(stub.WatchFlowRemoved(torctl_pb2.WatchFlowRemovedRequest(), timeout=10))):
            with pytest.raises(grpc.RpcError) as e:
                call()
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED and why in e.value.details()


def test_torcontrol_serves_calls_with_the_token(torcontrol):
    with controltoken.channel(torcontrol, TOKEN) as channel:
        st = torctl_pb2_grpc.TorControlStub(channel).Status(torctl_pb2.TorStatusRequest(), timeout=10)
    assert not st.connected


class Flows(control_pb2_grpc.ControlServicer):
    def ListFlows(self, request, context):
        return control_pb2.ListFlowsResponse(flows=[control_pb2.FlowRecord(
            flow=control_pb2.FiveTuple(src_ip="198.18.0.1", dst_ip="198.19.0.1", src_port=1, dst_port=2, proto=17),
            chain="c", instance="c/0", vlan=7, worker="w1")])


def test_gateway_client_sends_the_token():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2),
                         interceptors=[controltoken.ServerInterceptor(TOKEN)])
    control_pb2_grpc.add_ControlServicer_to_server(Flows(), server)
    addr = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
    server.start()
    try:
        assert [f.instance for f in Gateway(addr, TOKEN).list_flows()] == ["c/0"]
        with pytest.raises(grpc.RpcError) as e:
            Gateway(addr, WRONG).list_flows()
        assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        server.stop(None)


def test_cli_refuses_a_token_file_that_holds_no_usable_token(tmp_path, capsys):
    bad = tmp_path / "control-token"
    bad.write_text("short\n")
    assert cli.main(["--control-token-file", str(bad), "--gateway", ""]) == 2
    assert "at least 16" in capsys.readouterr().err
