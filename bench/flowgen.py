# SPDX-License-Identifier: Apache-2.0
"""Flow generator and sink for flow-setup measurements through keel's embedded ToR.

    flowgen.py send --iface keel-src --rate 1000 --duration 10 --packets 4 --gap-ms 2 \\
                    --dst-net 198.18.3.0/24 --out sent.json
    flowgen.py recv --iface keel-sink --duration 15 --out recv.json

`send` opens new flows at a steady rate (new flows per second), each a few packets
`--gap-ms` apart, UDP or TCP (alternating with --proto mix), from --src-ip to hosts of
--dst-net. With --malformed-every N every Nth flow (id % N == 1) sends only malformed
frames (by turns: an IPv4 IHL below 5, an IPv4 total length past the frame, an L4 header cut
short), which the ingress must drop and count; with --no-chain-every M every Mth flow (id % M
== 2) goes to --no-chain-net, which no chain's filter takes, so it must take the normal path.
Every packet carries, after its L4 header, the magic b"KEEL", the flow id and
the packet's sequence number in the flow, so the sink tells flows apart even after NAT or
tunnelling rewrote their headers. `recv` counts per flow what arrived: packets, packets
that came after a later one of the same flow (reordered) and duplicates, and the flows
that arrived from more than one source address:port (remapped: a NAT changed its mapping). Both run inside
the network namespace of their interface (ip netns exec) on raw AF_PACKET sockets, stop
after --duration (send) or when nothing arrived for --quiet seconds after --duration
(recv), and write JSON.

Addresses must be in 198.18.0.0/15 (the benchmarking range); the interface must be one
whose name starts with keel.
"""
import argparse
import heapq
import ipaddress
import json
import socket
import struct
import sys
import time

MAGIC = b"KEEL"
ETH_P_ALL = 0x0003
BENCH_NET = ipaddress.ip_network("198.18.0.0/15")


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def mac_bytes(mac: str) -> bytes:
    return bytes(int(b, 16) for b in mac.split(":"))


def frame(src_mac: bytes, dst_mac: bytes, src: bytes, dst: bytes, proto: int, sport: int, dport: int,
          payload: bytes) -> bytes:
    """An Ethernet + IPv4 + UDP/TCP frame with correct checksums."""
    if proto == 17:
        l4 = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0)
    else:  # TCP, ACK|PSH, no options
        l4 = struct.pack("!HHIIBBHHH", sport, dport, 1, 1, 5 << 4, 0x18, 65535, 0, 0)
    pseudo = src + dst + struct.pack("!BBH", 0, proto, len(l4) + len(payload))
    csum = checksum(pseudo + l4 + payload)
    if proto == 17:
        l4 = l4[:6] + struct.pack("!H", csum or 0xFFFF)
    else:
        l4 = l4[:16] + struct.pack("!H", csum) + l4[18:]
    total = 20 + len(l4) + len(payload)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, 0, 0x4000, 64, proto, 0, src, dst)
    ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
    return dst_mac + src_mac + b"\x08\x00" + ip + l4 + payload


GOOD, MALFORMED, NO_CHAIN = "good", "malformed", "no_chain"


def flow_kind(gid: int, malformed_every: int, no_chain_every: int) -> str:
    """What flow `gid` of a send with these settings is (the sender and its readers agree)."""
    if malformed_every and gid % malformed_every == 1:
        return MALFORMED
    if no_chain_every and gid % no_chain_every == 2:
        return NO_CHAIN
    return GOOD


