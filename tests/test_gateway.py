# SPDX-License-Identifier: Apache-2.0
"""keel-gateway driven by the real faas-cli: login, chains from stack.yml, bad inputs, a normal
function in Docker (invoke, scale), restart, the Control gRPC API, and removal."""
import base64
import importlib
import json
import re
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from gateway_fixtures import ROOT, control_token, docker_engine, gateway, placer_addr, redis_addr  # noqa: F401  (fixtures)

STACK = ROOT / "stack.yml"
# hello is scaled to 2 by hand and checked at 2 by later tests of this module: the
# autoscaler must not scale it back to its min (1) meanwhile, as it would after its default
# 30 s down window without calls (tests/test_conformance.py runs the defaults).
GATEWAY_ARGS = ["--scale-down-window", "10m"]
CHAINS = ["chain1", "chain2", "chain3"]


def redis_keys(redis_addr):
    host, port = redis_addr.split(":")
    out = subprocess.run(["redis-cli", "-h", host, "-p", port, "--raw", "KEYS", "keel:*"],
                         capture_output=True, text=True, check=True).stdout
    return sorted(k for k in out.split("\n") if k)


def api(gw, method, path, body=None, auth=True):
    req = urllib.request.Request(gw.url + path, method=method,
                                 data=None if body is None else json.dumps(body).encode())
    if auth:
        req.add_header("Authorization", "Basic " + base64.b64encode(f"admin:{gw.password()}".encode()).decode())
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def chain_stack(tmp_path, name, labels=None, annotations=None):
    labels = {"com.keel.kind": "chain"} if labels is None else labels
    lines = ["version: 1.0", "provider:", "  name: openfaas", "functions:", f"  {name}:", "    image: keel/chain:latest"]
    for section, kv in (("labels", labels), ("annotations", annotations or {})):
        if kv:
            lines.append(f"    {section}:")
            lines += [f"      {k}: {json.dumps(v)}" for k, v in kv.items()]
    p = tmp_path / f"{name}.yml"
    p.write_text("\n".join(lines) + "\n")
    return p


ACL_NAT = "ACL(rules=[{'dst_ip':'198.19.9.0/24'}]) -> NAT(external_ip='198.18.100.1', port_range=[1024, 65535])"
GOOD = {"com.keel.chain": ACL_NAT, "com.keel.filter": "dst net 198.19.9.0/24", "com.keel.slo": "p99=100us,t_min=10Mbps"}


def test_login_refuses_a_wrong_password_and_accepts_the_generated_one(gateway):
    assert gateway.secrets.joinpath("basic-auth-user").read_text() == "admin"
    bad = gateway.faas("login", "-u", "admin", "--password-stdin", stdin="not-the-password")
    assert bad.returncode != 0 and "unable to login" in (bad.stdout + bad.stderr).lower()
    ok = gateway.faas("login", "-u", "admin", "--password-stdin", stdin=gateway.password())
    assert ok.returncode == 0, ok.stderr
    assert api(gateway, "GET", "/system/functions", auth=False)[0] == 401
    assert api(gateway, "GET", "/healthz", auth=False)[0] == 200


def test_deploy_stack_chains_then_list_and_describe(gateway, redis_addr):
    r = gateway.faas("deploy", "-f", str(STACK), "--filter", "chain*")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("202 Accepted") == 3
    lst = gateway.faas("list", "-v")
    assert lst.returncode == 0
    rows = {l.split()[0]: l for l in lst.stdout.splitlines()[1:]}
    assert sorted(rows) == CHAINS
    assert "tunnel@switch -> ipv4fwd@switch" in rows["chain1"]
    assert "urlfilter@server:local -> encrypt@server:local" in rows["chain2"]
    d = gateway.faas("describe", "chain2")
    assert d.returncode == 0
    assert "com.keel.nfs: acl -> urlfilter -> encrypt" in d.stdout
    # one subgroup on one core ending with the two server-only NFs (the ACL may run on either side)
    assert re.search(r"com\.keel\.subgroups: local: 1 core\(s\) \[(acl, )?urlfilter, encrypt\]", d.stdout), d.stdout
    assert "chain2/0 pooled worker=local vlan=" in d.stdout
    assert "com.keel.rate:" in d.stdout and "com.keel.p99:" in d.stdout
    assert "keel:function:chain2" in redis_keys(redis_addr)


