# SPDX-License-Identifier: Apache-2.0
"""Fast pcap files of many small UDP packets, without scapy (10^6 packets in seconds)."""
import struct

_GLOBAL = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)


def _csum(data: bytes) -> int:
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def udp_frame(sport: int, payload: bytes, src="198.18.0.1", dst="198.19.0.1") -> bytes:
    """Ethernet + IPv4 + UDP (checksum 0) carrying payload."""
    ip_src = bytes(int(x) for x in src.split("."))
    ip_dst = bytes(int(x) for x in dst.split("."))
    total = 20 + 8 + len(payload)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, total, 0, 0, 64, 17, 0, ip_src, ip_dst)
    ip = ip[:10] + struct.pack("!H", _csum(ip)) + ip[12:]
    udp = struct.pack("!HHHH", sport, 5001, 8 + len(payload), 0)
    eth = bytes.fromhex("020000000002020000000001") + b"\x08\x00"
    return eth + ip + udp + payload


def write(path, frames_iter):
    """Writes the frames of frames_iter; returns how many."""
    n = 0
    with open(path, "wb") as f:
        f.write(_GLOBAL)
        for fr in frames_iter:
            f.write(struct.pack("<IIII", 0, 0, len(fr), len(fr)))
            f.write(fr)
            n += 1
    return n


def read(path):
    """Yields the frames of a pcap file."""
    with open(path, "rb") as f:
        data = f.read()
    off = 24
    while off + 16 <= len(data):
        incl = struct.unpack_from("<I", data, off + 8)[0]
        yield data[off + 16:off + 16 + incl]
        off += 16 + incl
