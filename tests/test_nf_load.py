# SPDX-License-Identifier: Apache-2.0
"""keel-nf --load: a tenant's packet function, built as a shared object the way the packet-cpp
template builds it (without libkeelnf), is loaded into keel-nf and runs by name."""
import json
import os
import shutil
import subprocess

import pytest
from scapy.all import ARP, IP, UDP, Ether, Raw, rdpcap, wrpcap

from keelenv import BIN, ROOT

HANDLER = ROOT / "functions" / "template" / "packet-cpp" / "function" / "handler.cc"
TTLS = [1, 5, 9, 10, 11, 64, 255]

pytestmark = pytest.mark.skipif(not shutil.which("g++"), reason="g++ is needed to build an NF .so")


def build_so(tmp_path, name, source):
    """Compiles source (a path or C++ text) like the template's build stage: -shared, no libkeelnf."""
    if isinstance(source, str):
        src = tmp_path / f"{name}.cc"
        src.write_text(source)
    else:
        src = source
    so = tmp_path / f"{name}.so"
    subprocess.run(["g++", "-std=c++17", "-O2", "-fPIC", "-shared", "-o", str(so), str(src),
                    "-I", str(ROOT / "nf-runtime" / "include")], check=True, capture_output=True, text=True,
                   timeout=120)
    return so


@pytest.fixture(scope="module")
def keel_nf():
    binary = BIN / "keel-nf"
    if not binary.exists():
        pytest.fail(f"{binary} is missing: run make build")
    if "--load" not in subprocess.run([str(binary), "--help"], capture_output=True, text=True).stdout:
        pytest.fail(f"{binary} predates --load: rebuild it")
    return binary


@pytest.fixture
def ttlguard(tmp_path):
    return build_so(tmp_path, "ttlguard", HANDLER)


def packets():
    return [Ether() / IP(src="198.18.0.1", dst="198.19.0.1", ttl=t) / UDP(sport=1000 + t, dport=5001) /
            Raw(b"\xff" * 16) for t in TTLS] + [Ether() / ARP()]


def eal(tmp_path, in_pcap, out_pcap):
    return ["--", "--no-pci", "--no-huge", "-m", "256", "--log-level=error", "--no-telemetry",
            f"--file-prefix=keelload{os.getpid()}", "--vdev", f"net_pcap0,rx_pcap={in_pcap},tx_pcap={out_pcap}"]


def run(keel_nf, *args, timeout=60):
    return subprocess.run([str(keel_nf), *map(str, args)], capture_output=True, text=True, timeout=timeout)


def test_loaded_nf_runs_by_name_and_drops_low_ttl(keel_nf, ttlguard, tmp_path):
    in_pcap, out_pcap, stats = tmp_path / "in.pcap", tmp_path / "out.pcap", tmp_path / "stats.json"
    wrpcap(str(in_pcap), packets())
    r = run(keel_nf, "--nf", 'ttlguard={"min_ttl":10}', "--load", ttlguard, "--chain-id", "load1",
            "--position", 0, "--of", 1, "--pktbuf", tmp_path / "pktbuf", "--exit-when-idle", 300,
            "--stats", stats, *eal(tmp_path, in_pcap, out_pcap))
    assert r.returncode == 0, r.stderr
    assert sorted(p[IP].ttl for p in rdpcap(str(out_pcap))) == [10, 11, 64, 255]
    nf = json.loads(stats.read_text())["nfs"][0]
    assert (nf["nf"], nf["packets_in"], nf["dropped"]) == ("ttlguard", 8, 4)