BAD = [
    ("unknown-nf", None, {**GOOD, "com.keel.chain": "ACL -> Frobnicate"}, 400, "annotations.com.keel.chain", "unknown NF or chain 'Frobnicate'"),
    ("syntax", None, {**GOOD, "com.keel.chain": "ACL -> -> NAT"}, 400, "annotations.com.keel.chain: column", ""),
    ("bad-nf-argument", None, {**GOOD, "com.keel.chain": ACL_NAT.replace("198.18.100.1", "notanip")}, 400,
     "annotations.com.keel.chain: column 48", "bad argument 'external_ip' for nat: expected an IPv4 address"),
    ("nf-init-refuses", None, {**GOOD, "com.keel.chain": "BPF(filters=['tcp prot 80'])"}, 400,
     "annotations.com.keel.chain", "NF bpf: argument filters: filters[0]: 'tcp prot 80' does not compile"),
    ("missing-nf-argument", None, {**GOOD, "com.keel.chain": "Tunnel -> IPv4Fwd(routes=[])"}, 400,
     "annotations.com.keel.chain", "NF tunnel: argument vlan: missing"),
    ("old-argument-name", None, {**GOOD, "com.keel.chain": "Tunnel(tag=7)"}, 400,
     "annotations.com.keel.chain", "bad argument 'tag' for tunnel: accepted arguments: vlan"),
    ("bad-filter", None, {**GOOD, "com.keel.filter": "dst net 198.18.0.0/15 andd tcp"}, 400, "annotations.com.keel.filter", "not a valid pcap filter"),
    ("bad-slo", None, {**GOOD, "com.keel.slo": "p99=100,t_min=1Gbps"}, 400, "annotations.com.keel.slo", "expected a delay like 100us"),
    ("missing-label", {"team": "x"}, GOOD, 400, "labels.com.keel.kind: missing", ""),
    ("missing-annotation", None, {"com.keel.chain": "ACL -> NAT"}, 400, "annotations.com.keel.filter: missing", ""),
    ("infeasible", None, {**GOOD, "com.keel.slo": "t_min=50Gbps"}, 400, "annotations.com.keel.slo", "no placement"),
    ("bad-scale-target", {"com.keel.kind": "chain", "com.openfaas.scale.type": "capacity", "com.openfaas.scale.target": "lots"},
     GOOD, 400, "labels.com.openfaas.scale.target", "expected a positive number of flows per instance"),
    ("scale-type-not-capacity", {"com.keel.kind": "chain", "com.openfaas.scale.type": "rps", "com.openfaas.scale.target": "5"},
     GOOD, 400, "labels.com.openfaas.scale.type", "a chain scales by flows per instance"),
]


@pytest.mark.parametrize("name,labels,annotations,code,field,problem", BAD, ids=[b[0] for b in BAD])
def test_bad_chain_is_rejected_naming_the_field_and_leaves_nothing(gateway, redis_addr, docker_engine, tmp_path,
                                                                   name, labels, annotations, code, field, problem):
    keys, containers = redis_keys(redis_addr), docker_engine.containers()
    r = gateway.faas("deploy", "-f", str(chain_stack(tmp_path, name, labels, annotations)))
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert f"Unexpected status: {code}" in out and field in out and problem in out, out
    assert redis_keys(redis_addr) == keys
    assert docker_engine.containers() == containers
    assert name not in gateway.faas("list").stdout


def test_duplicate_name_is_refused(gateway, redis_addr, tmp_path):
    keys = redis_keys(redis_addr)
    st, body = api(gateway, "POST", "/system/functions", {"service": "chain1", "image": "x",
                                                          "labels": {"com.keel.kind": "chain"}, "annotations": GOOD})
    assert st == 409 and "already deployed" in body
    r = gateway.faas("deploy", "-f", str(chain_stack(tmp_path, "chain3", {"com.keel.kind": "nf"})))
    assert r.returncode != 0 and "chain3 is already used by a chain" in r.stdout + r.stderr
    assert redis_keys(redis_addr) == keys


@pytest.fixture(scope="module")
def hello_image(docker_engine, tmp_path_factory):
    ctx = tmp_path_factory.mktemp("hello")
    env = {**os.environ, "CGO_ENABLED": "0", "PATH": os.environ["PATH"] + ":/usr/local/go/bin"}
    subprocess.run(["go", "build", "-o", str(ctx / "hello"), "./examples/hello"], cwd=ROOT / "gateway", env=env,
                   check=True, timeout=120)
    (ctx / "Dockerfile").write_text((ROOT / "gateway" / "examples" / "hello" / "Dockerfile").read_text())
    docker_engine.cli("build", "-q", "-t", "keel/hello:test", str(ctx))
    return "keel/hello:test"


