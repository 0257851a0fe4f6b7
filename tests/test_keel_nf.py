# SPDX-License-Identifier: Apache-2.0
"""keel-nf: a chain as one process per NF over the shared chain buffer."""
import json
import os
import shutil
import subprocess
import time

import pytest
from scapy.all import Ether, IP, UDP, Raw, rdpcap, wrpcap

from keelenv import BIN, ROOT


def start_chain(tmp_path, chain_id, nfs, packets, idle_ms=400):
    """Starts one keel-nf per NF (position 0 reads a capture); returns the
    processes and the paths of the output capture and stats files."""
    in_pcap, out_pcap = tmp_path / "in.pcap", tmp_path / "out.pcap"
    wrpcap(str(in_pcap), packets)
    pktbuf = tmp_path / "pktbuf"
    procs, stats = [], []
    for k, (name, cfg) in enumerate(nfs):
        st = tmp_path / f"stats{k}.json"
        args = [str(BIN / "keel-nf"), "--nf", f"{name}={json.dumps(cfg)}", "--chain-id", chain_id,
                "--position", str(k), "--of", str(len(nfs)), "--pktbuf", str(pktbuf), "--stats", str(st)]
        if k == 0:
            args += ["--exit-when-idle", str(idle_ms), "--", "--no-pci", "--no-huge", "-m", "512",
                     "--log-level=error", "--no-telemetry", f"--file-prefix=keelnf{os.getpid()}",
                     "--vdev", f"net_pcap0,rx_pcap={in_pcap},tx_pcap={out_pcap}"]
        procs.append(subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        stats.append(st)
    return procs, out_pcap, stats, pktbuf


def wait_all(procs, timeout=120):
    for p in procs:
        try:
            assert p.wait(timeout=timeout) == 0, p.stderr.read()
        finally:
            if p.poll() is None:
                p.kill()


def test_three_processes_stamp_every_packet_in_chain_order(tmp_path):
    n = 5000
    pkts = [Ether() / IP(src="198.18.0.1", dst="198.19.0.1") / UDP(sport=1000 + i % 100, dport=5001) /
            Raw(b"\xff" * 16) for i in range(n)]
    nfs = [("stamp", {"index": k}) for k in range(3)]
    procs, out, stats, pktbuf = start_chain(tmp_path, "order3", nfs, pkts)
    wait_all(procs)
    got = rdpcap(str(out))
    assert len(got) == n
    assert all(bytes(p[UDP].payload)[:3] == b"\x00\x01\x02" for p in got)
    for k, st in enumerate(stats):
        s = json.loads(st.read_text())
        assert s["order_violations"] == 0
        assert s["nfs"][0]["stats"]["out_of_order"] == 0
        assert s["nfs"][0]["packets_in"] == n
    assert not pktbuf.exists(), "position 0 removes the chain buffer when it stops"


def test_one_nf_chain_skips_the_copy(tmp_path):
    pkts = [Ether() / IP(src="198.18.0.1", dst="198.19.0.1") / UDP(sport=7, dport=5001) / Raw(b"\xff" * 8)] * 50
    procs, out, stats, _ = start_chain(tmp_path, "one", [("stamp", {"index": 0})], pkts)
    wait_all(procs)
    assert len(rdpcap(str(out))) == 50
    s = json.loads(stats[0].read_text())
    assert s["port"]["tx_packets"] == 50 and s["port"]["copy_dropped"] == 0


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to run as another user")
def test_another_user_cannot_open_the_chain_buffer(tmp_path):
    pkts = [Ether() / IP(src="198.18.0.1", dst="198.19.0.1") / UDP() / Raw(b"x" * 8)]
    os.chmod(tmp_path, 0o755)
    procs, _, _, pktbuf = start_chain(tmp_path, "private", [("stamp", {"index": 0}), ("stamp", {"index": 1})],
                                      pkts, idle_ms=3000)
    try:
        for _ in range(100):
            if pktbuf.exists():
                break
            procs[0].wait(timeout=0.05) if procs[0].poll() is not None else None
            subprocess.run(["sleep", "0.05"])
        assert oct(pktbuf.stat().st_mode & 0o777) == "0o600"
        # Position 1 maps the chain buffer and nothing of position 0's DPDK
        # memory (its EAL files are named by position 0's --file-prefix).
        maps = ""
        for _ in range(200):  # position 1 maps the file once its own EAL is up
            maps = open(f"/proc/{procs[1].pid}/maps").read()
            if str(pktbuf) in maps:
                break
            time.sleep(0.05)
        assert str(pktbuf) in maps
        assert f"keelnf{os.getpid()}" not in maps and "rtemap" not in maps
        intruder = subprocess.run(
            ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", str(BIN / "keel-nf"),
             "--nf", "stamp={\"index\":1}", "--chain-id", "intruder", "--position", "1", "--of", "2",
             "--pktbuf", str(pktbuf)], capture_output=True, text=True, timeout=30)
        assert intruder.returncode != 0
        assert "Permission denied" in intruder.stderr
    finally:
        wait_all(procs)