def test_loaded_nf_in_a_later_position_of_a_two_process_chain(keel_nf, ttlguard, tmp_path):
    in_pcap, out_pcap, pktbuf = tmp_path / "in.pcap", tmp_path / "out.pcap", tmp_path / "pktbuf"
    wrpcap(str(in_pcap), packets())
    common = ["--chain-id", "load2", "--of", 2, "--pktbuf", pktbuf]
    first = subprocess.Popen([str(keel_nf), "--nf", 'stamp={"index":0}', "--position", "0", *map(str, common),
                              "--exit-when-idle", "400", *eal(tmp_path, in_pcap, out_pcap)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        second = run(keel_nf, "--load", ttlguard, "--nf", 'ttlguard={"min_ttl":60}', "--position", 1, *common,
                     timeout=120)
        assert second.returncode == 0, second.stderr
        assert first.wait(timeout=120) == 0, first.stderr.read()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert sorted(p[IP].ttl for p in rdpcap(str(out_pcap))) == [64, 255]


def test_load_errors_exit_2_naming_the_file(keel_nf, tmp_path):
    args = ["--nf", "ttlguard", "--chain-id", "c", "--position", 0, "--of", 1]
    missing = tmp_path / "missing.so"
    r = run(keel_nf, "--load", missing, *args)
    assert r.returncode == 2 and str(missing) in r.stderr and "No such file" in r.stderr, r.stderr

    not_elf = tmp_path / "text.so"
    not_elf.write_text("not an object\n")
    r = run(keel_nf, "--load", not_elf, *args)
    assert r.returncode == 2 and str(not_elf) in r.stderr and "cannot load" in r.stderr, r.stderr

    empty = build_so(tmp_path, "empty", "int keel_tenant_nothing = 1;\n")
    r = run(keel_nf, "--load", empty, *args)
    assert r.returncode == 2 and str(empty) in r.stderr and "registers no new NF" in r.stderr, r.stderr

    unresolved = build_so(tmp_path, "unresolved", """
#include "keel/nf.h"
void keel_not_in_keel_nf();
namespace keel {
class Calls : public NF {
 public:
  void Init(const Config&) override { keel_not_in_keel_nf(); }
  void ProcessBatch(PacketBatch*) override {}
};
KEEL_NF(Calls, "calls", "needs a symbol keel-nf does not have");
}  // namespace keel
""")
    r = run(keel_nf, "--load", unresolved, *args)
    assert r.returncode == 2 and str(unresolved) in r.stderr, r.stderr
    assert "undefined symbol" in r.stderr and "keel_not_in_keel_nf" in r.stderr, r.stderr

    clash = build_so(tmp_path, "clash", HANDLER.read_text().replace('"ttlguard"', '"acl"'))
    r = run(keel_nf, "--load", clash, *args)
    assert r.returncode == 2 and str(clash) in r.stderr, r.stderr
    assert "registers NF 'acl', a name a library NF already has; refused" in r.stderr, r.stderr


def test_an_object_cannot_take_a_library_nfs_name(keel_nf, tmp_path):
    # One new NF beside one that claims the library's acl: the load would add
    # "mine", and the tenant's acl would run wherever a chain names ACL.
    sneaky = build_so(tmp_path, "sneaky", """
#include "keel/nf.h"
namespace keel {
class PassAll : public NF {
 public:
  void Init(const Config&) override {}
  void ProcessBatch(PacketBatch*) override {}
};
KEEL_NF(PassAll, "acl", "lets every packet through");
KEEL_NF_ARGS(PassAll, "[]");
class Mine : public NF {
 public:
  void Init(const Config&) override {}
  void ProcessBatch(PacketBatch*) override {}
};
KEEL_NF(Mine, "mine", "a new NF beside it");
}  // namespace keel
""")
    r = run(keel_nf, "--load", sneaky, "--list", "--json")
    assert r.returncode == 2, "the object was loaded: " + json.dumps(
        [nf for nf in json.loads(r.stdout)["nfs"] if nf["name"] == "acl"])
    assert f"{sneaky}: registers NF 'acl', a name a library NF already has; refused" in r.stderr, r.stderr


def test_loaded_nf_rejects_a_bad_field_by_name(keel_nf, ttlguard, tmp_path):
    in_pcap = tmp_path / "in.pcap"
    wrpcap(str(in_pcap), packets())
    r = run(keel_nf, "--load", ttlguard, "--nf", 'ttlguard={"min_ttl":0}', "--chain-id", "load3",
            "--position", 0, "--of", 1, "--pktbuf", tmp_path / "pktbuf",
            *eal(tmp_path, in_pcap, tmp_path / "out.pcap"))
    assert r.returncode == 2 and "min_ttl" in r.stderr, r.stderr


def test_list_json_exports_the_loaded_nf_with_its_arguments(keel_nf, ttlguard):
    r = run(keel_nf, "--load", ttlguard, "--list", "--json")
    assert r.returncode == 0, r.stderr
    nfs = {nf["name"]: nf for nf in json.loads(r.stdout)["nfs"]}
    assert nfs["ttlguard"]["loaded_from"] == str(ttlguard)
    assert [(a["name"], a["type"], a["minimum"], a["maximum"]) for a in nfs["ttlguard"]["args"]] == [
        ("min_ttl", "integer", 1, 255)]
    assert "loaded_from" not in nfs["nat"]


def test_check_runs_the_loaded_nfs_init(keel_nf, ttlguard):
    assert run(keel_nf, "--load", ttlguard, "--check", "--nf", 'ttlguard={"min_ttl":10}').returncode == 0
    r = run(keel_nf, "--load", ttlguard, "--check", "--nf", 'ttlguard={"min_ttl":0}')
    assert r.returncode == 2 and "ttlguard.min_ttl: 0 is out of range [1, 255]" in r.stderr, r.stderr