def invoke(gateway, name, data, timeout=20):
    deadline = time.time() + timeout
    while True:
        r = gateway.faas("invoke", name, stdin=data)
        if r.returncode == 0 or time.time() > deadline:
            return r
        time.sleep(0.3)


def test_normal_function_runs_in_docker_is_invoked_and_scaled(gateway, docker_engine, hello_image, tmp_path):
    stack = tmp_path / "hello.yml"
    stack.write_text(f"version: 1.0\nprovider:\n  name: openfaas\nfunctions:\n  hello:\n    image: {hello_image}\n")
    r = gateway.faas("deploy", "-f", str(stack))
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(docker_engine.containers()) == 1
    out = invoke(gateway, "hello", "keel")
    assert out.returncode == 0 and "hello from" in out.stdout and out.stdout.endswith(": keel"), out.stdout + out.stderr
    assert api(gateway, "POST", "/system/scale-function/hello", {"serviceName": "hello", "replicas": 2})[0] == 202
    assert len(docker_engine.containers()) == 2
    # Calls go to ready replicas only (their watchdog's /_/health answers): wait for the new one.
    deadline = time.time() + 30
    while json.loads(api(gateway, "GET", "/system/function/hello")[1])["availableReplicas"] < 2:
        assert time.time() < deadline, "the second replica did not become ready within 30 s"
        time.sleep(0.2)
    hosts = {invoke(gateway, "hello", "x").stdout.split(":")[0] for _ in range(6)}
    assert len(hosts) == 2, hosts
    st = json.loads(api(gateway, "GET", "/system/function/hello")[1])
    assert st["replicas"] == 2 and st["availableReplicas"] == 2 and st["invocationCount"] >= 7


def test_a_secret_is_mounted_read_only_in_the_functions_replicas(gateway, docker_engine, hello_image, tmp_path):
    r = gateway.faas("secret", "create", "greeting", "--from-literal", "s3cret-value")
    assert r.returncode == 0, r.stdout + r.stderr
    r = gateway.faas("secret", "list")
    assert r.returncode == 0 and "greeting" in r.stdout, r.stdout + r.stderr
    stack = tmp_path / "secret.yml"
    stack.write_text(f"version: 1.0\nprovider:\n  name: openfaas\nfunctions:\n  hello-secret:\n    image: {hello_image}\n"
                     "    secrets:\n      - greeting\n")
    r = gateway.faas("deploy", "-f", str(stack))
    assert r.returncode == 0, r.stdout + r.stderr

    def read():
        deadline = time.time() + 20
        while True:
            out = gateway.faas("invoke", "hello-secret", "--query", "secret=greeting", stdin="")
            if out.returncode == 0 or time.time() > deadline:
                return out
            time.sleep(0.3)
    out = read()
    assert out.returncode == 0 and out.stdout == "s3cret-value", out.stdout + out.stderr
    # An update reaches running replicas (the file is rewritten in place) ...
    r = gateway.faas("secret", "update", "greeting", "--from-literal", "rotated")
    assert r.returncode == 0, r.stdout + r.stderr
    assert read().stdout == "rotated"
    # ... a secret in use is not removed, and a missing one is named at deploy.
    r = gateway.faas("secret", "remove", "greeting")
    assert r.returncode != 0 and "used by hello-secret" in r.stdout + r.stderr, r.stdout + r.stderr
    stack.write_text(stack.read_text().replace("greeting", "nosuch"))
    r = gateway.faas("deploy", "-f", str(stack), "--update=true", "--replace=false")
    assert r.returncode != 0 and "secrets: no such secret: nosuch" in r.stdout + r.stderr, r.stdout + r.stderr
    assert gateway.faas("remove", "hello-secret").returncode == 0
    r = gateway.faas("secret", "remove", "greeting")
    assert r.returncode == 0, r.stdout + r.stderr


def test_missing_image_is_refused(gateway, docker_engine):
    st, body = api(gateway, "POST", "/system/functions", {"service": "ghost", "image": "keel/none:latest"})
    assert st == 400 and "image: keel/none:latest: image not found" in body
    assert not [c for c in docker_engine.containers() if "ghost" in c]


def test_metrics_has_openfaas_and_keel_series(gateway):
    st, text = api(gateway, "GET", "/metrics", auth=False)
    assert st == 200
    assert 'gateway_function_invocation_total{code="200",function_name="hello"}' in text
    assert 'gateway_functions_seconds_count{code="200",function_name="hello"}' in text
    assert 'gateway_service_count{function_name="hello"} 2' in text
    assert 'keel_chain_instances{chain="chain2",state="pooled"} 1' in text
    assert 'keel_chain_cores{chain="chain3"} 1' in text


