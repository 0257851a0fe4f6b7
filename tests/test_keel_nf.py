# SPDX-License-Identifier: Apache-2.0
"""keel-nf: a chain as one process per NF over the shared chain buffer."""
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import time

import pytest
from scapy.all import Dot1Q, Ether, IP, TCP, UDP, Raw, rdpcap, wrpcap

from keelenv import BIN, ROOT


def start_chain(tmp_path, chain_id, nfs, packets, idle_ms=400, extra=()):
    """Starts one keel-nf per NF (position 0 reads a capture); returns the
    processes and the paths of the output capture and stats files."""
    in_pcap, out_pcap = tmp_path / "in.pcap", tmp_path / "out.pcap"
    wrpcap(str(in_pcap), packets)
    pktbuf = tmp_path / "pktbuf"
    procs, stats = [], []
    for k, (name, cfg) in enumerate(nfs):
        st = tmp_path / f"stats{k}.json"
        args = [str(BIN / "keel-nf"), "--nf", f"{name}={json.dumps(cfg)}", "--chain-id", chain_id,
                "--position", str(k), "--of", str(len(nfs)), "--pktbuf", str(pktbuf), "--stats", str(st), *extra]
        if k == 0:
            args += ["--exit-when-idle", str(idle_ms), "--", "--no-pci", "--no-huge", "-m", "512",
                     "--log-level=error", "--no-telemetry", f"--file-prefix=keelnf{os.getpid()}",
                     "--vdev", f"net_pcap0,rx_pcap={in_pcap},tx_pcap={out_pcap}"]
        procs.append(subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        stats.append(st)
    return procs, out_pcap, stats, pktbuf


def wait_for(cond, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return False


def wait_all(procs, timeout=120):
    for p in procs:
        try:
            assert p.wait(timeout=timeout) == 0, p.stderr.read()
        finally:
            if p.poll() is None:
                p.kill()


def stamp_chain_in_order(tmp_path, chain_id, n, extra=()):
    """n packets through three `stamp` NFs as three processes (with |extra|
    options): every packet arrives, stamped by each NF in chain order, and no
    position saw a packet before its predecessor was done. Returns the
    positions' final statistics and the chain buffer's path."""
    pkts = [Ether() / IP(src="198.18.0.1", dst="198.19.0.1") / UDP(sport=1000 + i % 100, dport=5001) /
            Raw(b"\xff" * 16) for i in range(n)]
    nfs = [("stamp", {"index": k}) for k in range(3)]
    procs, out, stats, pktbuf = start_chain(tmp_path, chain_id, nfs, pkts, extra=extra)
    wait_all(procs)
    got = rdpcap(str(out))
    assert len(got) == n
    assert all(bytes(p[UDP].payload)[:3] == b"\x00\x01\x02" for p in got)
    finals = [json.loads(st.read_text()) for st in stats]
    for s in finals:
        assert s["order_violations"] == 0
    return finals, pktbuf


def keel_chain_output(tmp_path, nfs, in_pcap, tag, stats=None):
    """The frames keel-chain sends for |in_pcap| with |nfs| in one process
    (and its statistics file at |stats|, if given)."""
    ref = tmp_path / f"ref-{tag}.pcap"
    args = [str(BIN / "keel-chain")]
    for name, cfg in nfs:
        args += ["--nf", f"{name}={json.dumps(cfg)}"]
    if stats:
        args += ["--stats", str(stats)]
    r = subprocess.run(args + ["--exit-when-idle", "300", "--", "--no-pci", "--no-huge", "-m", "256",
                               "--log-level=error", "--no-telemetry", f"--file-prefix=keel{tag}{os.getpid()}",
                               "--vdev", f"net_pcap0,rx_pcap={in_pcap},tx_pcap={ref}"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [bytes(p) for p in rdpcap(str(ref))]


def schema(j):
    """The keys of a statistics file, nested (lists by their first element)."""
    if isinstance(j, dict):
        return {k: schema(v) for k, v in j.items()}
    if isinstance(j, list):
        return [schema(j[0])] if j else []
    return None


def test_three_processes_stamp_every_packet_in_chain_order(tmp_path):
    n = 5000
    finals, pktbuf = stamp_chain_in_order(tmp_path, "order3", n)
    for s in finals:
        assert s["nfs"][0]["stats"]["out_of_order"] == 0
        assert s["nfs"][0]["packets_in"] == n
    assert not pktbuf.exists(), "position 0 removes the chain buffer when it stops"


@pytest.mark.parametrize("nfs,extra,copied,received_in", [(1, (), 0, 0), (2, (), 0, 50), (2, ("--rx-copy",), 50, 0)])
def test_one_nf_chain_skips_the_copy(tmp_path, nfs, extra, copied, received_in):
    # The same packets through one NF and through two: only the chain of two
    # puts them into the chain's buffer (Galleon: a one-NF chain needs no
    # isolation copy), and by default the port received them there, so only
    # --rx-copy copies them in.
    pkts = [Ether() / IP(src="198.18.0.1", dst="198.19.0.1") / UDP(sport=7, dport=5001) / Raw(b"\xff" * 8)] * 50
    procs, out, stats, _ = start_chain(tmp_path, f"copy{nfs}{len(extra)}", [("stamp", {"index": k}) for k in range(nfs)],
                                       pkts, extra=extra)
    wait_all(procs)
    assert len(rdpcap(str(out))) == 50
    s = json.loads(stats[0].read_text())
    port = s["port"]
    assert (port["tx_packets"], port["copied"], port["copy_dropped"]) == (50, copied, 0)
    assert s["ingress"] == {"zero_copy": received_in > 0, "zero_copy_packets": received_in}
    assert s["cycles"]["copy_in"] == 0 or copied


def udp_frame(size, sport=7):
    """A UDP frame of exactly |size| bytes."""
    head = Ether() / IP(src="198.18.0.1", dst="198.19.0.1") / UDP(sport=sport, dport=5001)
    return head / Raw(b"\xab" * (size - len(head)))


@pytest.mark.parametrize("rx", ["rx-zero-copy", "rx-copy"])
@pytest.mark.parametrize("egress", ["copy", "zero-copy"])
def test_growing_nfs_never_crash_the_egress_on_the_longest_frame(tmp_path, egress, rx):
    # The chain buffer takes frames of up to 2048 bytes: a 2044-byte frame
    # enters it after the first tunnel and leaves the third at 2056 bytes.
    # Copying out, that is more than one egress mbuf holds and net_pcap does
    # not offer multi-segment TX, so the runtime drops and counts it;
    # transmitting from the chain buffer, the slot holds it whole and it goes
    # out. The other frames go out either way, and nothing crashes. The
    # same whether the port received into the chain buffer or it was copied
    # in (where the first tunnel's tag moves the frame back to the slot's
    # headroom).
    pkts = [udp_frame(100), udp_frame(2044, sport=8), udp_frame(100)]
    nfs = [("tunnel", {"vlan": 10 + k}) for k in range(3)]
    extra = (("--egress-copy",) if egress == "copy" else ()) + (("--rx-copy",) if rx == "rx-copy" else ())
    procs, out, stats, _ = start_chain(tmp_path, f"grow3{egress}{rx}", nfs, pkts, extra=extra)
    wait_all(procs, timeout=30)
    got = rdpcap(str(out))
    assert [got[0][Dot1Q:k].vlan for k in (1, 2, 3)] == [12, 11, 10]
    s = json.loads(stats[0].read_text())
    port = s["port"]
    assert s["ingress"]["zero_copy_packets"] == (3 if rx == "rx-zero-copy" else 0)
    if egress == "copy":
        assert [len(p) for p in got] == [112, 112]
        assert (port["tx_packets"], port["tx_too_long"], port["tx_dropped"]) == (2, 1, 0)
        assert s["egress"]["zero_copy_packets"] == 0
    else:
        assert [len(p) for p in got] == [112, 2056, 112]
        assert bytes(got[1][Raw].load) == b"\xab" * (2044 - 42)
        assert (port["tx_packets"], port["tx_too_long"], port["tx_dropped"]) == (3, 0, 0)
        assert s["egress"] == {"zero_copy": True, "zero_copy_packets": 3, "fallbacks": 0}


@pytest.mark.parametrize("rx", ["rx-zero-copy", "rx-copy"])
def test_a_frame_longer_than_a_slot_is_dropped_and_counted_either_way(tmp_path, rx):
    # 2049 bytes do not fit a slot's (or an mbuf's) 2048: net_pcap hands it
    # over as two segments, and the runtime drops it as malformed before any
    # NF, however the port receives; the frames around it pass.
    pkts = [udp_frame(100), udp_frame(2049, sport=8), udp_frame(2048, sport=9), udp_frame(100)]
    extra = ("--rx-copy",) if rx == "rx-copy" else ()
    procs, out, stats, _ = start_chain(tmp_path, f"over{rx}", [("stamp", {"index": k}) for k in range(2)], pkts,
                                       extra=extra)
    wait_all(procs, timeout=30)
    assert [len(p) for p in rdpcap(str(out))] == [100, 2048, 100]
    port = json.loads(stats[0].read_text())["port"]
    assert (port["rx_packets"], port["rx_malformed"], port["tx_packets"]) == (4, 1, 3)


def test_egress_from_the_chain_buffer_sends_the_bytes_egress_copies_send(tmp_path):
    # Issue 15 item 2: transmitting from the chain buffer (DPDK external
    # buffers) must send exactly what copying out sends, and what keel-chain
    # sends with every NF in one process.
    pkts = [Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") /
            IP(src="198.18.0.1", dst="198.19.0.%d" % (1 + i % 50)) / UDP(sport=1000 + i, dport=5001) /
            Raw(b"\xcd" * (8 + i % 600)) for i in range(3000)]
    nfs = [("tunnel", {"vlan": 7}), ("macswap", {}), ("tunnel", {"vlan": 9})]
    outs = {}
    for egress, extra in (("zero-copy", ()), ("copy", ("--egress-copy",))):
        d = tmp_path / egress
        d.mkdir()
        procs, out, stats, _ = start_chain(d, f"eq{egress}", nfs, pkts, extra=extra)
        wait_all(procs)
        outs[egress] = [bytes(p) for p in rdpcap(str(out))]
        zc = json.loads(stats[0].read_text())["egress"]["zero_copy_packets"]
        assert (zc == len(pkts)) == (egress == "zero-copy"), zc
    assert len(outs["zero-copy"]) == len(pkts)
    assert outs["zero-copy"] == outs["copy"] == keel_chain_output(tmp_path, nfs, tmp_path / "zero-copy" / "in.pcap", "eq")


KEY = "000102030405060708090a0b0c0d0e0f"
IV = "f0e0d0c0b0a090807060504030201000"


def capture_cases():
    """Chains and captures of the kind the NF tests use (stack.yml's chains,
    growing NFs, sizes up to 2040 bytes, which a tag still leaves inside a
    slot's data room, malformed frames)."""
    macs = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")

    def tcp(i, dst="198.19.0.1", payload=None):
        return (Ether(**macs) / IP(src="198.18.0.%d" % (1 + i % 4), dst=dst) /
                TCP(sport=5000 + i % 4, dport=80, flags="PA") / Raw(payload or b"d%04d" % i))

    mixed = [Ether(**macs) / IP(src="198.18.0.1", dst="198.19.0.%d" % (1 + i % 50)) /
             UDP(sport=1000 + i, dport=5001) / Raw(bytes([i % 251]) * (8 + (i * 37) % 1990)) for i in range(600)]
    mixed[100:100] = [Ether(**macs) / Raw(b"\x08"), Ether(**macs) / IP(ihl=3) / Raw(b"z" * 30)]  # malformed
    return {
        "acl-nat-tunnel": ([("acl", {"rules": [{"dst_ip": "198.19.0.0/16", "proto": "tcp", "drop": False}]}),
                            ("nat", {"external_ip": "198.18.255.1", "port_range": [40000, 40010]}),
                            ("tunnel", {"vlan": 7})],
                           [tcp(i) for i in range(200)] + [tcp(i, dst="198.20.0.1") for i in range(20)]),
        "acl-urlfilter-encrypt": ([("acl", {"rules": [{"dst_ip": "198.19.0.0/16"}]}),
                                   ("urlfilter", {"blocklist": ["evil.example"]}),
                                   ("encrypt", {"key": KEY, "iv": IV})],
                                  [tcp(i, payload=b"GET /%d HTTP/1.1\r\nHost: %s.example\r\n\r\n" %
                                       (i, b"evil" if i % 7 == 0 else b"ok")) for i in range(300)]),
        "tunnel-macswap-tunnel": ([("tunnel", {"vlan": 7}), ("macswap", {}), ("tunnel", {"vlan": 9})], mixed),
        "dedup-rededup": ([("dedup", {}), ("rededup", {})], mixed),
    }


@pytest.mark.parametrize("case", sorted(capture_cases()))
def test_receiving_into_the_chain_buffer_sends_the_bytes_rx_copy_sends(tmp_path, case):
    # Issue 33: the port receiving straight into the chain buffer must send
    # exactly what copying into it sends, and what keel-chain sends with
    # every NF in one process, with nothing copied in.
    nfs, pkts = capture_cases()[case]
    outs, ports = {}, {}
    for rx, extra in (("zero-copy", ()), ("copy", ("--rx-copy",))):
        d = tmp_path / rx
        d.mkdir()
        procs, out, stats, _ = start_chain(d, f"rx{rx}{case}", nfs, pkts, extra=extra)
        wait_all(procs)
        outs[rx] = [bytes(p) for p in rdpcap(str(out))]
        s = json.loads(stats[0].read_text())
        ports[rx] = s["port"]
        assert s["ingress"]["zero_copy"] == (rx == "zero-copy")
        assert all(json.loads(st.read_text())["bad_descriptors"]["count"] == 0 for st in stats)
    assert outs["zero-copy"], "nothing came out"
    assert outs["zero-copy"] == outs["copy"] == keel_chain_output(tmp_path, nfs, tmp_path / "copy" / "in.pcap", case)
    assert ports["zero-copy"]["copied"] == 0 and ports["copy"]["copied"] > 0
    for k in ("rx_packets", "rx_malformed", "tx_packets", "tx_too_long", "copy_dropped"):
        assert ports["zero-copy"][k] == ports["copy"][k], k


@pytest.mark.parametrize("rx", ["rx-zero-copy", "rx-copy"])
def test_a_frame_the_head_grows_past_the_data_room_stays_whole_when_received_in_place(tmp_path, rx):
    # 2046 bytes, tagged by the first NF: 2050. Copied into the chain buffer
    # it no longer fits a slot's 2048-byte data room and is dropped and
    # counted (copy_dropped); received in place it keeps its slot's headroom
    # and goes out whole, as keel-chain sends it.
    pkts = [udp_frame(100), udp_frame(2046, sport=8), udp_frame(100)]
    nfs = [("tunnel", {"vlan": 5}), ("macswap", {})]
    extra = ("--rx-copy",) if rx == "rx-copy" else ()
    procs, out, stats, _ = start_chain(tmp_path, f"head{rx}", nfs, pkts, extra=extra)
    wait_all(procs, timeout=30)
    got = [bytes(p) for p in rdpcap(str(out))]
    port = json.loads(stats[0].read_text())["port"]
    if rx == "rx-copy":
        assert [len(p) for p in got] == [104, 104] and port["copy_dropped"] == 1
    else:
        assert got == keel_chain_output(tmp_path, nfs, tmp_path / "in.pcap", "head")
        assert [len(p) for p in got] == [104, 2050, 104] and port["copy_dropped"] == 0


def service_threads(pid, name):
    """The thread ids of process |pid| called |name|."""
    return [int(t) for t in os.listdir(f"/proc/{pid}/task")
            if open(f"/proc/{pid}/task/{t}/comm").read().strip() == name]


def allowed_cpus(pid, tid):
    text = open(f"/proc/{pid}/task/{tid}/status").read()
    line = next(l for l in text.splitlines() if l.startswith("Cpus_allowed_list:"))
    cpus = set()
    for part in line.split(":")[1].strip().split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def test_stats_file_is_rewritten_while_the_chain_runs(tmp_path):
    pkts = [udp_frame(100, sport=1000 + i) for i in range(20)]
    nfs = [("stamp", {"index": 0}), ("stamp", {"index": 1})]
    procs, _, stats, _ = start_chain(tmp_path, "stats2", nfs, pkts, idle_ms=2500,
                                     extra=["--stats-interval", "100"])
    try:
        assert wait_for(lambda: all(st.exists() for st in stats), 10), "no statistics file while running"
        first = [json.loads(st.read_text()) for st in stats]
        assert not any(s["final"] for s in first)
        time.sleep(0.5)
        later = [json.loads(st.read_text()) for st in stats]
        assert all(b["unix_ms"] > a["unix_ms"] for a, b in zip(first, later)), "the file is not rewritten"
        assert all(b["turns"] > a["turns"] for a, b in zip(first, later))
        head = later[0]
        assert head["port"]["rx_packets"] == 20 and head["bursts_per_turn"] == 1
        assert "rx_queue_len" in head["port"] and head["port"]["rx_queue_len"] is None  # net_pcap cannot tell
        assert [s["nfs"][0]["packets_in"] for s in later] == [20, 20]
        assert all("cycles_per_packet" in s["nfs"][0] for s in later)
        if os.cpu_count() > 1:
            for p in procs:
                (stats_tid,) = service_threads(p.pid, "keel-stats")
                assert open(f"/proc/{p.pid}/task/{stats_tid}/stat").read().rsplit(")", 1)[1].split()[38] == "0"
                assert not allowed_cpus(p.pid, stats_tid) & allowed_cpus(p.pid, p.pid), \
                    "the statistics thread shares the packet thread's core"
    finally:
        wait_all(procs, timeout=30)
    final = json.loads(stats[0].read_text())
    assert final["final"] and final["nfs"][0]["stats"]["out_of_order"] == 0


def test_nat_state_in_redis_survives_a_restart_of_the_chain(tmp_path, redis_server):
    nat = {"external_ip": "198.18.255.1", "port_range": [30000, 30999]}
    nfs = [("stamp", {"index": 0}), ("nat", nat)]
    redis = ["--redis", redis_server, "--tenant", "t1"]
    out_syn = Ether() / IP(src="198.18.0.7", dst="198.19.0.3") / TCP(sport=4444, dport=80, flags="S")
    (tmp_path / "first").mkdir()
    procs, out, _, _ = start_chain(tmp_path / "first", "natc", nfs, [out_syn], extra=redis)
    wait_all(procs, timeout=60)
    (translated,) = rdpcap(str(out))
    assert translated[IP].src == "198.18.255.1"
    host, port = redis_server.split(":")
    keys = subprocess.run(["redis-cli", "-h", host, "-p", port, "--raw", "KEYS", "keel:state:*"],
                          capture_output=True, text=True, timeout=10).stdout.split()
    assert keys == ["keel:state:t1:natc:1-nat"], "one hash, named by the NF's position"
    reply = Ether() / IP(src="198.19.0.3", dst="198.18.255.1") / TCP(sport=80, dport=translated[TCP].sport, flags="SA")
    (tmp_path / "again").mkdir()
    procs, out, _, _ = start_chain(tmp_path / "again", "natc", nfs, [reply], extra=redis)
    wait_all(procs, timeout=60)
    back = rdpcap(str(out))
    assert len(back) == 1, "the restarted NAT lost the mapping"
    assert (back[0][IP].dst, back[0][TCP].dport) == ("198.18.0.7", 4444)


def test_nat_state_through_the_instances_own_redis_login(tmp_path, redis_server):
    """keel-nf --redis-auth-file logs in as the instance's ACL user (as keel-agent makes it:
    only its own keys, only the mirror's commands): the NAT's state is kept and loaded as
    without a login. A wrong password: a clear message (no password), empty state, no crash."""
    host, port = redis_server.split(":")

    def cli(*args):
        return subprocess.run(["redis-cli", "-h", host, "-p", port, "--raw", *args],
                              capture_output=True, text=True, timeout=10).stdout.split()

    assert cli("ACL", "SETUSER", "keel-nf.natc.0", "reset", "on", ">nfpassword7", "~keel:state:t1:natc.0:*",
               "resetchannels", "-@all", "+hscan", "+hset", "+hdel", "+hget", "+ping") == ["OK"]
    auth = tmp_path / "redis-login"
    auth.write_text("keel-nf.natc.0 nfpassword7\n")
    auth.chmod(0o600)
    nat = {"external_ip": "198.18.255.1", "port_range": [30000, 30999]}
    nfs = [("stamp", {"index": 0}), ("nat", nat)]
    redis = ["--redis", redis_server, "--tenant", "t1", "--redis-auth-file", str(auth)]
    out_syn = Ether() / IP(src="198.18.0.7", dst="198.19.0.3") / TCP(sport=4444, dport=80, flags="S")
    (tmp_path / "first").mkdir()
    procs, out, _, _ = start_chain(tmp_path / "first", "natc.0", nfs, [out_syn], extra=redis)
    wait_all(procs, timeout=60)
    (translated,) = rdpcap(str(out))
    assert cli("KEYS", "keel:state:*") == ["keel:state:t1:natc.0:1-nat"]
    reply = Ether() / IP(src="198.19.0.3", dst="198.18.255.1") / TCP(sport=80, dport=translated[TCP].sport, flags="SA")
    (tmp_path / "again").mkdir()
    procs, out, _, _ = start_chain(tmp_path / "again", "natc.0", nfs, [reply], extra=redis)
    wait_all(procs, timeout=60)
    back = rdpcap(str(out))
    assert len(back) == 1, "the restarted NAT lost the mapping it kept through its login"
    assert (back[0][IP].dst, back[0][TCP].dport) == ("198.18.0.7", 4444)

    auth.write_text("keel-nf.natc.0 notthepassword9\n")
    (tmp_path / "refused").mkdir()
    procs, out, _, _ = start_chain(tmp_path / "refused", "natc.0", nfs, [reply], extra=redis)
    errs = []
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        errs.append(err)
    nat_err = errs[1]
    assert "refuses the login of user keel-nf.natc.0 (--redis-auth-file)" in nat_err and "WRONGPASS" in nat_err, nat_err
    assert "refused the login; keel:state:t1:natc.0:1-nat starts with empty state" in nat_err, nat_err
    assert "notthepassword9" not in "".join(errs)
    assert len(rdpcap(str(out))) == 0, "a NAT without its state translated the reply"

    auth.unlink()
    (tmp_path / "nofile").mkdir()
    procs, _, _, _ = start_chain(tmp_path / "nofile", "natc.0", nfs[1:], [reply], extra=redis)
    _, err = procs[0].communicate(timeout=60)
    assert procs[0].returncode == 1 and f"--redis-auth-file {auth}: No such file" in err, err


def test_wait_iface_gives_up_with_a_message():
    start = time.time()
    r = subprocess.run([str(BIN / "keel-nf"), "--nf", "stamp", "--chain-id", "wait", "--position", "0", "--of", "1",
                        "--wait-iface", "keelnosuch0:300", "--", "--no-pci", "--no-huge", "-m", "256"],
                       capture_output=True, text=True, timeout=30)
    took = time.time() - start
    assert r.returncode == 1
    assert "interface keelnosuch0 did not appear within 300 ms" in r.stderr
    assert 0.3 <= took < 5
    r = subprocess.run([str(BIN / "keel-nf"), "--nf", "stamp", "--chain-id", "wait", "--position", "1", "--of", "2",
                        "--wait-iface", "vf0"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "position 0 only" in r.stderr


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip"), reason="needs root and iproute2 for a netns")
def test_wait_iface_opens_the_port_once_the_interface_appears(tmp_path):
    ns = f"keelwait{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        st = tmp_path / "stats.json"
        p = subprocess.Popen(
            ["ip", "netns", "exec", ns, str(BIN / "keel-nf"), "--nf", 'stamp={"index":0}', "--chain-id", f"wait{os.getpid()}",
             "--position", "0", "--of", "1", "--wait-iface", "keelvf0:20000", "--exit-when-idle", "500",
             "--stats", str(st), "--stats-interval", "50", "--", "--no-pci", "--no-huge", "-m", "256",
             "--log-level=error", "--no-telemetry", f"--file-prefix=keelwait{os.getpid()}",
             "--vdev", "net_af_packet0,iface=keelvf0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(1)
            assert p.poll() is None, p.stderr.read()
            assert not st.exists(), "the port opened before its interface existed"
            cpu = sum(int(f) for f in open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()[11:13])
            subprocess.run(["ip", "-n", ns, "link", "add", "keelvf0", "type", "veth", "peer", "name", "keelvf1"],
                           check=True)
            subprocess.run(["ip", "-n", ns, "link", "set", "keelvf0", "up"], check=True)
            subprocess.run(["ip", "-n", ns, "link", "set", "keelvf1", "up"], check=True)
            assert wait_for(st.exists, 10), "keel-nf did not start once the interface was there"
            assert p.wait(timeout=30) == 0, p.stderr.read()
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        assert cpu < 50, f"waiting used {cpu} ticks of CPU in 1 s: a busy loop"
        assert json.loads(st.read_text())["port"]["rx_packets"] >= 0
    finally:
        subprocess.run(["ip", "netns", "del", ns])


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

def cpu_ticks(pid):
    return sum(int(f) for f in open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[11:13])


def running_chain(tmp_path, chain_id):
    """Three stamp NFs that run until stopped, each with its statistics file written."""
    pkts = [udp_frame(100, sport=1000 + i) for i in range(10)]
    nfs = [("stamp", {"index": k}) for k in range(3)]
    procs, _, stats, _ = start_chain(tmp_path, chain_id, nfs, pkts, idle_ms=600000)
    assert wait_for(lambda: all(st.exists() for st in stats), 15), [p.poll() for p in procs]
    return procs


def exited_within(p, seconds):
    try:
        p.wait(timeout=seconds)
        return True
    except subprocess.TimeoutExpired:
        return False


def kill_all(procs):
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_positions_exit_when_position_0_is_killed(tmp_path):
    procs = running_chain(tmp_path, "kill0")
    try:
        procs[0].kill()
        for p in procs[1:]:
            assert exited_within(p, 3), "a position kept running after position 0 died"
            assert p.returncode == 1
            assert "position 0 of the chain is gone" in p.stderr.read()
    finally:
        kill_all(procs)


@pytest.mark.parametrize("k", [0, 1, 2])
def test_sigterm_stops_any_position_within_a_second_and_the_chain_with_it(tmp_path, k):
    procs = running_chain(tmp_path, f"term{k}")
    try:
        procs[k].terminate()
        assert exited_within(procs[k], 1), f"position {k} ignored SIGTERM for a second"
        for p in procs:
            assert exited_within(p, 2)
            assert p.returncode == 0, p.stderr.read()
    finally:
        kill_all(procs)


def test_waiting_for_a_stopped_position_does_not_burn_a_core(tmp_path):
    procs = running_chain(tmp_path, "stop0")
    try:
        os.kill(procs[0].pid, signal.SIGSTOP)
        time.sleep(0.2)
        before = [cpu_ticks(p.pid) for p in procs[1:]]
        time.sleep(1)
        used = [cpu_ticks(p.pid) - b for p, b in zip(procs[1:], before)]
        assert all(u < 20 for u in used), f"CPU ticks in 1 s while waiting: {used}"
        os.kill(procs[0].pid, signal.SIGCONT)
        procs[0].terminate()
        for p in procs:
            assert exited_within(p, 2) and p.returncode == 0
    finally:
        kill_all(procs)


def test_wait_futex_chain_keeps_chain_order_with_a_copy_per_hop(tmp_path):
    # The NFVnice-style baseline of bench/chain_length.py: positions asleep
    # on their semaphores, each hop copying; every packet still passes every
    # NF in order, and each position counts where its turns' cycles went.
    finals, _ = stamp_chain_in_order(tmp_path, "futex3", 3000, extra=("--wait-futex", "--copy-each-hop", "--rx-copy"))
    for k, s in enumerate(finals):
        c = s["cycles"]
        assert c["turns"] > 0 and c["nf"] > 0 and c["handoff"] > 0
        parts = sum(c[x] for x in ("rx", "rx_idle", "nf", "copy_in", "view", "copy_out", "tx", "sojourn"))
        assert c["busy"] >= parts, f"position {k}: the parts of its turns exceed the turns: {c}"
        if k > 0:
            assert c["copy_in"] > 0 and c["view"] > 0 and c["rx"] == 0 and c["tx"] == 0, c
    c0 = finals[0]["cycles"]
    assert c0["rx"] > 0 and c0["copy_in"] > 0 and c0["copy_out"] > 0 and c0["tx"] > 0, c0
    # the waits of the turns that carried packets: part of the handoff cycles, never more
    for k, s in enumerate(finals):
        w = s["handoff_wait"]
        assert 0 < w["count"] <= s["cycles"]["turns"] and sum(n for _, n in w["buckets"]) == w["count"], (k, w)
        assert 0 < w["sum"] <= s["cycles"]["handoff"], (k, w, s["cycles"])
        b = s["turn_busy"]
        assert w["count"] <= b["count"] <= s["cycles"]["turns"] and 0 < b["sum"] <= s["cycles"]["busy"], (k, b)


def test_one_nf_chain_sends_what_keel_chain_sends_without_buffer_or_handoff(tmp_path):
    # Galleon §4.2's single-NF case: no isolation copy, no chain buffer
    # views, no egress copy; the bytes out are keel-chain's.
    pkts = [Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") /
            IP(src="198.18.0.1", dst="198.19.0.%d" % (1 + i % 50)) / UDP(sport=1000 + i, dport=5001) /
            Raw(b"\xab" * (8 + i % 40)) for i in range(400)]
    nf = ("tunnel", {"vlan": 7})
    procs, out, stats, _ = start_chain(tmp_path, "solo1", [nf], pkts)
    wait_all(procs)
    assert [bytes(p) for p in rdpcap(str(out))] == keel_chain_output(tmp_path, [nf], tmp_path / "in.pcap", "solo")
    c = json.loads(stats[0].read_text())["cycles"]
    assert c["copy_in"] == 0 and c["view"] == 0 and c["copy_out"] == 0, c
    assert c["nf"] > 0 and c["tx"] > 0, c


def test_keel_chain_writes_the_statistics_keel_nf_writes(tmp_path):
    # One engine, one schema: keel-chain's statistics file is a keel-nf
    # position 0's (position 0 of 1), key for key, and counts the same.
    pkts = [udp_frame(100, sport=1000 + i) for i in range(300)]
    nf = ("acl", {"rules": [{"src_port": "1000-1099", "drop": True}, {"dst_ip": "198.19.0.0/16"}]})
    procs, out, stats, _ = start_chain(tmp_path, "schema1", [nf], pkts)
    wait_all(procs)
    chain_stats = tmp_path / "chain-stats.json"
    sent = keel_chain_output(tmp_path, [nf], tmp_path / "in.pcap", "schema", stats=chain_stats)
    assert len(sent) == len(rdpcap(str(out))) == 200
    head, whole = json.loads(stats[0].read_text()), json.loads(chain_stats.read_text())
    assert schema(whole) == schema(head)
    assert (whole["position"], whole["of"], whole["final"]) == (0, 1, True)
    for s in (head, whole):
        assert s["port"]["rx_packets"] == 300 and s["port"]["tx_packets"] == 200
        assert (s["nfs"][0]["packets_in"], s["nfs"][0]["dropped"]) == (300, 100)
        assert s["cycles"]["turns"] >= s["batches"] > 0 and s["cycles_per_batch"] > 0
        assert s["seconds"] > 0 and s["tsc_hz"] > 0
        # every packet that left, sent or dropped by the NF, has its sojourn in the histogram
        soj = s["sojourn"]
        assert soj["count"] == 300 and sum(n for _, n in soj["buckets"]) == 300 and 0 < soj["max"], soj
        assert s["rx_wait_bound"]["count"] == 300


def test_wait_futex_is_refused_under_coopsched():
    r = subprocess.run([str(BIN / "keel-nf"), "--nf", "stamp={\"index\":0}", "--chain-id", "x", "--position", "0",
                        "--of", "1", "--coopsched", "unix:/nonexistent", "--wait-futex"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--wait-futex" in r.stderr, r.stderr


MARK = 4093  # keel-ingress' mark (nf-runtime/include/keel/inband.h)
MOVE_EXPORT, MOVE_IMPORT = 2, 3  # in-band types EXPORT_STATE, IMPORT_STATE


def move_frame(in_band_type, kind, flow, records=b"", count=0):
    """A flow move's in-band frame as keel-ingress sends it (inband.h; body: flow_move.h's frame
    of |kind|, 1 export 2 import, for |flow| = (src, dst, sport, dport, proto))."""
    src, dst, sport, dport, proto = flow
    key = socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!HHB", sport, dport, proto)
    body = b"KM" + bytes([1, kind, 0, 0, count, 0]) + key + key + records
    return (Ether(src="02:00:00:00:00:09", dst="02:00:00:00:00:09") / Dot1Q(vlan=MARK, type=0x88B5) /
            Raw(bytes([1, in_band_type]) + struct.pack("!H", 4 + len(body)) + body))


def parse_move_frame(raw):
    """(in-band type, kind, status, [(position, nf id, value) per record]) of a move frame that
    left an instance (marked outermost, 0x88B5)."""
    assert raw[12:16] == struct.pack("!HH", 0x8100, MARK) and raw[16:18] == b"\x88\xb5", raw[:18].hex()
    in_band_type, length = raw[19], struct.unpack("!H", raw[20:22])[0]
    body = raw[22:18 + length]
    assert body[:3] == b"KM\x01"
    records, off = [], 34
    for _ in range(body[6]):
        position, nf = body[off], struct.unpack("!I", body[off + 1:off + 5])[0]
        vlen = body[off + 18]
        records.append((position, nf, body[off + 19:off + 19 + vlen]))
        off += 19 + vlen
    assert off == len(body)
    return in_band_type, body[3], body[4], records


def test_a_flow_moves_frame_passes_every_process_and_leaves_with_the_state_it_took(tmp_path):
    # Issue 37's move protocol inside an instance: an EXPORT_STATE frame behind a flow's packets
    # goes through monitor and NAT, two processes, without either NF seeing it; it leaves marked
    # with the monitor's counters and the NAT's mapping of the flow, and keel-chain, the same
    # chain in one process, sends the same bytes.
    nat = {"external_ip": "198.18.100.1", "port_range": [20000, 20010]}
    nfs = [("monitor", {}), ("nat", nat)]
    flow = ("198.18.0.1", "198.19.0.1", 5000, 53, 17)

    def marked_udp(sport, i):
        return (Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02") / Dot1Q(vlan=MARK) /
                IP(src="198.18.0.1", dst="198.19.0.1") / UDP(sport=sport, dport=53) / Raw(bytes([i]) * 20))

    pkts = [marked_udp(5001, 0)] + [marked_udp(5000, i) for i in range(1, 4)]
    no_move = (Ether(src="02:00:00:00:00:09", dst="02:00:00:00:00:09") / Dot1Q(vlan=MARK, type=0x88B5) /
               Raw(bytes([1, MOVE_EXPORT, 0, 48]) + b"XM" + bytes(42)))  # in-band header fine, no flow_move frame
    pkts += [move_frame(MOVE_EXPORT, 1, flow), marked_udp(5002, 9), no_move]
    procs, out, stats, _ = start_chain(tmp_path, "move1", nfs, pkts)
    wait_all(procs)
    got = [bytes(p) for p in rdpcap(str(out))]
    assert len(got) == 6, "4 packets, the frame, the packet behind it; the malformed frame dropped"
    assert [IP(g[14:]).sport for g in got[:4]] == [20000, 20001, 20001, 20001]
    in_band_type, kind, status, records = parse_move_frame(got[4])
    assert (in_band_type, kind, status) == (MOVE_EXPORT, 1, 0)
    assert sorted(r[0] for r in records) == [0, 1, 1], "the monitor's counters, both keys of the NAT's mapping"
    monitor = [r[2] for r in records if r[0] == 0][0]
    assert struct.unpack("=QQ", monitor) == (3, 3 * (len(pkts[1]) - 4)), "the flow's packets and bytes (mark off)"
    assert IP(got[5][14:]).sport == 20002, "the packet behind the frame passed the NAT after it"
    finals = [json.loads(st.read_text()) for st in stats]
    assert [f["nfs"][0]["moves"] for f in finals] == [{"exports": 1, "imports": 0, "failed": 0}] * 2
    assert finals[0]["moves"]["malformed"] == 1 and finals[0]["handover"]["move_frames"] == 2
    assert finals[1]["nfs"][0]["packets_in"] == 5, "the NAT never saw a frame"
    assert keel_chain_output(tmp_path, nfs, tmp_path / "in.pcap", "move") == got