def test_usage_errors_exit_2():
    def run(*a):
        return subprocess.run([str(BIN / "keel-nf"), *a], capture_output=True, text=True, timeout=30)
    assert run("--nf", "stamp", "--chain-id", "c", "--position", "2", "--of", "2").returncode == 2
    r = run("--nf", "nope", "--chain-id", "c", "--position", "0", "--of", "1")
    assert r.returncode == 2 and "unknown NF 'nope'" in r.stderr
    r = run("--nf", "stamp", "--chain-id", "../x", "--position", "0", "--of", "1")
    assert r.returncode == 2 and "chain id" in r.stderr
    r = run("--nf", "stamp", "--chain-id", "c", "--position", "1", "--of", "2", "--", "--vdev", "net_null0")
    assert r.returncode == 2 and "position 0 only" in r.stderr


def test_list_json_is_the_catalogue_keel_chain_exports():
    def catalogue(binary):
        r = subprocess.run([str(BIN / binary), "--list", "--json"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)
    cat = catalogue("keel-nf")
    assert cat == catalogue("keel-chain") and cat["version"] == 1
    nfs = {nf["name"]: nf for nf in cat["nfs"]}
    assert len(nfs) == 17
    assert [(a["name"], a["type"], a.get("required")) for a in nfs["tunnel"]["args"]] == [("vlan", "integer", True)]
    assert [a["name"] for a in nfs["nat"]["args"]] == ["external_ip", "port_range"]
    assert (ROOT / "build" / "nf-catalog.json").exists() and json.loads(
        (ROOT / "build" / "nf-catalog.json").read_text()) == cat


def test_check_runs_init_without_ports_and_names_the_bad_field():
    def check(*nfs):
        args = [a for nf in nfs for a in ("--nf", nf)]
        return subprocess.run([str(BIN / "keel-nf"), "--check", *args], capture_output=True, text=True, timeout=30)
    ok = check('tunnel={"vlan":7}', 'nat={"external_ip":"198.18.100.1","port_range":[1024,2047]}',
               'ipv4fwd={"routes":[{"prefix":"198.18.0.0/15","dst_mac":"02:00:00:00:00:01","port":0}]}')
    assert ok.returncode == 0 and ok.stderr == "", ok.stderr
    for nf, message in [('nat={"external_ip":"notanip","port_range":[1,2]}', "nat.external_ip: 'notanip' is not an IPv4 address"),
                        ('tunnel={"tag":7}', "tunnel.tag: unknown field"),
                        ("tunnel", "tunnel.vlan: missing"),
                        ('bpf={"filters":["tcp prot 80"]}', "bpf.filters[0]: 'tcp prot 80' does not compile"),
                        ('tunnel={"vlan":', "bad JSON")]:
        r = check('macswap', nf)
        assert r.returncode == 2 and message in r.stderr, (nf, r.stderr)
    r = check("frobnicate")
    assert r.returncode == 2 and "unknown NF 'frobnicate'" in r.stderr