def test_restart_serves_the_same_functions_and_readopts_containers(gateway, docker_engine):
    before, containers = gateway.faas("list").stdout, docker_engine.containers()
    gateway.stop()
    gateway.start()
    assert gateway.faas("list").stdout == before
    assert docker_engine.containers() == containers
    assert invoke(gateway, "hello", "again").stdout.endswith(": again")


@pytest.fixture(scope="module")
def control_pb(tmp_path_factory):
    out = tmp_path_factory.mktemp("pb")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I", str(ROOT / "proto"), f"--python_out={out}",
                    f"--grpc_python_out={out}", "keel/v1/control.proto"], check=True)
    shutil.copyfile(ROOT / "proto" / "keel" / "v1" / "controltoken.py", out / "keel" / "v1" / "controltoken.py")
    sys.path.insert(0, str(out))
    try:
        yield (importlib.import_module("keel.v1.control_pb2"), importlib.import_module("keel.v1.control_pb2_grpc"),
               importlib.import_module("keel.v1.controltoken"))
    finally:
        sys.path.remove(str(out))


def test_control_api_refuses_calls_without_the_control_token(gateway, control_pb):
    import grpc
    pb, pb_grpc, controltoken = control_pb
    assert gateway.token_file.stat().st_mode & 0o777 == 0o600
    for ch, why in ((grpc.insecure_channel(gateway.grpc), 'no "authorization: Bearer TOKEN"'),
                    (controltoken.channel(gateway.grpc, "x" * 64), "wrong token")):
        with ch:
            stub = pb_grpc.ControlStub(ch)
            for call in (lambda: stub.RegisterWorker(pb.RegisterWorkerRequest(worker="intruder", cores=1), timeout=10),
                         lambda: next(stub.Watch(pb.WatchRequest(watcher="intruder"), timeout=10))):
                with pytest.raises(grpc.RpcError) as e:
                    call()
                assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED and why in e.value.details()
    with controltoken.channel(gateway.grpc, gateway.token()) as ch:  # the placer's token is the gateway's
        pb_grpc.ControlStub(ch).ListFlows(pb.ListFlowsRequest(), timeout=10)