def malformed(good: bytes, gid: int, malformed_every: int) -> bytes:
    """A frame of a malformed flow, made from the well-formed one: which way it is broken
    depends on the flow, so a row has all three."""
    eth, ip = good[:14], good[14:]
    kind = (gid // max(malformed_every, 1)) % 3
    if kind == 0:  # IHL 4: the header claims less than its fixed 20 bytes
        return eth + bytes([0x44]) + ip[1:]
    if kind == 1:  # the total length runs 200 bytes past the end of the frame
        total = struct.unpack_from("!H", ip, 2)[0] + 200
        return eth + ip[:2] + struct.pack("!H", total) + ip[4:]
    # the IP header is whole, the L4 header is cut after 4 bytes (and the total says so)
    cut = ip[:24]
    return eth + cut[:2] + struct.pack("!H", 24) + cut[4:]


def check_iface(name: str) -> None:
    if not name.startswith("keel"):
        sys.exit(f"flowgen: interface {name!r}: only keel* interfaces (made by keel's tests) are used")


def send(a) -> dict:
    check_iface(a.iface)
    net = ipaddress.ip_network(a.dst_net)
    src = ipaddress.ip_address(a.src_ip)
    if not net.subnet_of(BENCH_NET) or src not in BENCH_NET:
        sys.exit("flowgen: --src-ip and --dst-net must be in 198.18.0.0/15")
    hosts = [h.packed for h in net.hosts()][:254]
    other = ipaddress.ip_network(a.no_chain_net)
    if a.no_chain_every and (not other.subnet_of(BENCH_NET) or other.overlaps(net)):
        sys.exit("flowgen: --no-chain-net must be in 198.18.0.0/15 and apart from --dst-net")
    other_hosts = [h.packed for h in other.hosts()][:254]
    counts = {GOOD: [0, 0], MALFORMED: [0, 0], NO_CHAIN: [0, 0]}  # kind -> [flows, packets]
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((a.iface, 0))
    src_mac, dst_mac = mac_bytes(a.src_mac), mac_bytes(a.dst_mac)
    nflows = int(a.rate * a.duration)
    pad = max(0, a.size - 14 - 20 - 20 - 12)
    start = time.monotonic() + 0.05
    # (due time, flow id, sequence number): each flow's first packet at id / rate, the rest
    # --gap-ms apart.
    due = [(start + i / a.rate, i, 0) for i in range(nflows)]
    heapq.heapify(due)
    sent, late_max = 0, 0.0
    while due:
        t, fid, seq = due[0]
        now = time.monotonic()
        if t > now:
            time.sleep(min(t - now, 0.001))
            continue
        heapq.heappop(due)
        late_max = max(late_max, now - t)
        gid = a.first_flow + fid
        proto = 17 if a.proto == "udp" or (a.proto == "mix" and gid % 2 == 0) else 6
        kind = flow_kind(gid, a.malformed_every, a.no_chain_every)
        pool = other_hosts if kind == NO_CHAIN else hosts
        dst = pool[gid % len(pool)]
        sport = 1024 + (gid // len(hosts)) % 64000
        dport = 5001 if proto == 17 else 80
        payload = MAGIC + struct.pack("!IIQ", gid, seq, time.monotonic_ns()) + b"\0" * pad
        f = frame(src_mac, dst_mac, src.packed, dst, proto, sport, dport, payload)
        s.send(malformed(f, gid, a.malformed_every) if kind == MALFORMED else f)
        sent += 1
        counts[kind][0] += seq == 0
        counts[kind][1] += 1
        if seq + 1 < a.packets:
            heapq.heappush(due, (t + a.gap_ms / 1000, fid, seq + 1))
    s.close()
    return {"flows": nflows, "packets": sent, "first_flow": a.first_flow, "packets_per_flow": a.packets,
            "seconds": round(time.monotonic() - start, 3), "late_max_ms": round(late_max * 1000, 3),
            "malformed_every": a.malformed_every, "no_chain_every": a.no_chain_every,
            "malformed_flows": counts[MALFORMED][0], "malformed_packets": counts[MALFORMED][1],
            "no_chain_flows": counts[NO_CHAIN][0], "no_chain_packets": counts[NO_CHAIN][1]}


def recv(a) -> dict:
    check_iface(a.iface)
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    # A deep queue, so that a burst is counted rather than lost in the sink's socket.
    s.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE (we run as root)
    s.bind((a.iface, 0))
    s.settimeout(0.2)
    flows: dict[int, list[int]] = {}  # flow id -> [received, last seq, reordered, duplicates]
    order: dict[int, list[int]] = {}  # flow id -> sequence numbers in arrival order
    seen: set[tuple[int, int]] = set()
    sources: dict[int, set[str]] = {}  # flow id -> the IPv4 source address:ports it came from
    other = 0
    end = time.monotonic() + a.duration
    last = time.monotonic()
    print("ready", file=sys.stderr, flush=True)
    while True:
        now = time.monotonic()
        if now > end and now - last > a.quiet:
            break
        try:
            pkt, addr = s.recvfrom(65535)
        except socket.timeout:
            continue
        if addr[2] == socket.PACKET_OUTGOING:
            continue
        i = pkt.find(MAGIC)
        if i < 0 or len(pkt) < i + 12:
            other += 1
            continue
        last = time.monotonic()
        fid, seq, sent_ns = struct.unpack_from("!IIQ", pkt, i + 4)
        st = flows.setdefault(fid, [0, -1, 0, 0])
        if (fid, seq) in seen:
            st[3] += 1
            continue
        seen.add((fid, seq))
        ip = 18 if pkt[12:14] == b"\x81\x00" else 14  # one VLAN tag, or none
        if pkt[ip - 2:ip] == b"\x08\x00" and len(pkt) >= ip + 24:
            l4 = ip + (pkt[ip] & 0x0F) * 4
            sources.setdefault(fid, set()).add(f"{socket.inet_ntoa(pkt[ip + 12:ip + 16])}:{int.from_bytes(pkt[l4:l4 + 2], 'big')}")
        order.setdefault(fid, []).append((seq, round((time.monotonic_ns() - sent_ns) / 1e6, 2)))
        st[0] += 1
        if seq < st[1]:
            st[2] += 1
        st[1] = max(st[1], seq)
    s.close()
    return {"packets": sum(f[0] for f in flows.values()), "flows": len(flows),
            "reordered": sum(f[2] for f in flows.values()), "duplicates": sum(f[3] for f in flows.values()),
            "other_packets": other, "per_flow": {str(k): v[0] for k, v in sorted(flows.items())},
            "reordered_flows": {str(k): order[k] for k, v in sorted(flows.items()) if v[2]},
            "remapped": {str(k): sorted(v) for k, v in sorted(sources.items()) if len(v) > 1}}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    ps = sub.add_parser("send", help="open new flows at a steady rate")
    ps.add_argument("--iface", default="keel-src")
    ps.add_argument("--src-mac", default="02:6b:65:00:00:01")
    ps.add_argument("--dst-mac", default="02:6b:65:00:00:02")
    ps.add_argument("--src-ip", default="198.18.0.1")
    ps.add_argument("--dst-net", default="198.18.3.0/24")
    ps.add_argument("--rate", type=float, default=100, help="new flows per second")
    ps.add_argument("--duration", type=float, default=10, help="seconds of new flows")
    ps.add_argument("--packets", type=int, default=4, help="packets per flow")
    ps.add_argument("--gap-ms", type=float, default=2.0, help="between a flow's packets")
    ps.add_argument("--proto", choices=["udp", "tcp", "mix"], default="mix")
    ps.add_argument("--size", type=int, default=128, help="frame size in bytes")
    ps.add_argument("--first-flow", type=int, default=0, help="id of the first flow (distinct 5-tuples per run)")
    ps.add_argument("--malformed-every", type=int, default=0, metavar="N",
                    help="every Nth flow sends only malformed frames (0: none)")
    ps.add_argument("--no-chain-every", type=int, default=0, metavar="M",
                    help="every Mth flow goes to --no-chain-net (0: none)")
    ps.add_argument("--no-chain-net", default="198.18.9.0/24", help="hosts that no chain's filter takes")
    ps.add_argument("--out", help="JSON result file (default: stdout)")
    pr = sub.add_parser("recv", help="count each flow's packets")
    pr.add_argument("--iface", default="keel-sink")
    pr.add_argument("--duration", type=float, default=10)
    pr.add_argument("--quiet", type=float, default=2.0, help="stop this long after the last packet")
    pr.add_argument("--out", help="JSON result file (default: stdout)")
    a = p.parse_args(argv)
    if a.cmd == "send" and (a.malformed_every < 0 or a.no_chain_every < 0 or a.malformed_every == 1
                            or a.no_chain_every in (1, 2)):
        p.error("send: --malformed-every must be 0 or >= 2, --no-chain-every 0 or >= 3")
    if a.cmd == "send" and (a.rate <= 0 or a.duration <= 0 or a.packets < 1 or a.duration * a.rate > 1_000_000):
        p.error("send: --rate, --duration > 0, --packets >= 1, at most a million flows")
    res = send(a) if a.cmd == "send" else recv(a)
    text = json.dumps(res)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
