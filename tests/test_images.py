# SPDX-License-Identifier: Apache-2.0
"""The packet-function image path against a private dockerd: deploy/local/images.sh builds
keel/nf-base and keel/nf-sdk offline, the stock faas-cli builds the ttlguard function of
stack.yml from the packet-cpp template (legacy builder), and the image it made drops the
packets of a capture whose TTL is below min_ttl."""
import json
import os
import shutil
import subprocess
import time

import pytest
from scapy.all import ARP, IP, UDP, Ether, Raw, rdpcap, wrpcap

from gateway_fixtures import FAAS_CLI, docker_engine  # noqa: F401  (fixture)
from keelenv import BIN, ROOT

IMAGES = ["keel/nf-ttlguard:latest", "keel/nf-sdk:latest", "keel/nf-base:latest"]
# README: make images takes ~15 s. Four times that leaves room for a loaded CI machine and still
# catches a build that starts to pull or compile; the subprocess timeout above it only stops a hang.
IMAGES_BUDGET_S = 60
EAL = ["--no-pci", "--no-huge", "-m", "256", "--log-level=error", "--no-telemetry"]


@pytest.fixture(scope="module")
def images(docker_engine, tmp_path_factory):  # noqa: F811
    if not shutil.which("docker"):
        pytest.skip("the docker client is not installed (make deps installs docker.io)")
    if not (BIN / "keel-nf").exists():
        pytest.fail(f"{BIN / 'keel-nf'} is missing: run make build")
    t0 = time.monotonic()
    r = subprocess.run([str(ROOT / "deploy" / "local" / "images.sh"), "--bin", str(BIN), docker_engine.host],
                       capture_output=True, text=True, timeout=300)
    took = time.monotonic() - t0
    try:
        assert r.returncode == 0, r.stdout + r.stderr
        yield docker_engine, took, r.stdout
    finally:
        for image in IMAGES:
            docker_engine.cli("image", "rm", "-f", image, check=False)
        docker_engine.cli("image", "prune", "-f", check=False)


def test_images_build_offline_from_this_machine(images):
    docker, took, out = images
    assert took < IMAGES_BUDGET_S, f"images.sh took {took:.0f}s (README: ~15 s)"
    for name in ("keel/nf-base:latest", "keel/nf-sdk:latest"):
        assert name in out
        assert docker.cli("image", "inspect", name, check=False).returncode == 0
    assert docker.cli("run", "--rm", "keel/nf-sdk:latest").stdout.startswith("g++")
    assert "--load NF.so" in docker.cli("run", "--rm", "keel/nf-base:latest", "--help").stdout


def capture(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    pkts = [Ether() / IP(src="198.18.0.1", dst="198.19.0.1", ttl=t) / UDP(sport=1000 + t, dport=5001) /
            Raw(b"\xff" * 16) for t in (1, 5, 9, 10, 11, 64, 255)] + [Ether() / ARP()]
    wrpcap(str(data / "in.pcap"), pkts)
    return data


def run_nf(docker, image, data, *nf_args):
    """docker run --rm IMAGE NF-ARGS over data/in.pcap → data/out.pcap; returns stats JSON."""
    r = docker.cli("run", "--rm", "--name", f"keel-img-test-{os.getpid()}", "-v", f"{data}:/data", image,
                   *nf_args, "--chain-id", "img", "--position", "0", "--of", "1", "--exit-when-idle", "300",
                   "--stats", "/data/stats.json", "--", *EAL,
                   "--vdev", "net_pcap0,rx_pcap=/data/in.pcap,tx_pcap=/data/out.pcap", check=False, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads((data / "stats.json").read_text())


def test_library_nf_runs_in_nf_base(images, tmp_path):
    docker, _, _ = images
    data = capture(tmp_path)
    st = run_nf(docker, "keel/nf-base:latest", data,
                "--nf", "acl=" + json.dumps({"rules": [{"dst_ip": "198.19.0.0/16", "proto": "udp"}]}))
    assert st["nfs"][0]["nf"] == "acl"
    assert len(rdpcap(str(data / "out.pcap"))) == 7  # the ARP packet matches no rule


def test_faas_cli_builds_ttlguard_and_its_image_drops_low_ttl(images, tmp_path):
    docker, _, _ = images
    if not os.path.exists(FAAS_CLI):
        pytest.skip("faas-cli is not installed (FAAS_CLI, PATH or ../shared/tools/faas-cli)")
    # functions/stack.yml, as the README has users build it (faas-cli writes ./build/<function>
    # of the folder it runs in), in a copy so that the test leaves no functions/build/ behind.
    work = tmp_path / "functions"
    work.mkdir()
    shutil.copy(ROOT / "functions" / "stack.yml", work / "stack.yml")
    os.symlink(ROOT / "functions" / "template", work / "template")
    env = {**os.environ, "DOCKER_HOST": docker.host, "DOCKER_BUILDKIT": "0", "HOME": str(tmp_path)}
    r = subprocess.run([FAAS_CLI, "build", "-f", "stack.yml"], cwd=work, env=env,
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "keel/nf-ttlguard:latest built" in r.stdout
    assert (work / "build" / "ttlguard").is_dir()  # faas-cli's build context, apart from CMake's build/
    cfg = docker.cli("image", "inspect", "-f", "{{json .Config.Entrypoint}}", "keel/nf-ttlguard:latest").stdout
    assert json.loads(cfg)[:2] == ["/usr/bin/keel-nf", "--load"]

    data = capture(tmp_path)
    st = run_nf(docker, "keel/nf-ttlguard:latest", data, "--nf", 'ttlguard={"min_ttl":10}')
    assert sorted(p[IP].ttl for p in rdpcap(str(data / "out.pcap"))) == [10, 11, 64, 255]
    nf = st["nfs"][0]
    assert (nf["nf"], nf["packets_in"], nf["dropped"]) == ("ttlguard", 8, 4)
    assert docker.cli("ps", "-aq", "--filter", f"name=keel-img-test-{os.getpid()}").stdout.strip() == ""

    # what the gateway runs when the function is deployed and when a chain names it
    r = docker.cli("run", "--rm", "--network", "none", "keel/nf-ttlguard:latest", "--list", "--json", timeout=60)
    loaded = [nf for nf in json.loads(r.stdout)["nfs"] if "loaded_from" in nf]
    assert [(nf["name"], [a["name"] for a in nf["args"]]) for nf in loaded] == [("ttlguard", ["min_ttl"])]
    r = docker.cli("run", "--rm", "--network", "none", "keel/nf-ttlguard:latest", "--check", "--nf",
                   'ttlguard={"min_ttl":0}', check=False, timeout=60)
    assert r.returncode == 2 and "ttlguard.min_ttl: 0 is out of range [1, 255]" in r.stderr, r.stderr
    r = docker.cli("run", "--rm", "--network", "none", "keel/nf-ttlguard:latest", "--check", "--nf",
                   'ttlguard={"min_ttl":10}', check=False, timeout=60)
    assert r.returncode == 0, r.stderr