def test_control_api_assigns_flows_by_listing_1(gateway, control_pb):
    import grpc
    pb, pb_grpc, controltoken = control_pb
    with controltoken.channel(gateway.grpc, gateway.token()) as ch:
        stub = pb_grpc.ControlStub(ch)
        watch = stub.Watch(pb.WatchRequest(watcher="test"), timeout=10)
        first = [next(watch) for _ in range(6)]
        assert {e.chain.name for e in first if e.kind == pb.WatchEvent.CHAIN_ADDED} == set(CHAINS)
        assert first[-1].kind == pb.WatchEvent.SYNCED  # the snapshot is complete
        reg = stub.RegisterWorker(pb.RegisterWorkerRequest(worker="local", cores=2, core_ids=[1],
                                                           vf_ports=[pb.VfPort(port=3, name="keelvf3"), pb.VfPort(port=4, name="keelvf4")]))
        assert sorted((i.chain, i.vf_port) for i in reg.instances) == [("chain2", 3), ("chain3", 4)]
        http = pb.FiveTuple(src_ip="198.18.0.1", dst_ip="198.18.2.9", src_port=4000, dst_port=80, proto=6)
        a = stub.AssignFlow(pb.AssignFlowRequest(flow=http, ingress_id="ingress-0"))
        assert a.assigned and a.chain == "chain2" and a.instance.state == "attached" and a.instance.vlan >= 100
        none = stub.AssignFlow(pb.AssignFlowRequest(flow=pb.FiveTuple(src_ip="10.0.0.1", dst_ip="198.18.200.1", proto=17)))
        assert not none.assigned and "no chain" in none.reason
        # chain 1 runs on the switch only: assigned without an instance
        udp1 = pb.FiveTuple(src_ip="198.18.0.1", dst_ip="198.18.1.1", proto=17)
        sw = stub.AssignFlow(pb.AssignFlowRequest(flow=udp1, chain="chain1"))
        assert sw.assigned and sw.switch_only and sw.chain == "chain1" and not sw.HasField("instance")
        # the ingress's classification is checked: a wrong hint is corrected by the filters
        assert stub.AssignFlow(pb.AssignFlowRequest(flow=udp1, chain="chain3")).chain == "chain1"
        # asking again for a live flow (the ingress retrying) gives the same instance, counted once
        again = stub.AssignFlow(pb.AssignFlowRequest(flow=http, chain="chain2"))
        assert again.instance.id == a.instance.id and again.instance.flows == 1
        assert a.instance.core == 1  # the worker's managed core
        # the controller keeps one idle instance ready (--pool 1): attaching chain2/0 pre-deploys chain2/1
        seen = []
        for e in watch:
            seen.append((e.kind, e.instance.id, e.instance.state))
            if e.instance.id == "chain2/1":
                break
        assert seen[0][0] == pb.WatchEvent.WORKER_REGISTERED
        assert (pb.WatchEvent.INSTANCE_CHANGED, "chain2/0", "attached") in seen and seen[-1][2] == "pooled"
        # the attached instance's VF refused packets (keel's own count; the NF's queue figure is
        # only shown): it is overloaded, and the next flow attaches the idle one; what the agent
        # reports never changes what the gateway decided (state, core)
        stats = [pb.InstanceStats(worker="local", instance="chain2/0", rate_gbps=0.05, packets=1000, nf_reported_drops=3,
                                  p99_us=42, vf_dropped=5, nf_reported_queue_len=100, flows=1, attached=False, core=-1,
                                  phase="ready")]
        assert stub.StreamStats(iter(stats)).received == 1
        http2 = pb.FiveTuple(src_ip="198.18.0.1", dst_ip="198.18.2.9", src_port=4001, dst_port=80, proto=6)
        b = stub.AssignFlow(pb.AssignFlowRequest(flow=http2))
        assert b.assigned and b.instance.id == "chain2/1" and b.instance.vlan != a.instance.vlan
        assert b.instance.state == "attached" and b.instance.core == 1  # shares the only managed core
        for e in watch:  # and the pool is refilled again
            if e.instance.id == "chain2/2":
                assert e.instance.state == "pooled"
                break
        watch.cancel()
        live = {(f.flow.dst_ip, f.flow.src_port, f.chain, f.instance) for f in stub.ListFlows(pb.ListFlowsRequest()).flows}
        assert live == {("198.18.2.9", 4000, "chain2", "chain2/0"), ("198.18.2.9", 4001, "chain2", "chain2/1"),
                        ("198.18.1.1", 0, "chain1", "")}
        assert [f.flow.src_port for f in stub.ListFlows(pb.ListFlowsRequest(chain="chain2")).flows] == [4000, 4001]
        # a flow whose rule expired is released once; its instance's count drops
        assert stub.ReleaseFlow(pb.ReleaseFlowRequest(flow=udp1, reason="idle_timeout")).released
        assert not stub.ReleaseFlow(pb.ReleaseFlowRequest(flow=udp1)).released
        assert stub.ReleaseFlow(pb.ReleaseFlowRequest(flow=http2, reason="idle_timeout")).released
        assert stub.AssignFlow(pb.AssignFlowRequest(flow=http2)).instance.flows == 1
        stub.ReportIngressStats(pb.IngressStats(ingress_id="ingress-0", new_flows=3))
        with pytest.raises(grpc.RpcError) as bad:
            stub.ReportIngressStats(pb.IngressStats())
        assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    d = gateway.faas("describe", "chain2").stdout
    assert "chain2/0 attached worker=local vlan=" in d and "core=1 flows=1 phase=ready" in d and "42.0 us" in d
    # as OpenFaaS users read it: replicas serve flows (attached), available ones run, invocations are flows
    code, body = api(gateway, "GET", "/system/function/chain2")
    st = json.loads(body)
    assert code == 200 and (st["replicas"], st["availableReplicas"], st["invocationCount"]) == (2, 1, 3), st
    assert st["annotations"]["com.keel.pool"] == "1 idle instance(s), 0 ready"
    st, text = api(gateway, "GET", "/metrics", auth=False)
    assert 'keel_chain_nf_reported_drops_total{chain="chain2"} 3' in text and 'keel_chain_flows{chain="chain2"} 2' in text


def test_remove_releases_everything(gateway, redis_addr, docker_engine):
    r = gateway.faas("remove", "-f", str(STACK), "--filter", "chain*")
    assert r.returncode == 0, r.stdout + r.stderr
    assert gateway.faas("remove", "hello").returncode == 0
    assert gateway.faas("list").stdout.splitlines()[1:] == []
    assert redis_keys(redis_addr) == ["keel:workers"]
    assert docker_engine.containers() == []
