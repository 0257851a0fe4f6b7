# SPDX-License-Identifier: Apache-2.0
"""keel-chain end to end: captures in, captures out, exact semantics per NF."""
import subprocess

from scapy.all import Dot1Q, Ether, ICMP, IP, Raw, TCP, UDP
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from keelenv import BIN

MACS = dict(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
KEY = "000102030405060708090a0b0c0d0e0f"
IV = "f0e0d0c0b0a090807060504030201000"


def udp(src="198.18.0.1", dst="198.19.0.1", sport=1000, dport=53, payload=b"x" * 20, ttl=64):
    return Ether(**MACS) / IP(src=src, dst=dst, ttl=ttl) / UDP(sport=sport, dport=dport) / Raw(payload)


def tcp(src="198.18.0.1", dst="198.19.0.1", sport=1000, dport=80, payload=b"y" * 20):
    return Ether(**MACS) / IP(src=src, dst=dst) / TCP(sport=sport, dport=dport, flags="PA") / Raw(payload)


def checksums_ok(pkt):
    """True if the IPv4 and TCP/UDP checksums of pkt are what scapy computes."""
    ip = pkt[IP]
    fresh = IP(bytes(ip))
    del fresh.chksum
    layers = [fresh]
    l4 = TCP if TCP in ip else UDP if UDP in ip else None
    if l4:
        del fresh[l4].chksum
    rebuilt = IP(bytes(fresh))
    return rebuilt.chksum == ip.chksum and (l4 is None or rebuilt[l4].chksum == ip[l4].chksum)


def run_cli(*args):
    return subprocess.run([str(BIN / "keel-chain"), *args], capture_output=True, text=True, timeout=30)


# --- command line -----------------------------------------------------------

def test_help_documents_the_interface():
    p = run_cli("--help")
    assert p.returncode == 0
    for flag in ("--nf NAME[=JSON]", "--burst N", "--exit-when-idle MS", "--stats FILE"):
        assert flag in p.stdout


def test_list_shows_every_library_nf():
    p = run_cli("--list")
    names = {line.split()[0] for line in p.stdout.splitlines()}
    assert names >= {"acl", "nat", "tunnel", "detunnel", "ipv4fwd", "urlfilter", "encrypt", "decrypt",
                     "chacha", "dedup", "rededup", "limiter", "monitor", "lb", "bpf", "macswap"}


def test_unknown_nf_exits_2_naming_it():
    p = run_cli("--nf", "macswap", "--nf", "firewallx", "--", "--no-pci")
    assert p.returncode == 2
    assert "unknown NF 'firewallx'" in p.stderr and "--nf #2" in p.stderr


def test_bad_json_exits_2_naming_the_nf():
    p = run_cli("--nf", 'tunnel={"vlan":', "--", "--no-pci")
    assert p.returncode == 2
    assert "tunnel" in p.stderr and "bad JSON" in p.stderr


def test_bad_config_field_exits_2_naming_the_field(keel_chain):
    r = keel_chain([("acl", {"rules": [{"dst_ip": "198.18.0.0/40"}]})], [udp()])
    assert r.returncode == 2
    assert "acl.rules[0].dst_ip" in r.stderr
    assert r.out == []


def test_missing_eal_separator_and_nf_are_usage_errors():
    assert run_cli("--nf", "macswap").returncode == 2
    assert run_cli("--", "--no-pci").returncode == 2
    assert run_cli("--burst", "0", "--nf", "macswap", "--", "--no-pci").returncode == 2
    assert run_cli("--batch", "1", "--nf", "macswap", "--", "--no-pci").returncode == 2  # a burst is not a batch


# --- runtime ----------------------------------------------------------------

def test_malformed_packets_are_dropped_and_counted(keel_chain):
    good = udp()
    truncated_ip = Ether(**MACS, type=0x0800) / Raw(bytes(IP(src="198.18.0.1", dst="198.19.0.1"))[:12])
    lying_length = Ether(**MACS) / IP(src="198.18.0.1", dst="198.19.0.1", len=400) / UDP() / Raw(b"z")
    short_udp = Ether(**MACS) / IP(src="198.18.0.1", dst="198.19.0.1", proto=17) / Raw(b"abc")
    runt = Raw(b"\x02\x00\x00")
    r = keel_chain([("macswap", None)], [good, truncated_ip, lying_length, short_udp, runt, good])
    assert r.returncode == 0, r.stderr
    assert len(r.out) == 2
    assert r.stats["port"]["rx_packets"] == 6
    assert r.stats["port"]["rx_malformed"] == 4
    assert r.stats["nfs"][0]["packets_in"] == 2


def test_stats_report_every_nf(keel_chain):
    pkts = [udp(sport=1000 + i) for i in range(50)]
    acl = {"rules": [{"src_port": "1000-1009", "drop": True}, {"dst_ip": "198.19.0.0/16"}]}
    r = keel_chain([("acl", acl), ("monitor", {}), ("macswap", {})], pkts)
    assert r.returncode == 0, r.stderr
    assert len(r.out) == 40
    nfs = r.stats["nfs"]
    assert [n["nf"] for n in nfs] == ["acl", "monitor", "macswap"]
    assert (nfs[0]["packets_in"], nfs[0]["packets_out"], nfs[0]["dropped"]) == (50, 40, 10)
    assert (nfs[1]["packets_in"], nfs[1]["dropped"]) == (40, 0)
    assert all(n["cycles_per_packet"] > 0 for n in nfs)
    assert r.stats["port"]["tx_packets"] == 40
    assert r.stats["tsc_hz"] > 0


def test_chain_buffer_gives_the_same_output_and_is_removed(keel_chain, tmp_path):
    pkts = [udp(sport=1000 + i, payload=bytes([i]) * (20 + i)) for i in range(100)]
    nfs = [("tunnel", {"vlan": 7}), ("macswap", {}), ("detunnel", {})]
    plain = keel_chain(nfs, pkts)
    buf = tmp_path / "chain.pktbuf"
    shared = keel_chain(nfs, pkts, "--pktbuf", str(buf))
    assert plain.returncode == 0 and shared.returncode == 0, shared.stderr
    assert shared.stats["chain_buffer"] == str(buf) and plain.stats["chain_buffer"] is None
    assert [bytes(p) for p in shared.out] == [bytes(p) for p in plain.out]
    assert len(plain.out) == 100
    assert not buf.exists()
    # keel-nf's steps: the copy in, the other NFs in place (each packet
    # finished by the stage before, checked), the copy out.
    c = shared.stats["cycles"]
    assert c["copy_in"] > 0 and c["view"] > 0 and c["copy_out"] > 0, c
    assert plain.stats["cycles"]["copy_in"] == plain.stats["cycles"]["view"] == 0
    assert shared.stats["port"]["copied"] == 100 and shared.stats["order_violations"] == 0


def test_bursts_of_one_packet_process_everything(keel_chain):
    r = keel_chain([("macswap", {})], [udp(sport=i + 1) for i in range(40)], "--burst", "1")
    assert r.returncode == 0
    assert len(r.out) == 40
    # A turn receives one burst, here of one packet: 40 turns got packets.
    assert r.stats["batches"] == 40 and r.stats["bursts_per_turn"] == 1
    assert r.stats["nfs"][0]["bursts"] == 40


# --- the NF library, one by one -------------------------------------------------

def test_macswap_swaps_addresses(keel_chain):
    r = keel_chain([("macswap", {})], [udp()])
    assert (r.out[0].src, r.out[0].dst) == (MACS["dst"], MACS["src"])
    assert bytes(r.out[0])[12:] == bytes(udp())[12:]


def test_acl_first_match_wins_and_unmatched_is_dropped(keel_chain):
    rules = {"rules": [
        {"src_ip": "198.18.0.1/32", "dst_port": 22, "proto": "tcp", "drop": True},
        {"dst_ip": "198.19.0.0/24", "proto": "tcp", "drop": False},
        {"proto": "udp", "dst_port": "50-60"},
        {"proto": "icmp", "drop": False},
    ]}
    pkts = [tcp(dport=22), tcp(dport=80), udp(dport=53), udp(dport=61),
            tcp(dst="198.19.1.1"), Ether(**MACS) / IP(src="198.18.0.1", dst="198.19.0.9") / ICMP()]
    r = keel_chain([("acl", rules)], pkts)
    assert r.returncode == 0, r.stderr
    assert [bytes(p) for p in r.out] == [bytes(pkts[1]), bytes(pkts[2]), bytes(pkts[5])]


def test_nat_translates_both_directions(keel_chain):
    cfg = {"external_ip": "198.18.255.1", "port_range": [20000, 20099]}
    out1 = udp(src="198.18.0.5", sport=1111, dst="198.19.0.9", dport=5001)
    out2 = udp(src="198.18.0.6", sport=1111, dst="198.19.0.9", dport=5001)
    r = keel_chain([("nat", cfg)], [out1, out2, out1])
    assert r.returncode == 0, r.stderr
    assert len(r.out) == 3
    ports = [p[UDP].sport for p in r.out]
    assert all(p[IP].src == "198.18.255.1" for p in r.out)
    assert all(20000 <= port <= 20099 for port in ports)
    assert ports[0] == ports[2] != ports[1]
    assert all(checksums_ok(p) for p in r.out)

    reply = udp(src="198.19.0.9", sport=5001, dst="198.18.255.1", dport=ports[1], payload=b"answer")
    stray = udp(src="198.19.0.9", sport=5001, dst="198.18.255.1", dport=20099 if ports[1] != 20099 else 20098)
    r = keel_chain([("nat", cfg)], [out1, out2, reply, stray])
    assert len(r.out) == 3
    back = r.out[2]
    assert (back[IP].dst, back[UDP].dport, bytes(back[UDP].payload)) == ("198.18.0.6", 1111, b"answer")
    assert checksums_ok(back)


def test_a_flood_of_new_flows_stays_within_the_flow_capacity(keel_chain):
    # 500 spoofed flows through a NAT whose table holds 40 keys (20 mappings):
    # the first 20 get through, the rest are refused and counted, and the
    # table never holds more than its capacity.
    cfg = {"external_ip": "198.18.255.1", "port_range": [20000, 29999]}
    flood = [udp(src=f"198.18.{i // 250}.{i % 250 + 1}", sport=1000 + i, dst="198.19.0.9") for i in range(500)]
    r = keel_chain([("nat", cfg)], flood, "--flow-capacity", "40", "--flow-idle-ms", "60000")
    assert r.returncode == 0, r.stderr
    assert len(r.out) == 20
    nf = r.stats["nfs"][0]
    assert nf["flows"] == {"count": 40, "capacity": 40, "evictions": 0, "refusals": 480}
    assert nf["stats"]["table_full_drops"] == 480


def test_nat_state_survives_a_restart_through_redis(keel_chain, redis_server):
    cfg = {"external_ip": "198.18.255.1", "port_range": [30000, 30999]}
    args = ("--redis", redis_server, "--tenant", "t1", "--chain-id", "nat-test")
    first = keel_chain([("nat", cfg)], [tcp(src="198.18.0.7", sport=4444, dst="198.19.0.3", dport=80)], *args)
    assert first.returncode == 0, first.stderr
    port = first.out[0][TCP].sport
    reply = tcp(src="198.19.0.3", sport=80, dst="198.18.255.1", dport=port, payload=b"hello")
    again = keel_chain([("nat", cfg)], [reply], *args)
    assert len(again.out) == 1, "the restarted NAT lost the mapping"
    assert (again.out[0][IP].dst, again.out[0][TCP].dport) == ("198.18.0.7", 4444)
    other_chain = keel_chain([("nat", cfg)], [reply], "--redis", redis_server, "--tenant", "t1",
                             "--chain-id", "another-chain")
    assert other_chain.out == [], "two chains must not share state"


def test_three_tunnels_over_the_chain_buffer_survive_the_longest_frame(keel_chain, tmp_path):
    # 2044 bytes fit the chain buffer after the first tunnel (2048); the
    # egress copy would need 2056 bytes, more than one mbuf, and net_pcap
    # sends no segment chains: dropped and counted, never a crash.
    head = Ether(**MACS) / IP(src="198.18.0.1", dst="198.19.0.1") / UDP(sport=7, dport=5001)
    longest = head / Raw(b"\xab" * (2044 - len(head)))
    nfs = [("tunnel", {"vlan": 10 + k}) for k in range(3)]
    r = keel_chain(nfs, [udp(), longest], "--pktbuf", str(tmp_path / "pktbuf"))
    assert r.returncode == 0, r.stderr
    assert [len(p) for p in r.out] == [len(udp()) + 12]
    assert r.stats["port"]["tx_too_long"] == 1 and r.stats["port"]["tx_dropped"] == 0


def test_tunnel_pushes_and_detunnel_pops_a_vlan_tag(keel_chain):
    pkt = udp()
    r = keel_chain([("tunnel", {"vlan": 7})], [pkt])
    tagged = r.out[0]
    assert Dot1Q in tagged and tagged[Dot1Q].vlan == 7
    assert bytes(tagged[Dot1Q].payload) == bytes(pkt[IP])
    r = keel_chain([("detunnel", {})], [tagged, pkt])
    assert [bytes(p) for p in r.out] == [bytes(pkt), bytes(pkt)]


def test_ipv4fwd_longest_prefix_ttl_and_checksum(keel_chain):
    cfg = {"routes": [{"prefix": "198.19.0.0/16", "dst_mac": "02:00:00:00:aa:01", "port": 0},
                      {"prefix": "198.19.5.0/24", "dst_mac": "02:00:00:00:aa:02", "port": 0}]}
    pkts = [udp(dst="198.19.1.1"), udp(dst="198.19.5.9"), udp(dst="198.20.0.1"),
            udp(dst="198.19.1.1", ttl=1), udp(dst="198.19.1.1", ttl=2)]
    r = keel_chain([("ipv4fwd", cfg)], pkts)
    assert r.returncode == 0, r.stderr
    assert [p.dst for p in r.out] == ["02:00:00:00:aa:01", "02:00:00:00:aa:02", "02:00:00:00:aa:01"]
    assert [p[IP].ttl for p in r.out] == [63, 63, 1]
    assert all(checksums_ok(p) for p in r.out)


def test_urlfilter_drops_blocked_requests_only(keel_chain):
    def get(host, path):
        return tcp(payload=f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    pkts = [get("ads.example.com", "/banner"), get("www.example.com", "/ads/x"),
            get("www.example.com", "/news"), tcp(payload=b"HTTP/1.1 200 OK\r\n\r\n"), udp()]
    r = keel_chain([("urlfilter", {"blocklist": ["ads.example.com", "www.example.com/ads"]})], pkts)
    assert [bytes(p) for p in r.out] == [bytes(p) for p in pkts[2:]]


def test_encrypt_is_aes128cbc_of_the_payload_and_decrypt_restores(keel_chain):
    cfg = {"key": KEY, "iv": IV}
    plain = [udp(payload=bytes(range(n % 256)) * 1) for n in (1, 15, 16, 17, 200)] + [tcp(payload=b"t" * 33)]
    r = keel_chain([("encrypt", cfg)], plain)
    assert r.returncode == 0, r.stderr
    for before, after in zip(plain, r.out):
        l4 = TCP if TCP in before else UDP
        data = bytes(before[l4].payload)
        padder = padding.PKCS7(128).padder()
        enc = Cipher(algorithms.AES(bytes.fromhex(KEY)), modes.CBC(bytes.fromhex(IV))).encryptor()
        want = enc.update(padder.update(data) + padder.finalize()) + enc.finalize()
        assert bytes(after[l4].payload) == want
        assert checksums_ok(after)
    back = keel_chain([("decrypt", cfg)], r.out)
    assert [bytes(p) for p in back.out] == [bytes(p) for p in plain]


def test_chacha_twice_restores_the_payload(keel_chain):
    cfg = {"key": "11" * 32, "nonce": "22" * 12}
    pkts = [udp(payload=b"secret payload %d" % i) for i in range(5)]
    once = keel_chain([("chacha", cfg)], pkts)
    assert all(bytes(a[UDP].payload) != bytes(b[UDP].payload) for a, b in zip(once.out, pkts))
    assert all(checksums_ok(p) for p in once.out)
    twice = keel_chain([("chacha", cfg), ("chacha", cfg)], pkts)
    assert [bytes(p) for p in twice.out] == [bytes(p) for p in pkts]


def test_dedup_shrinks_repeats_and_rededup_restores(keel_chain):
    chunk = bytes(range(64))
    pkts = [udp(payload=chunk * 8, sport=1000 + i % 3) for i in range(20)]
    dd = keel_chain([("dedup", {})], pkts)
    assert len(dd.out) == 20
    assert sum(len(p) for p in dd.out[1:]) < sum(len(p) for p in pkts[1:]) / 4
    both = keel_chain([("dedup", {}), ("rededup", {})], pkts)
    assert [bytes(p) for p in both.out] == [bytes(p) for p in pkts]


def test_limiter_drops_above_the_burst(keel_chain):
    pkts = [udp(payload=b"p" * 958) for _ in range(10)]  # 1000-byte frames
    r = keel_chain([("limiter", {"rate_bps": 8000, "burst_bytes": 3000})], pkts)
    assert r.returncode == 0, r.stderr
    assert len(r.out) == 3
    assert r.stats["nfs"][0]["dropped"] == 7


def test_monitor_counts_per_flow(keel_chain):
    pkts = [udp(sport=1)] * 3 + [tcp(sport=2)] * 2
    r = keel_chain([("monitor", {})], pkts)
    assert len(r.out) == 5
    flows = {(f["src_port"], f["proto"]): f for f in r.stats["nfs"][0]["stats"]["flows"]}
    assert flows[(1, 17)]["packets"] == 3 and flows[(1, 17)]["bytes"] == 3 * len(pkts[0])
    assert flows[(2, 6)]["packets"] == 2


def test_lb_keeps_a_flow_on_one_backend(keel_chain):
    backends = ["198.19.100.1", "198.19.100.2", "198.19.100.3"]
    pkts = [udp(sport=2000 + i % 10, dst="198.19.0.80") for i in range(60)]
    r = keel_chain([("lb", {"backends": backends})], pkts)
    assert len(r.out) == 60
    chosen = {}
    for sent, got in zip(pkts, r.out):
        assert got[IP].dst in backends and checksums_ok(got)
        assert chosen.setdefault(sent[UDP].sport, got[IP].dst) == got[IP].dst
    assert len(set(chosen.values())) > 1


def test_bpf_pass_and_drop(keel_chain):
    pkts = [udp(dport=53), udp(dport=54), tcp(dport=80)]
    keep = keel_chain([("bpf", {"filters": ["udp port 53", "tcp port 80"], "action": "pass"})], pkts)
    assert [bytes(p) for p in keep.out] == [bytes(pkts[0]), bytes(pkts[2])]
    drop = keel_chain([("bpf", {"filters": ["udp port 53"], "action": "drop"})], pkts)
    assert [bytes(p) for p in drop.out] == [bytes(pkts[1]), bytes(pkts[2])]
    bad = keel_chain([("bpf", {"filters": ["udp port banana"]})], pkts)
    assert bad.returncode == 2 and "bpf.filters[0]" in bad.stderr


# --- chains -------------------------------------------------------------------

def test_acl_nat_tunnel_chain_output_is_exact(keel_chain):
    acl = {"rules": [{"dst_ip": "198.19.0.0/16", "proto": "tcp", "drop": False}]}
    nat = {"external_ip": "198.18.255.1", "port_range": [40000, 40010]}
    pkts = [tcp(src="198.18.0.%d" % (i % 4 + 1), sport=5000 + i % 4, payload=b"d%03d" % i) for i in range(40)]
    pkts += [udp()] * 5 + [tcp(dst="198.20.0.1")] * 5
    r = keel_chain([("acl", acl), ("nat", nat), ("tunnel", {"vlan": 7})], pkts)
    assert r.returncode == 0, r.stderr
    assert len(r.out) == 40
    flows = {}
    for sent, got in zip(pkts, r.out):
        assert got[Dot1Q].vlan == 7
        assert got[IP].src == "198.18.255.1" and got[IP].dst == sent[IP].dst
        assert 40000 <= got[TCP].sport <= 40010
        assert flows.setdefault((sent[IP].src, sent[TCP].sport), got[TCP].sport) == got[TCP].sport
        assert got[Raw].load == sent[Raw].load
        assert checksums_ok(got)
    assert len(set(flows.values())) == 4
    assert [n["dropped"] for n in r.stats["nfs"]] == [10, 0, 0]


def test_galleon_chain2_acl_urlfilter_encrypt(keel_chain):
    acl = {"rules": [{"dst_ip": "198.19.0.0/16"}]}
    cfg = {"key": KEY, "iv": IV}
    req = tcp(payload=b"GET /ok HTTP/1.1\r\nHost: a.example\r\n\r\n")
    bad = tcp(payload=b"GET /x HTTP/1.1\r\nHost: evil.example\r\n\r\n")
    r = keel_chain([("acl", acl), ("urlfilter", {"blocklist": ["evil.example"]}), ("encrypt", cfg)],
                   [req, bad, req])
    assert len(r.out) == 2
    back = keel_chain([("decrypt", cfg)], r.out)
    assert [bytes(p) for p in back.out] == [bytes(req), bytes(req)]
